"""A local Sluice cluster for integration tests, driven through the `sluice`
CLI exactly as a user would, and torn down with nothing left behind."""

from __future__ import annotations

import collections
import contextlib
import csv
import glob
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
from kazoo.client import KazooClient

from sluice.client import JobManagerClient
from sluice.zk.auth import cluster_client

SLUICE = [sys.executable, "-m", "sluice.cli"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")


def sluice(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run the CLI capturing its output (a background process holding our pipes would hang this)."""
    proc = subprocess.run(
        [*SLUICE, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"sluice {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


class LocalCluster:
    def __init__(
        self,
        directory: str,
        taskmanagers: int = 2,
        slots: int = 2,
        zookeeper: str | None = None,
        cluster_id: str | None = None,
        jobmanagers: int = 1,
        zk_session_timeout: float | None = None,
        insecure: bool = False,
        options: dict[str, str] | None = None,
        spark: str = "local",
    ):
        self.options = options or {}  # process options: `cluster start -D key=value`
        self.spark = spark  # `cluster start --spark local|standalone|connect`
        self.dir = str(directory)
        self.insecure = insecure  # `cluster start --insecure`: plaintext, no certificates
        self.jobmanagers, self.zk_session_timeout = jobmanagers, zk_session_timeout
        self.taskmanagers, self.slots = taskmanagers, slots
        self.zookeeper, self.cluster_id = zookeeper, cluster_id
        self.info: dict = {}
        self.extra: list[subprocess.Popen] = []

    def start(self) -> LocalCluster:
        args = [
            "cluster",
            "start",
            "--dir",
            self.dir,
            "--taskmanagers",
            str(self.taskmanagers),
            "--slots",
            str(self.slots),
            "--jobmanagers",
            str(self.jobmanagers),
        ]
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
        try:
            sluice(*args, timeout=300)
        finally:
            path = os.path.join(self.dir, "cluster.json")
            if os.path.exists(path):
                with open(path) as f:
                    self.info = json.load(f)
        return self

    @property
    def pids(self) -> list[int]:
        return [p["pid"] for p in self.info.get("processes", [])] + [p.pid for p in self.extra]

    def addresses(self, role: str) -> list[str]:
        return [p["address"] for p in self.info["processes"] if p["role"] == role]

    def pid_of(self, role: str, index: int = 0) -> int:
        return [p["pid"] for p in self.info["processes"] if p["role"] == role][index]

    def replace_process(self, role: str, pid: int, address: str) -> None:
        """A process of `role` was restarted by the test: record it in cluster.json too, so
        that `cluster stop` ends the new one."""
        for p in self.info["processes"]:
            if p["role"] == role:
                p["pid"], p["address"] = pid, address
        path = os.path.join(self.dir, "cluster.json")
        with open(path, "w") as f:
            json.dump(self.info, f, indent=2)

    def zk_client(self) -> KazooClient:
        """A started kazoo client with the cluster's ZooKeeper credentials; stop and close it."""
        client = cluster_client(self.info["zookeeper"], self.info.get("zookeeper_auth_file"))
        client.start(timeout=15)
        return client

    def tls(self, stem: str = "client"):
        """The sluice.security.tls.TlsFiles of one of the cluster's parties in DIR/tls (`client`,
        `jobmanager-0`, `taskmanager-1`, ...) for rpc.channel; None for an --insecure cluster."""
        if "tls" not in self.info:
            return None
        from sluice.security.tls import TlsFiles

        directory = os.path.dirname(self.info["tls"]["ca"])
        return TlsFiles(self.info["tls"]["ca"], f"{directory}/{stem}.pem", f"{directory}/{stem}.key")

    def process_security(self, name: str) -> list[str]:
        """The flags that let one more process named `name` join: a TaskManager certificate from
        the cluster's CA (DIR/tls), or --insecure for a plaintext cluster."""
        if "tls" not in self.info:
            return ["--insecure"]
        from sluice.security.identity import Role
        from sluice.security.tls import issue_from

        files = issue_from(os.path.dirname(self.info["tls"]["ca"]), Role.TASKMANAGER, name)
        return ["--tls-ca", files.ca, "--tls-cert", str(files.cert), "--tls-key", str(files.key)]

    def client(self) -> JobManagerClient:
        return JobManagerClient.from_context({"cluster_dir": self.dir})

    def run(self, jobfile: str, *job_args: str, parallelism: int | None = None) -> str:
        """Submit detached through the CLI; returns the job id (the last line)."""
        args = ["run", jobfile, "--detach", "--cluster-dir", self.dir]
        if parallelism:
            args += ["--parallelism", str(parallelism)]
        out = sluice(*args, "--", *job_args).stdout.strip().splitlines()
        return out[-1].strip()

    def run_page_views(self, work: Any, *job_args: str, parallelism: int = 2) -> str:
        """Submit the reference job (examples/page_views.py) reading `work`/in and writing
        `work`/out, detached; returns the job id."""
        page_views = os.path.join(EXAMPLES, "page_views.py")
        inputs, outputs = os.path.join(work, "in"), os.path.join(work, "out")
        return self.run(page_views, "--input", inputs, "--output", outputs, *job_args, parallelism=parallelism)

    def status(self, job_id: str) -> dict:
        return json.loads(sluice("status", job_id, "--json", "--cluster-dir", self.dir).stdout)

    def start_taskmanager(self, slots: int, log_name: str) -> subprocess.Popen:
        log = os.path.join(self.dir, "log", log_name)
        with open(log, "ab") as out:
            p = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "taskmanager",
                    "--zookeeper",
                    self.info["zookeeper"],
                    "--cluster-id",
                    self.info["cluster_id"],
                    "--slots",
                    str(slots),
                    "--log-file",
                    log,
                    *(
                        ["--zk-auth-file", self.info["zookeeper_auth_file"]]
                        if "zookeeper_auth_file" in self.info
                        else []
                    ),
                    *self.process_security(os.path.splitext(log_name)[0]),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.extra.append(p)
        return p

    def stop(self) -> None:
        """`sluice cluster stop`, then make sure: no process of ours survives."""
        pids = self.pids
        try:
            if self.info:
                sluice("cluster", "stop", "--dir", self.dir, timeout=120, check=False)
        finally:
            for p in self.extra:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in self.extra:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            leftovers = []
            for pid in pids:
                try:
                    proc = psutil.Process(pid)
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        leftovers.append(pid)
                        for child in proc.children(recursive=True):
                            child.kill()
                        proc.kill()
                except psutil.NoSuchProcess:
                    pass
            assert not leftovers, f"processes left behind after cluster stop: {leftovers}"


@contextlib.contextmanager
def running_cluster(directory: str, **kwargs: Any) -> Iterator[LocalCluster]:
    """A started LocalCluster (keyword arguments as LocalCluster's), stopped on exit even when
    the start or a test fails: the body of a module-scoped `cluster` fixture."""
    c = LocalCluster(directory, **kwargs)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def taskmanager_log_lines(cluster_dir: str, *needles: str) -> list[str]:
    """The lines of the cluster's TaskManager logs that contain every one of `needles`."""
    found = []
    for log in sorted(glob.glob(os.path.join(cluster_dir, "log", "taskmanager-*.log"))):
        with open(log, errors="replace") as f:
            found += [line for line in f if all(n in line for n in needles)]
    return found


def kill_process_tree(pid: int) -> None:
    """kill -9 a process (a TaskManager), then wait for its children (its Spark JVM follows it)."""
    proc = psutil.Process(pid)
    children = proc.children(recursive=True)
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([proc], timeout=10)
    for child in children:
        try:
            child.wait(30)
        except psutil.TimeoutExpired:
            child.kill()


def read_counts(output_dir: str) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """Committed `url,count` lines (hidden files skipped): final count per url and all lines."""
    lines: list[tuple[str, int]] = []
    for path in sorted(glob.glob(os.path.join(output_dir, "*"))):
        name = os.path.basename(path)
        if name.startswith((".", "_")) or os.path.isdir(path):
            continue
        with open(path, newline="") as f:
            for row in csv.reader(f):
                lines.append((row[0], int(row[1])))
    final: dict[str, int] = collections.defaultdict(int)
    for url, count in lines:
        final[url] = max(final[url], count)
    return dict(final), lines


def assert_update_stream(lines: list[tuple[str, int]]) -> None:
    """No (url, count) line twice: each count of a url is written once."""
    seen = collections.Counter(lines)
    dups = [k for k, n in seen.items() if n > 1]
    assert not dups, f"{len(dups)} duplicated lines, e.g. {dups[:5]}"


def assert_monotone_updates(lines: list[tuple[str, int]]) -> None:
    """Each url's counts rise strictly in file-name (commit) order: no line twice, none back."""
    last: dict[str, int] = {}
    down = []
    for url, count in lines:
        if count <= last.get(url, 0):
            down.append((url, last[url], count))
        last[url] = count
    assert not down, f"{len(down)} updates not above the url's previous one, e.g. {down[:5]}"


def sqlite_table(db, sql: str = "SELECT url, count FROM page_views") -> dict:
    """A SQLite sink's committed table as {key: value} (what a reader of the database sees)."""
    import sqlite3

    if not os.path.exists(db):
        return {}
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute(sql))
    except sqlite3.OperationalError:  # the table is created with the first commit
        return {}
    finally:
        conn.close()
