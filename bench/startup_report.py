"""The report of bench/startup_bench.py: each condition's runs (one_run's dicts) -> the Markdown section
appended to bench/RESULTS.md: per condition, whether the archive was mapped and the medians of the
cluster start, its CPU seconds, a TaskManager's readiness and the first job. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markdown import paragraph, section, table
from stats import fmt_estimate, median_ci

TITLE = "cluster start and first job: class-data sharing archive, warm-up, bytecode"
HEADER = (
    "condition",
    "archive mapped",
    "cluster start",
    "its CPU seconds",
    "TaskManager ready (process start → registered)",
    "first job (`sluice run`)",
)


def condition_row(name: str, runs: Sequence[dict]) -> list[Any]:
    """A condition's row; SystemExit when the archive was mapped in some of its runs only."""
    mapped = {r["archive_mapped"] for r in runs}
    if len(mapped) != 1:
        raise SystemExit(f"{name}: the archive was mapped in some runs only")
    start = median_ci(r["cluster_start_s"] for r in runs)
    cpu = median_ci(r["cluster_start_cpu_s"] for r in runs)
    ready = median_ci(x for r in runs for x in r["taskmanager_ready_s"])
    job = median_ci(r["first_job_s"] for r in runs)
    return [name, "yes" if mapped == {True} else "no", *(fmt_estimate(e, ".2f") for e in (start, cpu, ready, job))]


def report(
    results: Mapping[str, Sequence[dict]],
    runs: int,
    events: int,
    command: str,
    facts: dict,
    when: float | None = None,
) -> str:
    """The section: the setting, then a row per condition (in `results`' order)."""
    setting = paragraph(
        f"{runs} runs per condition, alternating (order rotated each round); `sluice cluster start "
        f"--jobmanagers 1 --taskmanagers 2` (2 slots each); first job: examples/page_views.py at "
        f"parallelism 2 on {events:,} events, output checked. Seconds, median [95 % interval]."
    )
    rows = [condition_row(name, rs) for name, rs in results.items()]
    return section(TITLE, command, facts, [setting, table(HEADER, rows)], when=when)
