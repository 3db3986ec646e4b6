"""The Spark that `sluice cluster start --spark standalone|connect` runs beside a
local cluster: a standalone master and its worker(s), or a Spark Connect
server, started from pyspark's own `bin/spark-class` (argv, environment and
readiness lines: sluice/cli/spark_plan.py) before the TaskManagers, which then
get `--spark-master spark://...` or `--spark-remote sc://...`.

Each process runs in its own session with stdin /dev/null and stdout/stderr
to its log file in DIR/log/ (Spark's own log4j output included), so it never
holds the caller's pipes. Start waits, with a deadline, for the log line that
says the process serves (it also names the port the kernel gave it) and fails
with the log file's name and tail if the process exits or the deadline
passes. The entries go to cluster.json (roles spark-master, spark-worker,
spark-connect, with `url` and, for master and worker, `ui`); `cluster stop`
ends them after the TaskManagers, and with a worker any executor JVM it still
has.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from sluice.cli import spark_plan
from sluice.cluster_file import ProcessEntry
from sluice.logs import tail

log = logging.getLogger("sluice.cli.spark")

ROLES = ("spark-connect", "spark-worker", "spark-master")  # the order `cluster stop` ends them in
EXECUTOR_MEMORY_MB = 1024  # spark.executor.memory the TaskManagers ask for (taskmanager/spark_engine.py)


class SparkStartError(Exception):
    pass


@dataclass
class SparkStarted:
    mode: str
    url: str | None = None  # what the TaskManagers connect to
    processes: list[ProcessEntry] = field(default_factory=list)


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def start(mode: str, cluster_dir: str, log_dir: str, cores: int, taskmanagers: int, timeout: float) -> SparkStarted:
    """Start the Spark of `mode` (nothing for local); on any failure stop what was started."""
    spark_plan.check_mode(mode)
    out = SparkStarted(mode)
    if mode == "local":
        return out
    deadline = time.monotonic() + timeout
    home, python = spark_home(), sys.executable
    scratch = os.path.join(cluster_dir, "spark-scratch")  # the Spark processes' scratch files (spark_plan.base_env)
    os.makedirs(scratch, exist_ok=True)
    try:
        if mode == "standalone":
            m = _launch(spark_plan.master(home, log_dir, python, scratch), log_dir)
            out.processes.append(m)
            url = _wait_for(m, spark_plan.master_url, deadline, "the Spark master to serve")
            m.address, m.extra["url"] = spark_plan.host_port(url), url
            _record_ui(m)
            work_dir = os.path.join(cluster_dir, "spark-work")
            os.makedirs(work_dir, exist_ok=True)
            memory = EXECUTOR_MEMORY_MB * max(1, taskmanagers) + 512
            plan = spark_plan.worker(home, log_dir, python, url, 0, max(1, cores), memory, work_dir, scratch)
            w = _launch(plan, log_dir)
            out.processes.append(w)
            _wait_for(
                w,
                lambda text: url if spark_plan.worker_registered(text, url) else None,
                deadline,
                "the Spark worker to register with the master",
            )
            w.address, w.extra["url"] = spark_plan.worker_address(_read(w.log or "")) or "", url
            _record_ui(w)
            out.url = url
        else:
            c = _launch(spark_plan.connect_server(home, log_dir, python, max(1, cores), scratch_dir=scratch), log_dir)
            out.processes.append(c)
            url = _wait_for(c, spark_plan.connect_url, deadline, "the Spark Connect server to listen")
            c.address, c.extra["url"] = spark_plan.host_port(url), url
            out.url = url
    except BaseException:
        stop(out.processes)
        raise
    return out


def _launch(launch: spark_plan.Launch, log_dir: str) -> ProcessEntry:
    path = os.path.join(log_dir, launch.log_name)
    with open(path, "ab") as logf, open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(
            launch.argv,
            stdin=devnull,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=spark_plan.merged_env(os.environ, launch),
        )
    log.info("started %s (pid %d), log %s", launch.role, p.pid, path)
    entry = ProcessEntry(launch.role, p.pid, "", path)
    entry.extra["_popen"] = p  # reaped by stop; dropped before cluster.json is written
    return entry


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _wait_for(entry: ProcessEntry, parse: Callable[[str], str | None], deadline: float, what: str) -> str:
    popen: subprocess.Popen[bytes] = entry.extra["_popen"]
    path = entry.log or ""
    while True:
        found = parse(_read(path))
        if found:
            return str(found)
        if popen.poll() is not None:
            raise SparkStartError(
                f"{entry.role} (pid {entry.pid}) exited with {popen.returncode} before {what}; "
                f"its log {path} ends:\n{tail(path)}"
            )
        if time.monotonic() > deadline:
            raise SparkStartError(f"timed out waiting for {what} (pid {entry.pid}); see its log {path}:\n{tail(path)}")
        time.sleep(0.2)


def _record_ui(entry: ProcessEntry) -> None:
    port = spark_plan.ui_port(_read(entry.log or ""))
    if port is not None:
        entry.extra["ui"] = f"{spark_plan.HOST}:{port}"


def public(entries: list[ProcessEntry]) -> list[ProcessEntry]:
    """The entries as cluster.json holds them (without the Popen handles)."""
    return [
        ProcessEntry(e.role, e.pid, e.address, e.log, {k: v for k, v in e.extra.items() if k != "_popen"})
        for e in entries
    ]


def stop(entries: list[ProcessEntry], timeout: float = 15.0) -> None:
    """SIGTERM each Spark process (Connect server, workers, master, in that order), then SIGKILL
    what remains of it and of its children: a worker's executor JVMs and their Python workers."""
    for role in ROLES:
        procs: list[psutil.Process] = []
        children: list[psutil.Process] = []
        for e in entries:
            if e.role != role:
                continue
            try:
                p = psutil.Process(e.pid)
                children += p.children(recursive=True)
                p.send_signal(signal.SIGTERM)
                procs.append(p)
            except psutil.NoSuchProcess:
                pass
        _gone, alive = psutil.wait_procs(procs, timeout=timeout)
        for p in alive:
            _kill(p)
        psutil.wait_procs(alive, timeout=5)
        _gone, alive = psutil.wait_procs(children, timeout=5)
        for p in alive:
            _kill(p)
        psutil.wait_procs(alive, timeout=5)
    for e in entries:  # reap the children this process started, if it did
        popen = e.extra.get("_popen")
        if isinstance(popen, subprocess.Popen):
            try:
                popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _kill(p: psutil.Process) -> None:
    try:
        p.kill()
    except psutil.NoSuchProcess:
        pass
