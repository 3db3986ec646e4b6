"""Replayable sources. Each subtask owns a deterministic share of the input
and an offset (its state): the next split of its files, or the next
sequence number of a generator."""

from __future__ import annotations

import pyarrow as pa

from sluice.storage import list_files
from taskmanager.spark_engine import Batch, SparkEngine


class _OffsetState:
    """A source's state is its offset: restore it, and everything before it is not read again."""

    offset: int

    def snapshot(self) -> dict:
        return {"offset": self.offset}

    def restore(self, handle: dict) -> None:
        self.offset = int(handle["offset"])

    def describe_offset(self) -> str:
        return f"offset {self.offset}"


class FileSource(_OffsetState):
    """Subtask i of p reads files i, i+p, ... (sorted) through Spark.

    Adaptive batching: a Spark call has a large fixed cost, so the number of
    files per call doubles while a batch takes less than `target` seconds of
    processing and halves when it takes more than twice that; a checkpoint
    barrier waits for at most one batch."""

    MAX_FILES_PER_BATCH = 64

    def __init__(self, payload: dict, subtask: int, parallelism: int, engine: SparkEngine, target: float = 0.5):
        self.engine = engine
        self.format = payload["format"]
        self.schema = payload.get("schema")
        self.files = list_files(payload["path"], payload.get("suffix", ""))[subtask::parallelism]
        self.files_per_batch = 1
        self.target = target
        self.offset = 0  # number of my files fully emitted

    def batch_done(self, seconds: float) -> None:
        """How long the last batch took through the chain (fed back by the task)."""
        if seconds < self.target:
            self.files_per_batch = min(self.files_per_batch * 2, self.MAX_FILES_PER_BATCH)
        elif seconds > 2 * self.target:
            self.files_per_batch = max(1, self.files_per_batch // 2)

    def next_batch(self) -> Batch | None:
        if self.offset >= len(self.files):
            return None
        paths = self.files[self.offset:self.offset + self.files_per_batch]
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


class GeneratorSource(_OffsetState):
    """Subtask i of p generates ids i, i+p, i+2p, ... below `count` (or
    forever); `body` turns each DataFrame of ids into records inside Spark."""

    def __init__(self, payload: dict, subtask: int, parallelism: int, engine: SparkEngine):
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


class CollectionSource(_OffsetState):
    def __init__(self, payload: dict, subtask: int, parallelism: int, engine: SparkEngine):
        self.engine = engine
        self.rows = payload["rows"][subtask::parallelism]
        self.offset = 0

    def next_batch(self) -> Batch | None:
        if self.offset >= len(self.rows) or not self.rows:
            return None
        table = pa.Table.from_pylist(self.rows[self.offset:])
        self.offset = len(self.rows)
        return Batch(self.engine, table=table)


def make_source(kind: str, payload: dict, subtask: int, parallelism: int, engine: SparkEngine):
    return {"source_files": FileSource, "source_generator": GeneratorSource,
            "source_collection": CollectionSource}[kind](payload, subtask, parallelism, engine)
