"""The recovery suite's section of bench/RESULTS.md (bench/recovery_suite.py): runs -> medians per
scenario with bootstrap intervals (bench/stats.py), leaving out failed runs and those the load rule
marks (bench/procstat.py), and the Markdown of the summary and per-run tables (bench/markdown.py).
Pure: no cluster, no Spark, no clock but the heading's time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench_common import fmt
from markdown import bullets, heading, notes_lines, paragraph, table
from output_check import OutputCheck
from procstat import Usage, excluded
from recovery_scenarios import APP, CHECKPOINT_MS, DRIVER, PARALLELISM, SCENARIOS, system
from recovery_watch import DIR_POLL
from stats import Estimate, fmt_estimate, median_ci

MACHINE = {  # machine fact (bench_common.machine_facts) -> its row's label
    "date": "date -u",
    "cores": "cores",
    "cpu": "cpu",
    "ram": "ram",
    "python": "python",
    "java": "java",
    "pyspark": "pyspark",
    "os": "os",
    "load": "load average at start",
}
SUMMARY_HEADER = [
    "scenario",
    "system",
    "killed → restarted",
    "runs counted / run",
    "kill at s",
    "kill → first output s",
    "kill → progressing s",
    "total s",
]
RUN_HEADER = [
    "#",
    "run",
    "kill at s",
    "kill → first output s",
    "kill → progressing s",
    "total s",
    "restarts",
    "restored / before",
    "output check",
    "CPU s",
    "foreign cores",
    "status",
]


@dataclass
class Summary:
    kind: str
    runs: int
    failed: int
    excluded: int
    first_output: Estimate
    progressing: Estimate
    total: Estimate
    kill_at: Estimate = field(default_factory=lambda: median_ci([]))


def is_valid(r: dict) -> bool:
    """A run counts when it finished, its output passed the check, and the load rule kept it."""
    return r.get("error") is None and r.get("check") is not None and r["check"].ok


def summarize(kind: str, runs: Iterable[dict], limit: float | None) -> Summary:
    rs = [r for r in runs if r["kind"] == kind]
    valid = [r for r in rs if is_valid(r)]
    kept = [r for r in valid if not excluded(r.get("usage"), limit)]
    out_of_rule = len(valid) - len(kept)

    def est(key: str) -> Estimate:
        return median_ci((r.get(key) for r in kept), excluded=out_of_rule)

    return Summary(
        kind,
        len(rs),
        len(rs) - len(valid),
        out_of_rule,
        est("first_output"),
        est("progressing"),
        est("total"),
        est("kill_at"),
    )


def _status(r: dict, limit: float | None) -> str:
    if r.get("error"):
        return "**FAILED**"
    if r.get("check") is None or not r["check"].ok:
        return "**OUTPUT CHECK FAILED**"
    return "excluded (load rule)" if excluded(r.get("usage"), limit) else "counted"


def _usage_cells(r: dict) -> tuple[str, str]:
    """The run's system's CPU seconds and the foreign cores."""
    u: Usage | None = r.get("usage")
    if u is None:
        return "—", "—"
    return f"{u.cpu_s.get(system(r['kind']), 0.0):.1f}", f"{u.foreign_cores():.2f}"


def summary_row(kind: str, s: Summary) -> list[str]:
    """A scenario's row: its runs counted, the medians with their intervals."""
    scen, system_name, what = SCENARIOS[kind]
    return [
        f"({scen}) {kind}",
        system_name,
        what,
        f"{s.runs - s.failed - s.excluded} / {s.runs}",
        fmt_estimate(s.kill_at, ".1f"),
        f"**{fmt_estimate(s.first_output, '.2f')}**",
        f"**{fmt_estimate(s.progressing, '.2f')}**",
        fmt_estimate(s.total, ".1f"),
    ]


def run_row(i: int, r: dict, limit: float | None) -> list[str]:
    """Run `i` (1-based, in the order run): its times, restarts, check, CPU and status."""
    cpu, foreign = _usage_cells(r)
    check: OutputCheck | None = r.get("check")
    restored = "—"
    if system(r["kind"]) == "sluice":
        restored = f"{fmt(r.get('restored'), 'd')} / {fmt(r.get('checkpoint_before'), 'd')}"
    return [
        str(i),
        r["kind"],
        fmt(r.get("kill_at"), ".1f"),
        fmt(r.get("first_output")),
        fmt(r.get("progressing")),
        fmt(r.get("total"), ".1f"),
        fmt(r.get("restarts"), "d"),
        restored,
        "—" if check is None else ("yes" if check.ok else "**NO**"),
        cpu,
        foreign,
        _status(r, limit),
    ]


def job_text(args, limit: float | None) -> list[str]:
    """The paragraph that says what ran and how it was measured."""
    rule = (
        f"Load rule: a run during which other processes used more than {limit:g} cores on average is excluded."
        if limit
        else "Load rule: off."
    )
    return paragraph(
        f"Job: page_views over {args.events:,} events in {args.files} files, parallelism {PARALLELISM} "
        f"(Sluice, checkpoints every {CHECKPOINT_MS} ms, at most {args.max_files_per_trigger} files per source "
        f"read) / shuffle partitions {PARALLELISM} and maxFilesPerTrigger {args.max_files_per_trigger} (peer, "
        "checkpointLocation); every run to its end. "
        f"Kill {args.kill_after:g} s after the run's first committed output. 4 Spark task threads on each "
        "side: Sluice TaskManagers of 1 slot with `local[2]`, two of them running the job; the peer's "
        "standalone cluster 2 executors x 2 cores, its local driver `local[4]`. Seconds from the kill: "
        "*first output* = first committed file version first seen after the kill; *progressing* = first "
        "committed file version seen after the kill, written after it, holding a count above every count "
        "of its key committed before the kill; *total* = launch → last committed file seen (output "
        f"directory listed every {DIR_POLL * 1000:.0f} ms by the harness, both systems alike). Medians "
        "with bootstrap 95 % intervals over the counted runs.",
        rule,
    )


def restart_lines(runs: Sequence[dict]) -> list[str]:
    """The application failures' restart times, one paragraph per system that had any."""
    lines: list[str] = []
    app = [r for r in runs if r["kind"] == APP and r.get("restart_s") is not None]
    if app:
        took = ", ".join(f"{r['restart_s']:.1f}" for r in app)
        ready = ", ".join(f"{r['ready']:.1f}" for r in app)
        lines += paragraph(
            f"Application failure, Sluice: `cluster start` on the same directory took {took} s "
            f"(kill → cluster ready: {ready} s)."
        ) + [""]
    drv = [r for r in runs if r["kind"] == DRIVER and r.get("ready") is not None]
    if drv:
        ready = ", ".join(f"{r['ready']:.1f}" for r in drv)
        lines += paragraph(f"Application failure, peer: kill → restarted query started: {ready} s.") + [""]
    return lines


def report(
    args, facts: dict, command: str, runs: list[dict], notes: list[str], limit: float | None, when: float | None = None
) -> str:
    """The RESULTS.md section (`when`: the heading's time, default now)."""
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(when))
    L = [*heading(f"{stamp} UTC — recovery: paired scenarios", 2), ""]
    L += [f"Command: `{command}` at commit {facts['commit']}", ""]
    L += [*table(["machine", ""], ([label, str(facts.get(k, "?"))] for k, label in MACHINE.items())), ""]
    bad = [r for r in runs if r.get("check") is not None and not r["check"].ok]
    if bad:
        L += [f"**OUTPUT CHECK FAILED** in {len(bad)} runs (see the tables and notes).", ""]
    L += [*job_text(args, limit), ""]
    summaries = [summarize(kind, runs, limit) for kind in SCENARIOS]
    L += [*table(SUMMARY_HEADER, (summary_row(s.kind, s) for s in summaries if s.runs)), ""]
    L += paragraph(
        "Per run (in the order run): restarts = Sluice: the job's restarts after the kill; the peer: new "
        "executors launched (a) or driver restarts (b). CPU s = the system's CPU seconds in the run (all its "
        "processes, bench/procstat.py); foreign = cores used by other processes on average."
    ) + [""]
    L += [*table(RUN_HEADER, (run_row(i, r, limit) for i, r in enumerate(runs, 1))), ""]
    L += restart_lines(runs)
    checks = [f"{i}. {r['kind']}: {r['check'].describe()}" for i, r in enumerate(runs, 1) if r.get("check")]
    if checks:
        L += ["Output checks (bench/output_check.py):", "", *bullets(checks), ""]
    L += notes_lines(notes)
    return "\n".join(L) + "\n"
