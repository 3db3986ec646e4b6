"""Replayable sources. Each subtask owns a deterministic share of the input
and an offset (its state): the next split of its files, or the next
sequence number of a generator."""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice.graph import OperatorKind
from sluice.storage import list_files
from taskmanager.operators.base import IDLE, Idle, Payload, Source
from taskmanager.spark_engine import Batch, SparkEngine

__all__ = ["IDLE", "CollectionSource", "FileSource", "GeneratorSource", "Source", "make_source"]


class FileSource(Source):
    """Subtask i of p reads files i, i+p, ... (sorted) through Spark.

    Adaptive batching: a Spark call has a large fixed cost, so the number of
    files per call doubles while a batch takes less than `target` seconds of
    processing and halves when it takes more than twice that; a checkpoint
    barrier waits for at most one batch.

    Monitoring (`monitor_interval` seconds in the payload): the source is
    unbounded. It lists the directory again at most every interval once it
    has read what it knew of, and a file belongs to subtask
    crc32(name) % p, so that files arriving later never move an earlier one
    to another subtask. Its state is then the names of the files it has read
    (which grows with the input, as a continuous file enumerator's does);
    writers must make a file visible atomically (write `.name`, rename)."""

    MAX_FILES_PER_BATCH = 64

    def __init__(
        self,
        payload: Payload,
        subtask: int,
        parallelism: int,
        engine: SparkEngine,
        target: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine, self.clock = engine, clock
        self.format = payload["format"]
        self.schema = payload.get("schema")
        self.path, self.suffix = payload["path"], payload.get("suffix", "")
        self.subtask, self.parallelism = subtask, parallelism
        self.monitor_interval: float | None = payload.get("monitor_interval")
        self.idle_wait = min(self.monitor_interval or 0.1, 0.1)
        self.done: set[str] = set()  # monitoring: names of the files read
        self._listed_at = float("-inf")
        listed = list_files(self.path, self.suffix)  # a missing input directory fails the task in both modes
        self.files = [] if self.monitor_interval else listed[subtask::parallelism]
        self.files_per_batch = 1
        self.target = target
        self.offset = 0  # number of my files fully emitted

    def snapshot(self) -> dict[str, Any]:
        if not self.monitor_interval:
            return super().snapshot()
        return {"offset": self.offset, "done": sorted(self.done)}

    def restore(self, handle: dict[str, Any]) -> None:
        super().restore(handle)
        if self.monitor_interval:  # the queue (self.files) is still empty: the next listing fills it
            self.done = set(handle.get("done", []))

    def _mine(self, path: str) -> bool:
        name = os.path.basename(path)
        return name not in self.done and zlib.crc32(name.encode()) % self.parallelism == self.subtask

    def _discover(self) -> None:
        """Monitoring: queue my files not read yet, once per interval."""
        now = self.clock()
        if self.monitor_interval is None or now - self._listed_at < self.monitor_interval:
            return
        self._listed_at = now
        self.files = sorted(set(self.files) | {p for p in list_files(self.path, self.suffix) if self._mine(p)})

    def batch_done(self, seconds: float) -> None:
        """Adapt the files per batch to how long the last batch took through the chain."""
        if seconds < self.target:
            self.files_per_batch = min(self.files_per_batch * 2, self.MAX_FILES_PER_BATCH)
        elif seconds > 2 * self.target:
            self.files_per_batch = max(1, self.files_per_batch // 2)

    def next_batch(self) -> Batch | Idle | None:
        if self.monitor_interval:  # self.files: my files found and not read yet
            if not self.files:
                self._discover()
                if not self.files:
                    return IDLE
            paths, self.files = self.files[: self.files_per_batch], self.files[self.files_per_batch :]
            self.done.update(os.path.basename(p) for p in paths)
        else:  # self.files: all my files; the offset is how many were read
            if self.offset >= len(self.files):
                return None
            paths = self.files[self.offset : self.offset + self.files_per_batch]
        self.offset += len(paths)
        reader = self.engine.spark.read
        if self.schema:
            reader = reader.schema(self.schema)
        if self.format == "json":
            df = reader.json(paths)
        elif self.format == "csv":
            df = reader.option("header", "true").csv(paths)
        else:
            df = reader.text(paths)
        return Batch(self.engine, df=df)


class GeneratorSource(Source):
    """Subtask i of p generates ids i, i+p, i+2p, ... below `count` (or
    forever); `body` turns each DataFrame of ids into records inside Spark."""

    def __init__(self, payload: Payload, subtask: int, parallelism: int, engine: SparkEngine) -> None:
        self.engine = engine
        self.body = payload["body"]
        self.count = payload.get("count")
        self.batch_size = int(payload.get("batch_size") or 100_000)
        self.subtask, self.parallelism = subtask, parallelism
        self.offset = 0  # ids emitted by this subtask

    def next_batch(self) -> Batch | None:
        start = self.subtask + self.offset * self.parallelism
        end = start + self.batch_size * self.parallelism
        if self.count is not None:
            end = min(end, self.count)
        if start >= end:
            return None
        n = len(range(start, end, self.parallelism))
        self.offset += n
        df = self.body(self.engine.spark.range(start, end, self.parallelism))
        return Batch(self.engine, df=df)


class CollectionSource(Source):
    """Subtask i of p emits rows i, i+p, ... of the payload's list in one batch."""

    def __init__(self, payload: Payload, subtask: int, parallelism: int, engine: SparkEngine) -> None:
        self.engine = engine
        self.rows = payload["rows"][subtask::parallelism]
        self.offset = 0

    def next_batch(self) -> Batch | None:
        if self.offset >= len(self.rows) or not self.rows:
            return None
        table = pa.Table.from_pylist(self.rows[self.offset :])
        self.offset = len(self.rows)
        return Batch(self.engine, table=table)


SOURCES: dict[OperatorKind, Callable[[Payload, int, int, SparkEngine], Source]] = {
    OperatorKind.SOURCE_FILES: FileSource,
    OperatorKind.SOURCE_GENERATOR: GeneratorSource,
    OperatorKind.SOURCE_COLLECTION: CollectionSource,
}


def make_source(kind: OperatorKind, payload: Payload, subtask: int, parallelism: int, engine: SparkEngine) -> Source:
    """Build subtask `subtask` of `parallelism` of a source of `kind`."""
    return SOURCES[kind](payload, subtask, parallelism, engine)
