"""Paired recovery scenarios: Sluice and Spark Structured Streaming on the same page_views job,
the same data and the same number of Spark task threads, each killed the same way.

    python bench/recovery_suite.py [--quick] [--runs 4] [--events N] [--files N] [--kill-after S]
                                   [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Scenarios (bench/README.md, "Recovery: paired scenarios", says why the pairs are comparable):

(a) worker failure
    sluice-spare    kill -9 (process group) of the TaskManager hosting subtask 0 of the source; a warm
                    spare TaskManager is already running: 3 TaskManagers x 1 slot, each `local[2]`
                    (-D spark.master=local[2]); the job (parallelism 2) uses two of them; before each
                    run a short job at parallelism 3 warms every TaskManager's Spark.
    sluice-nospare  the same kill on 2 TaskManagers x 1 slot (`local[2]`): the job needs both slots, so
                    it waits for the replacement that the cluster's supervisor (sluice/cli/supervisor.py)
                    starts after the kill (its first restart backoff, 1 s, then a cold TaskManager).
    peer-executor   one long-lived driver (local Python + JVM) on a Spark standalone master + 2 workers x 2
                    cores (bench/spark_standalone.py), two executors of 2 cores, running the runs' queries
                    one after another, each when the harness creates its go file; one executor JVM
                    (CoarseGrainedExecutorBackend) gets SIGKILL; Spark retries its tasks on the other
                    and the worker launches a new executor.
(b) application failure
    sluice-app      every Sluice process (JobManager, TaskManagers with their Spark JVMs, supervisor)
                    gets SIGKILL at once; ZooKeeper and the checkpoint directory stay. The cluster is
                    started again on the same directory (`sluice cluster start`, which resumes a crashed
                    cluster: same cluster id, ZooKeeper and CA), and its new
                    leader recovers the job from the HA job store and its latest completed checkpoint.
    peer-driver     a driver (local[4]) per run, told to start its query once its SparkSession is ready;
                    its process group (Python + JVM) gets SIGKILL and a new driver starts at once on the
                    same checkpointLocation.

The job: examples/page_views.py at parallelism 2, checkpoints every 500 ms, at most
--max-files-per-trigger files per source read (`execution.source.max-files-per-read`); the peer: the
same running count (bench/structured_streaming_bench.py's query), shuffle partitions 2,
maxFilesPerTrigger --max-files-per-trigger, checkpointLocation, one output file per batch. Both read
the input in the same steps: a source that reads the whole backlog in one call would finish before
the kill. Every run reads the same
--files files of --events events (examples/generate_page_views.py) and runs to its end; its committed
output is checked exactly (bench/output_check.py: no line twice, counts increasing, final counts equal
the generator's). The kill comes --kill-after seconds after the run's first committed output.

Measured by the harness from the outside, identically for both systems: a thread lists the output
directory every 20 ms and reads every new version of a committed file (a new name, or a name
rewritten) when it first sees it.
  first output   kill -> the first committed file version first seen after the kill (whatever it holds)
  progressing    kill -> the first committed file version first seen after the kill that was written
                 after the kill (mtime) and holds a (key, count) line above every count of that key
                 committed before the kill: output beyond what the kill interrupted
  total          launch (job submitted to the running cluster / query told to start on a ready driver)
                 -> the last committed file version seen
Runs alternate between the systems in every round (a: S-spare P S-nospare, then reversed; b: S P, then
P S). CPU per system and foreign CPU from bench/procstat.py; a run during which other processes used
more than procstat.FOREIGN_CORES_LIMIT cores is marked and left out of the medians (load rule).
Medians with percentile-bootstrap 95 % intervals (bench/stats.py). Appends one section to --out.
Every cluster, Spark process and driver started is stopped in a `finally`.

This file is the suite's declaration (command line, the runs, main); its parts:
bench/recovery_scenarios.py (the scenarios and their order), bench/recovery_runs.py (one run of each),
bench/recovery_watch.py (watching committed output, the latencies), bench/recovery_report.py (the
section of --out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, REPO)

from bench_common import begin_run, finish_workdir, fmt, publish, run_main
from procstat import FOREIGN_CORES_LIMIT
from recovery_report import report
from recovery_runs import (
    RunError,
    _cluster_cls,
    log,
    peer_driver_run,
    peer_executor_run,
    peer_query,
    peer_spec,
    sluice_run,
    standalone_conf,
    warm,
)
from recovery_scenarios import APP, EXECUTOR, NOSPARE, SPARE, STOP_A, plan

if TYPE_CHECKING:
    from spark_standalone import SparkStandalone
    from structured_streaming_child import Child

FULL = {"runs": 4, "events": 600_000, "files": 120, "kill_after": 2.0}
QUICK = {"runs": 1, "events": 300_000, "files": 60, "kill_after": 1.5}
LOCAL2 = ("-D", "spark.master=local[2]")  # each Sluice TaskManager's Spark: 2 task threads


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"smoke sizes: {QUICK}")
    ap.add_argument("--runs", type=int, default=None, help=f"rounds per phase (full {FULL['runs']})")
    ap.add_argument("--events", type=int, default=None, help=f"events (full {FULL['events']:,})")
    ap.add_argument("--files", type=int, default=None, help=f"input files (full {FULL['files']})")
    ap.add_argument("--kill-after", type=float, default=None, help="seconds after the first committed output")
    ap.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=4,
        help="files per step of both: the peer's micro-batch, Sluice's source read",
    )
    ap.add_argument("--phases", default="ab", help="a: worker failure, b: application failure (default ab)")
    ap.add_argument(
        "--max-foreign-cores",
        "--foreign-cores-limit",
        dest="foreign_cores_limit",
        type=float,
        default=FOREIGN_CORES_LIMIT,
        help="load rule (0: off)",
    )
    ap.add_argument("--timeout", type=float, default=300, help="seconds a step may take")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for k, v in sizes.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    return args


class Rig:
    """What one invocation runs on: the data, the Sluice cluster of 2 TaskManagers and, in phase (a),
    the one of 3 (a warm spare), the Spark standalone cluster and the peer's long-lived driver on it;
    and how the resource meter finds each system's processes."""

    def __init__(self, args: argparse.Namespace, work: str):
        self.args, self.work = args, work
        self.data = os.path.join(work, "events")
        self.warm_data = os.path.join(work, "events-warmup")
        self.expected: dict[str, int] = {}
        self.cluster_cls = _cluster_cls()
        self.clusters: list = []
        self.nospare: Any = None  # the clusters (_cluster_cls's class)
        self.spare: Any = None
        self.spark: SparkStandalone | None = None
        self.peer_driver: Child | None = None
        self.peer_queries: dict[int, dict] = {}
        self.systems = {"sluice": self.sluice_pids, "spark": self.spark_pids}

    def sluice_pids(self) -> list[int]:
        return [pid for c in self.clusters for pid in c.all_pids()]

    def spark_pids(self) -> list[int]:
        from structured_streaming_child import Child

        return (self.spark.pids() if self.spark is not None else []) + [c.proc.pid for c in Child.live]

    def _cluster(self, name: str, taskmanagers: int):
        c = self.cluster_cls(os.path.join(self.work, name), taskmanagers, 1, LOCAL2)
        self.clusters.append(c)  # stopped in the end even if it does not start
        return c.start()

    def prepare(self, executor_runs: int) -> None:
        """The input, the cluster of 2 TaskManagers, and phase (a)'s clusters and peer driver."""
        from generate_page_views import generate

        args = self.args
        self.expected = generate(self.data, events=args.events, files=args.files, urls=10_000, seed=11)
        generate(self.warm_data, events=30_000, files=6, urls=10_000, seed=13)
        log(f"generated {args.events:,} events in {args.files} files")
        self.nospare = self._cluster("cluster-2tm", 2)
        if "a" in args.phases:
            self.spare = self._cluster("cluster-3tm", 3)
            self._start_peer_a(executor_runs)

    def _start_peer_a(self, executor_runs: int) -> None:
        """The standalone cluster and one long-lived driver on it that runs the peer's (a) queries one
        by one, each when told (its go file): like the Sluice clusters, it is up before each run
        (query 0: a short uncounted warm-up, as the Sluice spare cluster's warm-up job)."""
        from spark_standalone import SparkStandalone
        from structured_streaming_child import Child

        spark = self.spark = SparkStandalone(os.path.join(self.work, "spark"), workers=2, cores=2, memory="2g", log=log)
        spark.start()
        mfpt = self.args.max_files_per_trigger
        warmup = peer_query(self.warm_data, self.work, "peer-a-warmup", mfpt, go=False)
        self.peer_queries = {
            i: peer_query(self.data, self.work, f"peer-a-{i}", mfpt) for i in range(1, executor_runs + 1)
        }
        spec = peer_spec([warmup, *self.peer_queries.values()], spark.master_url, standalone_conf())
        driver = self.peer_driver = Child(spec, self.work, "peer-a-driver")
        driver.wait_for("done", self.args.timeout, query=0)
        log("peer driver on the standalone cluster ready (warm-up query done)")

    def stop_phase_a(self) -> None:
        """Phase (b) runs without phase (a)'s idle clusters."""
        if self.peer_driver is not None:
            self.peer_driver.kill()
            self.peer_driver = None
        if self.spare is not None:
            self.spare.stop()
            self.clusters.remove(self.spare)
            self.spare = None
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

    def run(self, n: int, kind: str, before: list[dict]) -> dict:
        """Run `n` of the invocation, of scenario `kind` (`before`: the runs made before it)."""
        args, work, tag = self.args, self.work, f"{n:02d}-{kind}"
        if kind in (SPARE, NOSPARE, APP):
            c = self.spare if kind == SPARE else self.nospare
            assert c is not None  # the warm-spare cluster runs through phase (a)
            c.wait_full(args.timeout)
            if kind == SPARE:
                warm(c, self.warm_data, os.path.join(work, f"out-warmup-{n}"), args.timeout)
            out = os.path.join(work, f"out-{tag}")
            r = sluice_run(kind, c, self.data, out, self.expected, args, self.systems, tag)
            r["out"] = out
            return r
        if kind == EXECUTOR:
            qi = 1 + sum(1 for x in before if x["kind"] == EXECUTOR)
            q = self.peer_queries[qi]
            return peer_executor_run(self.peer_driver, qi, q, self.spark, self.expected, args, self.systems, tag)
        return peer_driver_run(self.data, work, self.expected, args, self.systems, tag)

    def stop(self) -> None:
        """Every driver, the Spark cluster and every Sluice cluster; a failure to stop one is logged."""
        from structured_streaming_child import Child

        Child.kill_all()
        if self.spark is not None:
            try:
                self.spark.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the rest
                log(f"warning: stopping Spark: {exc}")
        for c in self.clusters:
            try:
                c.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping {c.dir}: {exc}\n{traceback.format_exc()}")


def one_run(rig: Rig, n: int, kind: str, before: list[dict], notes: list[str]) -> tuple[dict, bool]:
    """Run `n`, of scenario `kind`; a failure or a failed output check noted. Returns the run and
    whether it failed; a checked run's output and checkpoint are removed."""
    log(f"run {n}: {kind}")
    failed = False
    try:
        r = rig.run(n, kind, before)
    except (RunError, Exception) as exc:  # noqa: BLE001 — a failed run is reported, the suite goes on
        failed = True
        r = {"kind": kind, "error": f"{type(exc).__name__}: {exc}".split("\n")[0]}
        notes.append(f"run {n} ({kind}) failed: {r['error']}")
        log(f"  run {n} failed: {r['error']}")
    if r.get("check") is not None:
        if not r["check"].ok:
            failed = True
            notes.append(f"run {n} ({kind}): OUTPUT CHECK FAILED: {r['check'].describe()}")
        else:
            for key in ("out", "ckpt"):
                if r.get(key):
                    shutil.rmtree(r[key], ignore_errors=True)
    u = r.get("usage")
    log(
        f"  kill at {fmt(r.get('kill_at'), '.1f')}s; kill → first output {fmt(r.get('first_output'))}s, "
        f"→ progressing {fmt(r.get('progressing'))}s; total {fmt(r.get('total'), '.1f')}s; restarts "
        f"{r.get('restarts')}; foreign cores {fmt(u.foreign_cores() if u else None)}; "
        f"output {r['check'].describe() if r.get('check') else '—'}"
    )
    return r, failed


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "recovery-suite-", log)
    limit = args.foreign_cores_limit or None
    rig = Rig(args, work)
    runs: list[dict] = []
    notes: list[str] = []
    failed = interrupted = False
    t_start = time.monotonic()
    try:
        steps = plan(args.phases, args.runs)
        rig.prepare(steps.count(EXECUTOR))
        for kind in steps:
            if kind == STOP_A:
                rig.stop_phase_a()
                continue
            r, bad = one_run(rig, len(runs) + 1, kind, runs, notes)
            runs.append(r)
            failed = failed or bad
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping everything")
        raise
    except BaseException as exc:
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        rig.stop()
        if runs:
            notes.append(f"the suite took {time.monotonic() - t_start:.0f} s")
            publish(report(args, facts, command, runs, notes, limit), args.out, log)
        finish_workdir(work, temp and (interrupted or not failed) and not args.keep_workdir, log, "logs under */log/")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
