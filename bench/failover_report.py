"""The report of bench/failover_bench.py: its runs (one_run's dicts: the times from the kill, the output
check, the load) -> a line per run and the Markdown section appended to bench/RESULTS.md. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from bench_common import fmt, median
from markdown import table
from stats import fmt_load

TIMES = ("leader", "running", "ckpt")
HEADER = (
    "run",
    "new leader in ZooKeeper (s)",
    "job RUNNING again (s)",
    "first checkpoint after restore (s)",
    "output exactly once",
    "load, 1 min, start→end",
)


def describe(r: dict) -> str:
    """One run in a line: its times from the kill, its output check and its load."""
    return (
        ", ".join(f"{k} {r[k]:.2f}s" for k in TIMES if k in r)
        + f"; output {r['output_check'].describe()}; load {fmt_load(r)}"
    )


def run_row(i: int, r: dict) -> list[Any]:
    """A run's row: its times from the kill ("–": not reached), its output check, its load."""
    return [i, *(fmt(r.get(k), none="–") for k in TIMES), "yes" if r["output_check"].ok else "**NO**", fmt_load(r)]


def medians(runs: Sequence[dict]) -> dict[str, float | None]:
    return {k: median(r.get(k) for r in runs) for k in TIMES}


def report(runs: Sequence[dict], runs_arg: int, session_timeout: float, machine: str, when: datetime) -> str:
    """The section: the setting, a row per run and the medians, the goal, each failed output check.
    `machine`: its sentence ("Machine: ... cores, ... RAM, Python ...")."""
    med = medians(runs)
    rows = [run_row(i, r) for i, r in enumerate(runs, 1)]
    rows.append(["**median**", *(f"**{fmt(med[k])}**" for k in TIMES)])
    goal = session_timeout + 2
    met = med["running"] is not None and med["running"] <= goal
    bad = [(i, r["output_check"]) for i, r in enumerate(runs, 1) if not r["output_check"].ok]
    lines = [
        f"\n## JobManager failover after kill -9 of the leader — {when:%Y-%m-%d %H:%M} UTC\n",
        f"{machine} Command: `python bench/failover_bench.py --runs {runs_arg} "
        f"--zk-session-timeout {session_timeout}`. 2 JobManagers, 2 TaskManagers x 2 slots, "
        "unbounded keyed count at parallelism 2, checkpoints every 500 ms. Output exactly once: the committed "
        "lines after the cancel, no (key, count) line twice, counts increasing, each key's last count the "
        "generator's at the checkpoint that committed it (bench/output_check.py).\n",
        *table(HEADER, rows),
        f"\nGoal: job RUNNING again within session timeout + 2 s = {goal:.1f} s: "
        f"{'met' if met else 'missed'} (median {fmt(med['running'])} s).\n",
        *(f"**OUTPUT CHECK FAILED**, run {i}: {check.describe()}\n" for i, check in bad),
    ]
    return "\n".join(lines)
