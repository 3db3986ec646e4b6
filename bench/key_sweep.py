"""Key-cardinality sweep: Sluice and Spark Structured Streaming (the peer) on a running count per url
at fixed events over growing numbers of distinct urls (keys), measured under one window for both
(bench/window.py, as in the throughput suite: first record read → last result committed).

    python bench/key_sweep.py [--quick] [--events 3] [--keys 0.25,0.5,1,2] [--runs 3]
        [--max-foreign-cores 0.3] [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

What it answers (issue "The data plane at or beyond Structured Streaming"): is Sluice's cost linear
in keys, and where does it stand against the peer at 1 M and 2 M keys? Inputs: --events millions of
page views per key count, in files of 100,000 events (bench/checkpoint_overhead.py's data: random
permutations of all the urls one after the other, so every url occurs and the counts differ by at
most one). Both systems in the throughput suite's matched pair at 2 Spark task threads: Sluice 1
TaskManager × 2 slots, examples/page_views.py at parallelism 2 with checkpoints every 1 s (the
job's default); the peer local[2], 2 shuffle partitions, `Trigger.AvailableNow`, maxFilesPerTrigger
unset (one batch: its best configuration in the throughput sweeps). Each key count gets --runs runs
per system, alternating S P | P S | ... and the key counts in alternating order round by round; one
cluster and one SparkSession serve every run (one uncounted warm-up each). Every run's committed
output is checked exactly (bench/output_check.py); the load rule (bench/procstat.py) excludes a run
during which other processes used more than --max-foreign-cores cores.

Reported per key count (bench/key_sweep_report.py): each system's median window with a bootstrap
95 % interval and events/s, the ratio (Sluice's events/s over the peer's: above 1, Sluice faster),
and per doubling of the keys each system's time ratio (the issue's goal for Sluice: ≤ 1.5 per
doubling).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

import checkpoint_overhead as co  # (also puts the repo and examples/ on sys.path)
from bench_common import aborted, begin_run, finish_workdir, publish, run_main
from key_sweep_report import report
from paired_runs import log
from procstat import FOREIGN_CORES_LIMIT
from run_matrix import Order, matrix
from throughput_plan import MATCHED_PEER, MATCHED_SLUICE, PEER, SLUICE, Config
from throughput_runs import Suite
from throughput_workload import Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PER_FILE = 100_000
CONFIGS: dict[str, Config] = {SLUICE: MATCHED_SLUICE, PEER: MATCHED_PEER}


def dataset(work: str, keys: int, events: int) -> Dataset:
    """`events` page views over exactly `keys` urls in files of PER_FILE events."""
    spec = co.StateSize(f"{keys}", keys, events // PER_FILE, PER_FILE, 1)
    path = os.path.join(work, f"keys-{keys}")
    t0 = time.monotonic()
    expected = co.make_dataset(path, spec)
    log(f"{keys:,} keys: {events:,} events in {spec.files} files, generated in {time.monotonic() - t0:.1f}s")
    return Dataset(path, events, spec.files, expected)


def plan(keys: Sequence[int], runs: int) -> list[tuple[int, Config]]:
    """The measured runs in order: per round the key counts (reversed every other round), for each
    the two systems alternating which goes first."""
    cells = matrix([SLUICE, PEER], keys, runs, items_order=Order.REVERSE, systems_order=Order.ROTATE)
    return [(c.item, CONFIGS[c.system]) for c in cells]


def options() -> argparse.Namespace:
    """The command line, with the defaults of a full or a quick run filled in (`events`, `keys` in
    events and keys, `runs`, `max_foreign_cores`)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes: 0.5 M events, 50k and 100k keys, 1 run")
    ap.add_argument("--events", type=float, default=None, help="millions of events per key count (3; quick 0.5)")
    ap.add_argument("--keys", default=None, help="millions of keys, comma-separated (0.25,0.5,1,2; quick 0.05,0.1)")
    ap.add_argument("--runs", type=int, default=None, help="runs per system and key count (3; quick 1)")
    ap.add_argument("--max-foreign-cores", type=float, default=None)
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args()
    if args.max_foreign_cores is None:
        args.max_foreign_cores = FOREIGN_CORES_LIMIT
    args.events = round((args.events if args.events is not None else (0.5 if args.quick else 3.0)) * 1e6)
    keys = args.keys or ("0.05,0.1" if args.quick else "0.25,0.5,1,2")
    args.keys = [round(float(k) * 1e6) for k in keys.split(",")]
    args.runs = args.runs or (1 if args.quick else 3)
    if args.events % PER_FILE or args.events <= 0:
        ap.error(f"--events is a positive multiple of {PER_FILE / 1e6:g}")
    if sorted(set(args.keys)) != args.keys or args.keys[0] <= 0:
        ap.error("--keys: increasing positive numbers")
    return args


def main() -> int:
    args = options()
    keys, events = args.keys, args.events
    command, facts, temp, work = begin_run(REPO, args.workdir, "key-sweep-", log)
    t_begin = time.monotonic()
    suite = Suite(args, work)
    interrupted = False
    try:
        data = {k: dataset(work, k, events) for k in keys}
        suite.prestart(list(CONFIGS.values()), data[keys[0]])
        for k, cfg in plan(keys, args.runs):
            suite.run(cfg, data[k], f"keys {k}")["keys"] = k
    except BaseException as exc:
        interrupted = aborted(suite, exc, "the cluster and the SparkSession", log)
        raise
    finally:
        suite.stop_all()
        if suite.runs:
            for r in suite.runs:
                r.setdefault("keys", keys[0])  # the warm-up runs, on the smallest input
            suite.notes.append(f"The invocation took {time.monotonic() - t_begin:.0f} s.")
            publish(report(facts, command, suite.runs, keys, events, suite.notes), args.out, log)
        finish_workdir(work, temp and (interrupted or not suite.failed) and not args.keep_workdir, log)
    return 1 if suite.failed else 0


if __name__ == "__main__":
    run_main(main)
