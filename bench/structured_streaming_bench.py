"""Spark Structured Streaming peer of bench/page_views_bench.py: the same
running count of page views per url, on the same machine and the same data
(examples/generate_page_views.py's generate(): Zipf urls, 10,000 urls), as a
plain Spark Structured Streaming query, so that both can be put side by side.

    python bench/structured_streaming_bench.py [--events 1000000] [--files 8] [--max-files-per-trigger 1]
        [--trigger-ms MS] [--runs 3] [--session per-run|shared] [--input DIR]
        [--recovery-events 2000000] [--recovery-files 400] [--recovery-max-files-per-trigger 4]
        [--recovery-runs 3] [--recovery-input DIR] [--skip-recovery] [--skip-throughput]
        [--append bench/RESULTS.md] [--workdir DIR] [--keep-workdir] [--timeout 900]

The query (run in a child Python process, local[2], the settings of
taskmanager/spark_engine.py: shuffle partitions 2, UI off, Arrow on, driver
memory 2g):

    spark.readStream.schema("url string, user long, ts long")
         .option("maxFilesPerTrigger", N).json(DIR)
         .groupBy("url").count()
         .writeStream.outputMode("update").option("checkpointLocation", CKPT)
         .foreachBatch(write `url,count` lines to OUT/batch-<batch id>.csv).start()

Each batch's file is written to a temporary name and renamed to its batch id,
so that a batch replayed after a crash overwrites its own file (idempotent
sink; exactly-once together with the checkpoint's offset/commit logs). Every
run's output is checked (bench/output_check.py): the batch files in batch id
order hold no (url, count) line twice, each url's counts increase, and the
last count of each url equals generate()'s (or, with --input, the one counted
from the files in Python).

1. Throughput: one uncounted warm-up run, then --runs runs. --session per-run
   (default): each run is a fresh child process (fresh JVM): startup =
   SparkSession creation + query definition/start() (reported separately,
   also Python + pyspark import time); processing = start() returned ->
   processAllAvailable() returned; throughput = events / processing. --session
   shared: one child, one SparkSession; the warm-up and the runs are
   successive queries in it (a warm JVM, like Sluice's long-lived
   TaskManagers); the SparkSession creation is then paid once, by the warm-up.
   Per-batch latency: durationMs.triggerExecution of every micro-batch with
   input (StreamingQueryProgress), p50 / p99 over all counted runs.
2. Recovery: a child runs the query over a bigger input (--recovery-events in
   --recovery-files files, --recovery-max-files-per-trigger per batch); once
   a micro-batch is committed (CKPT/commits/<id> exists) the child's process
   group (Python driver + its JVM) gets SIGKILL; a new child is started at
   once on the same checkpointLocation and output dir. Measured from the
   kill: process start (Python + pyspark import), SparkSession ready, query
   started, first output file written after the kill (new name, or a replayed
   batch's file rewritten), first new commit. The restarted query runs to the
   end and its final counts are checked.

Results are printed and appended to --append as a dated Markdown section
("Spark Structured Streaming peer"). Every child (and its JVM) is killed on
exit, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench_common import (
    append_results,
    begin_run,
    finish_workdir,
    fmt,
    median,
    pct,
    run_main,
)
from stats import fmt_load, load1

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
SCHEMA = "url string, user long, ts long"
TAG = "@@sss-bench "  # prefix of the child's event lines on stdout
DIR_POLL = 0.02  # seconds between checkpoint/output directory listings (recovery)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ================================================================================================
# child: one SparkSession, one or more queries
# ================================================================================================
_EMIT_LOCK = threading.Lock()


def emit(event: str, **fields) -> None:
    fields.update(event=event, t=time.monotonic())  # CLOCK_MONOTONIC: comparable across processes
    with _EMIT_LOCK:
        sys.stdout.write(TAG + json.dumps(fields) + "\n")
        sys.stdout.flush()


def _brief(p: dict) -> dict:
    return {
        "batchId": p.get("batchId"),
        "numInputRows": p.get("numInputRows", 0),
        "timestamp": p.get("timestamp"),
        "durationMs": p.get("durationMs", {}),
    }


class ProgressStream(threading.Thread):
    """Emits each finished micro-batch's progress as a `batch` event while the query runs, so the
    parent has the batches of a child it kills (a timeline across the kill)."""

    def __init__(self, query, index: int):
        super().__init__(daemon=True)
        self.query, self.index = query, index
        self.seen: set = set()
        self.stopping = threading.Event()

    def poll(self) -> None:
        for p in _progress(self.query):
            if p.get("batchId") not in self.seen:
                self.seen.add(p.get("batchId"))
                emit("batch", query=self.index, progress=_brief(p))

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 — the query is stopping
                return


def _batch_writer(out: str):
    def write_batch(df, batch_id: int) -> None:
        t = df.toArrow()
        urls, counts = t.column("url").to_pylist(), t.column("count").to_pylist()
        tmp = os.path.join(out, f".batch-{batch_id:06d}.csv.tmp")
        with open(tmp, "w") as f:
            f.write("".join(f"{u},{c}\n" for u, c in zip(urls, counts, strict=True)))
        os.replace(tmp, os.path.join(out, f"batch-{batch_id:06d}.csv"))  # a replayed batch overwrites its file

    return write_batch


def _progress(query) -> list[dict]:
    try:
        return [json.loads(p.json()) for p in query._jsq.recentProgress()]
    except Exception:  # noqa: BLE001 — public API as a fallback
        return [json.loads(p.json) for p in query.recentProgress]


def child_spec(spec_path: str) -> dict:
    """A child's first step (this script's and those of the scripts that run their own child mode):
    the spec it was started with."""
    emit("python_ready")
    with open(spec_path) as f:
        spec = json.load(f)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    return spec


def spark_session(app_name: str, master: str, settings: dict[str, str]):
    """The child's SparkSession, its import and start reported (`imported`, `session`)."""
    from pyspark.sql import SparkSession

    emit("imported")
    t0 = time.monotonic()
    builder = SparkSession.builder.appName(app_name).master(master)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    emit("session", seconds=time.monotonic() - t0)
    return spark


def child_main(spec_path: str) -> int:
    spec = child_spec(spec_path)
    # spec "master", "shuffle_partitions" (bench/throughput_suite.py's sweeps): default local[2], 2
    settings = {
        # the settings of taskmanager/spark_engine.py
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(spec.get("shuffle_partitions", 2)),
        "spark.default.parallelism": str(spec.get("shuffle_partitions", 2)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        # keep every micro-batch's progress (default: the last 100)
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        # spec "conf": more settings over these (bench/recovery_suite.py: a standalone master's executors)
        **spec.get("conf", {}),
    }
    spark = spark_session("sss-page-views-bench", spec.get("master", "local[2]"), settings)
    for i, q in enumerate(spec["queries"]):
        if q.get("go_file"):  # the harness says when (runs alternating with another system's) ...
            while not os.path.exists(q["go_file"]):
                time.sleep(0.005)
            with open(q["go_file"]) as f:  # ... and may say what: its JSON updates the query
                text = f.read()
            q = {**q, **json.loads(text)} if text.strip() else q
            if q.get("exit"):
                break
        os.makedirs(q["out"], exist_ok=True)
        if q.get("shuffle_partitions"):
            spark.conf.set("spark.sql.shuffle.partitions", str(int(q["shuffle_partitions"])))
        t_def = time.monotonic()
        reader = spark.readStream.schema(SCHEMA)
        if q.get("max_files_per_trigger"):
            reader = reader.option("maxFilesPerTrigger", int(q["max_files_per_trigger"]))
        counts = reader.json(q["input"]).groupBy("url").count()
        writer = (
            counts.writeStream.outputMode("update")
            .option("checkpointLocation", q["checkpoint"])
            .foreachBatch(_batch_writer(q["out"]))
        )
        if q.get("available_now"):  # bounded: every file there now, in batches of maxFilesPerTrigger
            writer = writer.trigger(availableNow=True)
        elif q.get("trigger_ms"):
            writer = writer.trigger(processingTime=f"{int(q['trigger_ms'])} milliseconds")
        emit("starting", query=i)
        query = writer.start()
        t_started = time.monotonic()
        emit("started", query=i, seconds=t_started - t_def, load=os.getloadavg()[0])
        stream = ProgressStream(query, i) if q.get("stream_progress") else None
        if stream is not None:
            stream.start()
        while q.get("until_file") and not os.path.exists(q["until_file"]) and query.isActive:
            time.sleep(0.05)  # a watched directory: run until told (a failed query raises below)
        if q.get("available_now"):
            query.awaitTermination()  # the query stops by itself once everything there was processed
        else:
            query.processAllAvailable()
        t_done = time.monotonic()
        if stream is not None:
            stream.stopping.set()
            stream.join()
        progress = _progress(query)
        query.stop()
        emit(
            "done",
            query=i,
            processing=t_done - t_started,
            progress=[_brief(p) for p in progress],
            load=os.getloadavg()[0],
        )
    spark.stop()
    emit("exit")
    return 0


# ================================================================================================
# parent
# ================================================================================================
class BenchError(Exception):
    pass


class Child:
    """The bench script in --child mode, in its own process group (its JVM too), events read from stdout.
    `script`: the script run in --child mode (default this one)."""

    live: list[Child] = []

    def __init__(self, spec: dict, workdir: str, name: str, script: str | None = None):
        self.name = name
        self.spec_path = os.path.join(workdir, f"{name}.spec.json")
        with open(self.spec_path, "w") as f:
            json.dump(spec, f)
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.events: list[dict] = []
        self.cond = threading.Condition()
        self.logf = open(self.log_path, "w")
        self.t_spawn = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script or __file__), "--child", self.spec_path],
            stdout=subprocess.PIPE,
            stderr=self.logf,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
        Child.live.append(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None, "started with stdout=PIPE"
        for line in self.proc.stdout:
            if line.startswith(TAG):
                ev = json.loads(line[len(TAG) :])
                with self.cond:
                    self.events.append(ev)
                    self.cond.notify_all()
            else:
                self.logf.write(line)
        with self.cond:
            self.cond.notify_all()

    def find(self, event: str, query: int | None = None) -> dict | None:
        with self.cond:
            return next(
                (e for e in self.events if e["event"] == event and (query is None or e.get("query") == query)), None
            )

    def wait_for(self, event: str, timeout: float, query: int | None = None) -> dict:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                e = self.find(event, query)
                if e is not None:
                    return e
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise BenchError(
                        f"{self.name} exited {self.proc.returncode} before '{event}'; "
                        f"see {self.log_path}:\n{self.tail()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{self.name}: no '{event}' within {timeout:.0f}s; see {self.log_path}")
                self.cond.wait(min(left, 0.5))

    def tail(self, n: int = 3000) -> str:
        try:
            self.logf.flush()
            with open(self.log_path) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the child's process group (the Python driver and its JVM) and wait for it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.reap()

    def reap(self, timeout: float = 30) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # anything of its group left (the JVM normally exits on its stdin's EOF): kill it
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        self.reader.join(5)
        self.logf.close()
        if self in Child.live:
            Child.live.remove(self)

    def finish(self, timeout: float) -> None:
        """Wait for a normal exit (SIGKILL after timeout)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"warning: {self.name} did not exit within {timeout:.0f}s; killing it")
        self.kill()

    @classmethod
    def kill_all(cls) -> None:
        for c in list(cls.live):
            try:
                c.kill()
            except Exception as exc:  # noqa: BLE001 — kill the others even if one fails
                log(f"warning: killing {c.name}: {exc}")


# -- data ------------------------------------------------------------------------------------------
def prepare_input(work: str, name: str, given: str | None, events: int, files: int, seed: int) -> tuple[str, dict, int]:
    if given:
        t0 = time.monotonic()
        counts: dict[str, int] = {}
        paths = sorted(glob.glob(os.path.join(given, "*")))
        for path in paths:
            if os.path.basename(path).startswith((".", "_")) or os.path.isdir(path):
                continue
            with open(path) as f:
                for line in f:
                    if line.strip():
                        url = json.loads(line)["url"]
                        counts[url] = counts.get(url, 0) + 1
        n = sum(counts.values())
        log(f"using {given}: {n:,} events, {len(counts)} urls (counted in {time.monotonic() - t0:.1f}s)")
        return os.path.abspath(given), counts, n
    sys.path.insert(0, EXAMPLES)
    from generate_page_views import generate

    data = os.path.join(work, name)
    t0 = time.monotonic()
    expected = generate(data, events=events, files=files, urls=10_000, seed=seed)
    log(f"generated {events:,} events in {files} files ({len(expected)} urls) in {time.monotonic() - t0:.1f}s")
    return data, expected, events


def check_output(out: str, expected: dict):
    """bench/output_check.py's rules over this query's batch files. Imported here, in the parent:
    the child's process start (reported as startup) stays what it was."""
    from output_check import check_peer_output

    return check_peer_output(out, expected)


def query_spec(data: str, ckpt: str, out: str, mfpt: int, trigger_ms: int | None) -> dict:
    return {"input": data, "checkpoint": ckpt, "out": out, "max_files_per_trigger": mfpt, "trigger_ms": trigger_ms}


def progress_time(p: dict) -> float:
    """A micro-batch's trigger start (progress `timestamp`, ISO 8601 UTC) as epoch seconds."""
    return datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def batch_stats(progress: list[dict]) -> dict:
    """Input rows, batches with input, their durations (ms) and per batch (start epoch s, rows, ms):
    a batch's rows are read after its start and their counts are committed at its end."""
    with_input = [
        p for p in progress if p.get("numInputRows", 0) > 0 and p["durationMs"].get("triggerExecution") is not None
    ]
    return {
        "rows": sum(p.get("numInputRows", 0) for p in progress),
        "batches": len(with_input),
        "latencies": [p["durationMs"]["triggerExecution"] for p in with_input],
        "detail": [(progress_time(p), p["numInputRows"], p["durationMs"]["triggerExecution"]) for p in with_input],
    }


# -- throughput --------------------------------------------------------------------------------------
def throughput(args, work: str, data: str, expected: dict, events: int) -> tuple[list[dict], list[str]]:
    warmups = getattr(args, "warmups", 1)  # uncounted queries first (the JVM's JIT warms up over several)
    n_queries = args.runs + warmups
    notes: list[str] = []
    specs = []

    def label_of(i: int) -> str:
        return "warm-up" if i < warmups else f"run {i - warmups + 1}"

    for i in range(n_queries):
        label = f"warmup{i + 1}" if i < warmups else f"run{i - warmups + 1}"  # its own checkpoint and output
        specs.append(
            query_spec(
                data,
                os.path.join(work, f"ckpt-{label}"),
                os.path.join(work, f"out-{label}"),
                args.max_files_per_trigger,
                args.trigger_ms,
            )
        )
    results = []

    def collect(child: Child, qi: int, spec: dict, label: str, with_session: bool) -> dict:
        started = child.wait_for("started", args.timeout, query=qi)
        done = child.wait_for("done", args.timeout, query=qi)
        st = batch_stats(done["progress"])
        check = check_output(spec["out"], expected)
        r = {
            "label": label,
            "query_start": started["seconds"],
            "processing": done["processing"],
            "throughput": events / done["processing"],
            "rows": st["rows"],
            "batches": st["batches"],
            "latencies": st["latencies"],
            "detail": st["detail"],
            "counts_ok": check.ok,
            "output_check": check,
            "load_start": started.get("load"),  # the machine's, taken by the child when the query started
            "load_end": done.get("load"),
        }
        if with_session:
            imported, session = child.wait_for("imported", 60), child.wait_for("session", 60)
            r["process"] = imported["t"] - child.t_spawn
            r["session"] = session["seconds"]
            r["startup"] = session["seconds"] + started["seconds"]
            r["total"] = done["t"] - child.t_spawn
        else:
            r["process"] = r["session"] = None
            r["startup"] = started["seconds"]
            r["total"] = done["t"] - child.wait_for("starting", 60, query=qi)["t"]
        if st["rows"] != events:
            notes.append(f"{label}: progress reports {st['rows']:,} input rows, expected {events:,}")
        if not r["counts_ok"]:
            notes.append(f"{label}: OUTPUT CHECK FAILED: {check.describe()}")
        log(
            f"{label}: startup {fmt(r['startup'])}s (session {fmt(r['session'])}s, query start "
            f"{r['query_start']:.2f}s), processing {r['processing']:.2f}s = {r['throughput']:,.0f} events/s, "
            f"{r['batches']} batches, p50 {fmt(pct(r['latencies'], 50), '.0f')} ms, "
            f"output {check.describe()}"
        )
        if check.ok:  # an output that broke the check stays, for a look at it
            shutil.rmtree(spec["out"], ignore_errors=True)
        shutil.rmtree(spec["checkpoint"], ignore_errors=True)
        return r

    if args.session == "shared":
        child = Child({"queries": specs}, work, "throughput-shared")
        try:
            for i, spec in enumerate(specs):
                results.append(collect(child, i, spec, label_of(i), i == 0))
            child.finish(120)
        finally:
            child.kill()
    else:
        for i, spec in enumerate(specs):
            label = label_of(i)
            child = Child({"queries": [spec]}, work, f"throughput-{i}")
            try:
                results.append(collect(child, 0, spec, label, True))
                child.finish(120)
            finally:
                child.kill()
    return results, notes


# -- recovery --------------------------------------------------------------------------------------
def _commits(ckpt: str) -> set[str]:
    try:
        return {n for n in os.listdir(os.path.join(ckpt, "commits")) if n.isdigit()}
    except FileNotFoundError:
        return set()


def _outputs(out: str) -> dict[str, tuple[int, int]]:
    files = {}
    try:
        with os.scandir(out) as it:
            for e in it:
                if e.name.startswith("batch-"):
                    try:
                        st = e.stat()
                        files[e.name] = (st.st_ino, st.st_mtime_ns)
                    except FileNotFoundError:
                        pass
    except FileNotFoundError:
        pass
    return files


def recovery_run(args, work: str, data: str, expected: dict, events: int, n: int) -> tuple[dict, list[str]]:
    notes: list[str] = []
    ckpt, out = os.path.join(work, f"ckpt-recovery-{n}"), os.path.join(work, f"out-recovery-{n}")
    spec = {
        "queries": [
            {
                **query_spec(data, ckpt, out, args.recovery_max_files_per_trigger, args.trigger_ms),
                "stream_progress": True,
            }
        ]
    }
    load_start = load1()
    first = Child(spec, work, f"recovery-{n}-first")
    second = None
    try:
        deadline = time.monotonic() + args.timeout
        while not _commits(ckpt):
            if first.proc.poll() is not None:
                raise BenchError(
                    f"recovery {n}: the first child exited {first.proc.returncode} before a commit; "
                    f"see {first.log_path}:\n{first.tail()}"
                )
            if first.find("done") is not None:
                raise BenchError(f"recovery {n}: all input processed before a commit was seen")
            if time.monotonic() > deadline:
                raise BenchError(f"recovery {n}: no commit within {args.timeout:.0f}s")
            time.sleep(DIR_POLL)
        try:  # the committed batch's progress reaches the parent ~0.1 s later: wait for it, for the timeline
            first.wait_for("batch", 2.0)
        except BenchError:
            pass
        before_commits = _commits(ckpt)
        before_out = _outputs(out)
        t_kill, t_kill_wall = time.monotonic(), time.time()
        first.kill()  # SIGKILL to the driver's process group: Python + JVM
        t_killed = time.monotonic()
        if first.find("done") is not None:
            notes.append(
                f"recovery {n}: the first child had processed all input before the kill "
                "(make --recovery-events larger or --recovery-max-files-per-trigger smaller)"
            )
        r: dict[str, Any] = {
            "run": n,
            "load_start": load_start,
            "commits_before": len(before_commits),
            "last_commit_before": max(map(int, before_commits)),
            "before_kill": t_kill - first.t_spawn,
            "kill_reaped": t_killed - t_kill,
            "t_kill_wall": t_kill_wall,
            "before": [
                (
                    progress_time(e["progress"]),
                    e["progress"]["numInputRows"],
                    e["progress"]["durationMs"].get("triggerExecution", 0),
                )
                for e in first.events
                if e["event"] == "batch" and e["progress"]["numInputRows"]
            ],
        }
        log(
            f"recovery {n}: killed the first child {r['before_kill']:.1f}s after its start, commits "
            f"{sorted(map(int, before_commits))}, {len(before_out)} output files"
        )
        second = Child(spec, work, f"recovery-{n}-restart")
        t_commit = t_output = None
        first_output = None
        deadline = time.monotonic() + args.timeout
        while t_commit is None or t_output is None:
            now = time.monotonic()
            if t_commit is None and _commits(ckpt) - before_commits:
                t_commit = now
                first_commit = min(map(int, _commits(ckpt) - before_commits))
            if t_output is None:
                changed = [name for name, v in _outputs(out).items() if before_out.get(name) != v]
                if changed:
                    t_output, first_output = now, min(changed)
            if second.proc.poll() is not None and not (t_commit and t_output):
                break
            if now > deadline:
                raise BenchError(f"recovery {n}: no progress within {args.timeout:.0f}s after the restart")
            time.sleep(DIR_POLL)
        imported = second.wait_for("imported", 60)
        session = second.wait_for("session", 60)
        started = second.wait_for("started", 60)
        done = second.wait_for("done", args.timeout)
        second.finish(120)
        st = batch_stats(done["progress"])
        check = check_output(out, expected)
        r.update(
            {
                "spawn": second.t_spawn - t_kill,
                "process": imported["t"] - second.t_spawn,
                "session": session["seconds"],
                "query_start": started["seconds"],
                "ready": started["t"] - t_kill,  # kill -> query started again
                "first_output": None if t_output is None else t_output - t_kill,
                "first_output_name": first_output,
                "first_commit": None if t_commit is None else t_commit - t_kill,
                "first_commit_id": None if t_commit is None else first_commit,
                "first_batch": None if t_commit is None else t_commit - started["t"],  # query started -> commit
                "rest": done["processing"],
                "rows_after": st["rows"],
                "batches_after": st["batches"],
                "after": st["detail"],
                "total_runtime": r["before_kill"] + (done["t"] - second.t_spawn),
                "counts_ok": check.ok,
                "output_check": check,
                "load_end": done.get("load"),
            }
        )
        if not r["counts_ok"]:
            notes.append(f"recovery {n}: OUTPUT CHECK FAILED after the restart: {check.describe()}")
        if r["before_kill"] + done["processing"] < 15:
            notes.append(f"recovery {n}: the query ran < 15 s in all (make --recovery-events larger)")
        log(
            f"recovery {n}: after the kill: process {r['spawn'] + r['process']:.2f}s, SparkSession "
            f"+{r['session']:.2f}s, query started {r['ready']:.2f}s, first output {fmt(r['first_output'])}s "
            f"({first_output}), first commit {fmt(r['first_commit'])}s (batch {r['first_commit_id']}); "
            f"rest of the input {r['rest']:.1f}s, output {check.describe()}"
        )
        return r, notes
    finally:
        first.kill()
        if second is not None:
            second.kill()
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)


# -- reporting -------------------------------------------------------------------------------------
def report(
    args,
    facts: dict,
    command: str,
    tput: list[dict],
    tput_events: int,
    recovery: list[dict],
    rec_events: int,
    notes: list[str],
) -> str:
    L = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} — Spark Structured Streaming peer",
        "",
        f"Command: `{command}`",
        "",
        "| machine | |",
        "|---|---|",
    ]
    for k in ("date", "cores", "cpu", "ram", "python", "java", "pyspark", "os", "load"):
        label = {"date": "date -u", "load": "load average at start"}.get(k, k)
        L.append(f"| {label} | {facts[k]} |")
    L.append("")
    trig = f"processingTime {args.trigger_ms} ms" if args.trigger_ms else "default (as fast as possible)"
    L.append(
        'Query: `readStream.schema("url string, user long, ts long").option("maxFilesPerTrigger", N)'
        '.json(DIR).groupBy("url").count()` → `writeStream.outputMode("update")` with a checkpointLocation, '
        "foreachBatch writing `url,count` lines to one file per batch id; local[2], shuffle partitions 2, "
        f"UI off, Arrow on, driver memory 2g; trigger {trig}."
    )
    L.append("")
    warm = [r for r in tput if r["label"] == "warm-up"]
    runs = [r for r in tput if r["label"] != "warm-up"]
    if runs:
        src = f"`{args.input}`" if args.input else f"generate(events={tput_events:,}, files={args.files}, seed=7)"
        sess = (
            "a fresh child process (Python driver + JVM) per run"
            if args.session == "per-run"
            else "one child process, one SparkSession: the warm-up and the runs are successive queries in it"
        )
        L.append(
            f"### Throughput: {tput_events:,} events ({src}), maxFilesPerTrigger "
            f"{args.max_files_per_trigger or 'unset'}, {sess}"
        )
        L.append("")
        L.append(
            "Startup = SparkSession creation + query definition and `start()` (the Python + pyspark import "
            "before it is shown apart as *process*); processing = `start()` returned → "
            "`processAllAvailable()` returned; events/s = events / processing; total = child spawned → all "
            "processed (shared session: query defined → all processed). Batch latency = "
            "`durationMs.triggerExecution` of the micro-batches with input. Warm-up (not counted): "
            + (", ".join(f"startup {fmt(w['startup'])} s, processing {w['processing']:.2f} s" for w in warm) or "none")
            + "."
        )
        L.append("")
        L.append(
            "| run | process s | SparkSession s | query start s | startup s | processing s | events/s | "
            "total s | batches | p50 batch ms | p99 batch ms | output exactly once | load, 1 min, start→end |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in runs:
            L.append(
                f"| {r['label']} | {fmt(r['process'])} | {fmt(r['session'])} | {r['query_start']:.2f} | "
                f"{fmt(r['startup'])} | {r['processing']:.2f} | {r['throughput']:,.0f} | {r['total']:.2f} | "
                f"{r['batches']} | {fmt(pct(r['latencies'], 50), '.0f')} | {fmt(pct(r['latencies'], 99), '.0f')} "
                f"| {'yes' if r['counts_ok'] else '**NO**'} | {fmt_load(r)} |"
            )
        lat = [x for r in runs for x in r["latencies"]]
        L.append(
            f"| **median** | {fmt(median(r['process'] for r in runs))} | "
            f"{fmt(median(r['session'] for r in runs))} | {fmt(median(r['query_start'] for r in runs))} | "
            f"**{fmt(median(r['startup'] for r in runs))}** | {fmt(median(r['processing'] for r in runs))} | "
            f"**{fmt(median(r['throughput'] for r in runs), ',.0f')}** | {fmt(median(r['total'] for r in runs))} | "
            f"{fmt(median(r['batches'] for r in runs), '.0f')} | **{fmt(pct(lat, 50), '.0f')}** | "
            f"**{fmt(pct(lat, 99), '.0f')}** | {sum(r['counts_ok'] for r in runs)}/{len(runs)} | |"
        )
        L.append("")
        L.append(
            f"Median row: p50/p99 batch latency over all {len(lat)} batches of the counted runs. Output exactly "
            "once: every batch file read in batch id order, no (url, count) line twice, each url's counts "
            "increasing, final counts equal to the generator's (bench/output_check.py)."
        )
        L.append("")
    if recovery:
        src = (
            f"`{args.recovery_input}`"
            if args.recovery_input
            else f"generate(events={rec_events:,}, files={args.recovery_files}, seed=11)"
        )
        L.append(
            f"### Recovery after kill -9 of the driver: {rec_events:,} events ({src}), maxFilesPerTrigger "
            f"{args.recovery_max_files_per_trigger}"
        )
        L.append("")
        L.append(
            "Once `commits/` of the checkpoint has a file, the child's process group (Python driver and its "
            "JVM) gets SIGKILL and a new child starts at once on the same checkpointLocation. Seconds from "
            "the kill (cumulative, except the SparkSession's own duration): process up = new child's Python + "
            "pyspark import done; SparkSession = its creation time; "
            "query started = `start()` returned; first output = first batch file written after the kill (new "
            "or a replayed batch's rewritten, polled every 20 ms); first commit = first new file in "
            "`commits/`; first batch = query started → first commit. Before kill = first child's start → "
            "kill. The output is checked (bench/output_check.py) after the restarted query processed everything."
        )
        L.append("")
        L.append(
            "| run | before kill s | commits before | process up s | SparkSession (duration) s | "
            "query started s | first output s | first commit s (batch) | first batch s | rest of input s | "
            "output exactly once | load, 1 min, start→end |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in recovery:
            L.append(
                f"| {r['run']} | {r['before_kill']:.1f} | {r['commits_before']} | "
                f"{r['spawn'] + r['process']:.2f} | {r['session']:.2f} | {r['ready']:.2f} | "
                f"{fmt(r['first_output'])} | {fmt(r['first_commit'])} ({r['first_commit_id']}) | "
                f"{fmt(r['first_batch'])} | {r['rest']:.1f} | {'yes' if r['counts_ok'] else '**NO**'} | "
                f"{fmt_load(r)} |"
            )
        L.append(
            f"| **median** | {fmt(median(r['before_kill'] for r in recovery), '.1f')} | | "
            f"{fmt(median(r['spawn'] + r['process'] for r in recovery))} | "
            f"{fmt(median(r['session'] for r in recovery))} | {fmt(median(r['ready'] for r in recovery))} | "
            f"**{fmt(median(r['first_output'] for r in recovery))}** | "
            f"**{fmt(median(r['first_commit'] for r in recovery))}** | "
            f"{fmt(median(r['first_batch'] for r in recovery))} | {fmt(median(r['rest'] for r in recovery), '.1f')} "
            f"| {sum(r['counts_ok'] for r in recovery)}/{len(recovery)} | |"
        )
        L.append("")
    if notes:
        L += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(L) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--events", type=int, default=1_000_000, help="events for the throughput runs")
    ap.add_argument("--files", type=int, default=8, help="input files for the throughput runs")
    ap.add_argument("--input", help="reuse these *.jsonl files for the throughput runs (counts computed from them)")
    ap.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=1,
        help="maxFilesPerTrigger of the throughput runs (0: unset, all files in one batch)",
    )
    ap.add_argument(
        "--trigger-ms", type=int, default=None, help="processingTime trigger (default: as fast as possible)"
    )
    ap.add_argument("--runs", type=int, default=3, help="counted throughput runs (after one uncounted warm-up run)")
    ap.add_argument(
        "--session",
        choices=("per-run", "shared"),
        default="per-run",
        help="a fresh child process (JVM) per throughput run, or one SparkSession for all",
    )
    ap.add_argument("--recovery-events", type=int, default=2_000_000, help="enough for the query to run >= 15 s")
    ap.add_argument("--recovery-files", type=int, default=400)
    ap.add_argument("--recovery-max-files-per-trigger", type=int, default=4)
    ap.add_argument("--recovery-runs", type=int, default=3)
    ap.add_argument("--recovery-input", help="reuse these *.jsonl files for recovery")
    ap.add_argument("--skip-recovery", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument(
        "--append",
        default=os.path.join(HERE, "RESULTS.md"),
        help="Markdown file to append to ('' or '-': do not append)",
    )
    ap.add_argument(
        "--workdir",
        default=None,
        help="data, checkpoints, outputs, child logs (default: a temp dir, removed unless something failed)",
    )
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a child may take for one step")
    args = ap.parse_args()
    if args.child:
        return child_main(args.child)
    if args.runs < 1 and not args.skip_throughput:
        ap.error("--runs must be at least 1")

    command, facts, temp, work = begin_run(REPO, args.workdir, "sss-bench-", log)
    tput: list[dict] = []
    recovery: list[dict] = []
    notes: list[str] = []
    tput_events = rec_events = 0
    failed = interrupted = False
    try:
        if not args.skip_throughput:
            data, expected, tput_events = prepare_input(work, "events", args.input, args.events, args.files, 7)
            tput, n = throughput(args, work, data, expected, tput_events)
            notes += n
            failed = failed or not all(r["counts_ok"] for r in tput)
            if not args.input:
                shutil.rmtree(data, ignore_errors=True)
        if not args.skip_recovery and args.recovery_runs > 0:
            data, expected, rec_events = prepare_input(
                work, "events-recovery", args.recovery_input, args.recovery_events, args.recovery_files, 11
            )
            for i in range(1, args.recovery_runs + 1):
                try:
                    r, n = recovery_run(args, work, data, expected, rec_events, i)
                    recovery.append(r)
                    notes += n
                    failed = failed or not r["counts_ok"]
                except BenchError as exc:
                    failed = True
                    notes.append(f"recovery {i} failed: {exc}".split("\n")[0])
                    log(f"recovery {i} failed: {exc}")
            if not args.recovery_input:
                shutil.rmtree(data, ignore_errors=True)
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): killing the children")
        raise
    except BaseException as exc:
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        Child.kill_all()
        if tput or recovery:
            section = report(args, facts, command, tput, tput_events, recovery, rec_events, notes)
            print()
            print(section, flush=True)
            if args.append not in ("", "-"):
                append_results(args.append, section)
                log(f"appended to {args.append}")
        finish_workdir(work, temp and (interrupted or not failed) and not args.keep_workdir, log, "child logs: *.log")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
