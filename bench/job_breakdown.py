"""Where a page-views job's time goes, for Sluice and for Structured Streaming: the map of issue 33's
"breakdown of one page-views window" (bench/README.md, "Where a page-views job's time goes").

    python bench/job_breakdown.py [--events 1] [--runs 10] [-D KEY=VALUE ...] [--out bench/RESULTS.md]
        [--workdir DIR]

The throughput suite's matched pair (bench/throughput_runs.py's Suite: Sluice on 1 TaskManager x 2
slots at parallelism 2, the peer local[2] with maxFilesPerTrigger unset and 1 shuffle partition; each
warmed up by one uncounted run), the same input and window, --runs runs each, alternating. Each run's
phases: Sluice's from its JobManager's and TaskManager's logs, the peer's from its query progress
(bench/job_breakdown_report.py says which line and which field is which phase). Medians with 95 %
intervals; every output checked exactly as in the throughput suite. With `-D KEY=VALUE` (job options,
repeatable) a third arm runs: Sluice on the same cluster with those options, in turn with the others.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from page_views_runs import REPO  # first: puts the repo and examples/ on sys.path

# isort: split
from bench_common import aborted, begin_run, finish_workdir, publish, run_main
from job_breakdown_report import peer_phases, report, sluice_phases
from paired_runs import PEER, SLUICE, log
from procstat import FOREIGN_CORES_LIMIT
from run_matrix import Order, matrix
from throughput_plan import CHUNK_EVENTS, HEADLINE, PeerConfig, SluiceConfig
from throughput_runs import Suite
from throughput_workload import Data

SLUICE_CONFIG = SluiceConfig(taskmanagers=1, slots=2, parallelism=2)
PEER_CONFIG = PeerConfig(master=2, mfpt=0, shuffle=1)


def cluster_log_lines(suite: Suite) -> list[str]:
    """Every line of the Sluice cluster's JobManager and TaskManager logs so far."""
    side = suite.sluice[SLUICE_CONFIG.cluster_key]
    lines: list[str] = []
    for path in sorted(glob.glob(os.path.join(side.cluster.dir, "log", "*manager-*.log"))):
        with open(path, errors="replace") as f:
            lines.extend(f)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=float, default=1.0, help="millions of events")
    ap.add_argument("--runs", type=int, default=10, help="runs per system")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--workdir", default=None)
    ap.add_argument(
        "-D", dest="options", action="append", default=[], metavar="KEY=VALUE", help="a Sluice arm's job option"
    )
    args = ap.parse_args()
    if any("=" not in o for o in args.options):
        ap.error("-D takes KEY=VALUE")
    optioned = dataclasses.replace(SLUICE_CONFIG, options=tuple(tuple(o.split("=", 1)) for o in args.options))
    args.max_foreign_cores = FOREIGN_CORES_LIMIT
    events = round(args.events * 1e6)
    if events % CHUNK_EVENTS:
        ap.error(f"--events is a multiple of {CHUNK_EVENTS / 1e6:g}")
    command, facts, temp, work = begin_run(REPO, args.workdir, "job-breakdown-", log)
    suite = Suite(args, work)
    configs: dict[str, SluiceConfig | PeerConfig] = {SLUICE: SLUICE_CONFIG, PEER: PEER_CONFIG}
    if args.options:
        configs[optioned.label] = optioned
    arms: dict[str, list[dict]] = {name: [] for name in configs}
    interrupted = False
    files = "?"
    t_begin = time.monotonic()
    try:
        inputs = Data(work, events)
        inputs.generate()
        data = inputs.of(events)
        files = f"{data.files:,}"
        suite.prestart([SLUICE_CONFIG, PEER_CONFIG], data)
        for cell in matrix(list(configs), [None], args.runs, systems_order=Order.ROTATE):
            cfg = configs[cell.system]
            r = suite.run(cfg, data, HEADLINE)
            if not r["ok"]:
                continue
            if cell.system == PEER:
                arms[PEER].append(r | peer_phases(r.get("progress") or []))
            else:
                arms[cell.system].append(r | sluice_phases(cluster_log_lines(suite), r["job_id"]))
    except BaseException as exc:
        interrupted = aborted(suite, exc, "the cluster and the SparkSession", log)
        raise
    finally:
        suite.stop_all()
        notes = [*suite.notes, f"The invocation took {time.monotonic() - t_begin:.0f} s."]
        setup = (
            f"Page views, {events:,} events in {files} files; Sluice "
            f"{SLUICE_CONFIG.label}{f' (and, as a third arm, {optioned.label})' if args.options else ''} "
            f"against the peer {PEER_CONFIG.label}, {args.runs} runs each, the order turned every round, "
            "after one warm-up each; window and startup as in the throughput suite. Phases in seconds, medians "
            "[95 % intervals]; Sluice's source phases are per source subtask (the two run at once)."
        )
        if any(arms.values()):
            named = [
                ("Sluice" if name == SLUICE else "Sluice, " + ", ".join(args.options), runs)
                for name, runs in arms.items()
                if name != PEER
            ]
            publish(report(command, facts, [*named, ("peer", arms[PEER])], setup, notes), args.out, log)
        finish_workdir(work, temp and (interrupted or not suite.failed), log)
    return 1 if suite.failed else 0


if __name__ == "__main__":
    run_main(main)
