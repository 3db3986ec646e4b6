"""The supervisor of a local cluster's processes: `sluice cluster start` runs it
in the background; it restarts a JobManager, a TaskManager or the embedded
ZooKeeper that died, as Compose and Kubernetes restart a container.

A TaskManager exits when one of its tasks will not stop after a cancel
(taskmanager/task_registry.py, the cancellation watchdog) or when a job's
body kills its process (`os._exit`, a crash in native code); a JobManager or
ZooKeeper dies when someone kills it or the kernel's OOM killer picks it.
Compose and Kubernetes restart such a container (docker-compose.yml
`restart:`, the k8s StatefulSets); on one machine this process does: every
`POLL` seconds it reads cluster.json (sluice/cluster_file.py), and each
`jobmanager` or `taskmanager` entry whose process is gone is started again
with the same command (its `command`: same flags, resource id, log file and
address file), and the embedded ZooKeeper (an entry with its `data_dir`) on
its data directory and port, after a backoff that doubles from
`FIRST_BACKOFF` to `MAX_BACKOFF` while its restarts die before they are
ready (a crash loop at start) and resets once a restart is ready (its address
file written; ZooKeeper serving). A process that was ready and died later
starts again after `FIRST_BACKOFF`: deaths of working processes are bounded
where they have a cause, e.g. a job whose tasks keep losing TaskManagers fails
(`jobmanager.taskmanager-loss.max-per-job`). The new pid goes into
cluster.json at once and its address once it listens, so that `cluster stop`
ends the new process and clients see it. A restarted JobManager joins the election as a standby
(jobmanager/leader/); its ports are new ones (REST and metrics included),
which cluster.json then lists.

It logs to DIR/log/supervisor.log, holds none of its caller's pipes (its
own stdin is /dev/null), and ends on SIGTERM (`cluster stop` sends it first,
before the other processes, so nothing is restarted while the cluster stops)
or when cluster.json is gone.

    python -m sluice.cli.supervisor --dir DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

import psutil

from sluice import logs
from sluice.cluster_file import ClusterFile, ClusterFileError, ClusterFileNotFound, ProcessEntry, read_address_file
from sluice.zk.server import EmbeddedZooKeeper, ZooKeeperStartError

log = logging.getLogger("sluice.supervisor")

POLL = 0.5  # seconds between checks of the processes
FIRST_BACKOFF = 1.0  # seconds before the first restart of a process that died
MAX_BACKOFF = 60.0
COMMAND = "command"  # the cluster.json key of a process entry holding the argv that starts it again
DATA_DIR = "data_dir"  # the cluster.json key of the embedded ZooKeeper's entry: its data directory
LOG_NAME = "supervisor.log"
SUPERVISED = ("zookeeper", "jobmanager", "taskmanager")  # checked in this order
NAMES = {"zookeeper": "ZooKeeper", "jobmanager": "JobManager", "taskmanager": "TaskManager"}


@dataclasses.dataclass
class _Restarts:
    """What the supervisor knows about one process (by its log file, stable across restarts)."""

    backoff: float = dataclasses.field(default_factory=lambda: FIRST_BACKOFF)
    due: float | None = None  # when to start it again, once it was seen dead
    count: int = 0
    address_file: str | None = None  # its --address-file, waited for after a restart
    awaiting_address: bool = False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            return argv[i + 1]
    return None


class Supervisor:
    def __init__(self, cluster_dir: str) -> None:
        self.cluster_dir = os.path.abspath(cluster_dir)
        self.stopped = threading.Event()
        self._state: dict[str, _Restarts] = {}
        self._children: list[subprocess.Popen[bytes]] = []  # reaped as they end
        self._zookeepers: list[EmbeddedZooKeeper] = []  # restarted ones, reaped as they end

    def run(self) -> int:
        log.info("supervising the processes of %s (pid %d)", self.cluster_dir, os.getpid())
        while not self.stopped.is_set():
            try:
                info = ClusterFile.read(self.cluster_dir)
            except ClusterFileNotFound:
                log.info("%s is gone: the cluster stopped; supervisor exits", ClusterFile.path(self.cluster_dir))
                return 0
            except ClusterFileError as exc:  # e.g. being rewritten by hand: look again later
                log.warning("cannot read cluster.json: %s", exc)
                self.stopped.wait(POLL)
                continue
            try:
                self._check(info)
            except Exception:  # the supervisor must outlive any one failed check
                log.exception("checking the processes failed; checking again in %.1fs", POLL)
            self._reap()
            self.stopped.wait(POLL)
        log.info("supervisor stopped")
        return 0

    def _check(self, info: ClusterFile) -> None:
        now = time.monotonic()
        changed = False
        for entry in [e for role in SUPERVISED for e in info.of_role(role)]:
            command = entry.extra.get(COMMAND)
            data_dir = entry.extra.get(DATA_DIR)
            if entry.role == "zookeeper":
                if not isinstance(data_dir, str):
                    continue  # a ZooKeeper of someone else's: not ours to restart
            elif not isinstance(command, list) or not command:
                continue  # not started by `cluster start`: not ours to restart
            key = entry.log or str(command or data_dir)
            address_file = _flag_value(command, "--address-file") if command else None
            state = self._state.setdefault(key, _Restarts(address_file=address_file))
            if state.awaiting_address and self._read_address(entry, state):
                changed = True
            if _alive(entry.pid):
                continue
            if state.due is None:
                state.due = now + state.backoff
                log.warning(
                    "%s %s (pid %d, %s) is not running; restarting it in %.1fs (its log: %s)",
                    NAMES[entry.role],
                    entry.address,
                    entry.pid,
                    _name(entry),
                    state.backoff,
                    entry.log,
                )
                continue
            if now < state.due or self.stopped.is_set():
                continue
            if entry.role == "zookeeper":
                self._restart_zookeeper(entry, str(data_dir), state, now)
            else:
                self._restart(entry, [str(arg) for arg in command or ()], state)
            changed = True
        if changed:
            info.write(self.cluster_dir)

    def _restart(self, entry: ProcessEntry, command: list[str], state: _Restarts) -> None:
        if state.address_file:
            try:
                os.remove(state.address_file)
            except FileNotFoundError:
                pass
        log_path = entry.log or os.devnull
        p = logs.spawn_logged(command, log_path)
        self._children.append(p)
        self._restarted(entry, p.pid, state)
        state.awaiting_address = state.address_file is not None
        if not state.awaiting_address:
            state.backoff = FIRST_BACKOFF  # nothing to wait for: taken as ready

    def _restart_zookeeper(self, entry: ProcessEntry, data_dir: str, state: _Restarts, now: float) -> None:
        """The embedded ZooKeeper again, on its data directory and its port (every process's
        connect string names it); the sessions of the others resume if it is back within their
        timeout."""
        port = int(entry.address.rsplit(":", 1)[1])
        zk = EmbeddedZooKeeper(data_dir, port=port)
        try:
            zk.start(timeout=60)
        except ZooKeeperStartError as exc:
            state.due = now + state.backoff
            state.backoff = min(state.backoff * 2, MAX_BACKOFF)
            log.error("ZooKeeper %s did not start again: %s; trying again in %.1fs", entry.address, exc, state.backoff)
            return
        if self.stopped.is_set():  # `cluster stop` came while it started: it would find no record of it
            zk.stop()
            return
        zk.detach()  # outlives the supervisor; `cluster stop` ends it
        self._zookeepers.append(zk)
        self._restarted(entry, zk.pid or 0, state)
        state.backoff = FIRST_BACKOFF  # start() returned once it served: ready

    def _restarted(self, entry: ProcessEntry, pid: int, state: _Restarts) -> None:
        state.count += 1
        log.warning(
            "restarted %s %s as pid %d (restart %d; pid %d had ended)",
            NAMES[entry.role],
            _name(entry),
            pid,
            state.count,
            entry.pid,
        )
        entry.pid = pid  # recorded at once: `cluster stop` must find the new process
        state.due = None
        state.backoff = min(state.backoff * 2, MAX_BACKOFF)

    def _read_address(self, entry: ProcessEntry, state: _Restarts) -> bool:
        """The restarted process's address, once it listens (written to its address file)."""
        path = state.address_file
        if path is None or not os.path.exists(path):
            return False
        address, endpoints = read_address_file(path)
        if not address:
            return False
        state.awaiting_address = False
        state.backoff = FIRST_BACKOFF  # ready: a later death is not a crash loop at start
        log.info("%s %s (pid %d) listens at %s", NAMES[entry.role], _name(entry), entry.pid, address)
        entry.address = address
        entry.extra.update(endpoints)  # its new metrics port
        return True

    def _reap(self) -> None:
        self._children = [p for p in self._children if p.poll() is None]
        self._zookeepers = [z for z in self._zookeepers if z.running]


def _name(entry: ProcessEntry) -> str:
    """How the log names a process: a TaskManager's resource id, else its log file's name."""
    command = entry.extra.get(COMMAND)
    if isinstance(command, list) and (resource_id := _flag_value(command, "--resource-id")):
        return resource_id
    return os.path.splitext(os.path.basename(entry.log or ""))[0] or entry.role


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.cli.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the cluster directory (holding cluster.json)")
    args = parser.parse_args(argv)
    cluster_dir = os.path.abspath(args.dir)
    os.umask(logs.PRIVATE_UMASK)
    logs.setup("supervisor", log_file=os.path.join(cluster_dir, "log", LOG_NAME))
    supervisor = Supervisor(cluster_dir)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: supervisor.stopped.set())
    signal.signal(signal.SIGINT, lambda _signum, _frame: supervisor.stopped.set())
    return supervisor.run()


if __name__ == "__main__":
    raise SystemExit(main())
