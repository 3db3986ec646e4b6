"""The harness of bench/batch_bench.py: its run order (pure), a bounded job on a local Sluice cluster,
the load rule around a run, and `Bench`, the invocation's state (its runs, notes, clusters and
peer) with the bookkeeping every run goes through. The three parts that use it are in
bench/batch_parts.py; the report in bench/batch_report.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bench_common import fmt
from paired_runs import MEASURED, RunError, log, usage_figures
from run_matrix import Order, items_only, matrix

if TYPE_CHECKING:
    from batch_peer import BatchPeer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PAGE_VIEWS_BATCH = os.path.join(REPO, "examples", "page_views_batch.py")
FAILOVER_JOB = os.path.join(HERE, "jobs", "failover_copy.py")
BATCH_COUNTS = os.path.join(REPO, "tests", "integration", "jobs", "batch_counts.py")
SYSTEMS = ("Sluice", "peer")  # page views
STRATEGIES = ("region", "full")  # failover
ARMS = ("off", "on", "none")  # speculation: straggler without / with speculation; no straggler
VICTIMS = 4  # the failover job's subtasks, killed in turn round by round
FAST_POLL = 0.05  # seconds between status polls around a kill


# ================================================================================================
# the run order
# ================================================================================================
def page_views_order(runs: int) -> list[str]:
    """The measured page-view runs' systems: S P, then P S, ... (the first rotates round by round)."""
    return [c.system for c in matrix(SYSTEMS, [None], runs, systems_order=Order.ROTATE)]


def peer_tuning_order(shuffles: Sequence[int], runs: int) -> list[int]:
    """The peer's tuning runs' shuffle partitions: every candidate once per round, in the given order."""
    return items_only(shuffles, runs)


def failover_order(runs: int) -> list[tuple[str, int]]:
    """(strategy, victim subtask) per failover run: the strategies forward, then backward, ...; the
    victim the round's (subtask 0, 1, 2, 3, 0, ...)."""
    cells = matrix([""], STRATEGIES, runs, items_order=Order.REVERSE)
    return [(c.item, (c.round - 1) % VICTIMS) for c in cells]


def speculation_order(runs: int) -> list[str]:
    """The measured speculation runs' arms, their order turned by one each round (off on none, on none
    off, none off on, ...)."""
    return [c.system for c in matrix(ARMS, [None], runs, systems_order=Order.ROTATE)]


# ================================================================================================
# Sluice
# ================================================================================================
def parse_config(text: str) -> tuple[int, int, tuple[str, ...], str]:
    """`2x1` or `2x1/local[2]` -> (TaskManagers, slots, extra `cluster start` args, label)."""
    shape, _, master = text.strip().partition("/")
    tms, slots = (int(x) for x in shape.lower().split("x"))
    extra = ("-D", f"spark.master={master}") if master else ()
    label = f"{tms} TM x {slots} slot{'s' if slots > 1 else ''}, p={tms * slots}" + (f", {master}" if master else "")
    return tms, slots, extra, label


def new_cluster(work: str, name: str, taskmanagers: int, slots: int, extra: tuple[str, ...] = ()):
    from recovery_runs import _cluster_cls

    return _cluster_cls()(os.path.join(work, name), taskmanagers, slots, extra)


def submit(cluster, jobfile: str, parallelism: int, job_args: Sequence[str]) -> str:
    from page_views_runs import sluice

    cmd = ("run", jobfile, "--detach", "--parallelism", str(parallelism), "--cluster-dir", cluster.dir)
    proc = sluice(*cmd, "--", *job_args, timeout=300)
    return proc.stdout.strip().splitlines()[-1].strip()


def batch_job(cluster, jobfile: str, parallelism: int, job_args: Sequence[str], timeout: float) -> dict:
    """`sluice run --detach` of a bounded job, followed to its end: wall (CLI started -> FINISHED seen),
    the JobManager's submitted -> ended, the CLI's part (started -> submitted), the final status."""
    from page_views_runs import follow

    t_launch = time.time()
    job_id = submit(cluster, jobfile, parallelism, job_args)
    r = follow(cluster, job_id, timeout, t_launch)
    if r["state"] != "FINISHED":
        raise RunError(f"job {job_id} ended {r['state']}: {r['status']['failure'] or r['status']['message']}")
    return {
        "job_id": job_id,
        "time": r["t_end_seen"] - t_launch,
        "jm_time": (r["ended_ms"] - r["submitted_ms"]) / 1000,
        "client": r["submitted_ms"] / 1000 - t_launch,
        "status": r["status"],
    }


def metered(r: dict, systems: Mapping[str, Callable[[], Iterable[int]]], events: int, limit: float, body) -> None:
    """Run `body()` (its figures into `r`, a failure as r["error"]) under a ResourceMeter of `systems`;
    the load rule's figures into `r`."""
    from procstat import ResourceMeter

    meter = ResourceMeter(dict(systems)).start()
    try:
        r.update(body())
    except Exception as exc:  # noqa: BLE001 — a failed run is reported, the others go on
        r["error"] = f"{type(exc).__name__}: {exc}".split("\n")[0][:400]
    finally:
        r.update(usage_figures(meter.stop(), events, limit))


# ================================================================================================
# the invocation
# ================================================================================================
class Bench:
    """One invocation: its arguments, working directory, runs (dicts, in the order made), notes, the
    clusters and the peer it started (stopped by `stop_all` whatever happens), and what the tuning
    chose (for the report)."""

    def __init__(self, args: argparse.Namespace, work: str):
        self.args, self.work = args, work
        self.runs: list[dict] = []
        self.notes: list[str] = []
        self.failed = False
        self.n = 0
        self.clusters: list = []
        self.peer: BatchPeer | None = None
        self.chosen: dict[str, Any] = {}  # what the tuning chose, for the report

    def record(self, r: dict, line: str) -> dict:
        r["ok"] = "error" not in r and bool(r.get("check_ok"))
        what = f"run {r['n']} ({r['part']}, {r['arm']}, {r['phase']})"
        if "error" in r:
            self.notes.append(f"{what} failed: {r['error']}")
            self.failed = True
        elif not r.get("check_ok"):
            self.notes.append(f"{what}: OUTPUT CHECK FAILED: {r.get('check')} (output kept in {r.get('out')})")
            self.failed = True
        elif r.get("out"):
            shutil.rmtree(r["out"], ignore_errors=True)
        self.runs.append(r)
        status = r.get("error") or r.get("check")
        excluded = " (excluded)" if r.get("excluded") else ""
        log(f"{what}: {line}; foreign {fmt(r.get('foreign_cores'))}{excluded}; {status}")
        return r

    def new_run(self, part: str, arm: str, phase: str, **fields: Any) -> dict:
        waited = self.wait_quiet() if phase != "warm-up" else 0.0
        self.n += 1
        return {"n": self.n, "part": part, "arm": arm, "phase": phase, "waited": waited, **fields}

    def out_dir(self, r: dict) -> str:
        """A run's output directory (removed once its check passed)."""
        r["out"] = os.path.join(self.work, f"out-{r['n']:04d}")
        return r["out"]

    def ours(self) -> list[int]:
        """Every process of this invocation's clusters and peer (roots; the meter adds descendants)."""
        return [p for c in self.clusters for p in c.all_pids()] + (self.peer.roots() if self.peer else [])

    def wait_quiet(self) -> float:
        """Before a counted run on a shared machine: wait until other processes use at most the load rule's
        cores (a 2 s sample), for at most --quiet-wait seconds. The runs are judged by the load rule all
        the same; this only spares runs that it would exclude. Returns the seconds waited."""
        from procstat import ResourceMeter

        a = self.args
        if not a.max_foreign_cores or a.quiet_wait <= 0:
            return 0.0
        t0 = time.monotonic()
        while True:
            meter = ResourceMeter({MEASURED: self.ours}).start()
            time.sleep(2)
            foreign = meter.stop().foreign_cores()
            waited = time.monotonic() - t0
            if foreign <= a.max_foreign_cores:
                if waited > 5:
                    log(f"  the machine is quiet again after {waited:.0f}s")
                return waited
            if waited > a.quiet_wait:
                log(f"  still {foreign:.2f} foreign cores after {waited:.0f}s: running anyway (the load rule judges)")
                return waited
            if waited < 3:
                log(f"  other processes use {foreign:.2f} cores: waiting up to {a.quiet_wait:.0f}s for a quiet machine")
            time.sleep(3)

    def start_cluster(self, name: str, tms: int, slots: int, extra: tuple[str, ...] = ()):
        c = new_cluster(self.work, name, tms, slots, extra)
        self.clusters.append(c)
        c.start()
        return c

    def stop_cluster(self, c) -> None:
        try:
            c.stop()
        finally:
            if c in self.clusters:
                self.clusters.remove(c)

    def stop_all(self) -> None:
        from structured_streaming_child import Child

        if self.peer is not None:
            try:
                self.peer.stop()
            except BaseException as exc:  # noqa: BLE001 — teardown goes on
                log(f"warning: stopping the peer: {exc}")
            self.peer = None
        for c in list(self.clusters):
            try:
                self.stop_cluster(c)
            except BaseException as exc:  # noqa: BLE001 — teardown goes on to the other clusters
                log(f"warning: stopping {c.dir}: {exc}")
        Child.kill_all()
