"""Where a file source's Spark time goes: one source subtask's share of page views, read in one warm
SparkSession (local[2], as a TaskManager's) through different plans, so that each cost shows as the
difference between two of them.

    python bench/spark_call_costs.py [--events 1000000] [--events-per-file 50000] [--runs 7]
        [--subtasks 1] [--files-per-call 0] [--out bench/RESULTS.md] [--no-append] [--workdir DIR]

Input: examples/generate_page_views.py's files; a subtask's share at parallelism 2 (every other
file). With `--subtasks 2` both shares are read at once, each by its own thread, as the two source
subtasks of a TaskManager with 2 slots do; `--files-per-call K` reads a share in calls of K files
(0: all in one call). Plans, all over the same files, each run once per round, the order rotated
every round:

- sluice: what a page-views source call does today — FileFormatReader.read (the default on_error
  "drop": every column parsed, malformed rows observed and filtered), the key and its key group
  (xxhash64) projected, `toArrow`;
- sluice, a call per file: the same, one call per file (the fixed cost of a Spark call);
- sluice, no Arrow: the same plan written to Spark's `noop` sink (what crossing into Python costs);
- key columns only: the malformed-row metric referencing the key column only (Spark then parses
  only the columns the job reads);
- no validation: a plain `spark.read.json` of the schema, key and key group projected, `toArrow`
  (what checking rows for malformed values costs in all);
- partials in Spark: sluice's plan grouped by key and key group in Spark before `toArrow`;
- scan only: `spark.read.json` of the key column into the `noop` sink (the JSON scan alone);
- peer plan: the peer's batch — `spark.read.json(...).groupBy("url").count()` collected.

Per plan: seconds per run, median [95 % interval] (bench/stats.py), and events/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from page_views_runs import REPO  # first: puts the repo and examples/ on sys.path

# isort: split
from bench_common import begin_run, finish_workdir, fmt, publish, run_main
from generate_page_views import generate
from markdown import section_head, table
from run_matrix import MEASURED, WARM_UP, Cell, Order, matrix
from stats import fmt_estimate, median_ci

sys.path.insert(0, REPO)
SCHEMA = "url string, user long, ts long"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def subtask_inputs(work: str, events: int, events_per_file: int, subtasks: int) -> tuple[str, list[list[str]]]:
    """The first `subtasks` source subtasks' shares of page views at parallelism 2: `events` page
    views generated under work/in, `events_per_file` a file (at least 2 files); (that directory,
    every other file from the first, and from the second)."""
    path = os.path.join(work, "in")
    generate(path, events=events, files=max(2, events // events_per_file))
    files = sorted(glob.glob(os.path.join(path, "*.jsonl")))
    return path, [files[i::2] for i in range(subtasks)]


def calls(paths: Sequence[str], per_call: int) -> list[list[str]]:
    """`paths` in calls of `per_call` files (0: one call)."""
    if per_call <= 0:
        return [list(paths)]
    return [list(paths[i : i + per_call]) for i in range(0, len(paths), per_call)]


def in_subtasks(plan: Callable[[list[str]], object], shares: Sequence[Sequence[str]], per_call: int) -> None:
    """Each share read by a thread of its own, in calls of `per_call` files, as a TaskManager's source
    subtasks read theirs; an exception in a thread is raised here."""
    errors: list[BaseException] = []

    def read(share: Sequence[str]) -> None:
        try:
            for paths in calls(share, per_call):
                plan(paths)
        except BaseException as exc:  # noqa: BLE001 — raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(share,)) for share in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def plan_order(names: Sequence[str], runs: int) -> list[Cell[None]]:
    """The plans' runs in order: `runs` + 1 rounds, each plan once a round, the order turned by one
    every round (a b c, b c a, c a b, ...). Round 0 warms each plan's code up: not counted."""
    cells = matrix(names, [None], runs + 1, systems_order=Order.ROTATE)
    return [dataclasses.replace(c, round=c.round - 1, phase=WARM_UP if c.round == 1 else MEASURED) for c in cells]


def timed_rounds(named: Mapping[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Each plan's seconds per counted run, the plans run in `plan_order`."""
    names = list(named)
    times: dict[str, list[float]] = {}
    for r, cells in itertools.groupby(plan_order(names, runs), key=lambda c: c.round):
        for c in cells:
            t0 = time.monotonic()
            named[c.system]()
            took = time.monotonic() - t0
            if c.phase == MEASURED:
                times.setdefault(c.system, []).append(took)
        log(f"round {r}: " + ", ".join(f"{n} {times.get(n, [0])[-1]:.2f}s" for n in names))
    return times


def plan_row(name: str, seconds: Sequence[float], events: int) -> list:
    est = median_ci(seconds)
    return [name, fmt_estimate(est, ".3f"), fmt(events / est.median, ",.0f") if est.median else None]


def report(
    names: Sequence[str],
    times: dict[str, list[float]],
    nfiles: int,
    events: int,
    runs: int,
    command,
    facts,
    subtasks: int = 1,
    per_call: int = 0,
) -> str:
    """The section: per plan, seconds per run (median [95 % interval]) and events/s."""
    lines = section_head("a file source's Spark call, plan by plan", command, facts)
    whose = "One source subtask's share" if subtasks == 1 else f"{subtasks} source subtasks' shares, read at once,"
    how = "in one call" if per_call <= 0 else f"in calls of {per_call} files"
    lines += [
        f"{whose} of page views at parallelism 2: {nfiles} files, {events:,} events, {how} each, "
        f"read in one warm SparkSession (local[2]); {runs} runs per plan, order rotated each round. "
        "Seconds per run, median [95 % interval]; events/s from the median.",
        "",
        *table(("plan", "seconds", "events/s"), [plan_row(n, times.get(n, []), events) for n in names]),
    ]
    return "\n".join(lines) + "\n"


def plans(engine, payload: dict) -> dict[str, Callable[[list[str]], object]]:
    """Each plan as one call over the files it is given."""
    from pyspark.sql import functions as F

    from sluice import key_groups
    from taskmanager.operators.file_reader import FileFormatReader

    spark = engine.spark
    kg = key_groups.spark_key_group("url", 128)

    def sluice_df(paths: list[str], key_only: bool = False):
        reader = FileFormatReader(payload, engine)
        if key_only:
            plan = reader._plan()
            malformed = F.col(plan.corrupt).isNotNull()
            key_metric = F.count(F.when(malformed, F.coalesce(F.col("url"), F.lit("")))).alias("malformed")
            reader.plan = dataclasses.replace(plan, metrics=(plan.metrics[0], key_metric, *plan.metrics[2:]))
        return reader.read(paths).select("url", kg)

    return {
        "sluice": lambda paths: sluice_df(paths).toArrow(),
        "sluice, a call per file": lambda paths: [sluice_df([p]).toArrow() for p in paths],
        "sluice, no Arrow": lambda paths: sluice_df(paths).write.format("noop").mode("overwrite").save(),
        "key columns only": lambda paths: sluice_df(paths, key_only=True).toArrow(),
        "no validation": lambda paths: spark.read.schema(SCHEMA).json(paths).select("url", kg).toArrow(),
        "partials in Spark": lambda paths: sluice_df(paths).groupBy("url", kg).agg(F.count(F.lit(1))).toArrow(),
        "scan only": lambda paths: (
            spark.read.schema(SCHEMA).json(paths).select("url").write.format("noop").mode("overwrite").save()
        ),
        "peer plan": lambda paths: spark.read.schema(SCHEMA).json(paths).groupBy("url").count().collect(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--events-per-file", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--subtasks", type=int, choices=(1, 2), default=1, help="source subtasks read at once")
    ap.add_argument("--files-per-call", type=int, default=0, help="files per call (0: a share in one call)")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--no-append", action="store_true", help="print the section only")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-spark-calls-", log)
    from taskmanager.spark_engine import SparkEngine

    engine = SparkEngine(slots=2)
    try:
        path, shares = subtask_inputs(work, args.events, args.events_per_file, args.subtasks)
        events = args.events // 2 * args.subtasks
        engine.start()  # warmed up, as a TaskManager's
        payload = {"format": "json", "path": path, "schema": SCHEMA, "options": {}}
        named = {
            name: functools.partial(in_subtasks, plan, shares, args.files_per_call)
            for name, plan in plans(engine, payload).items()
        }
        names = list(named)
        times = timed_rounds(named, args.runs)
        nfiles = sum(len(share) for share in shares)
    finally:
        engine.stop()
        finish_workdir(work, temp, log)
    section = report(names, times, nfiles, events, args.runs, command, facts, args.subtasks, args.files_per_call)
    publish(section, args.out, log, append=not args.no_append)
    return 0


if __name__ == "__main__":
    run_main(main)
