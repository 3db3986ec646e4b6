"""One recovery run of examples/page_views.py: kill -9 of the TaskManager hosting subtask 0 of the first
task once output was committed, and the times from the kill until the job runs again, checkpoints again
and commits a file written after the kill (bench/page_views_bench.py part 3, bench/compare.py).

`DirWatch` lists an output directory every DIR_POLL s and remembers when each visible file was first
seen; `warm_all_taskmanagers` runs a short job on every TaskManager first (a warm spare).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass

import psutil
from page_views_runs import POLL, TERMINAL, BenchError, Cluster, follow, log
from stats import load1

DIR_POLL = 0.02  # seconds between output directory listings (recovery)


class DirWatch(threading.Thread):
    """Lists the output directory every DIR_POLL s; remembers when each visible file was first seen."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.first_seen: dict[str, float] = {}  # name -> monotonic time first seen
        self.mtime: dict[str, float] = {}  # name -> mtime (wall clock) when first seen
        self.stop_event = threading.Event()

    def visible(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.path) if not n.startswith((".", "_"))]
        except FileNotFoundError:
            return []

    def scan(self) -> None:
        now = time.monotonic()
        for n in self.visible():
            if n not in self.first_seen:
                self.first_seen[n] = now
                try:
                    self.mtime[n] = os.stat(os.path.join(self.path, n)).st_mtime
                except FileNotFoundError:
                    self.mtime[n] = float("inf")

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.scan()
            time.sleep(DIR_POLL)


def warm_all_taskmanagers(cluster: Cluster, data: str, out: str, timeout: float) -> str:
    """A short page_views run at parallelism = number of TaskManagers, so every TaskManager's Spark
    (the spare's too) has run the job's code once; returns which TaskManagers it used."""
    n = cluster.taskmanagers
    t_launch = time.time()
    job_id = cluster.submit("--input", data, "--output", out, "--checkpoint-interval", "500", parallelism=n)
    used: set[str] = set()
    deadline = time.monotonic() + timeout
    while True:
        s = cluster.status(job_id)
        used |= {t["taskmanager"] for t in s["tasks"] if t["taskmanager"]}
        if s["state"] in TERMINAL:
            break
        if time.monotonic() > deadline:
            cluster.cancel(job_id)
            raise BenchError(f"warm-up job {job_id} still {s['state']} after {timeout:.0f}s")
        time.sleep(POLL)
    shutil.rmtree(out, ignore_errors=True)
    if s["state"] != "FINISHED":
        raise BenchError(f"warm-up job {job_id} ended {s['state']}: {s['failure'] or s['message']}")
    log(f"  warm-up at parallelism {n} took {time.time() - t_launch:.1f}s on {len(used)}/{n} TaskManagers")
    return f"{len(used)}/{n}"


def _new_files(watch: DirWatch, before: set[str], t_kill_wall: float) -> tuple[dict, dict]:
    """Visible files that appeared after the kill, and those of them written after it (mtime; a
    pending part of the restored checkpoint, committed on restore, was written before)."""
    new = {n: t for n, t in list(watch.first_seen.items()) if n not in before}
    written = {n: t for n, t in new.items() if watch.mtime.get(n, 0) >= t_kill_wall}
    return new, written


def _all_running(s: dict) -> bool:
    return s["state"] == "RUNNING" and bool(s["tasks"]) and all(t["state"] == "RUNNING" for t in s["tasks"])


@dataclass
class Kill:
    """What was killed, and what the job had done until then."""

    address: str  # the TaskManager
    pid: int
    first_op: str
    children: list[psutil.Process]  # its Spark JVM, which follows it
    before: set[str]  # visible output files at the kill
    restarts: int
    checkpoint: int  # the last completed checkpoint before the kill
    t: float  # monotonic
    t_wall: float


def _until_committed(cluster: Cluster, job_id: str, watch: DirWatch, timeout: float, t_launch: float):
    """Wait until the job runs every task, completed a checkpoint and committed a file; returns its
    status then and the seconds from submission to the first completed checkpoint."""
    t_first_checkpoint = None
    deadline = time.monotonic() + timeout
    while True:
        s = cluster.status(job_id)
        if t_first_checkpoint is None and s["last_completed_checkpoint"] is not None:
            t_first_checkpoint = time.monotonic() - t_launch
        if s["state"] in TERMINAL:
            raise BenchError(
                f"job {job_id} ended {s['state']} before the kill (make --recovery-events larger): "
                f"{s['failure'] or s['message']}"
            )
        if _all_running(s) and s["last_completed_checkpoint"] is not None and watch.visible():
            return s, t_first_checkpoint
        if time.monotonic() > deadline:
            raise BenchError(
                f"job {job_id}: no completed checkpoint and committed file within {timeout:.0f}s "
                f"(state {s['state']}, {s['message']})"
            )
        time.sleep(POLL)


def _kill_subtask_0(cluster: Cluster, s: dict, watch: DirWatch) -> Kill:
    """SIGKILL to the TaskManager hosting subtask 0 of the job's first task."""
    first_op = s["tasks"][0]["operator"]
    target = next(t for t in s["tasks"] if t["operator"] == first_op and t["subtask"] == 0)
    address = target["taskmanager"]
    pid = cluster.taskmanager_pid(address)
    children = psutil.Process(pid).children(recursive=True)
    watch.scan()
    before = set(watch.first_seen)
    t_kill, t_kill_wall = time.monotonic(), time.time()
    os.kill(pid, signal.SIGKILL)
    kill = Kill(
        address, pid, first_op, children, before, s["restarts"], s["last_completed_checkpoint"], t_kill, t_kill_wall
    )
    log(
        f"  killed TaskManager {address} (pid {pid}, hosting {first_op} #0) after checkpoint "
        f"{kill.checkpoint}; {len(before)} files committed"
    )
    return kill


def _observe(cluster: Cluster, job_id: str, watch: DirWatch, kill: Kill, timeout: float) -> dict:
    """Poll the job after the kill until it runs again, checkpointed again and committed a file written
    after the kill (or ended, or `timeout` passed); the monotonic times of each, None when not seen."""
    o: dict = {"detected": None, "running": None, "checkpoint": None, "restored": None, "end_state": None}
    states: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = cluster.status(job_id)
        now = time.monotonic()
        if not states or states[-1][1] != s["state"]:
            states.append((round(now - kill.t, 2), s["state"]))
        if o["detected"] is None and (
            s["restarts"] > kill.restarts or s["state"] != "RUNNING" or any(t["state"] != "RUNNING" for t in s["tasks"])
        ):
            o["detected"] = now
        if o["running"] is None and _all_running(s) and s["restarts"] >= kill.restarts + 1:
            o["running"], o["restored"] = now, s["restored_checkpoint"]
        if o["checkpoint"] is None and any(
            c["status"] == "COMPLETED" and c["id"] > kill.checkpoint for c in s["checkpoints"]
        ):
            o["checkpoint"] = now
        if s["state"] in TERMINAL:
            o["end_state"] = s["state"]
            break
        if o["running"] is not None and o["checkpoint"] is not None and _new_files(watch, kill.before, kill.t_wall)[1]:
            break
        time.sleep(POLL)
    return {**o, "states": states}


def _since(t: float | None, t0: float) -> float | None:
    return None if t is None else t - t0


def _result(job_id: str, t_first_checkpoint: float | None, kill: Kill, o: dict, watch: DirWatch) -> dict:
    watch.scan()
    new, new_written = _new_files(watch, kill.before, kill.t_wall)
    first_new = min(new.values()) if new else None
    first_written = min(new_written.values()) if new_written else None
    return {
        "job_id": job_id,
        "killed": kill.address,
        "first_checkpoint": t_first_checkpoint,
        "t_kill_wall": kill.t_wall,
        "checkpoint_after": _since(o["checkpoint"], kill.t),
        "pid": kill.pid,
        "checkpoint_before": kill.checkpoint,
        "restored": o["restored"],
        "end_state": o["end_state"],
        "states": o["states"],
        "detected": _since(o["detected"], kill.t),
        "running": _since(o["running"], kill.t),
        "first_file": _since(first_new, kill.t),
        "first_file_name": min(new, key=new.__getitem__) if new else None,
        "first_written_file": _since(first_written, kill.t),
        "first_written_file_name": min(new_written, key=new_written.__getitem__) if new_written else None,
    }


def _end(cluster: Cluster, job_id: str, timeout: float, run_to_end: bool) -> str:
    """Cancel the job (with run_to_end: follow it until it ends); its final state."""
    s = cluster.status(job_id)
    if run_to_end and s["state"] not in TERMINAL:
        s = follow(cluster, job_id, timeout, time.time())["status"]
    if s["state"] not in TERMINAL:
        cluster.cancel(job_id)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and cluster.status(job_id)["state"] not in TERMINAL:
            time.sleep(0.2)
    return cluster.status(job_id)["state"]


def _reap(children: list[psutil.Process]) -> None:
    for child in children:  # the killed TaskManager's Spark JVM follows it; make sure
        try:
            child.wait(30)
        except psutil.TimeoutExpired:
            log(f"  warning: child {child.pid} of the killed TaskManager still alive after 30s; killing it")
            child.kill()
        except psutil.NoSuchProcess:
            pass


def recovery_run(
    cluster: Cluster, data: str, out: str, timeout: float, interval: int = 500, run_to_end: bool = False
) -> dict:
    """Kill the TaskManager of subtask 0 once output was committed; measure the recovery. Then the
    job is canceled, or with run_to_end followed until it ends (its output left in `out`)."""
    load_start, t_launch = load1(), time.monotonic()
    job_id = cluster.submit("--input", data, "--output", out, "--checkpoint-interval", str(interval))
    watch = DirWatch(out)
    watch.start()
    try:
        s, t_first_checkpoint = _until_committed(cluster, job_id, watch, timeout, t_launch)
        kill = _kill_subtask_0(cluster, s, watch)
        result = _result(job_id, t_first_checkpoint, kill, _observe(cluster, job_id, watch, kill, timeout), watch)
    finally:
        watch.stop_event.set()
        watch.join(5)
    result["final_state"] = _end(cluster, job_id, timeout, run_to_end)
    result["load_start"], result["load_end"] = load_start, load1()
    _reap(kill.children)
    return result
