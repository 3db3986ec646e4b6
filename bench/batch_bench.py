"""Bounded jobs and fine-grained recovery (docs/batch.md), measured in three parts.

    python bench/batch_bench.py [--quick] [--parts page-views,failover,speculation] [--runs N]
                                [--events N] [--files N] [--sluice-configs 1x2,2x1] [--peer-shuffle 1,2,4,200]
                                [--failover-runs N] [--speculation-runs N] [--straggle S]
                                [--max-foreign-cores C] [--data-dir bench/data] [--out bench/RESULTS.md]
                                [--workdir DIR] [--keep-workdir]

1. page-views: examples/page_views_batch.py (BATCH, without --top-output) on a local Sluice cluster
   against plain Spark batch, `spark.read.schema(...).json(dir).groupBy("url").count().write.csv(out)`,
   in a child process of this script with one SparkSession (local[2]) started once, on the same
   generated input (examples/generate_page_views.py, cached under --data-dir and reused), alternating
   run by run (S P, then P S, ...). Sluice's time: `sluice run --detach` started -> FINISHED seen by a
   0.1 s status poll (its cluster started once before the runs, its TaskManagers' SparkSessions warm);
   the JobManager's own submitted -> ended is reported too. The peer's time: the query alone in the warm
   session (read, aggregate, write, the commit of the output). Tuning first (full runs): Sluice's
   cluster shape (--sluice-configs: TaskManagers x slots at parallelism = slots, optionally
   `/local[N]` for each TaskManager's Spark master) and the peer's shuffle partitions, --tune-runs runs
   each after one warm-up; the fastest median of each is measured. Every run's output is checked: one
   line per url with exactly the generator's count (bench/output_check.py's rules, plus no key twice).
2. failover: bench/jobs/failover_copy.py (streaming, 4 independent pipelines: file source -> paced map
   -> file sink, chained; checkpoints every 500 ms) at parallelism 4 on 4 TaskManagers x 2 slots, with
   `jobmanager.execution.failover-strategy` region or full, alternating. Once a checkpoint completed
   (and --kill-after seconds more), kill -9 of the process group of a TaskManager hosting exactly one
   of the job's subtasks (rotating over the subtasks). Recovery: kill -> every task RUNNING (or already
   FINISHED) again with the restarted ones in their new execution (status polled every 50 ms; tasks'
   `attempt` and `execution_attempt`). Restarted tasks: those whose (attempt, execution_attempt) rose.
   The output must hold every input row exactly once. The cluster's supervisor restarts the killed
   TaskManager (a cold start, during the recovery, in both arms); before the next run the harness waits
   for every slot to be free and warms the new TaskManager with a short job.
3. speculation: tests/integration/jobs/batch_counts.py (BATCH) at parallelism 4 on 2 TaskManagers x
   2 slots; its straggler is the first source attempt to create a marker file, which sleeps --straggle
   seconds once. Arms: off (straggler, no speculation), on (straggler, --speculative) and, for
   reference, none (no straggler), rotating. Time: `sluice run` started -> FINISHED seen. Exact counts.

Load rule (bench/procstat.py): a run during which processes of neither the measured system nor this
harness used more than --max-foreign-cores cores on average is excluded from every figure. Medians
with percentile-bootstrap 95 % intervals (bench/stats.py); ratios of medians with a bootstrap interval
(both arms resampled). One section is appended to --out. Every cluster and child process is stopped in
a `finally`, whatever happens.

The suite in modules: this file (the command line and main), bench/batch_parts.py (the three parts),
bench/batch_runs.py (the run order, a bounded job, the invocation's bookkeeping), bench/batch_peer.py
(the peer's child), bench/batch_data.py (inputs and output checks), bench/batch_report.py (the section).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, REPO)

from batch_parts import PARTS
from batch_report import report
from batch_runs import Bench
from bench_common import aborted, begin_run, finish_workdir, publish, run_main
from paired_runs import log

FULL = {
    "events": 10_000_000,
    "files": 80,
    "runs": 10,
    "tune_runs": 2,
    "sluice_configs": "1x2,2x1",
    "peer_shuffle": "1,2,4,200",
    "failover_runs": 6,
    "failover_events": 200_000,
    "failover_files": 400,
    "speculation_runs": 6,
    "speculation_events": 40_000,
    "speculation_files": 40,
    "straggle": 20.0,
}
QUICK = {
    "events": 500_000,
    "files": 20,
    "runs": 2,
    "tune_runs": 0,
    "sluice_configs": "1x2",
    "peer_shuffle": "2",
    "failover_runs": 2,
    "failover_events": 100_000,
    "failover_files": 200,
    "speculation_runs": 2,
    "speculation_events": 20_000,
    "speculation_files": 20,
    "straggle": 12.0,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from procstat import FOREIGN_CORES_LIMIT

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes and 2 runs per arm (a few minutes)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"which of {', '.join(PARTS)} to run")
    for key, value in FULL.items():
        kind = float if isinstance(value, float) else (int if isinstance(value, int) else str)
        ap.add_argument("--" + key.replace("_", "-"), type=kind, default=None, help=f"full {value}; quick {QUICK[key]}")
    ap.add_argument("--failover-pause", type=float, default=0.1, help="seconds per batch in the failover job's map")
    ap.add_argument("--kill-after", type=float, default=1.0, help="seconds after the first completed checkpoint")
    ap.add_argument("--speculation-delay", type=float, default=0.2, help="seconds per source batch (batch_counts)")
    ap.add_argument("--max-foreign-cores", type=float, default=FOREIGN_CORES_LIMIT, help="the load rule (0: off)")
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=900,
        help="before each counted run, wait up to this many seconds for other processes to use at most "
        "--max-foreign-cores (0: do not wait)",
    )
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"), help="where the page-view input is cached")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to ('-': none)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}; choose among {', '.join(PARTS)}")
    return args


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "batch-bench-", log)
    b = Bench(args, work)
    t0 = time.monotonic()
    interrupted = False
    try:
        for part, run_part in PARTS.items():
            if part in args.parts:
                log(f"== {part}")
                run_part(b)
    except BaseException as exc:
        interrupted = aborted(b, exc, "every cluster and child", log)
        raise
    finally:
        b.stop_all()
        if b.runs:
            section = report(b, command, facts, time.monotonic() - t0)
            if args.out in ("", "-"):
                print("\n" + section, flush=True)
            else:
                publish(section, args.out, log)
        finish_workdir(work, temp and (interrupted or not b.failed) and not args.keep_workdir, log, "logs under */log/")
    return 1 if b.failed else 0


if __name__ == "__main__":
    run_main(main)
