"""Latency at fixed input rates, a sustained run, and the maximum sustainable throughput at a p99
bound: Sluice and Spark Structured Streaming, runs alternating between the two.

    python bench/latency_suite.py [--quick] [--file-rate 25] [--samples 500] [--sustained-s 300]
                                  [--interval 1000] [--max-foreign-cores 0.3]
                                  [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

The input is a stream of page-view files (examples/generate_page_views.py's events: Zipf urls,
10,000 urls) that a feeder thread writes into a watched directory at a fixed pace: file i is
written under a hidden name and renamed at start + i / file-rate (rename: no reader sees half a
file). Each file ends with one marker event `/marker/<i>`, whose count (1) is committed when file
i has been counted and committed; a watcher lists the output directory every 20 ms, so latency(i)
= first sight of marker i in a committed output file − file i's rename (bench/paced_latency.py's
method). The file rate is fixed (default 25 files/s) and a rate is set by the events per file, so
every point of the suite takes the same time and yields the same number of samples. The first
--warm-files files of every run are left out of its percentiles.

Both systems run the reference job (running count per url): Sluice examples/page_views.py with
--monitor-interval 100 and checkpoints every --interval ms on one local cluster (--taskmanagers 1 x
--slots 2, parallelism 2: two Spark task threads, as the peer's local[2]), warmed by a bounded job
over the warm-up input, a new job per run; the peer's query (bench/structured_streaming_bench.py,
local[2]) in one child process with one SparkSession, warmed by a bounded query over the same
input, a new query per run, started only when its run begins (no idle query polls during the
other system's runs).

1. Capacity, per system: a backlog drain through the same path: --capacity-events events in files
   of 25,000 written hidden, then all renamed at once into the watched directory; capacity =
   events / (rename → last marker seen committed). Not a ramp: under a backlog both systems batch
   as much as they can (Sluice's source doubles its files per batch, a micro-batch takes every
   file there), the same adaptation a paced stream above their per-batch capacity gets.
2. Fixed rates at 25 / 50 / 75 / 90 % of that system's own capacity, --samples counted files each
   (after the warm files); the systems alternate run by run. Then 100 % and 110 % while the last
   point's p99 was within the larger bound (the knee).
3. Sustained: --sustained-s seconds at one rate for both, 50 % of the slower system's capacity
   (so that run is the slower system's 50 % point); latency percentiles per minute, CPU seconds
   and peak RSS of every process (bench/procstat.py).
4. Maximum sustainable throughput at p99 ≤ 1 s and ≤ 2 s: the highest rate tested (any run of
   that system the load rule kept) whose p99 is within the bound.

p50's 95 % interval is a block bootstrap: the samples are cut into blocks of consecutive files
(one block = BLOCK_S seconds of arrivals, so a checkpoint interval's saw-tooth stays inside a
block), blocks are resampled with replacement, and the interval runs from the 2.5th to the 97.5th
percentile of the resamples' medians (bench/stats.py's seed and resample count). Every run's
committed output is checked (bench/output_check.py: no line twice, counts increasing, final counts
exact); a failed check marks the run failed and leaves it out of every figure. The load rule
(bench/procstat.py): a run during which other processes used more than --max-foreign-cores cores
on average is marked excluded and left out of the figures.

The pieces: latency_plan.py (the rates and their order), latency_workload.py (the files, the feeder,
the marker watcher), latency_runs.py (one run of either system), latency_figures.py (percentiles,
intervals, capacity, maximum sustainable rate), latency_report.py (the section).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import paced_latency
import page_views_runs
import structured_streaming_child
from bench_common import aborted, begin_run, finish_workdir, publish, run_main
from generate_page_views import generate
from latency_figures import PEER, SLUICE, SYSTEMS
from latency_plan import events_per_file, knee_next, point_order, rates, sustained_order
from latency_report import describe, report
from latency_runs import Peer, Setup, sluice_run
from latency_workload import Contents
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter

log = page_views_runs.log
CAPACITY_FILE_EVENTS = 25_000
Runner = Callable[..., dict]  # (label, events per file, files, backlog=False) -> a run


@dataclass
class Invocation:
    """What one invocation holds: the cluster and the peer, the runs (`res`:
    "capacity": system -> run, "points", "sustained", "runs": all in order), notes and failure."""

    args: argparse.Namespace
    work: str
    cluster: page_views_runs.Cluster
    peer: Peer | None = None
    res: dict = field(default_factory=lambda: {"capacity": {}, "points": [], "sustained": [], "runs": []})
    notes: list[str] = field(default_factory=list)
    failed: bool = False

    def record(self, r: dict) -> dict:
        self.res["runs"].append(r)
        log(describe(r))
        if not r["check"].ok:
            self.failed = True
            self.notes.append(f"{r['system']} {r['label']}: OUTPUT CHECK FAILED: {r['check'].describe()}")
        if r["missing"]:
            self.failed = True
            self.notes.append(f"{r['system']} {r['label']}: {r['missing']} markers never seen committed")
        return r


def start_systems(run: Invocation) -> tuple[dict[str, Runner], Setup]:
    """The cluster and the peer's child started (its JVM starts while the cluster does); one runner per
    system, and the settings they share."""
    args, work, cluster = run.args, run.work, run.cluster
    warm_data = os.path.join(work, "warm")
    generate(warm_data, events=200_000, files=8, urls=args.urls, seed=13)
    peer = run.peer = Peer(work, warm_data, args.timeout)
    cluster.start()
    warm_up_sluice(cluster, warm_data, work, args.timeout)
    peer.ready()
    systems: dict[str, Callable[[], Iterable[int]]] = {SLUICE: lambda: cluster.pids, PEER: peer.pids}

    def meter() -> ResourceMeter:
        return ResourceMeter(systems)

    contents = Contents(work, CAPACITY_FILE_EVENTS, args.urls)
    setup = Setup(
        work, contents, args.file_rate, args.warm_files, args.interval, args.timeout, args.max_foreign_cores, meter
    )
    runners: dict[str, Runner] = {
        SLUICE: lambda label, e, n, backlog=False: sluice_run(cluster, setup, label, e, n, backlog),
        PEER: lambda label, e, n, backlog=False: peer.run(setup, label, e, n, backlog),
    }
    return runners, setup


def warm_up_sluice(cluster: page_views_runs.Cluster, warm_data: str, work: str, timeout: float) -> None:
    """One bounded page-views job over the warm-up input, uncounted, as the peer's session runs one
    bounded query over it: without it Sluice's capacity drain was also its TaskManagers' first job
    (a young JVM's first calls took 5-6 s for what takes ~1 s once warm: bench/README.md)."""
    job_id = cluster.submit("--input", warm_data, "--output", os.path.join(work, "sluice-warm"))
    r = page_views_runs.follow(cluster, job_id, timeout, time.time())
    if r["state"] != "FINISHED":
        raise page_views_runs.BenchError(f"Sluice's warm-up job ended {r['state']}: {r['status']['message']}")


def capacities(run: Invocation, runners: dict[str, Runner]) -> dict[str, float]:
    """1. Each system's capacity, from a backlog drain."""
    files = max(2, run.args.capacity_events // CAPACITY_FILE_EVENTS)
    capacity: dict[str, float] = {}
    for system in SYSTEMS:
        r = run.record(runners[system]("capacity", CAPACITY_FILE_EVENTS, files, backlog=True))
        run.res["capacity"][system] = r
        if r["capacity"] is None:
            raise page_views_runs.BenchError(f"{system}: no capacity measured (the drain did not complete)")
        capacity[system] = r["capacity"]
    log("capacity: " + ", ".join(f"{s} {c:,.0f} events/s" for s, c in capacity.items()))
    return capacity


def fixed_rates(run: Invocation, runners: dict[str, Runner], capacity: dict[str, float], slower: str) -> None:
    """2. The points at a % of each system's own capacity, alternating systems, then the knee points."""
    args = run.args
    points, knee = rates(args.quick)
    n_point = args.warm_files + args.samples
    for cell in point_order(points, knee):
        system, p = cell.system, cell.item
        if p in knee:
            if not knee_next([r for r in run.res["points"] if r["system"] == system]):
                continue
        elif p == 50 and system == slower and args.sustained_s > 0:
            continue  # its 50 % point is the sustained run
        e = events_per_file(capacity[system] * p / 100, args.file_rate)
        run.res["points"].append(run.record(runners[system](f"{p} %", e, n_point)))


def sustained(run: Invocation, runners: dict[str, Runner], rate: float, slower: str) -> None:
    """3. The sustained run of both systems at one rate, the slower system's 50 % point."""
    args = run.args
    e = events_per_file(rate, args.file_rate)
    n = int(args.sustained_s * args.file_rate)
    for system in sustained_order(slower):
        r = run.record(runners[system]("sustained" + (", 50 %" if system == slower else ""), e, n))
        run.res["sustained"].append(r)
    run.res["sustained"].sort(key=lambda r: SYSTEMS.index(r["system"]))


def measure(run: Invocation) -> None:
    args = run.args
    runners, setup = start_systems(run)
    capacity = capacities(run, runners)
    slower = min(capacity, key=lambda s: capacity[s])
    points, knee = rates(args.quick)
    top = max(capacity.values()) * max((*points, *knee)) / 100
    setup.contents = Contents(run.work, events_per_file(top, args.file_rate), args.urls)
    fixed_rates(run, runners, capacity, slower)
    if args.sustained_s > 0:
        sustained(run, runners, 0.5 * capacity[slower], slower)


def stop(run: Invocation) -> None:
    """The peer's child, then the cluster, then any child left, whatever fails on the way."""
    try:
        if run.peer is not None:
            run.peer.close()
    finally:
        try:
            leftovers = run.cluster.stop()
            if leftovers:
                run.notes.append(f"`cluster stop` left processes behind (killed): {leftovers}")
        finally:
            structured_streaming_child.Child.kill_all()


# -- main ------------------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="2 rates (25 %%, 75 %%), 100 samples, no knee, no sustained run"
    )
    ap.add_argument("--file-rate", type=float, default=25.0, help="files per second into the watched directory")
    ap.add_argument("--samples", type=int, default=None, help="counted files per point (default 500; quick 100)")
    ap.add_argument(
        "--taskmanagers", type=int, default=1, help="Sluice's TaskManagers (1 x 2 slots: the peer's 2 Spark threads)"
    )
    ap.add_argument("--slots", type=int, default=2, help="slots per TaskManager")
    ap.add_argument(
        "--warm-files", type=int, default=None, help="files left out at each run's start (default 50; quick 20)"
    )
    ap.add_argument(
        "--sustained-s", type=float, default=None, help="seconds of the sustained run (default 300; quick 0 = none)"
    )
    ap.add_argument(
        "--capacity-events", type=int, default=None, help="events of the capacity drain (default 8M; quick 2M)"
    )
    ap.add_argument("--interval", type=int, default=1000, help="Sluice's checkpoint interval, ms")
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--max-foreign-cores", type=float, default=FOREIGN_CORES_LIMIT, help="load rule; 0 = off")
    ap.add_argument(
        "--out", default=os.path.join(page_views_runs.HERE, "RESULTS.md"), help="Markdown file to append to"
    )
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--timeout", type=float, default=180, help="seconds to wait for a step")
    args = ap.parse_args()
    q = args.quick
    args.samples = args.samples or (100 if q else 500)
    args.warm_files = args.warm_files if args.warm_files is not None else (20 if q else 50)
    args.sustained_s = args.sustained_s if args.sustained_s is not None else (0 if q else 300)
    args.capacity_events = args.capacity_events or (2_000_000 if q else 8_000_000)
    return args


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(page_views_runs.REPO, args.workdir, "sluice-latency-", log)
    cluster = page_views_runs.Cluster(os.path.join(work, "cluster"), taskmanagers=args.taskmanagers, slots=args.slots)
    run = Invocation(args, work, cluster)
    interrupted = False
    t_start = time.monotonic()
    try:
        measure(run)
    except BaseException as exc:
        interrupted = aborted(run, exc, "the cluster and the peer", log)
        raise
    finally:
        try:
            stop(run)
        finally:
            if run.res["runs"]:
                run.notes.append(f"whole invocation {time.monotonic() - t_start:.0f} s")
                section = report(args, facts, command, run.res, run.notes, paced_latency.MONITOR_MS)
                publish(section, args.out, log)
            finish_workdir(work, temp and (interrupted or not run.failed) and not args.keep_workdir, log, "logs")
    return 1 if run.failed else 0


if __name__ == "__main__":
    run_main(main)
