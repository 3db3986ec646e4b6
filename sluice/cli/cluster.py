"""Local cluster launcher: `sluice cluster start|stop|status`.

Starts ZooKeeper (embedded, unless an ensemble is given), JobManagers and
TaskManagers as background processes that log to DIR/log/ and never hold
the caller's stdout/stderr, writes DIR/cluster.json (sluice/cluster_file.py),
and returns once a leader serves and every TaskManager registered with it.
Process defaults (slots, heartbeat and session timeouts) come from
sluice/config.py's OPTIONS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import psutil

from sluice import config
from sluice.client import JobManagerClient, SluiceError, read_cluster_json
from sluice.cluster_file import ClusterFile, ProcessEntry


class ClusterError(Exception):
    pass


def _spawn(args: list[str], log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        return subprocess.Popen(
            args, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True
        )


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


def running_cluster(cluster_dir: str) -> ClusterFile | None:
    try:
        info = read_cluster_json(cluster_dir)
    except SluiceError:
        return None
    return info if any(_alive(p.pid) for p in info.processes) else None


def start(
    cluster_dir: str,
    jobmanagers: int = 1,
    taskmanagers: int = 2,
    slots: int = config.TASKMANAGER_SLOTS.default,
    zookeeper: str | None = None,
    cluster_id: str | None = None,
    timeout: float = 120.0,
    heartbeat_timeout: float = config.HEARTBEAT_TIMEOUT.default,
    zk_session_timeout: float = config.ZOOKEEPER_SESSION_TIMEOUT.default,
) -> ClusterFile:
    if jobmanagers < 1 or taskmanagers < 0 or slots < 1:
        raise ClusterError("need --jobmanagers >= 1, --taskmanagers >= 0 and --slots >= 1")
    cluster_dir = os.path.abspath(cluster_dir)
    if running_cluster(cluster_dir):
        raise ClusterError(
            f"a cluster is already running in {cluster_dir}; stop it with `sluice cluster stop --dir {cluster_dir}`"
        )
    log_dir, run_dir = os.path.join(cluster_dir, "log"), os.path.join(cluster_dir, "run")
    os.makedirs(log_dir, exist_ok=True)
    os.makedirs(run_dir, exist_ok=True)
    cluster_id = cluster_id or f"cluster-{uuid.uuid4().hex[:8]}"
    procs: list[ProcessEntry] = []
    started: list[subprocess.Popen[bytes]] = []
    try:
        if zookeeper is None:
            from sluice.zk.server import EmbeddedZooKeeper

            zk = EmbeddedZooKeeper(os.path.join(cluster_dir, "zookeeper"))
            zk.start(timeout=60)
            zk.detach()  # outlives this command; `cluster stop` ends it
            zookeeper = zk.connect_string
            if zk.pid is None:
                raise ClusterError(f"the embedded ZooKeeper has no process after starting; see {zk.log_path}")
            procs.append(ProcessEntry("zookeeper", zk.pid, zookeeper, str(zk.log_path)))
        # the named flags of `python -m jobmanager|taskmanager` (sluice/config.py OPTIONS)
        common = [
            config.ZOOKEEPER_QUORUM.flag,
            zookeeper,
            config.CLUSTER_ID.flag,
            cluster_id,
            config.ZOOKEEPER_SESSION_TIMEOUT.flag,
            str(zk_session_timeout),
        ]
        roles = [
            (
                "jobmanager",
                i,
                [
                    config.HEARTBEAT_TIMEOUT.flag,
                    str(heartbeat_timeout),
                    config.CHECKPOINTS_DIR.flag,
                    os.path.join(cluster_dir, "checkpoints"),
                ],
            )
            for i in range(jobmanagers)
        ]
        roles += [
            (
                "taskmanager",
                i,
                [
                    config.TASKMANAGER_SLOTS.flag,
                    str(slots),
                    config.TASKMANAGER_RESOURCE_ID.flag,
                    f"taskmanager-{i}-{cluster_id[-8:]}",
                ],
            )
            for i in range(taskmanagers)
        ]
        pending = []
        for role, i, extra in roles:
            name = f"{role}-{i}"
            addr_file, log = os.path.join(run_dir, f"{name}.addr"), os.path.join(log_dir, f"{name}.log")
            _remove(addr_file)
            p = _spawn(
                [sys.executable, "-m", role, *common, *extra, config.LOG_FILE.flag, log, "--address-file", addr_file],
                log,
            )
            started.append(p)
            pending.append((role, p, addr_file, log))
        deadline = time.monotonic() + timeout
        for role, p, addr_file, log in pending:
            while not os.path.exists(addr_file):
                if p.poll() is not None:
                    raise ClusterError(
                        f"{role} (pid {p.pid}) exited with {p.returncode}; its log {log} ends:\n{_tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise ClusterError(f"{role} (pid {p.pid}) did not start within {timeout}s; log {log}")
                time.sleep(0.1)
            with open(addr_file) as f:
                procs.append(ProcessEntry(role, p.pid, f.read().strip(), log))
        info = ClusterFile(cluster_id, zookeeper, procs, dir=cluster_dir)
        info.write(cluster_dir)
        _wait_ready(info, taskmanagers, slots, deadline)
        return info
    except BaseException:
        for p in started:
            _terminate([p.pid])
        _terminate([z.pid for z in procs if z.role == "zookeeper"])
        _remove(ClusterFile.path(cluster_dir))
        raise


def _wait_ready(info: ClusterFile, taskmanagers: int, slots: int, deadline: float) -> None:
    """Until a leader serves and sees every TaskManager with all its slots: a wait on a
    condition with a deadline (each poll also checks that no process died), not a retry."""
    client = JobManagerClient(zookeeper=info.zookeeper, cluster_id=info.cluster_id, timeout=5)
    last = "no leader yet"
    try:
        while time.monotonic() < deadline:
            for p in info.processes:
                if not _alive(p.pid):
                    raise ClusterError(
                        f"{p.role} (pid {p.pid}) died during start; its log {p.log} ends:\n{_tail(p.log or '')}"
                    )
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


def stop(cluster_dir: str, timeout: float = 15.0) -> list[ProcessEntry]:
    """SIGTERM TaskManagers, then JobManagers, then ZooKeeper; SIGKILL what remains."""
    info = read_cluster_json(cluster_dir)
    for role in ("taskmanager", "jobmanager", "zookeeper"):
        _terminate([p.pid for p in info.of_role(role)], timeout)
    path = ClusterFile.path(cluster_dir)
    os.replace(path, path + ".stopped")
    return info.processes


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


def status(cluster_dir: str) -> dict[str, Any]:
    """The `cluster status --json` object: cluster.json's processes, each with `alive`, and the leader's view."""
    info = read_cluster_json(cluster_dir)
    rows = [{**p.to_json(), "alive": _alive(p.pid)} for p in info.processes]
    out: dict[str, Any] = {
        "cluster_id": info.cluster_id,
        "zookeeper": info.zookeeper,
        "processes": rows,
        "leader": None,
        "taskmanagers_registered": 0,
        "total_slots": 0,
        "free_slots": 0,
    }
    try:
        with JobManagerClient(zookeeper=info.zookeeper, cluster_id=info.cluster_id, timeout=5) as c:
            ov = c.cluster()
            out.update(
                leader=ov.leader,
                taskmanagers_registered=len(ov.taskmanagers),
                total_slots=ov.total_slots,
                free_slots=ov.free_slots,
            )
    except SluiceError as exc:
        out["error"] = str(exc)
    return out


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
