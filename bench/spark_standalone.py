"""A real multi-process Spark for the benchmarks: a standalone master and workers started from
pyspark's own `$SPARK_HOME/bin/spark-class` (SPARK_HOME = pyspark's install directory), on
loopback with free ports, each in its own process group, logging to files.

    with SparkStandalone(workdir, workers=2, cores=2, memory="2g") as spark:
        spark.master_url          # spark://127.0.0.1:<port>, for a driver's .master(...)
        spark.executors()         # the CoarseGrainedExecutorBackend JVMs the workers run now
        spark.pids()              # master, workers (and, as their descendants, executors)

`stop()` (also on `__exit__`) sends SIGTERM to every process group it started, then SIGKILL to
whatever is left, executors and their Python workers included; nothing survives it.

    python bench/spark_standalone.py [--workers 2] [--cores 2] [--seconds 5]   # start, show, stop
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

import psutil

LOOPBACK = "127.0.0.1"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
MASTER_READY = re.compile(r"I have been elected leader|New state: ALIVE")
WORKER_READY = re.compile(r"Successfully registered with master")
_EXECUTOR_ID = re.compile(r"--executor-id\s+(\S+)")
_APP_ID = re.compile(r"--app-id\s+(\S+)")


class SparkStandaloneError(Exception):
    pass


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Executor:
    pid: int
    executor_id: str | None
    app_id: str | None
    worker_pid: int


def parse_executor(cmdline: list[str]) -> tuple[str | None, str | None] | None:
    """(executor id, app id) of a CoarseGrainedExecutorBackend command line; None for another process."""
    text = " ".join(cmdline)
    if EXECUTOR_CLASS not in text:
        return None
    eid, app = _EXECUTOR_ID.search(text), _APP_ID.search(text)
    return (eid.group(1) if eid else None, app.group(1) if app else None)


class SparkStandalone:
    def __init__(self, workdir: str, workers: int = 2, cores: int = 2, memory: str = "2g", log=print):
        self.workdir = os.path.abspath(workdir)
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.log = log
        self.home = spark_home()
        self.master_port = 0
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._logs: list = []

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=self.home,
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_NO_DAEMONIZE="1",
            SPARK_LOG_DIR=os.path.join(self.workdir, "log"),
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        os.makedirs(os.path.join(self.workdir, "log"), exist_ok=True)
        logf = open(os.path.join(self.workdir, "log", f"{name}.log"), "ab")
        self._logs.append(logf)
        return subprocess.Popen(
            [os.path.join(self.home, "bin", "spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=self.workdir,
            start_new_session=True,  # its own process group: stop() ends it with its executors
            close_fds=True,
        )

    def log_path(self, name: str) -> str:
        return os.path.join(self.workdir, "log", f"{name}.log")

    def _wait_log(self, name: str, proc: subprocess.Popen, pattern: re.Pattern, deadline: float) -> None:
        path = self.log_path(name)
        while True:
            try:
                with open(path, errors="replace") as f:
                    if pattern.search(f.read()):
                        return
            except FileNotFoundError:
                pass
            if proc.poll() is not None:
                raise SparkStandaloneError(f"spark {name} exited {proc.returncode}; see {path}:\n{_tail(path)}")
            if time.monotonic() > deadline:
                raise SparkStandaloneError(f"spark {name} not ready in time; see {path}:\n{_tail(path)}")
            time.sleep(0.2)

    def start(self, timeout: float = 120) -> SparkStandalone:
        t0 = time.monotonic()
        deadline = t0 + timeout
        try:
            self.master_port = free_port()
            self.master = self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    str(free_port()),
                ],
            )
            self._wait_log("master", self.master, MASTER_READY, deadline)
            for i in range(self.n_workers):
                work = os.path.join(self.workdir, f"worker-{i}")
                os.makedirs(work, exist_ok=True)
                self.workers.append(
                    self._spawn(
                        f"worker-{i}",
                        [
                            "org.apache.spark.deploy.worker.Worker",
                            "--host",
                            LOOPBACK,
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--webui-port",
                            str(free_port()),
                            "--work-dir",
                            work,
                            self.master_url,
                        ],
                    )
                )
            for i, w in enumerate(self.workers):
                self._wait_log(f"worker-{i}", w, WORKER_READY, deadline)
        except BaseException:
            self.stop()
            raise
        self.log(
            f"Spark standalone at {self.master_url}: {self.n_workers} workers x {self.cores} cores "
            f"ready in {time.monotonic() - t0:.1f}s (logs in {self.workdir}/log)"
        )
        return self

    def pids(self) -> list[int]:
        """The master's and the workers' pids (executors are the workers' descendants)."""
        return [p.pid for p in [self.master, *self.workers] if p is not None and p.poll() is None]

    def executors(self) -> list[Executor]:
        """The executor JVMs running now, by worker, oldest first."""
        found = []
        for w in self.workers:
            try:
                children = psutil.Process(w.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            for c in children:
                try:
                    parsed = parse_executor(c.cmdline())
                    if parsed is not None and c.status() != psutil.STATUS_ZOMBIE:
                        found.append((c.create_time(), Executor(c.pid, parsed[0], parsed[1], w.pid)))
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
        return [e for _, e in sorted(found, key=lambda x: x[0])]

    def stop(self) -> None:
        procs = [p for p in [*self.workers, self.master] if p is not None]
        for p in procs:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:  # the group: executors and their Python workers too
            _signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                self.log(f"warning: spark process {p.pid} still alive after SIGKILL")
        for f in self._logs:
            f.close()
        self._logs = []
        self.master, self.workers = None, []

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-standalone-") as work:
        with SparkStandalone(work, args.workers, args.cores) as spark:
            print(spark.master_url, spark.pids())
            time.sleep(args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
