"""Spark Structured Streaming peer of bench/page_views_bench.py: the same
running count of page views per url, on the same machine and the same data
(examples/generate_page_views.py's generate(): Zipf urls, 10,000 urls), as a
plain Spark Structured Streaming query, so that both can be put side by side.

    python bench/structured_streaming_bench.py [--events 1000000] [--files 8] [--max-files-per-trigger 1]
        [--trigger-ms MS] [--runs 3] [--session per-run|shared] [--input DIR]
        [--recovery-events 2000000] [--recovery-files 400] [--recovery-max-files-per-trigger 4]
        [--recovery-runs 3] [--recovery-input DIR] [--skip-recovery] [--skip-throughput]
        [--append bench/RESULTS.md] [--workdir DIR] [--keep-workdir] [--timeout 900]

The query (run in a child Python process, local[2], the settings of
taskmanager/spark_engine.py: shuffle partitions 2, UI off, Arrow on, driver
memory 2g):

    spark.readStream.schema("url string, user long, ts long")
         .option("maxFilesPerTrigger", N).json(DIR)
         .groupBy("url").count()
         .writeStream.outputMode("update").option("checkpointLocation", CKPT)
         .foreachBatch(write `url,count` lines to OUT/batch-<batch id>.csv).start()

Each batch's file is written to a temporary name and renamed to its batch id,
so that a batch replayed after a crash overwrites its own file (idempotent
sink; exactly-once together with the checkpoint's offset/commit logs). Every
run's output is checked (bench/output_check.py): the batch files in batch id
order hold no (url, count) line twice, each url's counts increase, and the
last count of each url equals generate()'s (or, with --input, the one counted
from the files in Python).

1. Throughput: one uncounted warm-up run, then --runs runs. --session per-run
   (default): each run is a fresh child process (fresh JVM): startup =
   SparkSession creation + query definition/start() (reported separately,
   also Python + pyspark import time); processing = start() returned ->
   processAllAvailable() returned; throughput = events / processing. --session
   shared: one child, one SparkSession; the warm-up and the runs are
   successive queries in it (a warm JVM, like Sluice's long-lived
   TaskManagers); the SparkSession creation is then paid once, by the warm-up.
   Per-batch latency: durationMs.triggerExecution of every micro-batch with
   input (StreamingQueryProgress), p50 / p99 over all counted runs.
2. Recovery: a child runs the query over a bigger input (--recovery-events in
   --recovery-files files, --recovery-max-files-per-trigger per batch); once
   a micro-batch is committed (CKPT/commits/<id> exists) the child's process
   group (Python driver + its JVM) gets SIGKILL; a new child is started at
   once on the same checkpointLocation and output dir. Measured from the
   kill: process start (Python + pyspark import), SparkSession ready, query
   started, first output file written after the kill (new name, or a replayed
   batch's file rewritten), first new commit. The restarted query runs to the
   end and its final counts are checked.

Results are printed and appended to --append as a dated Markdown section
("Spark Structured Streaming peer"). Every child (and its JVM) is killed on
exit, error, Ctrl-C or SIGTERM.

This file is the command line and main; the child process (both its ends) is
bench/structured_streaming_child.py, the runs bench/structured_streaming_runs.py,
the section bench/structured_streaming_report.py; the other suites import
these pieces from them.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass, field

from bench_common import begin_run, finish_workdir, publish, run_main
from structured_streaming_child import (
    HERE,
    REPO,
    BenchError,
    Child,
    child_main,
    log,
)
from structured_streaming_report import report
from structured_streaming_runs import prepare_input, recovery_run, throughput


@dataclass
class Measured:
    """What a run of this script has measured so far (reported even when it stops half-way)."""

    tput: list[dict] = field(default_factory=list)
    tput_events: int = 0
    recovery: list[dict] = field(default_factory=list)
    rec_events: int = 0
    notes: list[str] = field(default_factory=list)
    failed: bool = False


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--events", type=int, default=1_000_000, help="events for the throughput runs")
    ap.add_argument("--files", type=int, default=8, help="input files for the throughput runs")
    ap.add_argument("--input", help="reuse these *.jsonl files for the throughput runs (counts computed from them)")
    ap.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=1,
        help="maxFilesPerTrigger of the throughput runs (0: unset, all files in one batch)",
    )
    ap.add_argument(
        "--trigger-ms", type=int, default=None, help="processingTime trigger (default: as fast as possible)"
    )
    ap.add_argument("--runs", type=int, default=3, help="counted throughput runs (after one uncounted warm-up run)")
    ap.add_argument(
        "--session",
        choices=("per-run", "shared"),
        default="per-run",
        help="a fresh child process (JVM) per throughput run, or one SparkSession for all",
    )
    ap.add_argument("--recovery-events", type=int, default=2_000_000, help="enough for the query to run >= 15 s")
    ap.add_argument("--recovery-files", type=int, default=400)
    ap.add_argument("--recovery-max-files-per-trigger", type=int, default=4)
    ap.add_argument("--recovery-runs", type=int, default=3)
    ap.add_argument("--recovery-input", help="reuse these *.jsonl files for recovery")
    ap.add_argument("--skip-recovery", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument(
        "--append",
        default=os.path.join(HERE, "RESULTS.md"),
        help="Markdown file to append to ('' or '-': do not append)",
    )
    ap.add_argument(
        "--workdir",
        default=None,
        help="data, checkpoints, outputs, child logs (default: a temp dir, removed unless something failed)",
    )
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a child may take for one step")
    return ap


def run_throughput(args, work: str, m: Measured) -> None:
    data, expected, m.tput_events = prepare_input(work, "events", args.input, args.events, args.files, 7)
    m.tput, n = throughput(args, work, data, expected, m.tput_events)
    m.notes += n
    m.failed = m.failed or not all(r["counts_ok"] for r in m.tput)
    if not args.input:
        shutil.rmtree(data, ignore_errors=True)


def run_recovery(args, work: str, m: Measured) -> None:
    data, expected, m.rec_events = prepare_input(
        work, "events-recovery", args.recovery_input, args.recovery_events, args.recovery_files, 11
    )
    for i in range(1, args.recovery_runs + 1):
        try:
            r, n = recovery_run(args, work, data, expected, m.rec_events, i)
            m.recovery.append(r)
            m.notes += n
            m.failed = m.failed or not r["counts_ok"]
        except BenchError as exc:
            m.failed = True
            m.notes.append(f"recovery {i} failed: {exc}".split("\n")[0])
            log(f"recovery {i} failed: {exc}")
    if not args.recovery_input:
        shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    if args.child:
        return child_main(args.child)
    if args.runs < 1 and not args.skip_throughput:
        ap.error("--runs must be at least 1")

    command, facts, temp, work = begin_run(REPO, args.workdir, "sss-bench-", log)
    m = Measured()
    interrupted = False
    try:
        if not args.skip_throughput:
            run_throughput(args, work, m)
        if not args.skip_recovery and args.recovery_runs > 0:
            run_recovery(args, work, m)
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): killing the children")
        raise
    except BaseException as exc:
        m.failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        Child.kill_all()
        if m.tput or m.recovery:
            section = report(args, facts, command, m.tput, m.tput_events, m.recovery, m.rec_events, m.notes)
            publish(section, args.append, log, append=args.append not in ("", "-"))
        finish_workdir(work, temp and (interrupted or not m.failed) and not args.keep_workdir, log, "child logs: *.log")
    return 1 if m.failed else 0


if __name__ == "__main__":
    run_main(main)
