"""The pure parts of bench/before_after.py: the order its runs are made in (`run_order`) and its
section of bench/RESULTS.md (`section`: per input the median time of each commit with its interval
and the ratio after / before; each cluster's TaskManager memory). Tables are bench/markdown.py's.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Sequence
from typing import Any, TypeVar

import markdown
from bench_common import fmt
from procstat import fmt_rss
from run_matrix import Cell, Order, matrix, warm_ups
from stats import fmt_estimate, median_ci

T = TypeVar("T")
TIMES = ["input", "condition", "seconds", "events/s", "runs (output exact)"]
MEMORY = ["condition", "peak RSS", "RSS after the last job"]


def run_order(names: Sequence[str], items: Sequence[T], runs: int) -> list[Cell[T]]:
    """Round 0, the uncounted warm-up (every item on every cluster), then `runs` measured rounds; in
    each round the items in the order given and, for every item of the round, the clusters in the
    order of `names` in even rounds and reversed in odd ones (two clusters)."""
    return warm_ups(names, items) + matrix(names[::-1], items, runs, systems_order=Order.ALTERNATE)


def time_rows(label: str, events: int, runs: Sequence[dict]) -> tuple[list[Any], float | None]:
    """One input's row for one condition (its runs, those with exact output counted), and the median."""
    exact = [g for g in runs if g["counts_ok"]]
    est = median_ci(g["submit_to_end"] for g in exact)
    rate = fmt(events / est.median, ",.0f") if est.median else "—"
    return [label, fmt_estimate(est, ".2f"), rate, f"{len(exact)} of {len(runs)}"], est.median


def input_rows(per_file: int, events: int, runs: dict[str, list[dict]], before: str, after: str) -> list[list[Any]]:
    """An input's rows: before, after, and the ratio of their median times when both have one."""
    name = f"{per_file:,} events/file"
    rows, medians = [], {}
    for condition in (before, after):
        row, medians[condition] = time_rows(condition, events, runs.get(condition, []))
        rows.append([name, *row])
    was, now = medians[before], medians[after]
    if was and now:
        rows.append([name, "after / before (time)", f"{now / was:.2f}", "", ""])
    return rows


def memory_row(name: str, memory: tuple[int, int] | None) -> list[str]:
    peak, now = memory or (None, None)
    return [name, fmt_rss(peak), fmt_rss(now)]


def section(
    args: Namespace,
    command: str,
    facts: dict,
    names: tuple[str, str],
    inputs: dict[int, tuple[str, dict]],
    runs: dict[tuple[str, int], list[dict]],
    memory: dict[str, tuple[int, int] | None],
    failed: bool,
) -> str:
    """The section: `names` (before, after); `inputs` per events per file (directory, expected counts);
    `runs` per (condition, events per file); `memory` per condition; `failed`: the run stopped early."""
    before, after = names
    distinct = len(next(iter(inputs.values()))[1]) if inputs else 0
    setup = (
        f"examples/page_views.py at parallelism 2 on {args.events:,} events "
        f"({distinct:,} distinct urls of {args.urls:,}), "
        f"{args.taskmanagers} TaskManager(s) x {args.slots} slots per cluster, checkpoints every "
        f"{args.checkpoint_interval} ms; {args.runs} runs per condition and input, alternating. "
        "Submission to FINISHED, median [95 % interval]; events/s from the median."
    )
    rows = []
    for per_file in inputs:
        per_condition = {name: runs.get((name, per_file), []) for name in names}
        rows += input_rows(per_file, args.events, per_condition, before, after)
    blocks = [
        [setup],
        markdown.table(TIMES, rows),
        [
            "TaskManager memory per cluster, after every run above and its warm-up (the highest over its "
            "TaskManagers): peak RSS since start (VmHWM), RSS after the last job."
        ],
        markdown.table(MEMORY, [memory_row(name, memory.get(name)) for name in (before, after)]),
        ["The run stopped early (see the log); the figures above are the runs it finished."] if failed else [],
    ]
    return markdown.section(args.title, command, facts, blocks)
