"""Throughput of Sluice and of Spark Structured Streaming (the peer) under one window, taken from
the outside in the same way for both: first record read → last result committed
(bench/window.py), with configuration sweeps, a headline comparison and an input-size sweep.

    python bench/throughput_suite.py [--quick] [--out bench/RESULTS.md] [--sizes 0.5,2,8]
        [--events 1000000] [--sweep-runs 2] [--headline-runs 10] [--size-runs 3]
        [--skip-sweep] [--skip-sizes] [--max-foreign-cores 0.3] [--workdir DIR] [--keep-workdir]

The job: page_views, a running count per url (examples/page_views.py on Sluice; the same query in
bench/structured_streaming_bench.py's child for the peer), over the same files for both
(examples/generate_page_views.py's generate(), in chunks of 100,000 events, 8 files of 12,500 events
each; an input of N events is the first N/100,000 chunks, hard-linked into its own directory).
Both read bounded: Sluice's file source reads the files there at submit, then ends (checkpoints
every 1 s, the job's default; the file sink commits at checkpoints and at the end); the peer runs
`Trigger.AvailableNow` (maxFilesPerTrigger unset or set: batches of that many files). Both pass an
explicit schema, so nothing reads the files before the job runs.

Per run: the window (seconds; events/s = events / window), startup (launch → first read: for
Sluice the `sluice run` CLI started, for the peer the query handed to its warm SparkSession),
CPU seconds per million events of the measured system (bench/procstat.py's ResourceMeter, from
the first read to the end seen by the harness; every process of the cluster or SparkSession the
run used: the Sluice cluster's ZooKeeper, JobManager, supervisor, TaskManagers and their Spark
JVMs; the peer's Python driver and its JVM), peak RSS of each of those processes, the CPU of the
suite's other (idle) clusters and sessions, and the CPU other processes of the machine used
meanwhile (the load rule: more than --max-foreign-cores cores on average excludes the run).
Every run's committed output is checked (bench/output_check.py: no line twice, counts strictly
increasing per key, final counts exact); a run that fails it is reported and left out.

1. Sweeps (full only): the peer over maxFilesPerTrigger {unset, 40, 20, 8} x shuffle partitions
   {1, 2, 4} x master {local[2], local[4]}; Sluice over slots per TaskManager {1, 2} x
   TaskManagers {1, 2} x parallelism {2, 4} where the slots allow (the file source sizes each
   Spark call from the last one's pace, execution.source.batch-duration 1 s: not swept).
   --sweep-runs runs per configuration, round-robin (every configuration once, then again in
   reverse order), Sluice and peer runs interleaved.
2. Headline: each system's best configuration (highest median events/s in the sweep) and a
   matched-resource pair (the best configuration of each with as many Spark task threads as the
   machine has cores: Sluice TaskManagers x slots = the peer's local[n]); --headline-runs runs per
   system and pair, alternating S P P S ...; medians with bootstrap 95 % intervals, ratio Sluice/peer.
3. Size sweep: both systems in their best configuration, --size-runs alternating runs per size;
   window = fixed + per_event x events fitted by least squares over all runs, with bootstrap intervals.

Quick (--quick, `make bench-quick`): no sweeps; the matched pair at 2 task threads (Sluice 1
TaskManager x 2 slots, parallelism 2; the peer local[2], shuffle partitions 2, maxFilesPerTrigger
unset) is both the headline and the size-sweep configuration.

One Sluice cluster per (TaskManagers, slots) and one SparkSession per master serve every run of
theirs (each gets one uncounted warm-up run first); they are stopped in `finally`, whatever happens.
bench/README.md ("Throughput: one window for both") says how to read the section this appends.

Where the parts are: bench/throughput_plan.py (the configurations, the run orders, the choice of
the best and matched configurations), bench/throughput_workload.py (the input files),
bench/throughput_runs.py (the clusters, the SparkSessions and one run), bench/throughput_report.py
(the section). This file: the command line and the phases.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_common import aborted, begin_run, finish_workdir, publish, run_main
from paired_runs import log
from procstat import FOREIGN_CORES_LIMIT
from throughput_plan import (
    CHUNK_EVENTS,
    HEADLINE,
    MATCHED_PEER,
    MATCHED_SLUICE,
    SLUICE,
    SWEEP,
    Pair,
    PeerConfig,
    SluiceConfig,
    headline_order,
    headline_pairs,
    parse_sizes,
    size_order,
    sweep_configs,
    sweep_order,
)
from throughput_report import report
from throughput_runs import Suite
from throughput_workload import Data, Dataset


def options() -> argparse.Namespace:
    """The command line, with the defaults of a full or a quick run filled in: `events` and `sizes`
    in events, `headline_runs`, `skip_sweep` (also when --quick), `max_foreign_cores`."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes: no sweeps, the matched pair only")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--events", type=float, default=None, help="millions of events of the sweep and headline runs")
    ap.add_argument("--sizes", default=None, help="millions of events of the size sweep, e.g. 0.5,2,8,20")
    ap.add_argument("--sweep-runs", type=int, default=2)
    ap.add_argument("--headline-runs", type=int, default=None, help="runs per system and pair (full 10, quick 3)")
    ap.add_argument("--size-runs", type=int, default=3)
    ap.add_argument("--skip-sweep", action="store_true", help="no sweeps: the matched pair at 2 threads only")
    ap.add_argument("--skip-sizes", action="store_true")
    ap.add_argument(
        "--max-foreign-cores",
        type=float,
        default=None,
        help="the load rule: runs during which other processes used more cores on average are excluded "
        "(default procstat.FOREIGN_CORES_LIMIT; 0: off)",
    )
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args()
    if args.max_foreign_cores is None:
        args.max_foreign_cores = FOREIGN_CORES_LIMIT
    args.events = round((args.events if args.events is not None else (0.5 if args.quick else 1.0)) * 1e6)
    args.sizes = parse_sizes(args.sizes or ("0.2,1" if args.quick else "0.5,2,8"))
    args.headline_runs = args.headline_runs or (3 if args.quick else 10)
    args.skip_sweep = args.quick or args.skip_sweep
    if args.events % CHUNK_EVENTS:
        ap.error(f"--events is a multiple of {CHUNK_EVENTS / 1e6:g}")
    return args


# ================================================================================================
# phases
# ================================================================================================
def sweep(suite: Suite, sluice_cfgs: list[SluiceConfig], peer_cfgs: list[PeerConfig], data: Dataset, runs: int) -> None:
    """Every configuration of both systems `runs` times, one Sluice cluster alive at a time."""
    for key, order in sweep_order(sluice_cfgs, peer_cfgs, runs):
        for cfg in order:
            suite.run(cfg, data, SWEEP)
        suite.stop_sluice(key)


def choose_pairs(suite: Suite, args: argparse.Namespace, data: Dataset, plan: dict, skipped: list[str]) -> list[Pair]:
    """The headline's pairs: from the sweeps, or (sweeps skipped) the matched pair at 2 task threads."""
    if args.skip_sweep:
        skipped.append(
            "Sweeps skipped"
            + (" (--quick)" if args.quick else " (--skip-sweep)")
            + f": the headline is the matched pair at 2 task threads ({MATCHED_SLUICE.label} vs "
            f"{MATCHED_PEER.label}), which is also the size-sweep configuration."
        )
        return [(MATCHED_SLUICE, MATCHED_PEER, "matched")]
    log(f"sweeps over {args.events:,} events, {args.sweep_runs} runs per configuration")
    s_cfgs, p_cfgs = sweep_configs()
    plan.update(sluice_cfgs=s_cfgs, peer_cfgs=p_cfgs, sweep_events=args.events)
    sweep(suite, s_cfgs, p_cfgs, data, args.sweep_runs)
    cores = os.cpu_count() or 2
    threads = 2 if cores <= 2 else cores
    pairs = headline_pairs([r for r in suite.runs if r["phase"] == SWEEP], s_cfgs, p_cfgs, threads)
    (best_s, best_p, _), (m_s, m_p, _) = pairs[0], pairs[-1]
    plan.update(best_sluice=best_s, best_peer=best_p)
    log(f"best: {best_s.label} / {best_p.label}; matched at {threads} threads: {m_s.label} / {m_p.label}")
    for key in list(suite.sluice):  # clusters not needed any more
        if key not in {p[0].cluster_key for p in pairs}:
            suite.stop_sluice(key)
    return pairs


def headline(suite: Suite, pairs: Sequence[Pair], data: Dataset, runs: int) -> None:
    log(f"headline: {runs} alternating runs per system and pair over {data.events:,} events")
    suite.prestart([c for pair in pairs for c in pair[:2]], data)
    for cfg in headline_order(pairs, runs):
        suite.run(cfg, data, HEADLINE)


def size_sweep(suite: Suite, inputs: Data, pair: Pair, sizes: Sequence[int], runs: int) -> None:
    """The pair at every size, `runs` rounds; only its own Sluice cluster stays up."""
    s_cfg, p_cfg, _ = pair
    for key in list(suite.sluice):
        if key != s_cfg.cluster_key:
            suite.stop_sluice(key)
    log(f"size sweep {[f'{s:,}' for s in sizes]}: {runs} alternating runs each")
    for events, system in size_order(sizes, runs):
        suite.run(s_cfg if system == SLUICE else p_cfg, inputs.of(events), f"size {events}")


def run_phases(suite: Suite, args: argparse.Namespace, plan: dict, skipped: list[str]) -> None:
    """The input, the sweeps (or not), the headline and the size sweep (or not); `plan` and `skipped`
    say what ran, for the report."""
    inputs = Data(suite.work, max([args.events, *plan["sizes"]]))
    inputs.generate()
    data = inputs.of(args.events)
    plan["headline"] = pairs = choose_pairs(suite, args, data, plan, skipped)
    headline(suite, pairs, data, args.headline_runs)
    if args.skip_sizes:
        skipped.append("Size sweep skipped (--skip-sizes).")
        return
    plan.update(size_sluice=pairs[0][0], size_peer=pairs[0][1])
    size_sweep(suite, inputs, pairs[0], args.sizes, args.size_runs)


def main() -> int:
    args = options()
    command, facts, temp, work = begin_run(REPO, args.workdir, "throughput-suite-", log)
    t_begin = time.monotonic()
    suite = Suite(args, work)
    interrupted = False
    plan: dict = {"max_foreign_cores": args.max_foreign_cores or "off", "sizes": [] if args.skip_sizes else args.sizes}
    skipped: list[str] = []
    try:
        run_phases(suite, args, plan, skipped)
    except BaseException as exc:
        interrupted = aborted(suite, exc, "the clusters and SparkSessions", log)
        raise
    finally:
        suite.stop_all()
        plan["skipped"] = " ".join(skipped)
        if suite.runs:
            suite.notes.append(f"The invocation took {time.monotonic() - t_begin:.0f} s.")
            publish(report(facts, command, suite.runs, suite.notes, plan), args.out, log)
        finish_workdir(work, temp and (interrupted or not suite.failed) and not args.keep_workdir, log)
    return 1 if suite.failed else 0


if __name__ == "__main__":
    run_main(main)
