"""bench/windowed_bench.py's section of bench/RESULTS.md ("Event-time windows"): its runs (the dicts
bench/paired_runs.py's PairedBench makes) and plan -> Markdown, with the cells bench/paired_report.py
shares with bench/state_bench.py. Pure."""

from __future__ import annotations

from collections.abc import Sequence

import paired_report
from bench_common import fmt
from markdown import heading, paragraph, section, table
from paired_runs import SLUICE
from stats import est, fmt_estimate
from windowed_bench_workload import SEED, Workload

SUMMARY_HEAD = ["workload", "system", *paired_report.SUMMARY_HEAD, "state (peak)", "output windows", "unemitted"]
RUN_HEAD = [
    *paired_report.run_head("workload"),
    "output windows",
    "unemitted",
    "late dropped",
    "foreign cores",
    "output exact",
]


def summary_row(label: str, system: str, runs_s: Sequence[dict], rate, ratio: float | None) -> list[str]:
    """One workload's and system's figures over its measured runs (SUMMARY_HEAD)."""
    return [
        label,
        system,
        *paired_report.summary_cells(runs_s, rate, ratio, system),
        paired_report.state_summary(runs_s, system),
        fmt_estimate(est(runs_s, "output_rows"), ",.0f"),
        "—" if system == SLUICE else fmt_estimate(est(runs_s, "unemitted"), ",.0f"),
    ]


def run_row(r: dict, workloads: dict[str, Workload]) -> list[str]:
    """One run (RUN_HEAD)."""
    start, out = paired_report.run_start(r, workloads[r["workload"]].label, 120, 160)
    return [
        *start,
        fmt(r.get("output_rows"), ","),
        fmt(r.get("unemitted"), ","),
        fmt(r.get("late_dropped"), ","),
        paired_report.foreign_cell(r),
        out,
    ]


def setup_text(plan: dict) -> list[str]:
    """The input and both systems' configurations."""
    return paragraph(
        f"Input: {plan['events']:,} events ({plan['files']} files, {plan['urls']:,} urls, seed {SEED}), timestamps "
        f"out of order by up to {plan['disorder_ms']:,} ms; both systems' out-of-orderness bound "
        f"{plan['disorder_ms']:,} ms. "
        "Count per url and window (aligned to epoch 0). Sluice: 1 TaskManager x 2 slots, parallelism 2, "
        f"`examples/windowed_page_views.py`, checkpoints every {plan['checkpoint_interval']} ms. Peer: local[2], "
        "`withWatermark` + `groupBy(window(...), url).count()`, append mode, CSV file sink, Trigger.AvailableNow "
        f"(maxFilesPerTrigger unset); shuffle partitions {plan['shuffle_text']}."
    )


def method_text(plan: dict) -> list[str]:
    """What each figure means and how the outputs are checked."""
    return paragraph(
        "Window = first read of an input file (inotify IN_ACCESS) → commit of the last output holding a result "
        "line (Sluice: the rename of its part; peer: the rename of `_spark_metadata/<batch>` that commits its "
        "files); events/s = events / window; startup = launch → first read; CPU = the measured system's processes "
        "from the first read to the end seen by the harness, per million events. State: Sluice the largest "
        "completed checkpoint of the run (`size_bytes`); peer the largest `memoryUsedBytes` of its state operator "
        "(StreamingQueryProgress) and its checkpoint's `state/` on disk at the end. Output check: Sluice every "
        "expected (url, window) committed once with its exact count; peer every emitted window exact and once, "
        "every window whose end is at or below its final watermark emitted, the rest *unemitted* (append mode "
        "keeps them in state when the bounded input ends). Medians with percentile-bootstrap 95 % intervals over the "
        f"kept runs (load rule: other processes above {plan['max_foreign_cores']} cores on average exclude a run); "
        "ratio Sluice/peer of the median events/s (above 1: Sluice faster); *every valid run*: the same median with "
        "the load rule off (this machine is shared). Late dropped: Sluice `records_late_dropped`, peer "
        "`numRowsDroppedByWatermark` (0 expected: the bound is the disorder). Latency from the watermark passing a "
        "window's end to the commit of its row: not measured (the peer's bounded AvailableNow run passes every "
        "window's end at once, in its final no-data batch)."
    )


def report(facts: dict, command: str, runs: Sequence[dict], plan: dict, notes: Sequence[str]) -> str:
    """The section: the setup, a summary row per workload and system, the expected windows, every run."""
    workloads: dict[str, Workload] = plan["workloads"]
    summary = [
        summary_row(workloads[w].label, s, rs[s], rate, ratio)
        for w, s, rs, rate, ratio in paired_report.summary_groups(runs, "workload", workloads)
    ]
    expected = "; ".join(f"{workloads[w].label} {n:,} (url, window) rows" for w, n in plan["expected_rows"].items())
    blocks = [
        paired_report.check_banner(runs),
        setup_text(plan),
        method_text(plan),
        table(SUMMARY_HEAD, summary),
        paragraph(f"Expected windows: {expected}."),
        heading("Every run"),
        table(RUN_HEAD, [run_row(r, workloads) for r in runs]),
    ]
    title = "Event-time windows: Sluice vs Spark Structured Streaming"
    return section(title, command, facts, blocks, notes) + "\n"
