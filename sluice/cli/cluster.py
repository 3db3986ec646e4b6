"""Local cluster launcher: `sluice cluster start|stop|status`.

Starts ZooKeeper (embedded, unless an ensemble is given), JobManagers and
TaskManagers as background processes that log to DIR/log/ and never hold
the caller's stdout/stderr, writes DIR/cluster.json, and returns once a
leader serves and every TaskManager registered with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

from sluice.client import JobManagerClient, SluiceError, read_cluster_json
from sluice.storage import write_text_atomic

ROLES = ("zookeeper", "jobmanager", "taskmanager")


class ClusterError(Exception):
    pass


def _spawn(args: list[str], log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        return subprocess.Popen(args, stdin=devnull, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def _alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tail(path: str, n: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def running_cluster(cluster_dir: str) -> dict | None:
    try:
        info = read_cluster_json(cluster_dir)
    except SluiceError:
        return None
    return info if any(_alive(p["pid"]) for p in info["processes"]) else None


def start(cluster_dir: str, jobmanagers: int = 1, taskmanagers: int = 2, slots: int = 2,
          zookeeper: str | None = None, cluster_id: str | None = None, timeout: float = 120.0,
          heartbeat_timeout: float = 6.0, zk_session_timeout: float = 6.0) -> dict:
    if jobmanagers < 1 or taskmanagers < 0 or slots < 1:
        raise ClusterError("need --jobmanagers >= 1, --taskmanagers >= 0 and --slots >= 1")
    cluster_dir = os.path.abspath(cluster_dir)
    if running_cluster(cluster_dir):
        raise ClusterError(f"a cluster is already running in {cluster_dir}; stop it with "
                           f"`sluice cluster stop --dir {cluster_dir}`")
    log_dir, run_dir = os.path.join(cluster_dir, "log"), os.path.join(cluster_dir, "run")
    os.makedirs(log_dir, exist_ok=True)
    os.makedirs(run_dir, exist_ok=True)
    cluster_id = cluster_id or f"cluster-{uuid.uuid4().hex[:8]}"
    procs: list[dict] = []
    started: list[subprocess.Popen] = []
    try:
        if zookeeper is None:
            from sluice.zk.server import EmbeddedZooKeeper
            zk = EmbeddedZooKeeper(os.path.join(cluster_dir, "zookeeper"))
            zk.start(timeout=60)
            zk.detach()  # outlives this command; `cluster stop` ends it
            zookeeper = zk.connect_string
            procs.append({"role": "zookeeper", "pid": zk.pid, "address": zookeeper, "log": str(zk.log_path)})
        common = ["--zookeeper", zookeeper, "--cluster-id", cluster_id, "--zk-session-timeout", str(zk_session_timeout)]
        roles = [("jobmanager", i, ["--heartbeat-timeout", str(heartbeat_timeout),
                                    "--checkpoint-dir", os.path.join(cluster_dir, "checkpoints")])
                 for i in range(jobmanagers)]
        roles += [("taskmanager", i, ["--slots", str(slots), "--resource-id", f"taskmanager-{i}-{cluster_id[-8:]}"])
                  for i in range(taskmanagers)]
        pending = []
        for role, i, extra in roles:
            name = f"{role}-{i}"
            addr_file, log = os.path.join(run_dir, f"{name}.addr"), os.path.join(log_dir, f"{name}.log")
            _remove(addr_file)
            p = _spawn([sys.executable, "-m", role, *common, *extra, "--log-file", log, "--address-file", addr_file], log)
            started.append(p)
            pending.append((role, p, addr_file, log))
        deadline = time.monotonic() + timeout
        for role, p, addr_file, log in pending:
            while not os.path.exists(addr_file):
                if p.poll() is not None:
                    raise ClusterError(f"{role} (pid {p.pid}) exited with {p.returncode}; its log {log} ends:\n{_tail(log)}")
                if time.monotonic() > deadline:
                    raise ClusterError(f"{role} (pid {p.pid}) did not start within {timeout}s; log {log}")
                time.sleep(0.1)
            with open(addr_file) as f:
                procs.append({"role": role, "pid": p.pid, "address": f.read().strip(), "log": log})
        info = {"cluster_id": cluster_id, "zookeeper": zookeeper, "dir": cluster_dir, "processes": procs}
        write_text_atomic(os.path.join(cluster_dir, "cluster.json"), json.dumps(info, indent=2) + "\n")
        _wait_ready(info, taskmanagers, slots, deadline)
        return info
    except BaseException:
        for p in started:
            _terminate([p.pid])
        _terminate([p["pid"] for p in procs if p["role"] == "zookeeper"])
        _remove(os.path.join(cluster_dir, "cluster.json"))
        raise


def _wait_ready(info: dict, taskmanagers: int, slots: int, deadline: float) -> None:
    """Until a leader serves and sees every TaskManager with all its slots."""
    client = JobManagerClient(zookeeper=info["zookeeper"], cluster_id=info["cluster_id"], timeout=5)
    last = "no leader yet"
    try:
        while time.monotonic() < deadline:
            for p in info["processes"]:
                if not _alive(p["pid"]):
                    raise ClusterError(f"{p['role']} (pid {p['pid']}) died during start; its log {p['log']} ends:\n"
                                       f"{_tail(p['log'])}")
            try:
                overview = client.cluster()
                if len(overview.taskmanagers) >= taskmanagers and overview.total_slots >= taskmanagers * slots:
                    return
                last = f"{len(overview.taskmanagers)}/{taskmanagers} TaskManagers registered"
            except SluiceError as exc:
                last = str(exc)
            time.sleep(0.3)
    finally:
        client.close()
    raise ClusterError(f"cluster not ready in time: {last}")


def stop(cluster_dir: str, timeout: float = 15.0) -> list[dict]:
    """SIGTERM TaskManagers, then JobManagers, then ZooKeeper; SIGKILL what remains."""
    info = read_cluster_json(cluster_dir)
    by_role = {r: [p for p in info["processes"] if p["role"] == r] for r in ROLES}
    for role in ("taskmanager", "jobmanager", "zookeeper"):
        _terminate([p["pid"] for p in by_role[role]], timeout)
    os.replace(os.path.join(cluster_dir, "cluster.json"), os.path.join(cluster_dir, "cluster.json.stopped"))
    return info["processes"]


def _terminate(pids: list[int], timeout: float = 15.0) -> None:
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.send_signal(signal.SIGTERM)
            procs.append(p)
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            for child in p.children(recursive=True):
                child.kill()
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


def status(cluster_dir: str) -> dict:
    info = read_cluster_json(cluster_dir)
    rows = [{**p, "alive": _alive(p["pid"])} for p in info["processes"]]
    out = {"cluster_id": info["cluster_id"], "zookeeper": info["zookeeper"], "processes": rows,
           "leader": None, "taskmanagers_registered": 0, "total_slots": 0, "free_slots": 0}
    try:
        with JobManagerClient(zookeeper=info["zookeeper"], cluster_id=info["cluster_id"], timeout=5) as c:
            ov = c.cluster()
            out.update(leader=ov.leader, taskmanagers_registered=len(ov.taskmanagers), total_slots=ov.total_slots,
                       free_slots=ov.free_slots)
    except SluiceError as exc:
        out["error"] = str(exc)
    return out


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
