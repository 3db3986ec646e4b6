"""A hash exchange of a batch that is an Arrow table already (a keyed operator's output going to
a hash edge: a keyed aggregate re-keyed into a SQLite or file sink after an operator-level
rescale, docs/savepoints.md "Keyed edges"): the key groups computed by Spark against computed
in Python.

    python bench/hash_exchange_bench.py [--rows 1000,10000,50000] [--runs 9] [--out bench/RESULTS.md]

How: one SparkSession as a TaskManager starts it (taskmanager.spark_engine.SparkEngine, local[2],
warmed up); per size an Arrow table like a keyed count's update batch (`url` strings of 12-16
characters, all distinct, and a `count` column); each run routes the batch through a hash
RecordWriter into 3 subpartitions, timed from the call to the last subpartition filled:

- **spark**: the batch handed over as a DataFrame made from the table (what the writer did for an
  Arrow batch before: `createDataFrame`, then `select("*", xxhash64 key group).toArrow()`);
- **arrow**: the batch handed over as the table (`key_groups.arrow_key_groups`, no Spark call), at
  every size (the writer itself hands batches above `ARROW_HASH_MAX_ROWS` to Spark: this run is
  where that threshold comes from).

The two alternate run by run (spark first in odd runs, arrow first in even ones); both routings
are checked to be identical. Reported (bench/hash_exchange_report.py): median seconds per batch
with a 95 % bootstrap interval, and rows/s at the median.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import pyarrow as pa
from bench_common import begin_run, finish_workdir, publish, run_main
from hash_exchange_report import ROUTINGS, report
from run_matrix import Cell, Order, matrix

from sluice.graph import Partitioning
from taskmanager.network import record_writer
from taskmanager.network.partition import ResultPartition
from taskmanager.network.record_writer import RecordWriter
from taskmanager.spark_engine import Batch, SparkEngine

SUBTASKS = 3


def log(message: str) -> None:
    print(f"[hash_exchange_bench] {message}", file=sys.stderr, flush=True)


def update_batch(rows: int) -> pa.Table:
    return pa.table({"url": [f"/page/{i:09d}" for i in range(rows)], "count": pa.array(range(rows), pa.int64())})


def route(engine: SparkEngine, table: pa.Table, via: str) -> tuple[float, list[list[str]]]:
    """Seconds to route `table` through a hash writer, and the urls each subpartition got."""
    partition = ResultPartition("bench/att/chain/0-p", SUBTASKS, 1 << 20)
    writer = RecordWriter(partition, Partitioning.HASH, ["url"], 0, 128, None, lambda: False)
    t0 = time.perf_counter()
    if via == "spark":
        batch = Batch(engine, df=engine.spark.createDataFrame(table))
    else:
        batch = Batch(engine, table=table)
    writer.emit(batch)
    seconds = time.perf_counter() - t0
    urls: list[list[str]] = []
    for sub in partition.subpartitions:
        got: list[str] = []
        while sub.backlog():
            item = sub.poll(1.0)
            assert item is not None, "backlog() counted an item"
            _kind, part = item
            got.extend(part.column("url").to_pylist())
        urls.append(sorted(got))
    return seconds, urls


def order(rows: int, runs: int) -> list[Cell[int]]:
    """The runs of one batch size: both routings per round, spark first in odd rounds, arrow first in
    even ones."""
    return matrix(ROUTINGS, [rows], runs, systems_order=Order.ROTATE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000,10000,50000", help="batch sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]
    record_writer.ARROW_HASH_MAX_ROWS = max(sizes)  # measure the Python path at every size
    command, facts, temp, work = begin_run(REPO, None, "sluice-hash-bench-", log)
    engine = SparkEngine(slots=2, app_name="sluice-hash-exchange-bench")
    engine.start()
    results: dict[tuple[int, str], list[float]] = {}
    try:
        for rows in sizes:
            table = update_batch(rows)
            routed: dict[str, list[list[str]]] = {}
            for cell in order(rows, args.runs):
                seconds, routed[cell.system] = route(engine, table, cell.system)
                results.setdefault((rows, cell.system), []).append(seconds)
                if len(routed) == len(ROUTINGS):  # the round's both routings
                    if routed["spark"] != routed["arrow"]:
                        raise SystemExit(f"the two routings differ for {rows} rows")
                    routed.clear()
            log(f"{rows} rows done")
    finally:
        engine.stop()
        finish_workdir(work, temp, log)
    publish(report(facts, command, sizes, args.runs, results, SUBTASKS), args.out, log)
    return 0


if __name__ == "__main__":
    run_main(main)
