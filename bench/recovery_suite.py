"""Paired recovery scenarios: Sluice and Spark Structured Streaming on the same page_views job,
the same data and the same number of Spark task threads, each killed the same way.

    python bench/recovery_suite.py [--quick] [--runs 4] [--events N] [--files N] [--kill-after S]
                                   [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Scenarios (bench/README.md, "Recovery: paired scenarios", says why the pairs are comparable):

(a) worker failure
    sluice-spare    kill -9 (process group) of the TaskManager hosting subtask 0 of the source; a warm
                    spare TaskManager is already running: 3 TaskManagers x 1 slot, each `local[2]`
                    (-D spark.master=local[2]); the job (parallelism 2) uses two of them; before each
                    run a short job at parallelism 3 warms every TaskManager's Spark.
    sluice-nospare  the same kill on 2 TaskManagers x 1 slot (`local[2]`): the job needs both slots, so
                    it waits for the replacement that the cluster's supervisor (sluice/cli/supervisor.py)
                    starts after the kill (its first restart backoff, 1 s, then a cold TaskManager).
    peer-executor   one long-lived driver (local Python + JVM) on a Spark standalone master + 2 workers x 2
                    cores (bench/spark_standalone.py), two executors of 2 cores, running the runs' queries
                    one after another, each when the harness creates its go file; one executor JVM
                    (CoarseGrainedExecutorBackend) gets SIGKILL; Spark retries its tasks on the other
                    and the worker launches a new executor.
(b) application failure
    sluice-app      every Sluice process (JobManager, TaskManagers with their Spark JVMs, supervisor)
                    gets SIGKILL at once; ZooKeeper and the checkpoint directory stay. The cluster is
                    started again on the same directory (`sluice cluster start`, which resumes a crashed
                    cluster: same cluster id, ZooKeeper and CA), and its new
                    leader recovers the job from the HA job store and its latest completed checkpoint.
    peer-driver     a driver (local[4]) per run, told to start its query once its SparkSession is ready;
                    its process group (Python + JVM) gets SIGKILL and a new driver starts at once on the
                    same checkpointLocation.

The job: examples/page_views.py at parallelism 2, checkpoints every 500 ms, at most
--max-files-per-trigger files per source read (`execution.source.max-files-per-read`); the peer: the
same running count (bench/structured_streaming_bench.py's query), shuffle partitions 2,
maxFilesPerTrigger --max-files-per-trigger, checkpointLocation, one output file per batch. Both read
the input in the same steps: a source that reads the whole backlog in one call would finish before
the kill. Every run reads the same
--files files of --events events (examples/generate_page_views.py) and runs to its end; its committed
output is checked exactly (bench/output_check.py: no line twice, counts increasing, final counts equal
the generator's). The kill comes --kill-after seconds after the run's first committed output.

Measured by the harness from the outside, identically for both systems: a thread lists the output
directory every 20 ms and reads every new version of a committed file (a new name, or a name
rewritten) when it first sees it.
  first output   kill -> the first committed file version first seen after the kill (whatever it holds)
  progressing    kill -> the first committed file version first seen after the kill that was written
                 after the kill (mtime) and holds a (key, count) line above every count of that key
                 committed before the kill: output beyond what the kill interrupted
  total          launch (job submitted to the running cluster / query told to start on a ready driver)
                 -> the last committed file version seen
Runs alternate between the systems in every round (a: S-spare P S-nospare, then reversed; b: S P, then
P S). CPU per system and foreign CPU from bench/procstat.py; a run during which other processes used
more than procstat.FOREIGN_CORES_LIMIT cores is marked and left out of the medians (load rule).
Medians with percentile-bootstrap 95 % intervals (bench/stats.py). Appends one section to --out.
Every cluster, Spark process and driver started is stopped in a `finally`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, REPO)

from bench_common import begin_run, finish_workdir, fmt, publish, run_main
from output_check import OutputCheck, check_peer_output, check_sluice_output
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, Usage, excluded
from stats import Estimate, fmt_estimate, median_ci

DIR_POLL = 0.02  # seconds between output directory listings
STATUS_POLL = 0.1  # seconds between job status polls
PARALLELISM = 2  # the job's (Sluice) and the shuffle partitions (peer)
CHECKPOINT_MS = 500
SPARE, NOSPARE, EXECUTOR, APP, DRIVER = "sluice-spare", "sluice-nospare", "peer-executor", "sluice-app", "peer-driver"
SCENARIOS: dict[str, tuple[str, str, str]] = {  # name -> (scenario, system, what is killed and what restarts)
    SPARE: ("a", "Sluice", "TaskManager of source #0 (process group, its Spark JVM too); warm spare running"),
    NOSPARE: ("a", "Sluice", "TaskManager of source #0 (process group); no spare: the supervisor restarts it"),
    EXECUTOR: ("a", "Spark", "one executor JVM of 2 (standalone, 2 workers x 2 cores); the worker relaunches it"),
    APP: ("b", "Sluice", "JobManager, TaskManagers, supervisor (SIGKILL at once); cluster restarted, job recovered"),
    DRIVER: ("b", "Spark", "the driver's process group (Python + local[4] JVM); a new driver on the checkpoint"),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class RunError(Exception):
    pass


# -- watching committed output -------------------------------------------------------------------------
@dataclass
class Version:
    """One version of a committed output file, read when first seen."""

    name: str
    seen: float  # monotonic time first seen
    mtime: float  # wall clock, when it was written
    maxima: dict[str, int]  # key -> highest count in it


def file_maxima(text: str) -> dict[str, int]:
    """Per key, the highest count in `key,count` lines (lines that are not such are skipped:
    the output check judges them)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, comma, count = line.rpartition(",")
        if not comma:
            continue
        try:
            n = int(count)
        except ValueError:
            continue
        if n > out.get(key, -1):
            out[key] = n
    return out


def sluice_committed(name: str) -> bool:
    return name.startswith("part-")  # the file sink's visible (committed) parts; pending ones are hidden


def peer_committed(name: str) -> bool:
    return name.startswith("batch-") and name.endswith(".csv")


class OutputWatch(threading.Thread):
    """Lists `path` every DIR_POLL s; each new version of a committed file (a new name, or a new
    inode/mtime under a known name) is read at once and kept as a Version, in the order seen."""

    def __init__(self, path: str, committed: Callable[[str], bool]):
        super().__init__(daemon=True)
        self.path, self.committed = path, committed
        self.versions: list[Version] = []
        self._ids: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def scan(self) -> int:
        """One listing now; returns how many versions are known after it."""
        with self._lock:
            try:
                entries = list(os.scandir(self.path))
            except FileNotFoundError:
                return len(self.versions)
            now = time.monotonic()
            for e in sorted(entries, key=lambda e: e.name):
                if not self.committed(e.name):
                    continue
                try:
                    st = e.stat()
                    ident = (st.st_ino, st.st_mtime_ns)
                    if self._ids.get(e.name) == ident:
                        continue
                    with open(e.path) as f:
                        text = f.read()
                except FileNotFoundError:
                    continue
                self._ids[e.name] = ident
                self.versions.append(Version(e.name, now, st.st_mtime, file_maxima(text)))
            return len(self.versions)

    def run(self) -> None:
        while not self._stop_event.wait(DIR_POLL):
            self.scan()

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:  # started
            self.join(5)
        self.scan()

    def first_seen(self) -> float | None:
        with self._lock:
            return self.versions[0].seen if self.versions else None


def recovery_times(versions: Sequence[Version], n_before: int, t_kill: float, t_kill_wall: float) -> dict:
    """The two latencies from the versions in the order seen, the first `n_before` of them seen
    before the kill (at monotonic t_kill, wall t_kill_wall): see the module docstring."""
    before: dict[str, int] = {}
    for v in versions[:n_before]:
        for k, c in v.maxima.items():
            if c > before.get(k, -1):
                before[k] = c
    after = versions[n_before:]
    first = min((v.seen for v in after), default=None)
    progressing = None
    progressing_name = None
    for v in sorted(after, key=lambda v: v.seen):
        if v.mtime >= t_kill_wall and any(c > before.get(k, -1) for k, c in v.maxima.items()):
            progressing, progressing_name = v.seen, v.name
            break
    return {
        "first_output": None if first is None else first - t_kill,
        "progressing": None if progressing is None else progressing - t_kill,
        "progressing_file": progressing_name,
        "versions_before": n_before,
        "versions_after": len(after),
        "last_seen": max((v.seen for v in versions), default=None),
    }


# -- the order of runs ---------------------------------------------------------------------------------
def schedule(rounds: int, phase: str) -> list[str]:
    """Runs in order, alternating systems within each round and reversing every other round:
    a: S-spare P S-nospare | S-nospare P S-spare ...; b: S P | P S ..."""
    base = [SPARE, EXECUTOR, NOSPARE] if phase == "a" else [APP, DRIVER]
    order: list[str] = []
    for i in range(rounds):
        order += base if i % 2 == 0 else list(reversed(base))
    return order


# -- Sluice --------------------------------------------------------------------------------------------
def _cluster_cls():
    from page_views_bench import Cluster

    class SluiceCluster(Cluster):
        """A page_views_bench Cluster whose crash (LocalCluster.crash: every Sluice process at once)
        keeps its embedded ZooKeeper, and that starts again on the same directory, ZooKeeper and
        cluster id; stop() ends that ZooKeeper too."""

        def __init__(self, directory: str, taskmanagers: int, slots: int, extra_args: tuple[str, ...] = ()):
            super().__init__(directory, taskmanagers, slots, extra_args)
            self.zk_pid: int | None = None
            self.warm_pids: frozenset[int] = frozenset()
            self.restarting = False

        def start(self, timeout: float = 400) -> SluiceCluster:
            super().start(timeout)
            self.zk_pid = next(iter(super().role_pids("zookeeper")), None)
            return self

        def reload(self) -> dict:
            self.refresh()
            self.remember_children()
            return self.info

        def all_pids(self) -> list[int]:
            pids = list(self.pids)
            if self.restarting:  # not in a cluster.json yet: every process started for this directory
                pids += [
                    p.pid
                    for p in psutil.process_iter(["cmdline"])
                    if any(self.dir in arg for arg in (p.info["cmdline"] or []))
                ]
            return pids + ([self.zk_pid] if self.zk_pid and self.zk_pid not in pids else [])

        def role_pids(self, role: str) -> list[int]:
            self.reload()
            return super().role_pids(role)

        def wait_full(self, timeout: float) -> None:
            """Until every process runs and every TaskManager is registered with all its slots free."""
            try:
                self.wait_whole(timeout)
            except TimeoutError as exc:
                raise RunError(str(exc)) from None
            self.reload()

        def restart(self, timeout: float = 400) -> float:
            """`cluster start` on the crashed cluster's directory: it resumes that cluster (same
            cluster id, its still-running ZooKeeper, its CA); returns the command's duration."""
            t0 = time.monotonic()
            self.restarting = True
            try:
                self.start(timeout)
            finally:
                self.restarting = False
            return time.monotonic() - t0

        def stop(self) -> list[int]:
            try:
                return super().stop()
            finally:
                if self.zk_pid is not None:
                    try:
                        p = psutil.Process(self.zk_pid)
                        p.terminate()
                        p.wait(15)
                    except psutil.TimeoutExpired:
                        p.kill()
                    except psutil.NoSuchProcess:
                        pass
                    self.zk_pid = None

    return SluiceCluster


def warm(cluster, data: str, out: str, timeout: float) -> None:
    """A short job on every TaskManager (warm-spare cluster), unless the same processes ran one."""
    from page_views_bench import warm_all_taskmanagers

    pids = frozenset(cluster.role_pids("taskmanager"))
    if pids == cluster.warm_pids:
        return
    used = warm_all_taskmanagers(cluster, data, out, timeout)
    shutil.rmtree(out, ignore_errors=True)
    if used != f"{cluster.taskmanagers}/{cluster.taskmanagers}":
        log(f"  warning: the warm-up ran on {used} TaskManagers")
    cluster.warm_pids = frozenset(cluster.role_pids("taskmanager"))


def _wait_kill_point(
    watch: OutputWatch, kill_after: float, timeout: float, ended: Callable[[], str | None], what: str
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        first = watch.first_seen()
        if first is not None and time.monotonic() - first >= kill_after:
            return
        end = ended()
        if end is not None:
            raise RunError(f"{what} ended ({end}) before the kill: make --events larger")
        if time.monotonic() > deadline:
            raise RunError(f"{what}: no committed output within {timeout:.0f}s")
        time.sleep(DIR_POLL)


def sluice_run(kind: str, cluster, data: str, out: str, expected: dict, args, meter_systems, tag: str) -> dict:
    from page_views_bench import TERMINAL

    meter = ResourceMeter(meter_systems).start()
    watch = OutputWatch(out, sluice_committed)
    t_launch = time.monotonic()
    r: dict = {"kind": kind}
    try:
        job_id = cluster.submit(
            "--input",
            data,
            "--output",
            out,
            "--checkpoint-interval",
            str(CHECKPOINT_MS),
            parallelism=PARALLELISM,
            options={"execution.source.max-files-per-read": str(args.max_files_per_trigger)},
        )
        watch.start()
        r["job_id"] = job_id

        def ended() -> str | None:
            s = cluster.status(job_id)
            return s["state"] if s["state"] in TERMINAL else None

        _wait_kill_point(watch, args.kill_after, args.timeout, ended, f"job {job_id}")
        s = cluster.status(job_id)
        restarts_before = s["restarts"]
        r["checkpoint_before"] = s["last_completed_checkpoint"]
        if kind == APP:
            n_before = watch.scan()
            t_kill, t_kill_wall = time.monotonic(), time.time()
            killed = cluster.crash()
            r["killed"] = f"{len(killed)} processes"
            log(f"  killed every Sluice process ({len(killed)}) {t_kill - t_launch:.1f}s into the job")
            r["restart_s"] = cluster.restart(timeout=args.timeout)
            r["ready"] = time.monotonic() - t_kill
            log(f"  cluster started again in {r['restart_s']:.1f}s")
        else:
            first_op = s["tasks"][0]["operator"]
            target = next(t for t in s["tasks"] if t["operator"] == first_op and t["subtask"] == 0)
            cluster.reload()
            pid = cluster.taskmanager_pid(target["taskmanager"])
            n_before = watch.scan()
            t_kill, t_kill_wall = time.monotonic(), time.time()
            os.killpg(pid, signal.SIGKILL)  # the TaskManager and its Spark JVM
            r["killed"] = f"TaskManager pid {pid}"
            log(f"  killed TaskManager {target['taskmanager']} (pid {pid}) {t_kill - t_launch:.1f}s into the job")
        deadline = time.monotonic() + args.timeout
        while True:
            s = cluster.status(job_id)
            if s["state"] in TERMINAL:
                break
            if time.monotonic() > deadline:
                cluster.cancel(job_id)
                raise RunError(f"job {job_id} still {s['state']} {args.timeout:.0f}s after the kill")
            time.sleep(STATUS_POLL)
        r["state"] = s["state"]
        r["restarts"] = s["restarts"] - (restarts_before if kind != APP else 0)
        r["restored"] = s.get("restored_checkpoint")
        if s["state"] != "FINISHED":
            raise RunError(f"job {job_id} ended {s['state']}: {s['failure'] or s['message']}")
    finally:
        watch.stop()
        r["usage"] = meter.stop()
    r["kill_at"] = t_kill - t_launch
    r.update(recovery_times(watch.versions, n_before, t_kill, t_kill_wall))
    r["total"] = None if r["last_seen"] is None else r["last_seen"] - t_launch
    r["check"] = check_sluice_output(out, expected)
    return r


# -- the peer ------------------------------------------------------------------------------------------
def peer_query(data: str, work: str, tag: str, mfpt: int, go: bool = True) -> dict:
    """One query of the peer: its own checkpointLocation and output; with `go`, it starts only once
    the harness creates its go file (the driver and its executors are up by then)."""
    from structured_streaming_bench import query_spec

    q = query_spec(data, os.path.join(work, f"ckpt-{tag}"), os.path.join(work, f"out-{tag}"), mfpt, None)
    if go:
        q["go_file"] = os.path.join(work, f"go-{tag}")
    return q


def peer_spec(queries: list[dict], master: str, conf: dict) -> dict:
    return {"master": master, "shuffle_partitions": PARALLELISM, "conf": conf, "queries": queries}


def standalone_conf() -> dict[str, str]:
    """The driver's settings on the standalone cluster: 2 executors x 2 cores (4 task threads)."""
    return {
        "spark.executor.cores": "2",
        "spark.cores.max": "4",
        "spark.executor.memory": "1g",
        "spark.pyspark.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


def _go(q: dict) -> float:
    with open(q["go_file"], "w"):
        pass
    return time.monotonic()


def peer_executor_run(child, qi: int, q: dict, spark, expected: dict, args, meter_systems, tag: str) -> dict:
    """Query `qi` of the long-lived driver `child` on the standalone cluster; one executor killed."""
    meter = ResourceMeter(meter_systems).start()
    watch = OutputWatch(q["out"], peer_committed)
    r: dict = {"kind": EXECUTOR, "out": q["out"], "ckpt": q["checkpoint"]}
    try:
        deadline = time.monotonic() + args.timeout
        while len(spark.executors()) < 2:  # the executor killed in the previous run is back
            if time.monotonic() > deadline:
                raise RunError(f"peer {tag}: {len(spark.executors())} executors running, expected 2")
            time.sleep(0.2)
        t_launch = _go(q)
        watch.start()

        def ended() -> str | None:
            if child.find("done", query=qi) is not None:
                return "all input processed"
            return None if child.proc.poll() is None else f"driver exited {child.proc.returncode}"

        _wait_kill_point(watch, args.kill_after, args.timeout, ended, f"peer {tag}")
        execs = spark.executors()
        if len(execs) < 2:
            raise RunError(f"peer {tag}: {len(execs)} executors running, expected 2")
        victim = execs[0]
        before = {e.pid for e in execs}
        procs = [psutil.Process(victim.pid)]
        procs += procs[0].children(recursive=True)
        n_before = watch.scan()
        t_kill, t_kill_wall = time.monotonic(), time.time()
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        r["killed"] = f"executor {victim.executor_id} pid {victim.pid}"
        log(f"  killed executor {victim.executor_id} (pid {victim.pid}) {t_kill - t_launch:.1f}s into the query")
        psutil.wait_procs(procs, timeout=10)
        child.wait_for("done", args.timeout, query=qi)
        r["restarts"] = len({e.pid for e in spark.executors()} - before)  # new executors launched
        r["state"] = "FINISHED"
    finally:
        watch.stop()
        r["usage"] = meter.stop()
    r["kill_at"] = t_kill - t_launch
    r.update(recovery_times(watch.versions, n_before, t_kill, t_kill_wall))
    r["total"] = None if r["last_seen"] is None else r["last_seen"] - t_launch
    r["check"] = check_peer_output(q["out"], expected)
    return r


def peer_driver_run(data: str, work: str, expected: dict, args, meter_systems, tag: str) -> dict:
    """A driver (local[4]) started and ready, then its query; the driver killed and started again."""
    from structured_streaming_bench import Child

    q = peer_query(data, work, tag, args.max_files_per_trigger)
    restart_q = {k: v for k, v in q.items() if k != "go_file"}
    r: dict = {"kind": DRIVER, "out": q["out"], "ckpt": q["checkpoint"]}
    first = second = None
    meter = None
    try:
        first = Child(peer_spec([q], "local[4]", {}), work, f"{tag}-driver")
        first.wait_for("session", args.timeout)  # ready, as a Sluice cluster is before its job
        meter = ResourceMeter(meter_systems).start()
        watch = OutputWatch(q["out"], peer_committed)
        t_launch = _go(q)
        watch.start()

        def ended() -> str | None:
            if first.find("done") is not None:
                return "all input processed"
            return None if first.proc.poll() is None else f"driver exited {first.proc.returncode}"

        try:
            _wait_kill_point(watch, args.kill_after, args.timeout, ended, f"peer {tag}")
            n_before = watch.scan()
            t_kill, t_kill_wall = time.monotonic(), time.time()
            first.kill()  # the driver's process group: Python + its JVM
            r["killed"] = f"driver pid {first.proc.pid}"
            log(f"  killed the driver {t_kill - t_launch:.1f}s into the query")
            second = Child(peer_spec([restart_q], "local[4]", {}), work, f"{tag}-driver-restarted")
            second.wait_for("done", args.timeout)
            r["ready"] = second.wait_for("started", 5)["t"] - t_kill
            r["restarts"] = 1  # the driver, once
            second.finish(120)
            r["state"] = "FINISHED"
        finally:
            watch.stop()
    finally:
        for c in (first, second):
            if c is not None:
                c.kill()
        if meter is not None:
            r["usage"] = meter.stop()
    r["kill_at"] = t_kill - t_launch
    r.update(recovery_times(watch.versions, n_before, t_kill, t_kill_wall))
    r["total"] = None if r["last_seen"] is None else r["last_seen"] - t_launch
    r["check"] = check_peer_output(q["out"], expected)
    return r


# -- figures and the report ----------------------------------------------------------------------------
@dataclass
class Summary:
    kind: str
    runs: int
    failed: int
    excluded: int
    first_output: Estimate
    progressing: Estimate
    total: Estimate
    kill_at: Estimate = field(default_factory=lambda: median_ci([]))


def is_valid(r: dict) -> bool:
    """A run counts when it finished, its output passed the check, and the load rule kept it."""
    return r.get("error") is None and r.get("check") is not None and r["check"].ok


def summarize(kind: str, runs: Iterable[dict], limit: float | None) -> Summary:
    rs = [r for r in runs if r["kind"] == kind]
    valid = [r for r in rs if is_valid(r)]
    kept = [r for r in valid if not excluded(r.get("usage"), limit)]
    out_of_rule = len(valid) - len(kept)

    def est(key: str) -> Estimate:
        return median_ci((r.get(key) for r in kept), excluded=out_of_rule)

    return Summary(
        kind,
        len(rs),
        len(rs) - len(valid),
        out_of_rule,
        est("first_output"),
        est("progressing"),
        est("total"),
        est("kill_at"),
    )


def _status(r: dict, limit: float | None) -> str:
    if r.get("error"):
        return "**FAILED**"
    if r.get("check") is None or not r["check"].ok:
        return "**OUTPUT CHECK FAILED**"
    return "excluded (load rule)" if excluded(r.get("usage"), limit) else "counted"


def _usage_cells(r: dict, system: str) -> tuple[str, str]:
    u: Usage | None = r.get("usage")
    if u is None:
        return "—", "—"
    return f"{u.cpu_s.get(system, 0.0):.1f}", f"{u.foreign_cores():.2f}"


def report(args, facts: dict, command: str, runs: list[dict], notes: list[str], limit: float | None) -> str:
    L = [f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} — recovery: paired scenarios", ""]
    L += [f"Command: `{command}` at commit {facts['commit']}", "", "| machine | |", "|---|---|"]
    for k in ("date", "cores", "cpu", "ram", "python", "java", "pyspark", "os", "load"):
        label = {"date": "date -u", "load": "load average at start"}.get(k, k)
        L.append(f"| {label} | {facts.get(k, '?')} |")
    L.append("")
    bad = [r for r in runs if r.get("check") is not None and not r["check"].ok]
    if bad:
        L += [f"**OUTPUT CHECK FAILED** in {len(bad)} runs (see the tables and notes).", ""]
    rule = (
        f"Load rule: a run during which other processes used more than {limit:g} cores on average is excluded."
        if limit
        else "Load rule: off."
    )
    L.append(
        f"Job: page_views over {args.events:,} events in {args.files} files, parallelism {PARALLELISM} "
        f"(Sluice, checkpoints every {CHECKPOINT_MS} ms, at most {args.max_files_per_trigger} files per source "
        f"read) / shuffle partitions {PARALLELISM} and maxFilesPerTrigger {args.max_files_per_trigger} (peer, "
        "checkpointLocation); every run to its end. "
        f"Kill {args.kill_after:g} s after the run's first committed output. 4 Spark task threads on each "
        "side: Sluice TaskManagers of 1 slot with `local[2]`, two of them running the job; the peer's "
        "standalone cluster 2 executors x 2 cores, its local driver `local[4]`. Seconds from the kill: "
        "*first output* = first committed file version first seen after the kill; *progressing* = first "
        "committed file version seen after the kill, written after it, holding a count above every count "
        "of its key committed before the kill; *total* = launch → last committed file seen (output "
        f"directory listed every {DIR_POLL * 1000:.0f} ms by the harness, both systems alike). Medians "
        "with bootstrap 95 % intervals over the counted runs. " + rule
    )
    L.append("")
    L.append(
        "| scenario | system | killed → restarted | runs counted / run | kill at s | kill → first output s | "
        "kill → progressing s | total s |"
    )
    L.append("|---|---|---|---|---|---|---|---|")
    for kind, (scen, system, what) in SCENARIOS.items():
        s = summarize(kind, runs, limit)
        if s.runs == 0:
            continue
        counted = s.runs - s.failed - s.excluded
        L.append(
            f"| ({scen}) {kind} | {system} | {what} | {counted} / {s.runs} | {fmt_estimate(s.kill_at, '.1f')} | "
            f"**{fmt_estimate(s.first_output, '.2f')}** | **{fmt_estimate(s.progressing, '.2f')}** | "
            f"{fmt_estimate(s.total, '.1f')} |"
        )
    L.append("")
    L.append(
        "Per run (in the order run): restarts = Sluice: the job's restarts after the kill; the peer: new "
        "executors launched (a) or driver restarts (b). CPU s = the system's CPU seconds in the run (all its "
        "processes, bench/procstat.py); foreign = cores used by other processes on average."
    )
    L.append("")
    L.append(
        "| # | run | kill at s | kill → first output s | kill → progressing s | total s | restarts | "
        "restored / before | output check | CPU s | foreign cores | status |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        system = "sluice" if r["kind"].startswith("sluice") else "spark"
        cpu, foreign = _usage_cells(r, system)
        check: OutputCheck | None = r.get("check")
        restored = (
            f"{fmt(r.get('restored'), 'd')} / {fmt(r.get('checkpoint_before'), 'd')}"
            if r["kind"].startswith("sluice")
            else "—"
        )
        L.append(
            f"| {i} | {r['kind']} | {fmt(r.get('kill_at'), '.1f')} | {fmt(r.get('first_output'))} | "
            f"{fmt(r.get('progressing'))} | {fmt(r.get('total'), '.1f')} | {fmt(r.get('restarts'), 'd')} | "
            f"{restored} | {'—' if check is None else ('yes' if check.ok else '**NO**')} | {cpu} | {foreign} | "
            f"{_status(r, limit)} |"
        )
    L.append("")
    app = [r for r in runs if r["kind"] == APP and r.get("restart_s") is not None]
    if app:
        L.append(
            "Application failure, Sluice: `cluster start` on the same directory took "
            + ", ".join(f"{r['restart_s']:.1f}" for r in app)
            + " s (kill → cluster ready: "
            + ", ".join(f"{r['ready']:.1f}" for r in app)
            + " s)."
        )
        L.append("")
    drv = [r for r in runs if r["kind"] == DRIVER and r.get("ready") is not None]
    if drv:
        L.append(
            "Application failure, peer: kill → restarted query started: "
            + ", ".join(f"{r['ready']:.1f}" for r in drv)
            + " s."
        )
        L.append("")
    checks = [f"{i}. {r['kind']}: {r['check'].describe()}" for i, r in enumerate(runs, 1) if r.get("check")]
    if checks:
        L += ["Output checks (bench/output_check.py):", ""] + [f"- {c}" for c in checks] + [""]
    if notes:
        L += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(L) + "\n"


# -- main ----------------------------------------------------------------------------------------------
FULL = {"runs": 4, "events": 600_000, "files": 120, "kill_after": 2.0}
QUICK = {"runs": 1, "events": 300_000, "files": 60, "kill_after": 1.5}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"smoke sizes: {QUICK}")
    ap.add_argument("--runs", type=int, default=None, help=f"rounds per phase (full {FULL['runs']})")
    ap.add_argument("--events", type=int, default=None, help=f"events (full {FULL['events']:,})")
    ap.add_argument("--files", type=int, default=None, help=f"input files (full {FULL['files']})")
    ap.add_argument("--kill-after", type=float, default=None, help="seconds after the first committed output")
    ap.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=4,
        help="files per step of both: the peer's micro-batch, Sluice's source read",
    )
    ap.add_argument("--phases", default="ab", help="a: worker failure, b: application failure (default ab)")
    ap.add_argument(
        "--max-foreign-cores",
        "--foreign-cores-limit",
        dest="foreign_cores_limit",
        type=float,
        default=FOREIGN_CORES_LIMIT,
        help="load rule (0: off)",
    )
    ap.add_argument("--timeout", type=float, default=300, help="seconds a step may take")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for k, v in sizes.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    from generate_page_views import generate
    from spark_standalone import SparkStandalone
    from structured_streaming_bench import Child

    command, facts, temp, work = begin_run(REPO, args.workdir, "recovery-suite-", log)
    limit = args.foreign_cores_limit or None
    SluiceCluster = _cluster_cls()
    clusters: list = []
    spark: SparkStandalone | None = None
    runs: list[dict] = []
    notes: list[str] = []
    failed = interrupted = False
    t_start = time.monotonic()

    def sluice_pids() -> list[int]:
        return [pid for c in clusters for pid in c.all_pids()]

    def spark_pids() -> list[int]:
        return (spark.pids() if spark is not None else []) + [c.proc.pid for c in Child.live]

    systems = {"sluice": sluice_pids, "spark": spark_pids}
    try:
        data = os.path.join(work, "events")
        expected = generate(data, events=args.events, files=args.files, urls=10_000, seed=11)
        warm_data = os.path.join(work, "events-warmup")
        generate(warm_data, events=30_000, files=6, urls=10_000, seed=13)
        log(f"generated {args.events:,} events in {args.files} files")
        local2 = ("-D", "spark.master=local[2]")
        nospare = SluiceCluster(os.path.join(work, "cluster-2tm"), 2, 1, local2)
        clusters.append(nospare)
        nospare.start()
        plan: list[str] = []
        spare = None
        peer_driver = None
        peer_queries: dict[int, dict] = {}
        if "a" in args.phases:
            spare = SluiceCluster(os.path.join(work, "cluster-3tm"), 3, 1, local2)
            clusters.append(spare)
            spare.start()
            spark = SparkStandalone(os.path.join(work, "spark"), workers=2, cores=2, memory="2g", log=log)
            spark.start()
            plan += schedule(args.runs, "a")
            # one long-lived driver on the standalone cluster runs the peer's (a) queries one by one, each
            # when told (its go file): like the Sluice clusters, it is up before each run
            # (query 0: a short uncounted warm-up, as the Sluice spare cluster's warm-up job)
            warmup = peer_query(warm_data, work, "peer-a-warmup", args.max_files_per_trigger, go=False)
            peer_queries = {
                i: peer_query(data, work, f"peer-a-{i}", args.max_files_per_trigger)
                for i in range(1, plan.count(EXECUTOR) + 1)
            }
            peer_driver = Child(
                peer_spec([warmup, *peer_queries.values()], spark.master_url, standalone_conf()),
                work,
                "peer-a-driver",
            )
            peer_driver.wait_for("done", args.timeout, query=0)
            log("peer driver on the standalone cluster ready (warm-up query done)")
        if "b" in args.phases:
            plan += ["stop-a"] + schedule(args.runs, "b")
        n = 0
        for kind in plan:
            if kind == "stop-a":  # phase (b) runs without phase (a)'s idle clusters
                if peer_driver is not None:
                    peer_driver.kill()
                    peer_driver = None
                if spare is not None:
                    spare.stop()
                    clusters.remove(spare)
                    spare = None
                if spark is not None:
                    spark.stop()
                    spark = None
                continue
            n += 1
            tag = f"{n:02d}-{kind}"
            log(f"run {n}: {kind}")
            r: dict = {"kind": kind}
            try:
                if kind in (SPARE, NOSPARE, APP):
                    c = spare if kind == SPARE else nospare
                    assert c is not None  # the warm-spare cluster runs through phase (a)
                    c.wait_full(args.timeout)
                    if kind == SPARE:
                        warm(c, warm_data, os.path.join(work, f"out-warmup-{n}"), args.timeout)
                    out = os.path.join(work, f"out-{tag}")
                    r = sluice_run(kind, c, data, out, expected, args, systems, tag)
                    r["out"] = out
                elif kind == EXECUTOR:
                    qi = 1 + sum(1 for x in runs if x["kind"] == EXECUTOR)
                    r = peer_executor_run(peer_driver, qi, peer_queries[qi], spark, expected, args, systems, tag)
                else:
                    r = peer_driver_run(data, work, expected, args, systems, tag)
            except (RunError, Exception) as exc:  # noqa: BLE001 — a failed run is reported, the suite goes on
                failed = True
                r["error"] = f"{type(exc).__name__}: {exc}".split("\n")[0]
                notes.append(f"run {n} ({kind}) failed: {r['error']}")
                log(f"  run {n} failed: {r['error']}")
            runs.append(r)
            if r.get("check") is not None:
                if not r["check"].ok:
                    failed = True
                    notes.append(f"run {n} ({kind}): OUTPUT CHECK FAILED: {r['check'].describe()}")
                else:
                    for key in ("out", "ckpt"):
                        if r.get(key):
                            shutil.rmtree(r[key], ignore_errors=True)
            u = r.get("usage")
            log(
                f"  kill at {fmt(r.get('kill_at'), '.1f')}s; kill → first output {fmt(r.get('first_output'))}s, "
                f"→ progressing {fmt(r.get('progressing'))}s; total {fmt(r.get('total'), '.1f')}s; restarts "
                f"{r.get('restarts')}; foreign cores {fmt(u.foreign_cores() if u else None)}; "
                f"output {r['check'].describe() if r.get('check') else '—'}"
            )
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping everything")
        raise
    except BaseException as exc:
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        Child.kill_all()
        if spark is not None:
            try:
                spark.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the rest
                log(f"warning: stopping Spark: {exc}")
        for c in clusters:
            try:
                c.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping {c.dir}: {exc}\n{traceback.format_exc()}")
        if runs:
            notes.append(f"the suite took {time.monotonic() - t_start:.0f} s")
            section = report(args, facts, command, runs, notes, limit)
            publish(section, args.out, log)
        finish_workdir(work, temp and (interrupted or not failed) and not args.keep_workdir, log, "logs under */log/")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
