"""bench/state_bench.py's section of bench/RESULTS.md ("Keyed state"): its runs (the dicts
bench/state_bench_runs.py's Bench makes) and plan -> Markdown, with the cells bench/paired_report.py
shares with bench/windowed_bench.py. Pure."""

from __future__ import annotations

from collections.abc import Sequence

import paired_report
from bench_common import fmt, size
from markdown import bullets, heading, paragraph, section, table
from paired_report import fmt_bytes_est
from paired_runs import PEER, SLUICE
from state_bench_jobs import CLICK_SEED, FORM_FLAGS, PAGE_SEED, Job
from stats import Estimate, est, fmt_estimate

SUMMARY_HEAD = [
    "job",
    "system",
    *paired_report.SUMMARY_HEAD,
    "CPU ratio P/S",
    "state (peak)",
    "RSS Python + JVM",
    "output rows",
]
RUN_HEAD = [
    *paired_report.run_head("job"),
    "RSS Python + JVM",
    "output rows",
    "late dropped",
    "foreign cores",
    "output checked",
]


def summary_row(job: str, system: str, rs: dict[str, list[dict]], rate: Estimate, ratio: float | None) -> list[str]:
    """One job's and system's figures over its measured runs (SUMMARY_HEAD); `rs`: the job's measured
    runs of both systems (the CPU ratio is the peer's over Sluice's)."""
    runs_s = rs[system]
    cpu_ratio = paired_report.ratio_of(est(rs[PEER], "cpu_per_m").median, est(rs[SLUICE], "cpu_per_m").median)
    return [
        job,
        system,
        *paired_report.summary_cells(runs_s, rate, ratio, system),
        fmt(cpu_ratio) if system == SLUICE else "",
        paired_report.state_summary(runs_s, system),
        f"{fmt_bytes_est(est(runs_s, 'rss_py'))} + {fmt_bytes_est(est(runs_s, 'rss_jvm'))}",
        fmt_estimate(est(runs_s, "output_rows"), ",.0f"),
    ]


def run_row(r: dict) -> list[str]:
    """One run (RUN_HEAD)."""
    start, out = paired_report.run_start(r, r["job"], 200, 200)
    return [
        *start,
        f"{size(r.get('rss_py'))} + {size(r.get('rss_jvm'))}",
        fmt(r.get("output_rows"), ","),
        fmt(r.get("late_dropped"), ","),
        paired_report.foreign_cell(r),
        out,
    ]


def dedup_text(plan: dict) -> list[str]:
    return paragraph(
        f"**dedup**: {plan['dedup_events']:,} page views ({plan['dedup_files']} files) of {plan['users']:,} users "
        f"(seed {PAGE_SEED}), timestamps out of order by up to {plan['disorder_ms']:,} ms. Sluice "
        f"`examples/dedup.py --ttl-ms {plan['ttl_ms']} --out-of-orderness-ms {plan['disorder_ms']}"
        f"{FORM_FLAGS.get(plan.get('dedup_operator', 'process'), '')}`: per user, "
        f"the first event within {plan['ttl_ms']:,} ms of event time, in timestamp order "
        f'({plan["expected_dedup"]:,} events expected). Peer: `withWatermark("et", "{plan["ttl_ms"]} '
        'milliseconds")` + `dropDuplicatesWithinWatermark(["user"])`: the first arrival per user, kept '
        "until the watermark passes its time + the delay (with the whole input in one batch: one row per user)."
    )


def join_text(plan: dict) -> list[str]:
    return paragraph(
        f"**join**: {plan['impressions']:,} impressions and {plan['clicks']:,} clicks ({plan['join_files']} "
        f"files each, seed {CLICK_SEED}), timestamps out of order by up to {plan['disorder_ms']:,} ms; "
        f"clicks joined to their impression when 0 <= click ts − impression ts <= {plan['upper_ms']:,} ms "
        f"({plan['expected_join']:,} pairs expected). Sluice `examples/click_join.py --upper-ms "
        f"{plan['upper_ms']} --out-of-orderness-ms {plan['disorder_ms']}`; peer: stream-stream inner join on "
        f"imp_id, watermarks of {plan['disorder_ms']:,} ms on both sides, `c_et BETWEEN imp_et AND imp_et + "
        f"interval {plan['upper_ms']} milliseconds`, append mode."
    )


def method_text(plan: dict) -> list[str]:
    """Both systems' configurations, what each figure means and how the outputs are checked."""
    return paragraph(
        "Sluice: 1 TaskManager x 2 slots, parallelism 2, checkpoints every "
        f"{plan['checkpoint_interval']} ms. Peer: local[2], CSV file sink, Trigger.AvailableNow "
        f"(maxFilesPerTrigger unset); shuffle partitions {plan['shuffle_text']}. Window = first read of an input "
        "file (inotify IN_ACCESS; for the join either input directory) → commit of the last output holding a "
        "result line (Sluice: the rename of its part; peer: `_spark_metadata/<batch>`); events/s = input events / "
        "window; CPU = the measured system's processes from the first read to the end seen by the harness, per "
        "million events. State: Sluice the largest completed checkpoint of the run (`size_bytes`); peer the largest "
        "`memoryUsedBytes` over its batches (summed over its state operators) and its checkpoint's `state/` on disk "
        "at the end. RSS: peak (VmHWM since the process started: a high-water mark over the runs before too) of "
        "Sluice's TaskManager, Python + its Spark JVM, and of the peer's driver, Python + JVM. Output check: Sluice's "
        "dedup exactly against `expected_firsts` (every expected event once, nothing else); the peer's dedup for "
        "sanity against Spark's own guarantee (each row an input event, none twice, every user at least once, no two "
        f"rows of a user within {plan['ttl_ms']:,} ms); both joins exactly against `expected_joins` (the same "
        "multiset of (imp_id, ts, ts_right), ads right). Medians with percentile-bootstrap 95 % intervals over the "
        f"kept runs (load rule: other processes above {plan['max_foreign_cores']} cores on average exclude a run); "
        "ratio Sluice/peer of the median events/s (above 1: Sluice faster) and peer/Sluice of CPU per event "
        "(above 1: Sluice cheaper); *every valid run*: the same median with the load rule off."
    )


def calls_text(plan: dict, jobs: dict[str, Job]) -> list[str]:
    """The instrumented run's Python calls per event (no lines when Sluice's dedup did not run)."""
    calls = plan.get("calls")
    if "dedup" not in jobs or SLUICE not in plan["systems"]:
        return []
    if not calls:
        return ["Python calls per event: not obtained (the instrumented run was not made or failed; see the notes)."]
    return paragraph(
        f"Python calls of Sluice's dedup process function (one instrumented run, run {calls['run']}, "
        f"not in the figures): {calls['process']:,} `process` + {calls['on_timer']:,} `on_timer` = "
        f"{calls['process'] + calls['on_timer']:,} calls for {calls['events']:,} events, "
        f"**{fmt(calls['per_event'], '.3f')} per event** ({calls['instances']} function instances). Exact for "
        "that run; the process calls (one per user present in a batch) vary with the source's adaptive "
        "batching from run to run. The peer calls no Python per event."
    )


def checks_found(runs: Sequence[dict]) -> list[str]:
    """What the passing checks found, per job and system, each distinct summary once."""
    checks = sorted({(r["job"], r["system"], r["check"]) for r in runs if r.get("check_ok")})
    if not checks:
        return []
    head = "What the passing checks found (per job and system, each distinct summary once):"
    return [head, "", *bullets(f"{j}, {s}: {c}" for j, s, c in checks)]


def report(facts: dict, command: str, runs: Sequence[dict], plan: dict, notes: Sequence[str]) -> str:
    """The section: the jobs, the method, a summary row per job and system, the Python calls, every run."""
    jobs: dict[str, Job] = plan["jobs"]
    summary = [
        summary_row(j, s, rs, rate, ratio) for j, s, rs, rate, ratio in paired_report.summary_groups(runs, "job", jobs)
    ]
    blocks = [
        paired_report.check_banner(runs),
        dedup_text(plan) if "dedup" in jobs else [],
        join_text(plan) if "join" in jobs else [],
        method_text(plan),
        table(SUMMARY_HEAD, summary),
        calls_text(plan, jobs),
        heading("Every run"),
        table(RUN_HEAD, [run_row(r) for r in runs]),
        checks_found(runs),
    ]
    return section("Keyed state: Sluice vs Spark Structured Streaming", command, facts, blocks, notes) + "\n"
