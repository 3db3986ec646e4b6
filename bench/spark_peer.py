"""The peer's side of every paired suite: one SparkSession in a --child process
(bench/structured_streaming_child.py's Child) serving one query per go file, and the parent's view of
it (`PeerSide`, which the throughput, latency, windowed, state and batch suites subclass with their
own child spec, launch and check). For windowed_bench.py and state_bench.py also the child itself
(`serve_queries`: the CSV file sink with Trigger.AvailableNow; `go_queries`, the go files it reads)
and the readers of that sink's commit log and of Spark's progress."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Self

from bench_common import write_atomically
from paired_runs import PEER, RunError, log

SPARK_LOG = "_spark_metadata"
# structured_streaming_child.py's settings (those of taskmanager/spark_engine.py)
SPARK_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
}


def spark_sink_log(out: str) -> dict[int, list[str]]:
    """The committed files of a Structured Streaming file sink under `out`, per batch id, from its
    `_spark_metadata` log (`<batch id>` and `<batch id>.compact` files: "v1", then one JSON entry per
    line with the file's path and action; a compact file holds every entry up to it). Files written
    but not in the log are not committed and not returned."""
    from urllib.parse import unquote, urlparse

    logdir = os.path.join(out, SPARK_LOG)
    batches: dict[int, list[str]] = {}
    deleted: set[str] = set()
    seen: set[str] = set()
    names = [n for n in (os.listdir(logdir) if os.path.isdir(logdir) else []) if n.removesuffix(".compact").isdigit()]
    for name in sorted(names, key=lambda n: (int(n.removesuffix(".compact")), n.endswith(".compact"))):
        base = name.removesuffix(".compact")
        with open(os.path.join(logdir, name)) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:
            if not line.strip():
                continue
            e = json.loads(line)
            path = unquote(urlparse(e["path"]).path)
            if e.get("action", "add") == "delete":
                deleted.add(path)
            elif path not in seen:
                seen.add(path)
                batches.setdefault(int(base), []).append(path)
    return {b: [p for p in ps if p not in deleted] for b, ps in sorted(batches.items())}


def spark_time_ms(text: str | None) -> int | None:
    """A progress time (`2023-11-14T22:29:57.950Z`) as epoch ms."""
    if not text:
        return None
    return round(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp() * 1000)


def dir_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# ================================================================================================
# the child: one SparkSession, one query per go file
# ================================================================================================
def go_path(directory: str, i: int) -> str:
    """The go file of a child's query `i`: `<directory>/go-NNNN.json`."""
    return os.path.join(directory, f"go-{i:04d}.json")


def go_queries(directory: str) -> Iterator[tuple[int, dict]]:
    """In a --child: (i, query spec) for each go file `go_path(directory, i)`, i from 0, each waited
    for, until one says exit."""
    i = 0
    while True:
        go = go_path(directory, i)
        while not os.path.exists(go):
            time.sleep(0.005)
        with open(go) as f:
            q = json.load(f)
        if q.get("exit"):
            return
        yield i, q
        i += 1


def progress_entry(p: dict) -> dict:
    """What a `done` event of `serve_queries` tells of one micro-batch's progress."""
    return {
        "batchId": p.get("batchId"),
        "numInputRows": p.get("numInputRows", 0),
        "triggerExecution": p.get("durationMs", {}).get("triggerExecution"),
        "watermark": p.get("eventTime", {}).get("watermark"),
        "state": [
            {k: s.get(k) for k in ("numRowsTotal", "memoryUsedBytes", "numRowsDroppedByWatermark")}
            for s in p.get("stateOperators", [])
        ],
    }


def serve_queries(spec_path: str, app_name: str, build: Callable[[Any, dict], Any], survive_errors: bool) -> int:
    """A script's --child mode: one SparkSession (master from the spec), then for each go file
    (`go_queries`) the streaming DataFrame `build(spark, query spec)` written by the CSV file
    sink with Trigger.AvailableNow, its batches' progress reported in its `done` event, until a go
    file says exit. `survive_errors`: a failed query is reported in its `done` event (`error`) and
    the session serves the next; otherwise the child dies of it."""
    from structured_streaming_child import _progress, child_spec, emit, spark_session

    spec = child_spec(spec_path)
    spark = spark_session(app_name, spec["master"], SPARK_SETTINGS)
    for i, q in go_queries(spec["dir"]):
        spark.conf.set("spark.sql.shuffle.partitions", str(int(q["shuffle_partitions"])))
        t_def = time.monotonic()
        query = (
            build(spark, q)
            .writeStream.outputMode("append")
            .format("csv")
            .option("path", q["out"])
            .option("checkpointLocation", q["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        t_started = time.monotonic()
        emit("started", query=i, seconds=t_started - t_def)
        try:
            query.awaitTermination()
        except Exception as exc:  # reported to the parent (survive_errors), the session goes on
            if not survive_errors:
                raise
            emit("done", query=i, error=f"{type(exc).__name__}: {exc}".split("\n")[0][:400], progress=[])
            continue
        t_done = time.monotonic()
        progress = [progress_entry(p) for p in _progress(query)]
        query.stop()
        emit("done", query=i, processing=t_done - t_started, progress=progress)
    spark.stop()
    emit("exit")
    return 0


# ================================================================================================
# the parent's side
# ================================================================================================
class PeerSide:
    """The peer's SparkSession in the script's --child process (`script`, set by the subclass; by
    default structured_streaming_bench.py's); each run is a query handed to it by a go file
    (`go_file(i)`). A suite's subclass adds its launch and its check."""

    system = PEER
    script = ""

    def __init__(self, work: str, master: int, timeout: float, name: str = "peer"):
        self.name = name
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.master, self.timeout = master, timeout
        self.next = 0
        self.child: Any = None
        self.t_spawn = 0.0

    def go_file(self, i: int) -> str:
        return go_path(self.dir, i)

    def spec(self) -> dict:
        """The child's spec: its master, where its go files are."""
        return {"master": f"local[{self.master}]", "dir": self.dir}

    def spawn(self) -> Self:
        """Start the child (its SparkSession starts in the background; `start` waits for it)."""
        from structured_streaming_child import Child

        if self.child is None:
            self.t_spawn = time.monotonic()
            self.child = Child(self.spec(), self.dir, self.name, script=self.script or None)
        return self

    def start(self) -> Self:
        self.spawn()
        self.child.wait_for("session", self.timeout)
        log(f"peer SparkSession local[{self.master}] ready {time.monotonic() - self.t_spawn:.1f}s after its spawn")
        return self

    def roots(self) -> list[int]:
        return [self.child.proc.pid] if self.child is not None and self.child.proc.poll() is None else []

    def prepare(self, out: str) -> str:
        """The directory whose commits end the window: the file sink's log."""
        path = os.path.join(out, SPARK_LOG)
        os.makedirs(path, exist_ok=True)
        return path

    def submit(self, q: dict, state: Callable[[Sequence[dict]], dict]) -> Callable[[], dict]:
        """Hand query spec `q` (without its checkpoint) to the child; the wait returns the run's figures,
        `state(progress)` among them."""
        i = self.next
        self.next += 1
        ckpt = q["out"] + "-ckpt"
        write_atomically(self.go_file(i), json.dumps({**q, "checkpoint": ckpt}))

        def wait() -> dict:
            done = self.child.wait_for("done", self.timeout, query=i)
            if done.get("error"):
                shutil.rmtree(ckpt, ignore_errors=True)
                raise RunError(f"the peer's query failed: {done['error']}")
            progress = done["progress"]
            r = {
                "batches": len(progress),
                "rows_in": sum(p["numInputRows"] for p in progress),
                "watermark": spark_time_ms(progress[-1]["watermark"]) if progress else None,
                "state_disk": dir_size(os.path.join(ckpt, "state")),
                **state(progress),
            }
            shutil.rmtree(ckpt, ignore_errors=True)
            return r

        return wait

    def committed(self, out: str) -> tuple[list[str], dict[str, str]]:
        """(the committed data files, data file -> the name of the log file that committed it)."""
        files, by = [], {}
        logdir = os.path.join(out, SPARK_LOG)
        for batch, paths in spark_sink_log(out).items():
            name = str(batch) if os.path.exists(os.path.join(logdir, str(batch))) else f"{batch}.compact"
            for p in paths:
                files.append(p)
                by[p] = name
        return files, by

    def stop(self) -> None:
        if self.child is None:
            return
        try:
            if self.child.proc.poll() is None:
                write_atomically(self.go_file(self.next), json.dumps({"exit": True}))
                self.child.finish(30)
        finally:
            self.child.kill()
