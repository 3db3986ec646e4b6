"""Page views with TaskManagers on their own local Spark vs on an external Spark.

    python bench/external_spark_bench.py [--runs 5] [--events 400000] [--files 80]
        [--systems local,standalone,connect] [--max-foreign-cores 0.3] [--workdir DIR] [--quick]

Three local clusters of one TaskManager with 2 slots each, started once through
`sluice cluster start --spark local|standalone|connect` (sluice/cli/spark_cluster.py):

- local: the TaskManager's own `local[2]` SparkSession (the default);
- standalone: a Spark standalone master and worker (2 cores) beside the cluster;
  the TaskManager's Spark application runs its tasks in an executor JVM under the
  worker (spark.cores.max = 2);
- connect: a Spark Connect server (`local[2]`) beside the cluster; the TaskManager
  holds a Connect session.

The same page_views job (examples/page_views.py, parallelism 2, checkpoints every
--interval ms) reads the same files on each, alternating the system run by run
(the order rotates every round), after one unmeasured warm-up run per cluster.
Throughput is events / (job submitted -> job ended) from the JobManager's own
timestamps; every run's committed output is checked exactly against the counts
computed when the input was generated. CPU seconds are those of the measured
cluster's processes (TaskManager, JobManager, ZooKeeper and the Spark processes
with their executors), from bench/procstat.py's ResourceMeter, which also gives
the foreign cores of the load rule. Medians with 95 % bootstrap intervals
(bench/stats.py); the section (bench/external_spark_report.py) goes to
bench/RESULTS.md, interpretation to bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))

from bench_common import begin_run, finish_workdir, publish, run_main
from external_spark_report import report
from generate_page_views import generate
from page_views_runs import BenchError, Cluster, log, throughput_run
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, excluded
from run_matrix import Cell, Order, matrix, warm_ups

SYSTEMS = ("local", "standalone", "connect")
RESULTS = os.path.join(HERE, "RESULTS.md")
JOB = "page views"  # the one item of the run matrix: every run is the same job on the same input
TIMEOUT = 600  # seconds a run may take


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measured runs per system (default 5)")
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--files", type=int, default=80)
    ap.add_argument("--interval", type=int, default=1000, help="checkpoint interval, ms")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of local,standalone,connect")
    ap.add_argument(
        "--max-foreign-cores",
        type=float,
        default=FOREIGN_CORES_LIMIT,
        help="load rule: a run during which other processes used more cores on average is left out (0: off)",
    )
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        help="seconds to wait, before each run, for the machine's foreign load to fall under the limit",
    )
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--quick", action="store_true", help="smoke size: 2 runs of 100k events")
    a = ap.parse_args(argv)
    if a.quick:
        a.runs, a.events, a.files = 2, 100_000, 20
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    bad = [s for s in a.systems if s not in SYSTEMS]
    if bad or not a.systems:
        ap.error(f"--systems: expected some of {','.join(SYSTEMS)}, got {bad or 'none'}")
    if a.runs < 1 or a.events < 1 or a.files < 1:
        ap.error("--runs, --events and --files must be >= 1")
    return a


def wait_for_quiet(roots: dict, limit: float, patience: float) -> None:
    """Before a run: up to `patience` s for other processes on the machine to use at most `limit`
    cores (2 s samples); the run goes ahead either way and the load rule judges it."""
    if not limit or patience <= 0:
        return
    deadline = time.monotonic() + patience
    while True:
        meter = ResourceMeter(roots).start()
        time.sleep(2)
        foreign = meter.stop().foreign_cores()
        if foreign <= limit or time.monotonic() > deadline:
            return
        log(f"  waiting for a quieter machine: foreign {foreign:.2f} cores")


def run_order(systems: list[str], runs: int) -> list[Cell[str]]:
    """The measured runs in order: every round runs every system, the order turned by one each round
    (local standalone connect | standalone connect local | ...)."""
    return matrix(systems, [JOB], runs, systems_order=Order.ROTATE)


class Runner:
    """The clusters (one per system, started once), the input and its expected counts; `run` one cell."""

    def __init__(self, a: argparse.Namespace, work: str, data: str, expected: dict):
        self.a, self.work, self.data, self.expected = a, work, data, expected
        self.clusters: dict[str, Cluster] = {}

    def start(self) -> None:
        for system in self.a.systems:
            c = Cluster(os.path.join(self.work, f"cluster-{system}"), 1, 2, ("--spark", system))
            self.clusters[system] = c.start()

    def roots(self) -> dict[str, Callable[[], Iterable[int]]]:
        """Each cluster's processes, looked up anew at each sample (a process restarted is followed)."""

        def pids_now(c: Cluster) -> Callable[[], Iterable[int]]:
            return lambda: c.pids

        return {s: pids_now(c) for s, c in self.clusters.items()}

    def warm_up(self) -> None:
        """One unmeasured run per cluster: the first job on a fresh Spark compiles and loads classes."""
        for cell in warm_ups(list(self.clusters), [JOB]):
            log(f"warm-up run on {cell.system}")
            out = os.path.join(self.work, f"out-warmup-{cell.system}")
            r = throughput_run(
                self.clusters[cell.system], self.data, out, self.a.interval, self.a.events, self.expected, TIMEOUT
            )
            if not r["counts_ok"]:
                raise BenchError(f"warm-up on {cell.system}: output not exact: {r['output_check']}")

    def run(self, cell: Cell[str]) -> dict[str, Any]:
        """One measured run, metered: its figures, CPU seconds, foreign cores and the load rule's verdict."""
        a, system = self.a, cell.system
        out = os.path.join(self.work, f"out-{system}-{cell.round - 1}")
        roots = self.roots()
        wait_for_quiet(roots, a.max_foreign_cores, a.quiet_wait)
        meter = ResourceMeter(roots).start()
        try:
            r = throughput_run(self.clusters[system], self.data, out, a.interval, a.events, self.expected, TIMEOUT)
        finally:
            usage = meter.stop()
        r.update(
            system=system,
            round=cell.round,
            cpu_s=usage.cpu_s.get(system, 0.0),
            foreign_cores=usage.foreign_cores(),
            excluded=excluded(usage, a.max_foreign_cores or None),
        )
        log(
            f"round {cell.round} {system}: {r['throughput']:,.0f} events/s in {r['submit_to_end']:.2f}s, "
            f"CPU {r['cpu_s']:.1f}s, foreign {r['foreign_cores']:.2f} cores, exact {r['counts_ok']}"
            + (" (excluded)" if r["excluded"] else "")
        )
        return r

    def stop(self) -> None:
        for c in self.clusters.values():
            c.stop()


def main() -> int:
    a = parse_args()
    command, facts, temp, work = begin_run(REPO, a.workdir, "sluice-external-spark-", log)
    data = os.path.join(work, "in")
    log(f"generating {a.events:,} events in {a.files} files")
    runner = Runner(a, work, data, generate(data, events=a.events, files=a.files, urls=5_000, seed=19))
    runs: list[dict] = []
    notes: list[str] = []
    failed = False
    try:
        runner.start()
        runner.warm_up()
        for cell in run_order(a.systems, a.runs):
            r = runner.run(cell)
            runs.append(r)
            if not r["counts_ok"]:
                failed = True
                notes.append(f"round {cell.round} {cell.system}: output not exact: {r['output_check']}")
    except Exception as exc:  # noqa: BLE001 — report what ran, then fail
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        notes.append(f"aborted: {type(exc).__name__}: {exc}".split("\n")[0])
    except KeyboardInterrupt:
        log("interrupted: stopping the clusters")
        failed = True
        notes.append("interrupted")
    finally:
        runner.stop()
    if runs:
        publish(report(a, command, facts, runs, notes), a.results, log)
    finish_workdir(work, temp and not a.keep_workdir and not failed, log)
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
