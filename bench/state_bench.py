"""Keyed state: Sluice and Spark Structured Streaming (the peer) run two stateful jobs over the same
generated data, alternating run by run, each output checked against its system's own semantics, and
timed from the outside in the same way (first input read → last result committed).

    python bench/state_bench.py [--quick] [--jobs dedup,join] [--events 400000] [--users 20000]
        [--dedup-operator process|batch|builtin]
        [--ttl-ms 60000] [--impressions 750000] [--upper-ms 600000] [--disorder-ms 2000] [--runs 5]
        [--peer-shuffle 2,200] [--no-count-calls] [--skip-sluice] [--skip-peer] [--max-foreign-cores 0.3]
        [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Jobs (both systems' out-of-orderness bound is --disorder-ms D unless said otherwise):

- **dedup**. Input: examples/generate_page_views.py's generate() (seed 7, users uniform in [0, U),
  timestamps out of order by up to D, 12,500 events per file). Sluice: `examples/dedup.py --ttl-ms T
  --out-of-orderness-ms D`, a keyed process function that keeps, per user, the first event within T
  ms of event time (list and value state, event-time timers), output `user,ts,url`. Checked exactly
  against an independent computation (`expected_firsts`: per user, events in (ts, url) order, an
  event kept when the user's last kept one is at least T older; vectorized with numpy, tested against
  the plain loop of tests/integration/test_user_state.py): every expected event committed once, none
  missing, none unexpected. Peer: `withWatermark("et", "T milliseconds")` +
  `dropDuplicatesWithinWatermark(["user"])` (Spark 4): the first *arrival* of a user wins, and the
  user's entry expires once the watermark passes its event time + T; Spark's documented guarantee is
  that events whose distance is below the watermark delay are deduplicated. Its sanity check
  (`check_dedup_peer`): every emitted row is an input event, no row twice, every input user emitted
  at least once, and no two emitted events of one user less than T apart. (With the whole input in
  its first batch, nothing expires in between, so it emits one row per user; Sluice emits one per user
  and T: the two jobs do not produce the same rows, by their definitions.)
- **join**. Input: examples/generate_clicks.py's generate() (M impressions, one every 10 ms; about
  0.35 M clicks, each up to 20 min after its impression, some on no impression; timestamps out of
  order by up to D; 12,500 impressions per file and as many files of clicks). Sluice:
  `examples/click_join.py --upper-ms U --out-of-orderness-ms D` (interval join keyed by imp_id,
  output `imp_id,ad,ts,ts_right`). Peer: a stream-stream inner join on imp_id with watermarks of D
  on both sides and `clicks.et BETWEEN imp.et AND imp.et + interval U milliseconds`, append mode.
  Both checked exactly (`check_join`) against generate_clicks.expected_joins (the multiset of
  (imp_id, impression ts, click ts)), and every row's ad against its impression's.

Measured per run: the window (bench/window.py's inotify watch: the first read(2) of any input file
(both input directories for the join) → the commit of the last output file holding a result line;
Sluice renames its parts, the peer commits a batch by writing `_spark_metadata/<batch>`); events/s
= input events / window (dedup N; join impressions + clicks); startup (launch → first read); CPU
seconds per million events of the measured system's processes (bench/procstat.py, also the load
rule); state: Sluice the largest completed checkpoint (`size_bytes` of `sluice status --json`), the
peer the largest `memoryUsedBytes` summed over its state operators (StreamingQueryProgress) and its
checkpoint's `state/` on disk at the end; peak RSS (VmHWM since the process started, so a high-water
mark over every run before too) of Sluice's TaskManager (its Python process and its Spark JVM) and
of the peer's driver (Python and JVM), the largest process of each role (`rss_parts`).

Python calls per event (dedup, Sluice): the keyed-process operator counts its calls into user code
(`python_calls`, taskmanager/operators/keyed_process.py) but does not report them. One uncounted
*instrumented* run per invocation runs a job file this script writes into its working directory:
examples/dedup.py's own build() with its process function subclassed to count its process() and
on_timer() calls (the calls the operator counts) and to write the counts to a file per instance while
the final watermark fires the last timers. The count is exact for that run; the number of batches
(the source doubles its files per Spark call while a batch takes under 0.5 s) and with it the
process calls differ a little from run to run. The peer runs no Python per event.

Configurations: Sluice one local cluster of 1 TaskManager x 2 slots, parallelism 2, checkpoints every
second (its best, bench/README.md); the peer one SparkSession local[2] in a child process, queries
with Trigger.AvailableNow (maxFilesPerTrigger unset: the whole input in one batch, then the no-data
batch that evicts state), shuffle partitions: each of --peer-shuffle tried once per job after the
warm-up, the fastest kept (quick: 2 only). Order: one uncounted warm-up per system and job, the
instrumented run, the peer's tuning runs, then --runs rounds; in each round each job runs Sluice, then
the peer. Medians with bootstrap 95 % intervals (bench/stats.py); runs the load rule excludes are left
out.

Sizes: dedup 400,000 page views of 20,000 users (20 per user), join 750,000 impressions (about 1 M
events with their clicks). Sluice's dedup ran at about 4,300 events/s in the reference run (0.89
Python calls per event, ~280 us of CPU each, everything included), so 1 M events would take about 4
minutes per run and the full run's 7 Sluice dedup runs alone would pass its ~15-minute budget.
Quick (--quick): 200,000 page views of 10,000 users, 150,000 impressions, 2 runs per system and job.
Appends one section to bench/RESULTS.md ("Keyed state"). This file declares the suite (the peer's
queries, the command line, the runs); its pieces: bench/state_bench_jobs.py (the jobs, their inputs
and expected answers), bench/state_bench_checks.py (the output checks), bench/state_bench_runs.py
(the two sides, a run, the instrumented run), bench/state_bench_report.py (the section).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import paired_runs
import spark_peer
from bench_common import begin_run, run_main
from paired_runs import SLUICE, log
from state_bench_checks import DEDUP_COLUMNS, JOIN_COLUMNS
from state_bench_jobs import DEDUP_JOB, JOBS, JOIN_JOB, Data, prepare_dedup, prepare_join
from state_bench_report import report
from state_bench_runs import Bench, PeerSide, SluiceSide

PAGE_SCHEMA = "url string, user long, ts long"
IMP_SCHEMA = "imp_id long, ad string, user long, ts long"
CLICK_SCHEMA = "imp_id long, user long, ts long"


# ================================================================================================
# peer child: one SparkSession, one query per go file
# ================================================================================================
def peer_query(spark: Any, q: dict) -> Any:
    """The peer's streaming DataFrame for query spec `q` (job dedup or join)."""
    from pyspark.sql import functions as F

    if q["job"] == "dedup":
        return (
            spark.readStream.schema(PAGE_SCHEMA)
            .json(q["input"])
            .withColumn("et", F.timestamp_millis("ts"))
            .withWatermark("et", f"{int(q['ttl_ms'])} milliseconds")
            .dropDuplicatesWithinWatermark(["user"])
            .select(*DEDUP_COLUMNS)
        )
    delay = f"{int(q['delay_ms'])} milliseconds"
    imps = (
        spark.readStream.schema(IMP_SCHEMA)
        .json(q["impressions"])
        .withColumn("imp_et", F.timestamp_millis("ts"))
        .withWatermark("imp_et", delay)
    )
    clicks = (
        spark.readStream.schema(CLICK_SCHEMA)
        .json(q["clicks"])
        .select(
            F.col("imp_id").alias("c_imp_id"), F.col("ts").alias("ts_right"), F.timestamp_millis("ts").alias("c_et")
        )
        .withWatermark("c_et", delay)
    )
    cond = F.expr(
        f"imp_id = c_imp_id AND c_et >= imp_et AND c_et <= imp_et + interval {int(q['upper_ms'])} milliseconds"
    )
    return imps.join(clicks, cond, "inner").select(*JOIN_COLUMNS)


def child_main(spec_path: str) -> int:
    return spark_peer.serve_queries(spec_path, "sss-state-bench", peer_query, survive_errors=True)


# ================================================================================================
# main
# ================================================================================================
def sluice_ready() -> str | None:
    """Why the Sluice side cannot run (None: it can)."""
    for path in (DEDUP_JOB, JOIN_JOB):
        if not os.path.exists(path):
            return f"{os.path.relpath(path, REPO)} does not exist"
    try:
        import sluice.api  # noqa: F401 — imported only to see that it imports
    except Exception as exc:  # noqa: BLE001 — reported, not raised
        return f"sluice.api does not import: {exc}"
    return None


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="small inputs, 2 runs per system and job")
    ap.add_argument("--jobs", default="dedup,join", help=f"any of {', '.join(JOBS)}")
    ap.add_argument("--events", type=int, default=None, help="dedup: page views (default 400,000; quick 200,000)")
    ap.add_argument("--users", type=int, default=None, help="dedup: distinct users (default 20,000; quick 10,000)")
    ap.add_argument("--ttl-ms", type=int, default=60_000, help="dedup: T (Sluice's TTL, the peer's watermark delay)")
    ap.add_argument("--impressions", type=int, default=None, help="join: impressions (default 750,000; quick 150,000)")
    ap.add_argument("--upper-ms", type=int, default=600_000, help="join: a click's latest time after its impression")
    ap.add_argument("--disorder-ms", type=int, default=2000, help="timestamps out of order by up to this; the bound")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per system and job (5; quick 2)")
    paired_runs.add_peer_args(ap, "job")
    ap.add_argument("--no-count-calls", action="store_true", help="skip the instrumented dedup run")
    ap.add_argument(
        "--dedup-operator",
        choices=("process", "batch", "builtin"),
        default="process",
        help="Sluice's dedup: examples/dedup.py's process function, its --batch-form, or its --builtin "
        "stream.deduplicate",
    )
    paired_runs.add_run_args(ap, 600)
    return ap, ap.parse_args()


def prepare(work: str, args: argparse.Namespace, jobs: dict, plan: dict) -> dict[str, Data]:
    """Each job's input, generated into `work`, with its expected answer; its facts added to `plan`."""
    data: dict[str, Data] = {}
    t0 = time.monotonic()
    users = args.users
    if "dedup" in jobs:
        data["dedup"], facts_d = prepare_dedup(
            work, args.events, users, args.disorder_ms, args.ttl_ms, args.dedup_operator
        )
        facts_d["dedup_operator"] = args.dedup_operator
        plan.update(facts_d)
        log(
            f"dedup: {facts_d['dedup_events']:,} events of {users:,} users, {facts_d['expected_dedup']:,} expected "
            f"firsts ({time.monotonic() - t0:.1f}s)"
        )
    t0 = time.monotonic()
    if "join" in jobs:
        data["join"], facts_j = prepare_join(work, args.impressions, args.disorder_ms, args.upper_ms)
        plan.update(facts_j)
        log(
            f"join: {facts_j['impressions']:,} impressions, {facts_j['clicks']:,} clicks, "
            f"{facts_j['expected_join']:,} expected pairs ({time.monotonic() - t0:.1f}s)"
        )
    return data


def main() -> int:
    ap, args = parse_args()
    if args.child:
        return child_main(args.child)
    runs, shuffle = paired_runs.runs_and_shuffle(args)
    args.events = args.events or (200_000 if args.quick else 400_000)  # the sizes' defaults
    args.users = args.users or (10_000 if args.quick else 20_000)
    args.impressions = args.impressions or (150_000 if args.quick else 750_000)
    try:
        jobs = {j.strip(): JOBS[j.strip()] for j in args.jobs.split(",") if j.strip()}
    except KeyError as exc:
        ap.error(f"unknown job {exc}; known: {', '.join(JOBS)}")
    if (
        min(args.events, args.users, args.impressions, args.ttl_ms, args.upper_ms) <= 0
        or args.disorder_ms < 0
        or runs < 1
    ):
        ap.error("--events, --users, --impressions, --ttl-ms, --upper-ms > 0, --disorder-ms >= 0, --runs >= 1")
    if not shuffle or not jobs:
        ap.error("--peer-shuffle and --jobs not empty")
    systems = paired_runs.choose_systems(ap, args, sluice_ready)
    if systems is None:
        return 2

    command, facts, temp, work = begin_run(REPO, args.workdir, "state-bench-", log)
    t_begin = time.monotonic()
    plan: dict[str, Any] = {
        "jobs": jobs,
        "systems": systems,
        "users": args.users,
        "ttl_ms": args.ttl_ms,
        "upper_ms": args.upper_ms,
        "disorder_ms": args.disorder_ms,
        "checkpoint_interval": args.checkpoint_interval,
        "max_foreign_cores": args.max_foreign_cores or "off",
        "shuffle_text": "",
    }
    bench = Bench(args, work, prepare(work, args, jobs, plan))

    def count_calls() -> None:
        if SLUICE in systems and "dedup" in jobs and not args.no_count_calls and args.dedup_operator == "process":
            calls = bench.count_calls()
            if calls is not None:
                plan["calls"] = calls | {"run": bench.n}

    return paired_runs.conduct(
        bench,
        systems,
        (SluiceSide, PeerSide),
        list(jobs.values()),
        runs,
        shuffle,
        noun="job",
        plan=plan,
        label=lambda j: j,
        report=lambda: report(facts, command, bench.runs, plan, bench.notes),
        after_warmup=count_calls,
        temp=temp,
        t_begin=t_begin,
    )


if __name__ == "__main__":
    run_main(main)
