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
from helpers import wait_until
from kazoo.client import KazooClient

from sluice import testing
from sluice.cluster_file import ClusterFile
from sluice.testing.local_cluster import ENDED, CliError, run_cli
from sluice.zk.auth import cluster_client

SLUICE = [sys.executable, "-m", "sluice.cli"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")


# every `sluice cluster start` of this session, by test (tests/integration/conftest.py checks
# their number against the tier's budget)
CLUSTER_STARTS: list[str] = []


# Job options (`sluice run -D`) for a test whose kill, stop or failover must land mid-job: a file
# source reads a test's whole backlog in one or two Spark calls (FileSource, "Batch sizing"), so
# these cap a call at a few files and the input is read in many steps with checkpoints between.
SMALL_READS = {"execution.source.max-files-per-read": "2"}
ONE_FILE_READS = {"execution.source.max-files-per-read": "1"}


def option_args(options: dict[str, str] | None) -> list[str]:
    """`sluice run` flags for job options: -D KEY=VALUE each."""
    return [arg for key, value in (options or {}).items() for arg in ("-D", f"{key}={value}")]


# Process options (`cluster start -D`) of every cluster the tests start, unless a test sets them:
# no Spark warm-up (spark.warm-up). The suite starts ~65 TaskManagers, many killed or stopped before
# they run much, and a first task pays only for the calls it makes. Measured on this machine,
# test_recovery + test_event_time's chaos tests: 285 -> 263 s of CPU (2 alternating runs each).
TEST_PROCESS_OPTIONS = {"spark.warm-up": "false"}

HA_SESSION_TIMEOUT = 4.0  # seconds: the HA cluster's ZooKeeper sessions (a killed leader's is gone this soon)


def sluice(
    *args: str, timeout: float = 300, check: bool = True, cwd: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the CLI capturing its output (sluice.testing.run_cli, from this checkout); a failure
    fails the test. Every `cluster start` is counted for the tier's budget."""
    if args[:2] == ("cluster", "start"):
        CLUSTER_STARTS.append(os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0])
    try:
        return run_cli(*args, timeout=timeout, check=check, cwd=cwd or REPO, env=env)
    except CliError as exc:
        raise AssertionError(str(exc)) from None


class LocalCluster(testing.LocalCluster):
    """sluice.testing.LocalCluster with the tests' process options (TEST_PROCESS_OPTIONS), its
    starts counted, more TaskManagers a test starts (start_taskmanager; heal() and stop() end
    them), and a stop that fails the test when a process survived `cluster stop`."""

    cli = staticmethod(sluice)

    def __init__(self, directory: Any, taskmanagers: int = 2, slots: int = 2, **kwargs: Any):
        kwargs["options"] = {**TEST_PROCESS_OPTIONS, **(kwargs.get("options") or {})}
        super().__init__(directory, taskmanagers, slots, **kwargs)
        self.extra: list[subprocess.Popen] = []

    @property
    def pids(self) -> list[int]:
        return super().pids + [p.pid for p in self.extra]

    def replace_process(self, role: str, pid: int, address: str) -> None:
        """A process of `role` was restarted by the test: record it in cluster.json too, so
        that `cluster stop` ends the new one."""
        for p in self.info["processes"]:
            if p["role"] == role:
                p["pid"], p["address"] = pid, address
        ClusterFile.from_json(self.info, ClusterFile.path(self.dir)).write(self.dir)

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

    def run_page_views(self, work: Any, *job_args: str, parallelism: int = 2) -> str:
        """Submit the reference job (examples/page_views.py) reading `work`/in and writing
        `work`/out, detached; returns the job id."""
        page_views = os.path.join(EXAMPLES, "page_views.py")
        inputs, outputs = os.path.join(work, "in"), os.path.join(work, "out")
        return self.run(page_views, "--input", inputs, "--output", outputs, *job_args, parallelism=parallelism)

    def start_taskmanager(self, slots: int, log_name: str, *options: str) -> subprocess.Popen:
        """One more TaskManager for this cluster (`options`: more of its flags); heal() stops it."""
        log = os.path.join(self.dir, "log", log_name)
        auth = ["--zk-auth-file", self.info["zookeeper_auth_file"]] if "zookeeper_auth_file" in self.info else []
        command = [sys.executable, "-m", "taskmanager", "--zookeeper", self.info["zookeeper"]]
        command += ["--cluster-id", self.info["cluster_id"], "--slots", str(slots), "--log-file", log, *auth]
        command += self.process_security(os.path.splitext(log_name)[0])
        command += ["--spark-warm-up", TEST_PROCESS_OPTIONS["spark.warm-up"], *options]
        with open(log, "ab") as out:
            p = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.extra.append(p)
        return p

    def _stop_extra(self, timeout: float) -> None:
        for p in self.extra:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.extra:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.extra.clear()

    def heal(self, timeout: float = 240) -> None:
        """Bring the cluster back to the shape it started with after a test killed or added
        processes: extra TaskManagers the test started are stopped, the supervisor's restarts of
        killed JobManagers, TaskManagers and ZooKeeper are waited for, and it returns once a leader
        sees every TaskManager with every slot free. Fails (naming what is missing) when that does
        not happen in `timeout`."""
        self._stop_extra(30)
        try:
            self.wait_whole(timeout)
        except TimeoutError as exc:
            raise AssertionError(str(exc)) from None

    def stop(self) -> list[int]:
        """`sluice cluster stop`; fails the test when a process of the cluster survived it."""
        try:
            self._stop_extra(15)
        finally:
            leftovers = super().stop()
        assert not leftovers, f"processes left behind after cluster stop: {leftovers}"
        return leftovers


@contextlib.contextmanager
def running_cluster(directory: str, **kwargs: Any) -> Iterator[LocalCluster]:
    """A started LocalCluster (keyword arguments as LocalCluster's), stopped on exit even when
    the start or a test fails: the body of a module-scoped `cluster` fixture."""
    with testing.running(LocalCluster(directory, **kwargs)) as c:
        yield c


def wait_for(cluster: LocalCluster, job_id: str, predicate: Any, message: str, timeout: float = 180) -> dict:
    """Poll `status --json` of the job until `predicate(status)` holds; that status. Fails at
    once, with the job's failure, when the job ended without `predicate` holding (an ended
    job's status does not change any more)."""

    def holds() -> dict | None:
        s = cluster.status(job_id)
        if s and predicate(s):
            return s
        if s and s["state"] in ENDED:
            raise AssertionError(f"job {job_id} ended {s['state']} while waiting for {message}: {s.get('failure')}")
        return None

    return wait_until(holds, timeout=timeout, message=message, interval=0.2)


def wait_ended(cluster: LocalCluster, job_id: str, timeout: float = 240) -> dict:
    """The job's status once it is FINISHED, FAILED or CANCELED."""
    return wait_for(cluster, job_id, lambda s: s["state"] in ENDED, f"job {job_id} to end", timeout)


def wait_end(cluster: LocalCluster, job_id: str, timeout: float = 240) -> dict:
    """The job's status once it ended; fails unless it FINISHED."""
    status = wait_ended(cluster, job_id, timeout)
    assert status["state"] == "FINISHED", status.get("failure")
    return status


def last_line(proc: subprocess.CompletedProcess) -> str:
    """The last line a CLI call printed (an id or a path)."""
    return proc.stdout.strip().splitlines()[-1]


def pid_at(cluster: LocalCluster, address: str, timeout: float = 30) -> int:
    """The pid of the process at `address`, reading cluster.json again until it lists it (the
    supervisor records a restarted process's address once it listens)."""

    def find() -> int | None:
        pid = next((p["pid"] for p in cluster.info["processes"] if p["address"] == address), None)
        if pid is None:
            cluster.refresh()
        return pid

    return wait_until(find, timeout, f"a process at {address} in cluster.json", interval=0.2)


def kill9(pid: int) -> None:
    """kill -9 one process (a JobManager) and wait until it is gone."""
    proc = psutil.Process(pid)
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([proc], timeout=10)


def kill_taskmanager_running(cluster: LocalCluster, job_id: str, exclude: Any = ()) -> str:
    """kill -9 a TaskManager hosting tasks of the job (and its Spark JVM); returns its address."""
    cluster.refresh()
    status = cluster.status(job_id)
    address = next(t["taskmanager"] for t in status["tasks"] if t["taskmanager"] not in exclude)
    kill_process_tree(pid_at(cluster, address))
    return address


def checkpoint_root(cluster: LocalCluster, job_id: str) -> str:
    """The directory holding the job's retained checkpoints (chk-N/)."""
    (root,) = glob.glob(os.path.join(cluster.dir, "**", job_id), recursive=True)
    return root


def retained(root: str) -> dict[int, dict]:
    """The _metadata of every retained checkpoint under `root`, by checkpoint id."""
    out = {}
    for path in glob.glob(os.path.join(root, "chk-*", "_metadata")):
        with open(path) as f:
            meta = json.load(f)
        out[meta["checkpoint_id"]] = meta
    return out


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


def committed_rows(directory: Any) -> list[list[str]]:
    """Every committed line of a file sink's directory (hidden staging files skipped), split at commas."""
    rows: list[list[str]] = []
    for path in sorted(glob.glob(os.path.join(str(directory), "*"))):
        if os.path.basename(path).startswith((".", "_")) or os.path.isdir(path):
            continue
        with open(path, newline="") as f:
            rows += list(csv.reader(f))
    return rows


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
    """A SQLite sink's committed table as {key: value} (what a reader of the database sees); a
    query of more than two columns keys on the tuple of all but the last."""
    import sqlite3

    if not os.path.exists(db):
        return {}
    conn = sqlite3.connect(db)
    try:
        return {(row[0] if len(row) == 2 else row[:-1]): row[-1] for row in conn.execute(sql)}
    except sqlite3.OperationalError:  # the table is created with the first commit
        return {}
    finally:
        conn.close()
