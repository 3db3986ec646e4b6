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
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psutil
from helpers import wait_until
from kazoo.client import KazooClient

from sluice.client import JobManagerClient, SluiceError
from sluice.cluster_file import ClusterFile
from sluice.zk.auth import cluster_client

T = TypeVar("T")

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


def sluice(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run the CLI capturing its output (a background process holding our pipes would hang this)."""
    if args[:2] == ("cluster", "start"):
        CLUSTER_STARTS.append(os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0])
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
        self.options = {**TEST_PROCESS_OPTIONS, **(options or {})}  # process options: `cluster start -D key=value`
        self.spark = spark  # `cluster start --spark local|standalone|connect`
        self.dir = str(directory)
        self.insecure = insecure  # `cluster start --insecure`: plaintext, no certificates
        self.jobmanagers, self.zk_session_timeout = jobmanagers, zk_session_timeout
        self.taskmanagers, self.slots = taskmanagers, slots
        self.zookeeper, self.cluster_id = zookeeper, cluster_id
        self.info: dict = {}
        self.extra: list[subprocess.Popen] = []
        self._poller: JobManagerClient | None = None  # see polled()
        self._poller_stamp: int | None = None  # cluster.json's mtime when the poller was made

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
            if os.path.exists(ClusterFile.path(self.dir)):
                self.refresh()
        return self

    def refresh(self) -> None:
        """Read cluster.json again: the supervisor records there the pid and address of a
        TaskManager it restarted (so that lookups and `cluster stop` find the new one)."""
        self.info = ClusterFile.read(self.dir).to_json()

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

    def client(self) -> JobManagerClient:
        return JobManagerClient.from_context({"cluster_dir": self.dir})

    def polled(self, call: Callable[[JobManagerClient], T]) -> T:
        """`call(client)` on one client kept for this cluster's polls (status, overview): a new
        client per poll looks the leader up in ZooKeeper and opens a TLS channel, ~11 ms of this
        process's CPU plus the JobManager's and ZooKeeper's, five times a second in every wait.
        The kept client follows a failover as any client does; it is replaced after an error and
        whenever cluster.json changed (a cluster started again has new addresses and ZooKeeper)."""
        try:
            stamp = os.stat(ClusterFile.path(self.dir)).st_mtime_ns
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
            self._poller.close()
            self._poller = None

    def run(
        self, jobfile: str, *job_args: str, parallelism: int | None = None, options: dict[str, str] | None = None
    ) -> str:
        """Submit detached through the CLI (`options`: job options, as -D); returns the job id (the last line)."""
        args = ["run", jobfile, "--detach", "--cluster-dir", self.dir, *option_args(options)]
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
        """The job's `sluice status JOB --json` object, rendered by the CLI's own code in this
        process (a CLI process per poll costs ~0.4 s of CPU; test_day_one runs the real command)."""
        from sluice.cli.main import _job_dict

        return _job_dict(self.polled(lambda client: client.get(job_id)))

    def start_taskmanager(self, slots: int, log_name: str, *options: str) -> subprocess.Popen:
        """One more TaskManager for this cluster (`options`: more of its flags); heal() stops it."""
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
                    *("--spark-warm-up", TEST_PROCESS_OPTIONS["spark.warm-up"]),
                    *options,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.extra.append(p)
        return p

    def overview(self) -> Any:
        """The leader's ClusterOverview (TaskManagers, total and free slots)."""
        return self.polled(lambda client: client.cluster())

    def cancel_running(self, timeout: float = 60) -> list[str]:
        """Cancel every job that has not ended and wait until each did; the ids cancelled (asked
        in this process: it runs after every test on the shared cluster)."""
        from sluice.states import JobStatus, from_proto

        with self.client() as client:
            running = [j.job_id for j in client.list() if from_proto(JobStatus, j.state) not in ENDED]
            for job_id in running:
                try:
                    client.cancel(job_id)
                except SluiceError:  # it ended meanwhile
                    pass
        for job_id in running:
            wait_for(self, job_id, lambda s: s["state"] in ENDED, f"the cancel of {job_id}", timeout)
        return running

    def heal(self, timeout: float = 240) -> None:
        """Bring the cluster back to the shape it started with after a test killed or added
        processes: extra TaskManagers the test started are stopped, the supervisor's restarts of
        killed JobManagers, TaskManagers and ZooKeeper are waited for, and it returns once a leader
        sees every TaskManager with every slot free. Fails (naming what is missing) when that does
        not happen in `timeout`."""
        for p in self.extra:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.extra:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.extra.clear()
        total = self.taskmanagers * self.slots

        def whole() -> bool:
            self.refresh()
            supervised = [p for p in self.info["processes"] if p["role"] in ("zookeeper", "jobmanager", "taskmanager")]
            if not all(_alive(p["pid"]) and _address_recorded(p) for p in supervised):
                return False  # the supervisor restarts it, then records its new address (sluice/cli/supervisor.py)
            try:
                ov = self.overview()
            except Exception:  # noqa: BLE001 - a leader that is not serving yet: ask again
                return False
            return len(ov.taskmanagers) == self.taskmanagers and ov.total_slots == total == ov.free_slots

        wait_until(
            whole,
            timeout,
            f"every process running, a leader, {self.taskmanagers} TaskManagers with all {total} slots free",
            interval=0.5,
        )

    def stop(self) -> None:
        """`sluice cluster stop`, then make sure: no process of ours survives."""
        self.close_poller()
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


ENDED = ("FINISHED", "FAILED", "CANCELED")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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


def _address_recorded(entry: dict) -> bool:
    """Whether cluster.json holds the address the process wrote to its --address-file (a restarted
    one's is recorded by the supervisor once it listens)."""
    command = entry.get("command") or []
    if "--address-file" not in command[:-1]:
        return True
    path = command[command.index("--address-file") + 1]
    try:
        with open(path) as f:
            return f.readline().strip() == entry["address"]
    except OSError:
        return False


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
