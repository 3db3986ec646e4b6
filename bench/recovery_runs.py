"""One run of each recovery scenario (bench/recovery_suite.py): the Sluice cluster that can crash
and start again on its directory, a warm-up of every TaskManager, a Sluice job killed (a
TaskManager, or every process), and the peer's query with one executor or its driver killed. Each
run watches its committed output (bench/recovery_watch.py), meters the CPU of both systems
(bench/procstat.py) and checks its output exactly (bench/output_check.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable

import psutil
from output_check import check_peer_output, check_sluice_output
from procstat import ResourceMeter
from recovery_scenarios import APP, CHECKPOINT_MS, DRIVER, EXECUTOR, PARALLELISM
from recovery_watch import DIR_POLL, Kill, OutputWatch, peer_committed, sluice_committed

STATUS_POLL = 0.1  # seconds between job status polls


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class RunError(Exception):
    pass


# -- Sluice --------------------------------------------------------------------------------------------
def _cluster_cls():
    from page_views_runs import Cluster

    class SluiceCluster(Cluster):
        """A page_views_bench Cluster whose crash (LocalCluster.crash: every Sluice process at once)
        keeps its embedded ZooKeeper, and that starts again on the same directory, ZooKeeper and
        cluster id; stop() ends that ZooKeeper too."""

        def __init__(self, directory: str, taskmanagers: int, slots: int, extra_args: tuple[str, ...] = ()):
            super().__init__(directory, taskmanagers, slots, extra_args)
            self.zk_pid: int | None = None
            self.warm_pids: frozenset[int] = frozenset()
            self.restarting = False

        def start(self, timeout: float = 400) -> SluiceCluster:
            super().start(timeout)
            self.zk_pid = next(iter(super().role_pids("zookeeper")), None)
            return self

        def reload(self) -> dict:
            self.refresh()
            self.remember_children()
            return self.info

        def all_pids(self) -> list[int]:
            pids = list(self.pids)
            if self.restarting:  # not in a cluster.json yet: every process started for this directory
                pids += [
                    p.pid
                    for p in psutil.process_iter(["cmdline"])
                    if any(self.dir in arg for arg in (p.info["cmdline"] or []))
                ]
            return pids + ([self.zk_pid] if self.zk_pid and self.zk_pid not in pids else [])

        def role_pids(self, role: str) -> list[int]:
            self.reload()
            return super().role_pids(role)

        def wait_full(self, timeout: float) -> None:
            """Until every process runs and every TaskManager is registered with all its slots free."""
            try:
                self.wait_whole(timeout)
            except TimeoutError as exc:
                raise RunError(str(exc)) from None
            self.reload()

        def restart(self, timeout: float = 400) -> float:
            """`cluster start` on the crashed cluster's directory: it resumes that cluster (same
            cluster id, its still-running ZooKeeper, its CA); returns the command's duration."""
            t0 = time.monotonic()
            self.restarting = True
            try:
                self.start(timeout)
            finally:
                self.restarting = False
            return time.monotonic() - t0

        def stop(self) -> list[int]:
            try:
                return super().stop()
            finally:
                if self.zk_pid is not None:
                    try:
                        p = psutil.Process(self.zk_pid)
                        p.terminate()
                        p.wait(15)
                    except psutil.TimeoutExpired:
                        p.kill()
                    except psutil.NoSuchProcess:
                        pass
                    self.zk_pid = None

    return SluiceCluster


def warm(cluster, data: str, out: str, timeout: float) -> None:
    """A short job on every TaskManager (warm-spare cluster), unless the same processes ran one."""
    from page_views_recovery import warm_all_taskmanagers

    pids = frozenset(cluster.role_pids("taskmanager"))
    if pids == cluster.warm_pids:
        return
    used = warm_all_taskmanagers(cluster, data, out, timeout)
    shutil.rmtree(out, ignore_errors=True)
    if used != f"{cluster.taskmanagers}/{cluster.taskmanagers}":
        log(f"  warning: the warm-up ran on {used} TaskManagers")
    cluster.warm_pids = frozenset(cluster.role_pids("taskmanager"))


def _wait_kill_point(
    watch: OutputWatch, kill_after: float, timeout: float, ended: Callable[[], str | None], what: str
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        first = watch.first_seen()
        if first is not None and time.monotonic() - first >= kill_after:
            return
        end = ended()
        if end is not None:
            raise RunError(f"{what} ended ({end}) before the kill: make --events larger")
        if time.monotonic() > deadline:
            raise RunError(f"{what}: no committed output within {timeout:.0f}s")
        time.sleep(DIR_POLL)


def sluice_run(kind: str, cluster, data: str, out: str, expected: dict, args, meter_systems, tag: str) -> dict:
    """page_views submitted to the running `cluster`, killed once it has committed output (`kind`
    APP: every Sluice process, then the cluster started again; else the TaskManager of source #0),
    waited for to its end; its output checked."""
    from page_views_runs import TERMINAL

    meter = ResourceMeter(meter_systems).start()
    watch = OutputWatch(out, sluice_committed)
    t_launch = time.monotonic()
    r: dict = {"kind": kind}
    try:
        job_id = cluster.submit(
            "--input",
            data,
            "--output",
            out,
            "--checkpoint-interval",
            str(CHECKPOINT_MS),
            parallelism=PARALLELISM,
            options={"execution.source.max-files-per-read": str(args.max_files_per_trigger)},
        )
        watch.start()
        r["job_id"] = job_id

        def ended() -> str | None:
            s = cluster.status(job_id)
            return s["state"] if s["state"] in TERMINAL else None

        _wait_kill_point(watch, args.kill_after, args.timeout, ended, f"job {job_id}")
        s = cluster.status(job_id)
        restarts_before = s["restarts"]
        r["checkpoint_before"] = s["last_completed_checkpoint"]
        if kind == APP:
            kill = _crash_and_restart(cluster, watch, r, t_launch, args.timeout)
        else:
            kill = _kill_source_taskmanager(cluster, s, watch, r, t_launch)
        s = _wait_job_end(cluster, job_id, args.timeout)
        r["state"] = s["state"]
        r["restarts"] = s["restarts"] - (restarts_before if kind != APP else 0)
        r["restored"] = s.get("restored_checkpoint")
        if s["state"] != "FINISHED":
            raise RunError(f"job {job_id} ended {s['state']}: {s['failure'] or s['message']}")
    finally:
        watch.stop()
        r["usage"] = meter.stop()
    r.update(kill.figures(watch, t_launch))
    r["check"] = check_sluice_output(out, expected)
    return r


def _crash_and_restart(cluster, watch: OutputWatch, r: dict, t_launch: float, timeout: float) -> Kill:
    """Every Sluice process killed at once, then `cluster start` on the same directory."""
    kill = Kill.now(watch)
    killed = cluster.crash()
    r["killed"] = f"{len(killed)} processes"
    log(f"  killed every Sluice process ({len(killed)}) {kill.t - t_launch:.1f}s into the job")
    r["restart_s"] = cluster.restart(timeout=timeout)
    r["ready"] = time.monotonic() - kill.t
    log(f"  cluster started again in {r['restart_s']:.1f}s")
    return kill


def _kill_source_taskmanager(cluster, status: dict, watch: OutputWatch, r: dict, t_launch: float) -> Kill:
    """The process group (its Spark JVM too) of the TaskManager running subtask 0 of the source."""
    first_op = status["tasks"][0]["operator"]
    target = next(t for t in status["tasks"] if t["operator"] == first_op and t["subtask"] == 0)
    cluster.reload()
    pid = cluster.taskmanager_pid(target["taskmanager"])
    kill = Kill.now(watch)
    os.killpg(pid, signal.SIGKILL)  # the TaskManager and its Spark JVM
    r["killed"] = f"TaskManager pid {pid}"
    log(f"  killed TaskManager {target['taskmanager']} (pid {pid}) {kill.t - t_launch:.1f}s into the job")
    return kill


def _wait_job_end(cluster, job_id: str, timeout: float) -> dict:
    """The job's status once it is terminal; cancelled, and RunError, after `timeout` s."""
    from page_views_runs import TERMINAL

    deadline = time.monotonic() + timeout
    while True:
        s = cluster.status(job_id)
        if s["state"] in TERMINAL:
            return s
        if time.monotonic() > deadline:
            cluster.cancel(job_id)
            raise RunError(f"job {job_id} still {s['state']} {timeout:.0f}s after the kill")
        time.sleep(STATUS_POLL)


# -- the peer ------------------------------------------------------------------------------------------
def peer_query(data: str, work: str, tag: str, mfpt: int, go: bool = True) -> dict:
    """One query of the peer: its own checkpointLocation and output; with `go`, it starts only once
    the harness creates its go file (the driver and its executors are up by then)."""
    from structured_streaming_runs import query_spec

    q = query_spec(data, os.path.join(work, f"ckpt-{tag}"), os.path.join(work, f"out-{tag}"), mfpt, None)
    if go:
        q["go_file"] = os.path.join(work, f"go-{tag}")
    return q


def peer_spec(queries: list[dict], master: str, conf: dict) -> dict:
    return {"master": master, "shuffle_partitions": PARALLELISM, "conf": conf, "queries": queries}


def standalone_conf() -> dict[str, str]:
    """The driver's settings on the standalone cluster: 2 executors x 2 cores (4 task threads)."""
    return {
        "spark.executor.cores": "2",
        "spark.cores.max": "4",
        "spark.executor.memory": "1g",
        "spark.pyspark.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


def _go(q: dict) -> float:
    with open(q["go_file"], "w"):
        pass
    return time.monotonic()


def peer_executor_run(child, qi: int, q: dict, spark, expected: dict, args, meter_systems, tag: str) -> dict:
    """Query `qi` of the long-lived driver `child` on the standalone cluster; one executor killed."""
    meter = ResourceMeter(meter_systems).start()
    watch = OutputWatch(q["out"], peer_committed)
    r: dict = {"kind": EXECUTOR, "out": q["out"], "ckpt": q["checkpoint"]}
    try:
        _wait_executors(spark, args.timeout, tag)  # the executor killed in the previous run is back
        t_launch = _go(q)
        watch.start()

        def ended() -> str | None:
            if child.find("done", query=qi) is not None:
                return "all input processed"
            return None if child.proc.poll() is None else f"driver exited {child.proc.returncode}"

        _wait_kill_point(watch, args.kill_after, args.timeout, ended, f"peer {tag}")
        execs = spark.executors()
        if len(execs) < 2:
            raise RunError(f"peer {tag}: {len(execs)} executors running, expected 2")
        victim = execs[0]
        before = {e.pid for e in execs}
        procs = [psutil.Process(victim.pid)]
        procs += procs[0].children(recursive=True)
        kill = Kill.now(watch)
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        r["killed"] = f"executor {victim.executor_id} pid {victim.pid}"
        log(f"  killed executor {victim.executor_id} (pid {victim.pid}) {kill.t - t_launch:.1f}s into the query")
        psutil.wait_procs(procs, timeout=10)
        child.wait_for("done", args.timeout, query=qi)
        r["restarts"] = len({e.pid for e in spark.executors()} - before)  # new executors launched
        r["state"] = "FINISHED"
    finally:
        watch.stop()
        r["usage"] = meter.stop()
    r.update(kill.figures(watch, t_launch))
    r["check"] = check_peer_output(q["out"], expected)
    return r


def _wait_executors(spark, timeout: float, tag: str) -> None:
    """Until the standalone cluster runs 2 executors; RunError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while len(spark.executors()) < 2:
        if time.monotonic() > deadline:
            raise RunError(f"peer {tag}: {len(spark.executors())} executors running, expected 2")
        time.sleep(0.2)


def peer_driver_run(data: str, work: str, expected: dict, args, meter_systems, tag: str) -> dict:
    """A driver (local[4]) started and ready, then its query; the driver killed and started again."""
    from structured_streaming_child import Child

    q = peer_query(data, work, tag, args.max_files_per_trigger)
    restart_q = {k: v for k, v in q.items() if k != "go_file"}
    r: dict = {"kind": DRIVER, "out": q["out"], "ckpt": q["checkpoint"]}
    first = second = None
    meter = None
    try:
        first = Child(peer_spec([q], "local[4]", {}), work, f"{tag}-driver")
        first.wait_for("session", args.timeout)  # ready, as a Sluice cluster is before its job
        meter = ResourceMeter(meter_systems).start()
        watch = OutputWatch(q["out"], peer_committed)
        t_launch = _go(q)
        watch.start()

        def ended() -> str | None:
            if first.find("done") is not None:
                return "all input processed"
            return None if first.proc.poll() is None else f"driver exited {first.proc.returncode}"

        try:
            _wait_kill_point(watch, args.kill_after, args.timeout, ended, f"peer {tag}")
            kill = Kill.now(watch)
            first.kill()  # the driver's process group: Python + its JVM
            r["killed"] = f"driver pid {first.proc.pid}"
            log(f"  killed the driver {kill.t - t_launch:.1f}s into the query")
            second = Child(peer_spec([restart_q], "local[4]", {}), work, f"{tag}-driver-restarted")
            second.wait_for("done", args.timeout)
            r["ready"] = second.wait_for("started", 5)["t"] - kill.t
            r["restarts"] = 1  # the driver, once
            second.finish(120)
            r["state"] = "FINISHED"
        finally:
            watch.stop()
    finally:
        for c in (first, second):
            if c is not None:
                c.kill()
        if meter is not None:
            r["usage"] = meter.stop()
    r.update(kill.figures(watch, t_launch))
    r["check"] = check_peer_output(q["out"], expected)
    return r
