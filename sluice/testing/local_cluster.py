"""A local Sluice cluster for integration tests and benchmarks, started, driven and stopped
through the `sluice` CLI exactly as a user would (`cluster start`, `run --detach`, `cancel`,
`cluster stop`), and torn down with nothing left behind.

One driver for the test harness (tests/integration/harness.py) and every benchmark under bench/:
it reads cluster.json only through ClusterFile, keeps one client for its polls, waits for the
cluster to be whole again after a kill (the supervisor restarts what died), crashes it on
purpose, and after `cluster stop` kills whatever of its processes (and their Spark JVMs)
survived, naming them. A `checkout` runs another copy of the code: the CLI is started with
`python -m sluice.cli` in that directory, which Python puts first on the path, and the
processes the CLI starts inherit it (bench/before_after.py runs two commits side by side)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self, TypeVar

import psutil

from sluice.cli.status import job_dict
from sluice.client import JobManagerClient, SluiceError
from sluice.cluster_file import ClusterFile
from sluice.states import JobStatus, from_proto

T = TypeVar("T")
C = TypeVar("C", bound="LocalCluster")

SLUICE_CLI = (sys.executable, "-m", "sluice.cli")
ENDED = ("FINISHED", "FAILED", "CANCELED")
SUPERVISED = ("zookeeper", "jobmanager", "taskmanager")  # the roles sluice/cli/supervisor.py restarts


class CliError(Exception):
    """A `sluice` command exited non-zero; the message holds its arguments, code and output."""


def run_cli(
    *args: str, timeout: float = 300, check: bool = True, cwd: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`sluice ARGS` in a child process, its output captured (`cluster start` leaves no process
    holding these pipes, so this never hangs on a background process). Interrupted (Ctrl-C,
    SIGTERM, the timeout) the CLI gets SIGINT first, so that it cleans up after itself (`cluster
    start` stops what it started), and SIGKILL a minute later. `check`: raise CliError on a
    non-zero exit; `env`: the child's whole environment (this process's by default)."""
    child = subprocess.Popen(
        [*SLUICE_CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=env,
    )
    try:
        out, err = child.communicate(timeout=timeout)
    except BaseException:
        child.send_signal(signal.SIGINT)
        try:
            child.communicate(timeout=60)
        except BaseException:  # noqa: BLE001 - even on ^C or a timeout the child is killed before re-raising
            child.kill()
            child.wait()
        raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    if check and proc.returncode != 0:
        raise CliError(f"sluice {' '.join(args)} exited {proc.returncode}:\n{out}\n{err}")
    return proc


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def address_recorded(entry: dict[str, Any]) -> bool:
    """Whether cluster.json holds the address the process wrote to its --address-file (the
    supervisor records a restarted process's address once it listens)."""
    command = entry.get("command") or []
    if "--address-file" not in command[:-1]:
        return True
    path = command[command.index("--address-file") + 1]
    try:
        with open(path) as f:
            return f.readline().strip() == entry["address"]
    except OSError:
        return False


def kill_all(procs: list[psutil.Process], timeout: float = 15) -> list[int]:
    """SIGKILL every one of `procs` still running and wait for them; the pids that were running."""
    killed = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                killed.append(p.pid)
                p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=timeout)
    return killed


class LocalCluster:
    """`sluice cluster start --dir DIRECTORY` with these flags; `start()` runs it, `stop()` ends it.

    `options` are process options (`-D key=value`), `extra_args` any further `cluster start` flags,
    `checkout` the directory the CLI runs from (see the module docstring), `env` the environment of
    the CLI and so of the processes it starts."""

    cli: Callable[..., subprocess.CompletedProcess[str]] = staticmethod(run_cli)

    def __init__(
        self,
        directory: Any,
        taskmanagers: int = 2,
        slots: int = 2,
        *,
        jobmanagers: int = 1,
        zookeeper: str | None = None,
        cluster_id: str | None = None,
        zk_session_timeout: float | None = None,
        insecure: bool = False,
        options: dict[str, str] | None = None,
        spark: str = "local",
        extra_args: tuple[str, ...] = (),
        checkout: str | None = None,
        env: dict[str, str] | None = None,
    ):
        self.dir = str(directory)
        self.taskmanagers, self.slots, self.jobmanagers = taskmanagers, slots, jobmanagers
        self.zookeeper, self.cluster_id, self.zk_session_timeout = zookeeper, cluster_id, zk_session_timeout
        self.insecure, self.spark = insecure, spark
        self.options = dict(options or {})
        self.extra_args = tuple(extra_args)
        self.checkout, self.env = checkout, env
        self.info: dict[str, Any] = {}  # cluster.json, as read last
        self.descendants: dict[int, psutil.Process] = {}  # the processes' children seen (Spark JVMs)
        self._poller: JobManagerClient | None = None  # see polled()
        self._poller_stamp: int | None = None  # cluster.json's mtime when the poller was made

    # -- start and cluster.json -----------------------------------------------------------------
    def start_args(self) -> list[str]:
        args = ["cluster", "start", "--dir", self.dir, "--taskmanagers", str(self.taskmanagers)]
        args += ["--slots", str(self.slots), "--jobmanagers", str(self.jobmanagers)]
        if self.zk_session_timeout:
            args += ["--zk-session-timeout", str(self.zk_session_timeout)]
        if self.zookeeper:
            args += ["--zookeeper", self.zookeeper]
        if self.cluster_id:
            args += ["--cluster-id", self.cluster_id]
        for key, value in self.options.items():
            args += ["-D", f"{key}={value}"]
        if self.insecure:
            args += ["--insecure"]
        if self.spark != "local":
            args += ["--spark", self.spark]
        return [*args, *self.extra_args]

    def start(self, timeout: float = 300) -> Self:
        """`sluice cluster start` (on a crashed cluster's directory it resumes that cluster)."""
        try:
            self.sluice(*self.start_args(), timeout=timeout)
        finally:
            if os.path.exists(ClusterFile.path(self.dir)):
                self.refresh()
                self.remember_children()
        return self

    def sluice(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """One CLI command from this cluster's checkout, in its environment (`cli`: run_cli's arguments)."""
        return type(self).cli(*args, timeout=timeout, check=check, cwd=self.checkout, env=self.env)

    def refresh(self) -> dict[str, Any]:
        """Read cluster.json again (the supervisor records there the pid and address of a process it
        restarted, so that lookups and `cluster stop` find the new one)."""
        self.info = ClusterFile.read(self.dir).to_json()
        return self.info

    def remember_children(self) -> None:
        """Note the children of the cluster's processes (a TaskManager's Spark JVM), for stop()."""
        for pid in self.pids:
            try:
                for child in psutil.Process(pid).children(recursive=True):
                    self.descendants[child.pid] = child
            except psutil.NoSuchProcess:
                pass

    @property
    def pids(self) -> list[int]:
        """The pid of every process cluster.json names."""
        return [p["pid"] for p in self.info.get("processes", [])]

    def role_pids(self, role: str) -> list[int]:
        return [p["pid"] for p in self.info["processes"] if p["role"] == role]

    def pid_of(self, role: str, index: int = 0) -> int:
        return self.role_pids(role)[index]

    def addresses(self, role: str) -> list[str]:
        return [p["address"] for p in self.info["processes"] if p["role"] == role]

    def taskmanager_pid(self, address: str) -> int:
        for p in self.info["processes"]:
            if p["address"] == address:
                return p["pid"]
        raise LookupError(f"no TaskManager at {address} in {ClusterFile.path(self.dir)}: {self.info['processes']}")

    # -- clients and jobs -----------------------------------------------------------------------
    def client(self) -> JobManagerClient:
        """A new client from cluster.json (the leader's address, ZooKeeper credentials, TLS files)."""
        return JobManagerClient.from_context({"cluster_dir": self.dir})

    def polled(self, call: Callable[[JobManagerClient], T]) -> T:
        """`call(client)` on one client kept for this cluster's polls: a new client per poll looks
        the leader up in ZooKeeper and opens a TLS channel, ~11 ms of this process's CPU plus the
        JobManager's and ZooKeeper's. The kept client follows a failover as any client does; it is
        replaced after an error and whenever cluster.json changed (a cluster started again has new
        addresses and ZooKeeper)."""
        try:
            stamp: int | None = os.stat(ClusterFile.path(self.dir)).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp != self._poller_stamp:
            self.close_poller()
        if self._poller is None:
            self._poller, self._poller_stamp = self.client(), stamp
        try:
            return call(self._poller)
        except BaseException:
            self.close_poller()
            raise

    def close_poller(self) -> None:
        if self._poller is not None:
            try:
                self._poller.close()
            except Exception:  # noqa: BLE001 - closing a client whose server is gone
                pass
            self._poller = None

    def job(self, job_id: str) -> Any:
        """The job's JobInfo message."""
        return self.polled(lambda client: client.get(job_id))

    def status(self, job_id: str) -> dict[str, Any]:
        """The job's `sluice status JOB --json` object, rendered by the CLI's own code in this
        process (a CLI process per poll costs ~0.4 s of CPU)."""
        return job_dict(self.job(job_id))

    def overview(self) -> Any:
        """The leader's ClusterOverview (TaskManagers, total and free slots)."""
        return self.polled(lambda client: client.cluster())

    def run(
        self,
        jobfile: str,
        *job_args: str,
        parallelism: int | None = None,
        options: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> str:
        """`sluice run JOBFILE --detach` (`options`: job options, -D each); the job id it printed last."""
        args = ["run", jobfile, "--detach", "--cluster-dir", self.dir]
        args += [arg for key, value in (options or {}).items() for arg in ("-D", f"{key}={value}")]
        if parallelism:
            args += ["--parallelism", str(parallelism)]
        out = self.sluice(*args, "--", *job_args, timeout=timeout).stdout.strip().splitlines()
        return out[-1].strip()

    def cancel(self, job_id: str) -> None:
        """Ask the leader to cancel the job (nothing when it has ended already)."""
        try:
            self.polled(lambda client: client.cancel(job_id))
        except SluiceError:
            pass

    def cancel_running(self, timeout: float = 60) -> list[str]:
        """Cancel every job that has not ended and wait until each did; the ids cancelled."""
        jobs = self.polled(lambda client: client.list())
        running = [j.job_id for j in jobs if from_proto(JobStatus, j.state) not in ENDED]
        for job_id in running:
            self.cancel(job_id)
        deadline = time.monotonic() + timeout
        for job_id in running:
            while self.status(job_id)["state"] not in ENDED:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} did not end within {timeout:g}s of its cancel")
                time.sleep(0.2)
        return running

    # -- faults and recovery --------------------------------------------------------------------
    def whole(self) -> str | None:
        """None once the cluster has the shape it started with: every supervised process running
        with its address recorded, a leader, every TaskManager registered with every slot free;
        otherwise what is missing."""
        self.refresh()
        for p in self.info["processes"]:
            if p["role"] in SUPERVISED and not (alive(p["pid"]) and address_recorded(p)):
                return f"{p['role']} {p['pid']} not running yet (its supervisor restarts it)"
        try:
            ov = self.overview()
        except Exception as exc:  # noqa: BLE001 - a leader that is not serving yet: ask again
            return f"no leader serving: {str(exc)[:200]}"
        total = self.taskmanagers * self.slots
        if len(ov.taskmanagers) == self.taskmanagers and ov.total_slots == total == ov.free_slots:
            return None
        return f"{len(ov.taskmanagers)}/{self.taskmanagers} TaskManagers, {ov.free_slots}/{total} slots free"

    def wait_whole(self, timeout: float = 240) -> None:
        """Until whole() holds; TimeoutError naming what is missing after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (missing := self.whole()) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster {self.dir} not whole within {timeout:g}s: {missing}")
            time.sleep(0.5)

    def crash(self, keep_zookeeper: bool = True) -> list[int]:
        """SIGKILL every process of the cluster at once, with their Spark JVMs (the supervisor
        first, so it restarts nothing), as a machine's crash would; the embedded ZooKeeper too unless
        kept. `start()` on the same directory then resumes the cluster. The pids killed."""
        procs = []
        for p in sorted(self.info["processes"], key=lambda p: p["role"] != "supervisor"):
            if keep_zookeeper and p["role"] == "zookeeper":
                continue
            try:
                proc = psutil.Process(p["pid"])
                procs += [proc, *proc.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        self.close_poller()
        self.descendants.clear()
        return kill_all(procs)

    # -- stop -----------------------------------------------------------------------------------
    def stop(self) -> list[int]:
        """`sluice cluster stop`, then SIGKILL whatever of this cluster survived it: the processes
        cluster.json named, their children, and any process whose command line holds this
        directory (a `cluster start` cut short). The pids of those named by cluster.json or found by
        directory that had to be killed: none, normally (children still exiting are killed silently:
        a Spark JVM ends a moment after its TaskManager)."""
        self.close_poller()
        roots: list[psutil.Process] = []
        if os.path.exists(ClusterFile.path(self.dir)):
            self.refresh()
            self.remember_children()
            roots = list(self._processes(self.pids))
            try:
                proc = self.sluice("cluster", "stop", "--dir", self.dir, timeout=180, check=False)
                if proc.returncode != 0:
                    print(f"cluster stop exited {proc.returncode}: {proc.stderr.strip()[-500:]}", file=sys.stderr)
            except subprocess.TimeoutExpired:
                pass
        leftovers = kill_all(roots)
        kill_all(list(self.descendants.values()))
        self.descendants.clear()
        self.info = {}
        return leftovers + self._stop_strays()

    @staticmethod
    def _processes(pids: list[int]) -> Iterator[psutil.Process]:
        for pid in pids:
            try:
                yield psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass

    def _stop_strays(self) -> list[int]:
        """Processes whose command line holds this cluster's directory: SIGTERM, then SIGKILL with
        their children after 15 s."""
        me = os.getpid()
        strays = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if p.pid != me and any(a == self.dir or self.dir + os.sep in a for a in (p.info["cmdline"] or [])):
                    strays.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        children = []
        for p in strays:
            try:
                children += p.children(recursive=True)
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _gone, still = psutil.wait_procs(strays, timeout=15)
        kill_all(still + children, timeout=10)
        return [p.pid for p in strays]


@contextmanager
def running(cluster: C) -> Iterator[C]:
    """`cluster` started, and stopped on exit even when the start or the body failed."""
    try:
        yield cluster.start()
    finally:
        cluster.stop()
