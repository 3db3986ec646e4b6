"""The Structured Streaming peer's child process, both ends of it (bench/structured_streaming_bench.py
runs it; the other suites' peers run their own scripts' --child mode the same way).

- In the child: `child_main`, one SparkSession serving the queries of its spec (the running count
  of page views per url, written by foreachBatch to one file per batch id), and the pieces the other
  scripts' children use: `child_spec`, `spark_session`, `emit` (an event line on stdout) and
  `_progress` (a query's micro-batch progress).
- In the parent: `Child`, a script started in --child mode in its own process group (its JVM too),
  its events read from stdout, killed whole on exit; `BenchError` when it fails or takes too long.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH_SCRIPT = os.path.join(HERE, "structured_streaming_bench.py")  # the script whose --child runs child_main
SCHEMA = "url string, user long, ts long"
TAG = "@@sss-bench "  # prefix of the child's event lines on stdout


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


# a local master lists a read's files on the driver, not with a Spark job of its own above 32 paths:
# taskmanager/spark_engine.py's LOCAL_LISTING_THRESHOLD, given to the peer too
LOCAL_LISTING = {"spark.sql.sources.parallelPartitionDiscovery.threshold": "4096"}


def spark_session(app_name: str, master: str, settings: dict[str, str]):
    """The child's SparkSession, its import and start reported (`imported`, `session`); a local
    master lists on the driver as a TaskManager's does (LOCAL_LISTING, unless `settings` say otherwise)."""
    from pyspark.sql import SparkSession

    emit("imported")
    t0 = time.monotonic()
    builder = SparkSession.builder.appName(app_name).master(master)
    for k, v in ({**LOCAL_LISTING, **settings} if master.startswith("local") else settings).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    emit("session", seconds=time.monotonic() - t0)
    return spark


def child_settings(spec: dict) -> dict[str, str]:
    """The child's SparkSession settings: those of taskmanager/spark_engine.py. Spec
    "shuffle_partitions" (bench/throughput_suite.py's sweeps; default 2) and "conf", more settings
    over these (bench/recovery_suite.py: a standalone master's executors)."""
    return {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(spec.get("shuffle_partitions", 2)),
        "spark.default.parallelism": str(spec.get("shuffle_partitions", 2)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        # keep every micro-batch's progress (default: the last 100)
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        **spec.get("conf", {}),
    }


def await_go(q: dict) -> dict:
    """A query with a go file waits for it: the harness says when (runs alternating with another
    system's) and may say what: the file's JSON updates the query."""
    while not os.path.exists(q["go_file"]):
        time.sleep(0.005)
    with open(q["go_file"]) as f:
        text = f.read()
    return {**q, **json.loads(text)} if text.strip() else q


def query_writer(spark, q: dict):
    """The running count of query spec `q`, defined up to its start (its input, checkpoint, output
    and trigger)."""
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
    return writer


def run_query(spark, i: int, q: dict) -> None:
    """Query `i` of the spec, from its definition until it has processed everything (`starting`,
    `started`, `done` events; `batch` events as it goes with "stream_progress")."""
    os.makedirs(q["out"], exist_ok=True)
    if q.get("shuffle_partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(int(q["shuffle_partitions"])))
    t_def = time.monotonic()
    writer = query_writer(spark, q)
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
        "done", query=i, processing=t_done - t_started, progress=[_brief(p) for p in progress], load=os.getloadavg()[0]
    )


def child_main(spec_path: str) -> int:
    """The --child mode: a SparkSession (spec "master", default local[2]), then the spec's queries
    one after the other, until one's go file says exit."""
    spec = child_spec(spec_path)
    spark = spark_session("sss-page-views-bench", spec.get("master", "local[2]"), child_settings(spec))
    for i, q in enumerate(spec["queries"]):
        if q.get("go_file"):
            q = await_go(q)
            if q.get("exit"):
                break
        run_query(spark, i, q)
    spark.stop()
    emit("exit")
    return 0


# ================================================================================================
# parent
# ================================================================================================
class BenchError(Exception):
    """A child failed, or took longer than it may."""


class Child:
    """A bench script in --child mode, in its own process group (its JVM too), events read from stdout.
    `script`: the script run in --child mode (default bench/structured_streaming_bench.py, whose
    --child runs `child_main`)."""

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
            [sys.executable, os.path.abspath(script or BENCH_SCRIPT), "--child", self.spec_path],
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
