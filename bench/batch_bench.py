"""Bounded jobs and fine-grained recovery (docs/batch.md), measured in three parts.

    python bench/batch_bench.py [--quick] [--parts page-views,failover,speculation] [--runs N]
                                [--events N] [--files N] [--sluice-configs 1x2,2x1] [--peer-shuffle 1,2,4,200]
                                [--failover-runs N] [--speculation-runs N] [--straggle S]
                                [--max-foreign-cores C] [--data-dir bench/data] [--out bench/RESULTS.md]
                                [--workdir DIR] [--keep-workdir]

1. page-views: examples/page_views_batch.py (BATCH, without --top-output) on a local Sluice cluster
   against plain Spark batch, `spark.read.schema(...).json(dir).groupBy("url").count().write.csv(out)`,
   in a child process of this script with one SparkSession (local[2]) started once, on the same
   generated input (examples/generate_page_views.py, cached under --data-dir and reused), alternating
   run by run (S P, then P S, ...). Sluice's time: `sluice run --detach` started -> FINISHED seen by a
   0.1 s status poll (its cluster started once before the runs, its TaskManagers' SparkSessions warm);
   the JobManager's own submitted -> ended is reported too. The peer's time: the query alone in the warm
   session (read, aggregate, write, the commit of the output). Tuning first (full runs): Sluice's
   cluster shape (--sluice-configs: TaskManagers x slots at parallelism = slots, optionally
   `/local[N]` for each TaskManager's Spark master) and the peer's shuffle partitions, --tune-runs runs
   each after one warm-up; the fastest median of each is measured. Every run's output is checked: one
   line per url with exactly the generator's count (bench/output_check.py's rules, plus no key twice).
2. failover: bench/jobs/failover_copy.py (streaming, 4 independent pipelines: file source -> paced map
   -> file sink, chained; checkpoints every 500 ms) at parallelism 4 on 4 TaskManagers x 2 slots, with
   `jobmanager.execution.failover-strategy` region or full, alternating. Once a checkpoint completed
   (and --kill-after seconds more), kill -9 of the process group of a TaskManager hosting exactly one
   of the job's subtasks (rotating over the subtasks). Recovery: kill -> every task RUNNING (or already
   FINISHED) again with the restarted ones in their new execution (status polled every 50 ms; tasks'
   `attempt` and `execution_attempt`). Restarted tasks: those whose (attempt, execution_attempt) rose.
   The output must hold every input row exactly once. The cluster's supervisor restarts the killed
   TaskManager (a cold start, during the recovery, in both arms); before the next run the harness waits
   for every slot to be free and warms the new TaskManager with a short job.
3. speculation: tests/integration/jobs/batch_counts.py (BATCH) at parallelism 4 on 2 TaskManagers x
   2 slots; its straggler is the first source attempt to create a marker file, which sleeps --straggle
   seconds once. Arms: off (straggler, no speculation), on (straggler, --speculative) and, for
   reference, none (no straggler), rotating. Time: `sluice run` started -> FINISHED seen. Exact counts.

Load rule (bench/procstat.py): a run during which processes of neither the measured system nor this
harness used more than --max-foreign-cores cores on average is excluded from every figure. Medians
with percentile-bootstrap 95 % intervals (bench/stats.py); ratios of medians with a bootstrap interval
(both arms resampled). One section is appended to --out. Every cluster and child process is stopped in
a `finally`, whatever happens.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
sys.path.insert(0, HERE)
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, REPO)

from bench_common import begin_run, finish_workdir, fmt, publish, run_main, write_atomically
from markdown import notes_lines, section_head
from paired_runs import MEASURED, OTHERS, RunError, log, usage_figures
from spark_peer import SPARK_SETTINGS, PeerSide
from stats import RESAMPLES, SEED, Estimate, fmt_estimate, kept, median_ci, valid

PAGE_VIEWS_BATCH = os.path.join(EXAMPLES, "page_views_batch.py")
FAILOVER_JOB = os.path.join(HERE, "jobs", "failover_copy.py")
BATCH_COUNTS = os.path.join(REPO, "tests", "integration", "jobs", "batch_counts.py")
SCHEMA = "url string, user long, ts long"
PARTS = ("page-views", "failover", "speculation")
FAST_POLL = 0.05  # seconds between status polls around a kill
STRATEGIES = ("region", "full")
ARMS = ("off", "on", "none")  # speculation: straggler without / with speculation; no straggler

FULL = {
    "events": 10_000_000,
    "files": 80,
    "runs": 10,
    "tune_runs": 2,
    "sluice_configs": "1x2,2x1",
    "peer_shuffle": "1,2,4,200",
    "failover_runs": 6,
    "failover_events": 200_000,
    "failover_files": 400,
    "speculation_runs": 6,
    "speculation_events": 40_000,
    "speculation_files": 40,
    "straggle": 20.0,
}
QUICK = {
    "events": 500_000,
    "files": 20,
    "runs": 2,
    "tune_runs": 0,
    "sluice_configs": "1x2",
    "peer_shuffle": "2",
    "failover_runs": 2,
    "failover_events": 100_000,
    "failover_files": 200,
    "speculation_runs": 2,
    "speculation_events": 20_000,
    "speculation_files": 20,
    "straggle": 12.0,
}


# ================================================================================================
# the peer's child: one SparkSession, one batch query per go file
# ================================================================================================
def child_main(spec_path: str) -> int:
    """--child mode: a SparkSession (spark_peer.SPARK_SETTINGS, the spec's master), then for each go
    file `<dir>/go-NNNN.json` the batch count of its input written as CSV to its output, timed around
    the query alone (`done`: seconds), until a go file says exit."""
    from structured_streaming_bench import child_spec, emit, spark_session

    spec = child_spec(spec_path)
    spark = spark_session("batch-bench-peer", spec["master"], SPARK_SETTINGS)
    i = 0
    while True:
        go = os.path.join(spec["dir"], f"go-{i:04d}.json")
        while not os.path.exists(go):
            time.sleep(0.005)
        with open(go) as f:
            q = json.load(f)
        if q.get("exit"):
            break
        spark.conf.set("spark.sql.shuffle.partitions", str(int(q["shuffle_partitions"])))
        t0 = time.monotonic()
        try:
            spark.read.schema(SCHEMA).json(q["input"]).groupBy("url").count().write.csv(q["out"])
        except Exception as exc:  # noqa: BLE001 — reported to the parent; the session serves the next query
            emit("done", query=i, error=f"{type(exc).__name__}: {exc}".split("\n")[0][:400])
        else:
            emit("done", query=i, seconds=time.monotonic() - t0)
        i += 1
    spark.stop()
    emit("exit")
    return 0


class BatchPeer(PeerSide):
    """The peer's child (spark_peer.PeerSide: spawn, start, roots, stop) serving batch queries."""

    script = os.path.abspath(__file__)

    def run_query(self, data: str, out: str, shuffle: int) -> dict:
        """One query: its time in the child, and the parent's go file -> `done` event."""
        i = self.next
        self.next += 1
        t0 = time.monotonic()
        q = {"input": data, "out": out, "shuffle_partitions": shuffle}
        write_atomically(self.go_file(i), json.dumps(q))
        done = self.child.wait_for("done", self.timeout, query=i)
        if done.get("error"):
            raise RunError(f"the peer's query failed: {done['error']}")
        return {"time": done["seconds"], "parent_time": time.monotonic() - t0}


# ================================================================================================
# input data
# ================================================================================================
def cached_page_views(root: str, events: int, files: int, seed: int = 7) -> tuple[str, dict[str, int]]:
    """Page views of examples/generate_page_views.py under `root`, generated once per (events, files,
    seed) and reused: (the directory of the *.jsonl files, the expected count per url)."""
    from generate_page_views import generate

    base = os.path.join(os.path.abspath(root), f"page-views-{events}x{files}-seed{seed}")
    data, expected_path = os.path.join(base, "events"), os.path.join(base, "expected.json")
    if os.path.exists(expected_path):
        with open(expected_path) as f:
            expected = json.load(f)
        log(f"using cached input {data} ({events:,} events, {len(expected)} urls)")
        return data, expected
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.monotonic()
    expected = generate(data, events=events, files=files, urls=10_000, seed=seed)
    write_atomically(expected_path, json.dumps(expected))  # last: marks the directory complete
    log(f"generated {events:,} events in {files} files into {data} in {time.monotonic() - t0:.0f}s")
    return data, expected


def input_rows(directory: str) -> collections.Counter:
    """Every input row as the copy job writes it (`url,user,ts`), with its multiplicity."""
    rows: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    e = json.loads(line)
                    rows[f"{e['url']},{e['user']},{e['ts']}"] += 1
    return rows


# ================================================================================================
# output checks
# ================================================================================================
def counts_check(parts: Iterable[tuple[str, Any]], expected: dict[str, int], want_files: int | None) -> dict:
    """bench/output_check.py's rules over committed `key,count` parts (no line twice, counts increasing,
    final counts exact), plus the batch rule: each key written once. `want_files`: the number of parts
    there must be (one per sink subtask), None: any."""
    from output_check import check_updates

    check = check_updates(parts, expected)
    text = check.describe()
    ok = check.ok
    if ok and check.lines != len(check.final):
        ok, text = False, f"VIOLATION: {check.lines:,} lines for {len(check.final):,} keys: a key written twice"
    elif ok and want_files is not None and check.files != want_files:
        ok, text = False, f"VIOLATION: {check.files} parts, expected {want_files} (one per sink subtask)"
    elif ok:
        text = f"exact: {len(check.final):,} urls once each, {check.files} part{'s' if check.files != 1 else ''}"
    return {"check_ok": ok, "check": text}


def sluice_counts(out: str, expected: dict[str, int], sink_parallelism: int) -> dict:
    from output_check import sluice_parts

    try:
        return counts_check(sluice_parts(out), expected, sink_parallelism)
    except (OSError, ValueError) as exc:
        return {"check_ok": False, "check": f"unreadable output: {type(exc).__name__}: {exc}"}


def peer_counts(out: str, expected: dict[str, int]) -> dict:
    """The peer's committed output: `_SUCCESS` there, then every part-*.csv."""
    from output_check import _csv_lines

    if not os.path.exists(os.path.join(out, "_SUCCESS")):
        return {"check_ok": False, "check": "no _SUCCESS: the write did not commit"}

    def parts():
        for path in sorted(glob.glob(os.path.join(out, "part-*"))):
            with open(path) as f:
                yield path, _csv_lines(f.read())

    return counts_check(parts(), expected, None)


def copy_check(out: str, expected: collections.Counter) -> dict:
    """Every input row exactly once among the committed parts of the copy job."""
    from sluice.output import committed_parts

    got: collections.Counter = collections.Counter()
    files = committed_parts(out)
    for path in files:
        with open(path) as f:
            got.update(line.rstrip("\n") for line in f if line.strip())
    if got == expected:
        return {"check_ok": True, "check": f"exact: {sum(got.values()):,} rows once each in {len(files)} parts"}
    twice = sum((got - expected).values())
    missing = sum((expected - got).values())
    return {"check_ok": False, "check": f"VIOLATION: {twice:,} rows too many, {missing:,} missing"}


# ================================================================================================
# Sluice
# ================================================================================================
def parse_config(text: str) -> tuple[int, int, tuple[str, ...], str]:
    """`2x1` or `2x1/local[2]` -> (TaskManagers, slots, extra `cluster start` args, label)."""
    shape, _, master = text.strip().partition("/")
    tms, slots = (int(x) for x in shape.lower().split("x"))
    extra = ("-D", f"spark.master={master}") if master else ()
    label = f"{tms} TM x {slots} slot{'s' if slots > 1 else ''}, p={tms * slots}" + (f", {master}" if master else "")
    return tms, slots, extra, label


def new_cluster(work: str, name: str, taskmanagers: int, slots: int, extra: tuple[str, ...] = ()):
    from recovery_suite import _cluster_cls

    return _cluster_cls()(os.path.join(work, name), taskmanagers, slots, extra)


def submit(cluster, jobfile: str, parallelism: int, job_args: Sequence[str]) -> str:
    from page_views_bench import sluice

    cmd = ("run", jobfile, "--detach", "--parallelism", str(parallelism), "--cluster-dir", cluster.dir)
    proc = sluice(*cmd, "--", *job_args, timeout=300)
    return proc.stdout.strip().splitlines()[-1].strip()


def batch_job(cluster, jobfile: str, parallelism: int, job_args: Sequence[str], timeout: float) -> dict:
    """`sluice run --detach` of a bounded job, followed to its end: wall (CLI started -> FINISHED seen),
    the JobManager's submitted -> ended, the CLI's part (started -> submitted), the final status."""
    from page_views_bench import follow

    t_launch = time.time()
    job_id = submit(cluster, jobfile, parallelism, job_args)
    r = follow(cluster, job_id, timeout, t_launch)
    if r["state"] != "FINISHED":
        raise RunError(f"job {job_id} ended {r['state']}: {r['status']['failure'] or r['status']['message']}")
    return {
        "job_id": job_id,
        "time": r["t_end_seen"] - t_launch,
        "jm_time": (r["ended_ms"] - r["submitted_ms"]) / 1000,
        "client": r["submitted_ms"] / 1000 - t_launch,
        "status": r["status"],
    }


def metered(r: dict, systems: Mapping[str, Callable[[], Iterable[int]]], events: int, limit: float, body) -> None:
    """Run `body()` (its figures into `r`, a failure as r["error"]) under a ResourceMeter of `systems`;
    the load rule's figures into `r`."""
    from procstat import ResourceMeter

    meter = ResourceMeter(dict(systems)).start()
    try:
        r.update(body())
    except Exception as exc:  # noqa: BLE001 — a failed run is reported, the others go on
        r["error"] = f"{type(exc).__name__}: {exc}".split("\n")[0][:400]
    finally:
        r.update(usage_figures(meter.stop(), events, limit))


# ================================================================================================
# the invocation
# ================================================================================================
class Bench:
    def __init__(self, args: argparse.Namespace, work: str):
        self.args, self.work = args, work
        self.runs: list[dict] = []
        self.notes: list[str] = []
        self.failed = False
        self.n = 0
        self.clusters: list = []
        self.peer: BatchPeer | None = None
        self.chosen: dict[str, Any] = {}  # what the tuning chose, for the report

    def record(self, r: dict, line: str) -> dict:
        r["ok"] = "error" not in r and bool(r.get("check_ok"))
        what = f"run {r['n']} ({r['part']}, {r['arm']}, {r['phase']})"
        if "error" in r:
            self.notes.append(f"{what} failed: {r['error']}")
            self.failed = True
        elif not r.get("check_ok"):
            self.notes.append(f"{what}: OUTPUT CHECK FAILED: {r.get('check')} (output kept in {r.get('out')})")
            self.failed = True
        elif r.get("out"):
            shutil.rmtree(r["out"], ignore_errors=True)
        self.runs.append(r)
        status = r.get("error") or r.get("check")
        excluded = " (excluded)" if r.get("excluded") else ""
        log(f"{what}: {line}; foreign {fmt(r.get('foreign_cores'))}{excluded}; {status}")
        return r

    def new_run(self, part: str, arm: str, phase: str, **fields: Any) -> dict:
        waited = self.wait_quiet() if phase != "warm-up" else 0.0
        self.n += 1
        return {"n": self.n, "part": part, "arm": arm, "phase": phase, "waited": waited, **fields}

    def ours(self) -> list[int]:
        """Every process of this invocation's clusters and peer (roots; the meter adds descendants)."""
        return [p for c in self.clusters for p in c.all_pids()] + (self.peer.roots() if self.peer else [])

    def wait_quiet(self) -> float:
        """Before a counted run on a shared machine: wait until other processes use at most the load rule's
        cores (a 2 s sample), for at most --quiet-wait seconds. The runs are judged by the load rule all
        the same; this only spares runs that it would exclude. Returns the seconds waited."""
        from procstat import ResourceMeter

        a = self.args
        if not a.max_foreign_cores or a.quiet_wait <= 0:
            return 0.0
        t0 = time.monotonic()
        while True:
            meter = ResourceMeter({MEASURED: self.ours}).start()
            time.sleep(2)
            foreign = meter.stop().foreign_cores()
            waited = time.monotonic() - t0
            if foreign <= a.max_foreign_cores:
                if waited > 5:
                    log(f"  the machine is quiet again after {waited:.0f}s")
                return waited
            if waited > a.quiet_wait:
                log(f"  still {foreign:.2f} foreign cores after {waited:.0f}s: running anyway (the load rule judges)")
                return waited
            if waited < 3:
                log(f"  other processes use {foreign:.2f} cores: waiting up to {a.quiet_wait:.0f}s for a quiet machine")
            time.sleep(3)

    def start_cluster(self, name: str, tms: int, slots: int, extra: tuple[str, ...] = ()):
        c = new_cluster(self.work, name, tms, slots, extra)
        self.clusters.append(c)
        c.start()
        return c

    def stop_cluster(self, c) -> None:
        try:
            c.stop()
        finally:
            if c in self.clusters:
                self.clusters.remove(c)

    def stop_all(self) -> None:
        from structured_streaming_bench import Child

        if self.peer is not None:
            try:
                self.peer.stop()
            except BaseException as exc:  # noqa: BLE001 — teardown goes on
                log(f"warning: stopping the peer: {exc}")
            self.peer = None
        for c in list(self.clusters):
            try:
                self.stop_cluster(c)
            except BaseException as exc:  # noqa: BLE001 — teardown goes on to the other clusters
                log(f"warning: stopping {c.dir}: {exc}")
        Child.kill_all()

    # -- 1. page views ------------------------------------------------------------------------------
    def page_views(self) -> None:
        a = self.args
        data, expected = cached_page_views(a.data_dir, a.events, a.files)
        peer = BatchPeer(self.work, 2, a.job_timeout)
        self.peer = peer
        peer.spawn()  # its JVM starts while the cluster does
        configs = [c for c in a.sluice_configs.split(",") if c.strip()]
        shuffles = [int(x) for x in a.peer_shuffle.split(",") if x.strip()]
        cluster: Any = None
        current = configs[0]

        def others(system: str) -> Callable[[], list[int]]:
            if system == "Sluice":
                return peer.roots
            return lambda: sorted(cluster.pids) if cluster is not None else []

        def sluice_run(phase: str) -> dict:
            tms, slots, _extra, label = parse_config(current)
            r = self.new_run("page-views", "Sluice", phase, config=label, events=a.events)
            r["out"] = os.path.join(self.work, f"out-{r['n']:04d}")

            def body() -> dict:
                x = batch_job(
                    cluster, PAGE_VIEWS_BATCH, tms * slots, ("--input", data, "--output", r["out"]), a.job_timeout
                )
                x.pop("status")
                return x | sluice_counts(r["out"], expected, tms * slots)

            systems = {MEASURED: lambda: sorted(cluster.pids), OTHERS: others("Sluice")}
            metered(r, systems, a.events, a.max_foreign_cores, body)
            return self.record(
                r,
                f"{label}: {fmt(r.get('time'))} s (JobManager {fmt(r.get('jm_time'))} s, "
                f"CPU {fmt(r.get('cpu_per_m'))} s/M)",
            )

        def peer_run(phase: str, shuffle: int) -> dict:
            r = self.new_run("page-views", "peer", phase, config=f"local[2], shuffle {shuffle}", events=a.events)
            r["out"] = os.path.join(self.work, f"out-{r['n']:04d}")
            r["shuffle"] = shuffle

            def body() -> dict:
                return peer.run_query(data, r["out"], shuffle) | peer_counts(r["out"], expected)

            systems = {MEASURED: peer.roots, OTHERS: others("peer")}
            metered(r, systems, a.events, a.max_foreign_cores, body)
            return self.record(
                r,
                f"shuffle {shuffle}: {fmt(r.get('time'))} s (go -> done {fmt(r.get('parent_time'))} s, "
                f"CPU {fmt(r.get('cpu_per_m'))} s/M)",
            )

        def fastest(rs: list[dict], key: str) -> Any:
            by: dict[Any, list[float]] = collections.defaultdict(list)
            for r in kept(rs):
                by[r[key]].append(r["time"])
            return min(by, key=lambda k: median_ci(by[k]).median or 0.0) if by else None

        def use(config: str) -> None:
            nonlocal cluster, current
            if cluster is not None:
                self.stop_cluster(cluster)
            tms, slots, extra, _ = parse_config(config)
            # a new directory per start: the client caches TLS files by path (sluice/security/tls.py), and a
            # cluster started again in the same directory has a new CA
            name = f"cluster-pv-{config.replace('/', '-')}-{sum(1 for r in self.runs if r['phase'] == 'warm-up')}"
            cluster = self.start_cluster(name, tms, slots, extra)
            current = config
            sluice_run("warm-up")

        try:
            peer.start()
            peer_run("warm-up", shuffles[0])
            tuned = []
            if len(shuffles) > 1:
                tuned = [peer_run("tuning", s) for _ in range(a.tune_runs) for s in shuffles]
            shuffle = fastest(tuned, "shuffle") or shuffles[0]
            self.chosen["shuffle"] = shuffle
            tried: dict[str, list[dict]] = {}
            for config in configs:
                use(config)
                if len(configs) > 1:
                    tried[config] = [sluice_run("tuning") for _ in range(a.tune_runs)]
            best = configs[0]
            if len(configs) > 1:
                medians = {c: median_ci(r["time"] for r in kept(rs)).median for c, rs in tried.items()}
                ranked = [c for c in configs if medians[c] is not None]
                best = min(ranked, key=lambda c: medians[c] or 0.0) if ranked else configs[0]
                log(f"Sluice's fastest configuration: {parse_config(best)[3]} (tuning medians {medians})")
                if best != current:
                    use(best)
            self.chosen["sluice"] = parse_config(best)[3]
            for i in range(a.runs):
                for system in ("Sluice", "peer") if i % 2 == 0 else ("peer", "Sluice"):
                    sluice_run("measured") if system == "Sluice" else peer_run("measured", shuffle)
        finally:
            if cluster is not None:
                self.stop_cluster(cluster)
            self.peer = None
            peer.stop()

    # -- 2. failover ------------------------------------------------------------------------------
    def failover(self) -> None:
        from generate_page_views import generate
        from recovery_suite import warm

        a = self.args
        data = os.path.join(self.work, "failover-in")
        generate(data, events=a.failover_events, files=a.failover_files, urls=1000, seed=21)
        rows = input_rows(data)
        cluster = self.start_cluster("cluster-failover", 4, 2)
        try:
            for i in range(a.failover_runs):
                for strategy in STRATEGIES if i % 2 == 0 else tuple(reversed(STRATEGIES)):
                    cluster.wait_full(a.job_timeout)
                    warm(cluster, data, os.path.join(self.work, f"warm-{self.n + 1:04d}"), a.job_timeout)
                    self.failover_run(cluster, strategy, data, rows, victim_subtask=i % 4)
        finally:
            self.stop_cluster(cluster)

    def failover_run(self, cluster, strategy: str, data: str, rows: collections.Counter, victim_subtask: int) -> dict:
        a = self.args
        r = self.new_run("failover", strategy, "measured", events=a.failover_events)
        r["out"] = os.path.join(self.work, f"out-{r['n']:04d}")

        def body() -> dict:
            x: dict = {}
            t_launch = time.monotonic()
            job_args = ("--input", data, "--output", r["out"], "--strategy", strategy, "--pause", str(a.failover_pause))
            job_id = submit(cluster, FAILOVER_JOB, 4, job_args)
            x["job_id"] = job_id
            s = self._kill_point(cluster, job_id, t_launch)
            before = {t["subtask"]: (t["attempt"], t["execution_attempt"]) for t in s["tasks"]}
            restarts_before = s["restarts"]
            hosts = collections.Counter(t["taskmanager"] for t in s["tasks"])
            target = next(t for t in s["tasks"] if t["subtask"] == victim_subtask)
            if hosts[target["taskmanager"]] != 1:  # a TaskManager hosting this subtask alone
                target = next((t for t in s["tasks"] if hosts[t["taskmanager"]] == 1), None)
                if target is None:
                    raise RunError(f"no TaskManager hosts exactly one subtask: {dict(hosts)}")
            cluster.reload()
            pid = cluster.taskmanager_pid(target["taskmanager"])
            t_kill = time.monotonic()
            os.killpg(pid, signal.SIGKILL)  # the TaskManager and its Spark JVM
            x.update(victim=target["subtask"], kill_at=t_kill - t_launch, tasks=len(s["tasks"]))
            log(f"  killed TaskManager {target['taskmanager']} (subtask {target['subtask']}) {x['kill_at']:.1f}s in")
            t_detect = None
            deadline = t_kill + a.job_timeout
            while True:
                s = cluster.status(job_id)
                now = time.monotonic()
                changed = [t for t in s["tasks"] if (t["attempt"], t["execution_attempt"]) != before.get(t["subtask"])]
                if t_detect is None and (
                    s["restarts"] > restarts_before or changed or any(t["state"] != "RUNNING" for t in s["tasks"])
                ):
                    t_detect = now
                if (
                    changed
                    and s["state"] in ("RUNNING", "FINISHED")
                    and all(t["state"] in ("RUNNING", "FINISHED") for t in s["tasks"])
                ):
                    break
                if s["state"] in ("FAILED", "CANCELED"):
                    raise RunError(f"job {job_id} ended {s['state']}: {s['failure'] or s['message']}")
                if now > deadline:
                    raise RunError(f"job {job_id}: tasks not RUNNING again {a.job_timeout:.0f}s after the kill")
                time.sleep(FAST_POLL)
            x.update(
                recovery=now - t_kill,
                detect=(t_detect or now) - t_kill,
                redeploy=now - (t_detect or now),
                restarted=len(changed),
                job_restarted=any(t["attempt"] > before.get(t["subtask"], (0, 0))[0] for t in s["tasks"]),
            )
            from page_views_bench import follow

            end = follow(cluster, job_id, a.job_timeout, time.time())
            if end["state"] != "FINISHED":
                raise RunError(f"job {job_id} ended {end['state']}: {end['status']['failure']}")
            x.update(total=time.monotonic() - t_launch, restarts=end["status"]["restarts"] - restarts_before)
            return x | copy_check(r["out"], rows)

        metered(r, {MEASURED: cluster.all_pids}, a.failover_events, a.max_foreign_cores, body)
        return self.record(
            r,
            f"kill at {fmt(r.get('kill_at'), '.1f')}s; detected {fmt(r.get('detect'))}s, recovered "
            f"{fmt(r.get('recovery'))}s after; {r.get('restarted')}/{r.get('tasks')} tasks restarted",
        )

    def _kill_point(self, cluster, job_id: str, t_launch: float) -> dict:
        """The job's status once every task runs and a checkpoint completed --kill-after seconds ago."""
        a = self.args
        t_ckpt = None
        deadline = t_launch + a.job_timeout
        while True:
            s = cluster.status(job_id)
            if s["state"] in ("FINISHED", "FAILED", "CANCELED"):
                raise RunError(f"job {job_id} ended {s['state']} before the kill (make --failover-events larger)")
            ready = s["state"] == "RUNNING" and s["tasks"] and all(t["state"] == "RUNNING" for t in s["tasks"])
            if ready and (s.get("last_completed_checkpoint") or 0) >= 1:
                t_ckpt = t_ckpt or time.monotonic()
                if time.monotonic() - t_ckpt >= a.kill_after:
                    return s
            if time.monotonic() > deadline:
                raise RunError(f"job {job_id}: no completed checkpoint with every task running")
            time.sleep(FAST_POLL)

    # -- 3. speculation ---------------------------------------------------------------------------
    def speculation(self) -> None:
        from generate_page_views import generate

        a = self.args
        data = os.path.join(self.work, "speculation-in")
        expected = generate(data, events=a.speculation_events, files=a.speculation_files, urls=500, seed=13)
        cluster = self.start_cluster("cluster-speculation", 2, 2)
        try:
            self.speculation_run(cluster, "none", "warm-up", data, expected)
            for i in range(a.speculation_runs):
                k = i % len(ARMS)
                for arm in ARMS[k:] + ARMS[:k]:
                    self.speculation_run(cluster, arm, "measured", data, expected)
        finally:
            self.stop_cluster(cluster)

    def speculation_run(self, cluster, arm: str, phase: str, data: str, expected: dict) -> dict:
        a = self.args
        cluster.wait_full(a.job_timeout)  # a losing attempt asleep holds its slot until it wakes
        r = self.new_run("speculation", arm, phase, events=a.speculation_events)
        r["out"] = os.path.join(self.work, f"out-{r['n']:04d}")
        marker = os.path.join(self.work, f"straggler-{r['n']:04d}")
        job_args = [data, r["out"], str(a.speculation_delay)]
        if arm != "none":
            job_args += [marker, str(a.straggle)]
        if arm == "on":
            job_args.append("--speculative")

        def body() -> dict:
            x = batch_job(cluster, BATCH_COUNTS, 4, job_args, a.job_timeout)
            tasks = x.pop("status")["tasks"]
            backups = [t for t in tasks if t["speculative"]]
            x.update(
                backups=len(backups),
                backup_won=any(t["state"] == "FINISHED" for t in backups),
                straggled=os.path.exists(marker),
            )
            return x | sluice_counts(r["out"], expected, 4)

        metered(r, {MEASURED: cluster.all_pids}, a.speculation_events, a.max_foreign_cores, body)
        return self.record(
            r, f"{fmt(r.get('time'))} s (JobManager {fmt(r.get('jm_time'))} s); backups {r.get('backups')}"
        )


# ================================================================================================
# report
# ================================================================================================
def ratio_ci(num: Sequence[float], den: Sequence[float]) -> Estimate:
    """median(num) / median(den) with a percentile-bootstrap 95 % interval (each side resampled on its
    own, stats.SEED)."""
    import numpy as np

    x, y = np.array(num, dtype=float), np.array(den, dtype=float)
    if len(x) == 0 or len(y) == 0:
        return Estimate(None, None, None, 0)
    ratio = float(np.median(x) / np.median(y))
    if len(x) < 2 or len(y) < 2:
        return Estimate(ratio, None, None, 1)
    rng = np.random.default_rng(SEED)
    mx = np.median(x[rng.integers(0, len(x), size=(RESAMPLES, len(x)))], axis=1)
    my = np.median(y[rng.integers(0, len(y), size=(RESAMPLES, len(y)))], axis=1)
    low, high = np.percentile(mx / my, [2.5, 97.5])
    return Estimate(ratio, float(low), float(high), min(len(x), len(y)))


def values(rs: Iterable[dict], key: str) -> list[float]:
    return [r[key] for r in kept(rs) if r.get(key) is not None]


def est(rs: Iterable[dict], key: str) -> Estimate:
    rs = list(rs)
    return median_ci(values(rs, key), excluded=sum(1 for r in valid(rs) if r.get("excluded")))


def counts_cell(rs: Sequence[dict]) -> str:
    return f"{len(kept(rs))}/{len(valid(rs))}/{len(rs)}"


def check_cell(r: dict) -> str:
    if r.get("error"):
        return f"failed: {r['error'][:200]}"
    return ("" if r.get("check_ok") else "**NO**: ") + str(r.get("check"))


def foreign_cell(r: dict) -> str:
    return f"{fmt(r.get('foreign_cores'))}{' (excluded)' if r.get('excluded') else ''}"


def goal(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**missed**")


def page_views_report(b: Bench) -> list[str]:
    a = b.args
    rs = [r for r in b.runs if r["part"] == "page-views"]
    if not rs:
        return []
    m = {s: [r for r in rs if r["phase"] == "measured" and r["arm"] == s] for s in ("Sluice", "peer")}
    ratio = ratio_ci(values(m["Sluice"], "time"), values(m["peer"], "time"))
    ratio_jm = ratio_ci(values(m["Sluice"], "jm_time"), values(m["peer"], "time"))
    out = [
        "### 1. Batch page views: Sluice BATCH vs plain Spark batch",
        "",
        f"Input: {a.events:,} page views in {a.files} files (examples/generate_page_views.py, 10,000 urls, seed 7; "
        f"cached under {os.path.relpath(os.path.abspath(a.data_dir), REPO)}/). Sluice: `examples/page_views_batch.py` "
        f"(no --top-output) on {b.chosen.get('sluice', '—')}, one cluster started before the runs; *time* = `sluice "
        "run --detach` started → FINISHED seen by a 0.1 s status poll (CLI start-up, submission, scheduling, both "
        "stages, the commit of the output); *JobManager* = its submitted → ended. The peer: "
        '`spark.read.schema(...).json(dir).groupBy("url").count().write.csv(out)` in one warm SparkSession '
        f"(local[2], shuffle partitions {b.chosen.get('shuffle', '—')}) in a child process; *time* = the query "
        "alone (read, aggregate, write, job commit); *go → done* = the harness's go file → the child's done "
        "event. Neither side's time includes starting a cluster or a SparkSession. Runs alternate S P, P S, …; "
        "each output checked: every url once with exactly the generator's count.",
        "",
        "| system | configuration | runs kept/valid/all | time s | JobManager s | go → done s | CPU s per M events |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, label in (("Sluice", b.chosen.get("sluice", "—")), ("peer", f"local[2], shuffle {b.chosen.get('shuffle')}")):
        if m[s]:
            out.append(
                f"| {s} | {label} | {counts_cell(m[s])} | {fmt_estimate(est(m[s], 'time'), '.2f')} | "
                f"{fmt_estimate(est(m[s], 'jm_time'), '.2f') if s == 'Sluice' else '—'} | "
                f"{fmt_estimate(est(m[s], 'parent_time'), '.2f') if s == 'peer' else '—'} | "
                f"{fmt_estimate(est(m[s], 'cpu_per_m'), '.2f')} |"
            )
    met = None if ratio.median is None else ratio.median <= 1.2
    out += [
        "",
        f"**Sluice / peer time: {fmt_estimate(ratio, '.2f')}** (goal ≤ 1.2: {goal(met)}); with Sluice's "
        f"JobManager time instead: {fmt_estimate(ratio_jm, '.2f')}.",
        "",
    ]
    tuning = [r for r in rs if r["phase"] == "tuning"]
    if tuning:
        by: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
        for r in tuning:
            by[(r["arm"], r["config"])].append(r)
        out += [
            "Tuning (after each configuration's warm-up; the fastest median measured): "
            + "; ".join(f"{s} {c}: {', '.join(fmt(r.get('time')) for r in rr)} s" for (s, c), rr in sorted(by.items()))
            + ".",
            "",
        ]
    return out + run_table(
        rs,
        ("time s", "JobManager s", "go → done s", "CPU s/M"),
        lambda r: (fmt(r.get("time")), fmt(r.get("jm_time")), fmt(r.get("parent_time")), fmt(r.get("cpu_per_m"))),
        system_column=True,
    )


def failover_report(b: Bench) -> list[str]:
    a = b.args
    rs = [r for r in b.runs if r["part"] == "failover"]
    if not rs:
        return []
    out = [
        "### 2. Region vs full failover (streaming, 4 independent pipelines)",
        "",
        f"`bench/jobs/failover_copy.py` at parallelism 4 on 4 TaskManagers x 2 slots (each subtask on its own "
        f"TaskManager), {a.failover_events:,} page views in {a.failover_files} files, {a.failover_pause} s per batch "
        f"in the paced map, checkpoints every 500 ms; kill -9 of the process group of the TaskManager hosting one "
        f"subtask {a.kill_after:g} s after the first completed checkpoint. *Detected*: kill → the first status poll "
        "(every 50 ms) showing the failure (a task not RUNNING, a new attempt or a restart counted). *Recovery*: kill "
        "→ every task RUNNING (or FINISHED) again, the restarted ones in a new execution; *after detection*: the "
        "recovery less the detection (what the strategy decides). *Restarted*: tasks whose (job attempt, execution "
        "attempt) rose. Output: every input row exactly once.",
        "",
        "| strategy | runs kept/valid/all | detected s | recovery s | after detection s | tasks restarted (per run) | "
        "job attempt rose | restarts | job total s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    per = {s: [r for r in rs if r["arm"] == s] for s in STRATEGIES}
    for s in STRATEGIES:
        if per[s]:
            restarted = [f"{r['restarted']}/{r['tasks']}" for r in kept(per[s])]
            out.append(
                f"| {s} | {counts_cell(per[s])} | {fmt_estimate(est(per[s], 'detect'), '.2f')} | "
                f"{fmt_estimate(est(per[s], 'recovery'), '.2f')} | {fmt_estimate(est(per[s], 'redeploy'), '.2f')} | "
                f"{', '.join(restarted) or '—'} | "
                f"{sum(1 for r in kept(per[s]) if r.get('job_restarted'))}/{len(kept(per[s]))} | "
                f"{', '.join(str(r.get('restarts')) for r in kept(per[s])) or '—'} | "
                f"{fmt_estimate(est(per[s], 'total'), '.1f')} |"
            )
    region = kept(per["region"])
    met = None if not region else all(r["restarted"] * 4 <= r["tasks"] for r in region)
    ratio = ratio_ci(values(per["full"], "recovery"), values(per["region"], "recovery"))
    after = ratio_ci(values(per["full"], "redeploy"), values(per["region"], "redeploy"))
    out += [
        "",
        f"**Region restarts ≤ 1/4 of the tasks in every kept run: {goal(met)}.** Full / region: recovery "
        f"{fmt_estimate(ratio, '.2f')}, after detection {fmt_estimate(after, '.2f')}.",
        "",
    ]
    return out + run_table(
        rs,
        (
            "victim subtask",
            "kill at s",
            "detected s",
            "recovery s",
            "after detection s",
            "restarted",
            "restarts",
            "total s",
        ),
        lambda r: (
            str(r.get("victim", "—")),
            fmt(r.get("kill_at"), ".1f"),
            fmt(r.get("detect")),
            fmt(r.get("recovery")),
            fmt(r.get("redeploy")),
            f"{r.get('restarted', '—')}/{r.get('tasks', '—')}",
            str(r.get("restarts", "—")),
            fmt(r.get("total"), ".1f"),
        ),
    )


def speculation_report(b: Bench) -> list[str]:
    a = b.args
    rs = [r for r in b.runs if r["part"] == "speculation"]
    if not rs:
        return []
    per = {s: [r for r in rs if r["arm"] == s and r["phase"] == "measured"] for s in ARMS}
    names = {"off": "straggler, speculation off", "on": "straggler, speculation on", "none": "no straggler"}
    out = [
        "### 3. Speculative execution with one straggler (BATCH)",
        "",
        f"`tests/integration/jobs/batch_counts.py` at parallelism 4 on 2 TaskManagers x 2 slots, "
        f"{a.speculation_events:,} page views in {a.speculation_files} files, {a.speculation_delay} s per source "
        f"batch; the straggler (the first source attempt to take the marker file) sleeps {a.straggle:g} s once. "
        "Speculation with the defaults (min-finished 0.75, multiplier 1.5, min-runtime 1 s). *Time*: `sluice run "
        "--detach` started → FINISHED seen (0.1 s poll); *JobManager*: submitted → ended. Exact counts checked.",
        "",
        "| arm | runs kept/valid/all | time s | JobManager s | backups (won) |",
        "|---|---|---|---|---|",
    ]
    for s in ARMS:
        if per[s]:
            backups = ", ".join(f"{r['backups']}{' (won)' if r.get('backup_won') else ''}" for r in kept(per[s]))
            out.append(
                f"| {names[s]} | {counts_cell(per[s])} | {fmt_estimate(est(per[s], 'time'), '.2f')} | "
                f"{fmt_estimate(est(per[s], 'jm_time'), '.2f')} | {backups or '—'} |"
            )
    ratio = ratio_ci(values(per["on"], "time"), values(per["off"], "time"))
    cut = None if ratio.median is None else 1 - ratio.median
    cut_text = "—" if cut is None else f"{cut * 100:.0f} %"
    if ratio.low is not None and ratio.high is not None:
        cut_text += f" [{(1 - ratio.high) * 100:.0f}–{(1 - ratio.low) * 100:.0f} %]"
    out += [
        "",
        f"**Speculation cuts the time by {cut_text}** (on / off {fmt_estimate(ratio, '.2f')}; goal ≥ 40 %: "
        f"{goal(None if cut is None else cut >= 0.4)}).",
        "",
    ]
    return out + run_table(
        rs,
        ("time s", "JobManager s", "backups", "straggled"),
        lambda r: (
            fmt(r.get("time")),
            fmt(r.get("jm_time")),
            f"{r.get('backups', '—')}{' (won)' if r.get('backup_won') else ''}",
            "yes" if r.get("straggled") else "no",
        ),
    )


def run_table(
    rs: Sequence[dict], heads: Sequence[str], cells: Callable[[dict], Sequence[str]], system_column: bool = False
) -> list[str]:
    first = ("system", "configuration") if system_column else ("arm",)
    head = ("run", "phase", *first, *heads, "foreign cores", "output")
    rows = [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rs:
        lead = (r["arm"], r.get("config", "")) if system_column else (r["arm"],)
        row = (str(r["n"]), r["phase"], *lead, *cells(r), foreign_cell(r), check_cell(r))
        rows.append("| " + " | ".join(row) + " |")
    return ["Every run:", "", *rows, ""]


def report(b: Bench, command: str, facts: dict, seconds: float) -> str:
    a = b.args
    lines = section_head("Batch mode and fine-grained recovery", command, facts)
    lines += [
        f"Load rule: a run during which processes of neither the measured system nor the harness used more than "
        f"{a.max_foreign_cores:g} cores on average is excluded (`procstat.py`); medians with percentile-bootstrap "
        "95 % intervals over the kept runs; ratios of medians with a bootstrap interval (both arms resampled). "
        "*Runs kept/valid/all*: valid = completed with its output exact.",
        "",
    ]
    lines += page_views_report(b) + failover_report(b) + speculation_report(b)
    if any(r.get("excluded") for r in b.runs):
        n_out = sum(1 for r in b.runs if r.get("excluded"))
        lines += [f"The load rule left out {n_out} run{'s' if n_out != 1 else ''} (marked above).", ""]
    waits = [r["waited"] for r in b.runs if r.get("waited", 0) > 5]
    if waits:
        b.notes.append(
            f"Other processes loaded the machine before {len(waits)} runs; the harness waited {sum(waits):.0f} s in "
            f"all (at most {max(waits):.0f} s before one run) for it to be quiet (--quiet-wait)."
        )
    b.notes.append(f"The invocation took {seconds:.0f} s.")
    return "\n".join(lines + notes_lines(b.notes))


# ================================================================================================
# main
# ================================================================================================
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from procstat import FOREIGN_CORES_LIMIT

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes and 2 runs per arm (a few minutes)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"which of {', '.join(PARTS)} to run")
    for key, value in FULL.items():
        kind = float if isinstance(value, float) else (int if isinstance(value, int) else str)
        ap.add_argument("--" + key.replace("_", "-"), type=kind, default=None, help=f"full {value}; quick {QUICK[key]}")
    ap.add_argument("--failover-pause", type=float, default=0.1, help="seconds per batch in the failover job's map")
    ap.add_argument("--kill-after", type=float, default=1.0, help="seconds after the first completed checkpoint")
    ap.add_argument("--speculation-delay", type=float, default=0.2, help="seconds per source batch (batch_counts)")
    ap.add_argument("--max-foreign-cores", type=float, default=FOREIGN_CORES_LIMIT, help="the load rule (0: off)")
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=900,
        help="before each counted run, wait up to this many seconds for other processes to use at most "
        "--max-foreign-cores (0: do not wait)",
    )
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"), help="where the page-view input is cached")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to ('-': none)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}; choose among {', '.join(PARTS)}")
    return args


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "batch-bench-", log)
    b = Bench(args, work)
    t0 = time.monotonic()
    interrupted = False
    try:
        for part in PARTS:
            if part in args.parts:
                log(f"== {part}")
                getattr(b, part.replace("-", "_"))()
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping every cluster and child")
        raise
    except BaseException as exc:
        b.failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        b.notes.append(f"aborted: {type(exc).__name__}: {exc}".split("\n")[0])
        raise
    finally:
        b.stop_all()
        if b.runs:
            section = report(b, command, facts, time.monotonic() - t0)
            if args.out in ("", "-"):
                print("\n" + section, flush=True)
            else:
                publish(section, args.out, log)
        finish_workdir(work, temp and (interrupted or not b.failed) and not args.keep_workdir, log, "logs under */log/")
    return 1 if b.failed else 0


if __name__ == "__main__":
    run_main(main)
