"""Replayable sources. Each subtask owns a deterministic share of the input
and an offset (its state): the next split of its files, or the next
sequence number of a generator."""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice.checkpoints.rescale import generator_streams, items_read
from sluice.graph import OperatorKind
from sluice.storage import list_files, list_files_with_mtime, resolve
from taskmanager.operators.base import IDLE, Idle, Payload, Source
from taskmanager.operators.file_reader import SAMPLES, FileFormatReader, printable
from taskmanager.spark_engine import Batch, SparkEngine

__all__ = ["IDLE", "CollectionSource", "FileSource", "GeneratorSource", "Source", "make_source"]

log = logging.getLogger("sluice.taskmanager.sources")

# seconds to wait, at the end of the input, for the counts of the batches already run: Spark
# completes an observation from its listener bus, asynchronously after the action, which lags
# by seconds on a loaded machine (1 s once lost half a job's count). Only batches still pending
# wait, so a prompt bus costs nothing.
FINAL_OBSERVATION_WAIT = 15.0


class ContinuousFileMonitor:
    """A monitoring file source's view of its directory (FileSource's docstring, "Monitoring"):
    which listed files are this subtask's and not read yet, the names read with their modification
    times (its state), and forget_after's horizon."""

    def __init__(
        self, payload: Payload, interval: float, subtask: int, parallelism: int, clock: Callable[[], float]
    ) -> None:
        self.interval, self.clock = interval, clock
        self.path, self.suffix = payload["path"], payload.get("suffix", "")
        self.subtask, self.parallelism = subtask, parallelism
        self.done: dict[str, int] = {}  # names of the files read -> their modification time (ms)
        # forget_after (ms): a file modified that long before the newest file seen is neither read
        # nor remembered, so the names kept stay bounded (sources' docstring)
        self.forget_after: int | None = payload.get("forget_after_ms")
        self.newest_mtime = 0
        self.files_ignored = 0
        self.mtimes: dict[str, int] = {}  # modification times of the files listed
        self.listed_at = float("-inf")

    def snapshot(self) -> dict[str, Any]:
        return {"done": dict(sorted(self.done.items())), "newest_mtime": self.newest_mtime}

    def restore(self, handle: dict[str, Any]) -> None:
        done = handle.get("done", {})
        self.done = dict(done) if isinstance(done, dict) else dict.fromkeys(done, 0)  # a list: before forget_after
        self.newest_mtime = int(handle.get("newest_mtime", 0))

    def mine(self, path: str) -> bool:
        name = os.path.basename(path)
        return name not in self.done and zlib.crc32(name.encode()) % self.parallelism == self.subtask

    def horizon(self) -> int | None:
        """Files modified before this (ms) are forgotten: None without forget_after."""
        return None if self.forget_after is None else self.newest_mtime - self.forget_after

    def discover(self, queued: list[str], now: bool = False) -> list[str]:
        """`queued` with my files not read yet added: listed once per interval (`now`: whatever
        the interval)."""
        if now:
            self.listed_at = float("-inf")
        at = self.clock()
        if at - self.listed_at < self.interval:
            return queued
        self.listed_at = at
        listed = list_files_with_mtime(self.path, self.suffix)
        self.mtimes.update(listed)
        if self.forget_after is not None and listed:
            self.newest_mtime = max(self.newest_mtime, max(m for _p, m in listed))
        horizon = self.horizon()
        fresh = set()
        for p, mtime in listed:
            if not self.mine(p):
                continue
            if horizon is not None and mtime < horizon:
                self.files_ignored += 1
                if self.files_ignored == 1:
                    log.warning(
                        "file %s was modified %d ms before the newest file of %s, more than forget_after_ms %d: "
                        "not read (further such files are counted)",
                        p,
                        self.newest_mtime - mtime,
                        self.path,
                        self.forget_after,
                    )
                continue
            fresh.add(p)
        if horizon is not None:  # names older than the horizon can never be listed as new again
            self.done = {n: m for n, m in self.done.items() if m >= horizon}
        return sorted(set(queued) | fresh)

    def read(self, paths: list[str]) -> None:
        """`paths` are being read: remembered, with their modification times."""
        mtimes = self.mtimes
        self.done.update((os.path.basename(p), mtimes.get(p, 0)) for p in paths)


class FileSource(Source):
    """Subtask i of p reads files i, i+p, ... (sorted) through Spark.

    Adaptive batching: a Spark call has a large fixed cost, so the number of
    files per call doubles while a batch takes less than `target` seconds of
    processing and halves when it takes more than twice that; a checkpoint
    barrier waits for at most one batch.

    Monitoring (`monitor_interval` seconds in the payload; `ContinuousFileMonitor`): the source is
    unbounded. It lists the directory again at most every interval once it
    has read what it knew of, and a file belongs to subtask
    crc32(name) % p, so that files arriving later never move an earlier one
    to another subtask. Its state is then the names of the files it has read
    with their modification times (which grows with the input, as a continuous
    file enumerator's does, unless `forget_after_ms` bounds it: a file modified
    that long before the newest one listed is neither read nor remembered, and
    names older than that are dropped from the state, safely, since such a
    file would be ignored if listed again); writers must make a file visible
    atomically (write `.name`, rename).

    Reading (`FileFormatReader`, taskmanager/operators/file_reader.py): the
    payload's schema is fixed (inferred at submit when the user gave none:
    sluice/schema_inference.py) and its reader options go to Spark as they
    are. Parquet: each file's footer is checked against the schema before
    Spark reads it (`check_parquet`); a file that does not match fails the
    job naming it. Malformed rows of CSV and JSON, in one Spark pass: the
    files are read PERMISSIVE with a corrupt-record column (the user's when
    the schema has it, else CORRUPT_COLUMN, added by the reader); a row is malformed
    when that column is set. `DataFrame.observe` counts the malformed rows
    and keeps a sample of them (the smallest and largest line of each batch,
    truncated, with the file's name) while the chain's own Spark action runs
    (no second pass over the files); the task reports the count as
    `records_malformed` (`batch_done` collects it). What happens to them is
    the payload's `on_error` policy (sluice/schema_inference.py): `drop`
    filters them out and counts them as dropped too (`records_dropped`);
    `fail` makes Spark raise on the first one, naming its file and line (the
    task fails NON_RECOVERABLE: the same input fails the same way); `keep`
    lets them go on as Spark's PERMISSIVE does (nulls where a value could not
    be parsed, the text in the user's corrupt-record column); `dead_letter`
    lets them go on with their text and FILE_COLUMN, for the branch that
    from_files adds (sluice/api/environment.py) to part them from the parsed
    rows and write them to the dead-letter sink. Internal columns are dropped
    otherwise. A row whose key columns came out null is never keyed: a hash
    exchange drops and counts it (taskmanager/network/record_writer.py). The
    malformed-row metric references every column of the schema, so Spark
    parses each in every row whichever columns the job reads: a row is
    malformed when any column did not parse, and a body's `df.count()` never
    meets Spark's refusal of a query of the corrupt-record column alone. CSV
    is read without the parser's column pruning (a row's field count is
    checked against the whole schema) and a row with undecodable bytes in a
    string column is malformed too (malformed_checks.py)."""

    MAX_FILES_PER_BATCH = 64

    def __init__(
        self,
        payload: Payload,
        subtask: int,
        parallelism: int,
        engine: SparkEngine,
        target: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        byte_budget: int | None = None,
    ) -> None:
        self.engine = engine
        self.reader = FileFormatReader(payload, engine)
        self.path, self.suffix = payload["path"], payload.get("suffix", "")
        self.subtask, self.parallelism = subtask, parallelism
        interval: float | None = payload.get("monitor_interval")
        self.idle_wait = min(interval or 0.1, 0.1)
        # monitoring: the directory listed again every interval (the source is unbounded)
        self.monitor = ContinuousFileMonitor(payload, interval, subtask, parallelism, clock) if interval else None
        listed = list_files(self.path, self.suffix)  # a missing input directory fails the task in both modes
        self.reader.infer_schema(self.suffix)
        self.records_malformed = 0
        self.records_dropped = 0
        self.bad_record_samples: list[str] = []
        self._listed = listed
        self.skip: set[str] = set()  # fixed listing, after a rescale: names read before it (rescale.items_read)
        self.files = [] if self.monitor else listed[subtask::parallelism]
        self.files_per_batch = 1
        self.target = target
        # BATCH: each Spark call reads as many files as fit in this many bytes of input (at least one)
        self.byte_budget = byte_budget
        self._sizes: dict[str, int] | None = None
        self.offset = 0  # number of my files fully emitted

    def snapshot(self) -> dict[str, Any]:
        if not self.monitor:
            return {"offset": self.offset, **({"skip": sorted(self.skip)} if self.skip else {})}
        return {"offset": self.offset, **self.monitor.snapshot()}

    def restore(self, handle: dict[str, Any]) -> None:
        super().restore(handle)
        if not self.monitor and ("skip" in handle or "rescale_from" in handle):
            names = [os.path.basename(p) for p in self._listed]
            if "rescale_from" in handle:  # a savepoint of another parallelism (sluice/checkpoints/rescale.py)
                self.skip = items_read(names, handle["rescale_from"])
            else:
                self.skip = set(handle["skip"])
            left = [p for p, n in zip(self._listed, names, strict=True) if n not in self.skip]
            self.files = left[self.subtask :: self.parallelism]
        if self.monitor:  # the queue (self.files) is still empty: the next listing fills it
            self.monitor.restore(handle)

    def batch_done(self, seconds: float) -> None:
        """Adapt the files per batch to how long the last batch took through the chain, and
        collect the malformed-row counts of the batches the chain has run."""
        self._collect(0.0)
        if seconds < self.target:
            self.files_per_batch = min(self.files_per_batch * 2, self.MAX_FILES_PER_BATCH)
        elif seconds > 2 * self.target:
            self.files_per_batch = max(1, self.files_per_batch // 2)

    def has_pending_input(self) -> bool:
        """Files of mine not read yet: queued, or in the directory now. Monitoring lists it again
        here, whatever the interval, so that a subtask never goes idle while a file of its own
        waits unlisted (docs/event-time.md, "Idleness")."""
        if not self.monitor:
            return self.offset < len(self.files)
        if not self.files:
            self.files = self.monitor.discover(self.files, now=True)
        return bool(self.files)

    def next_batch(self) -> Batch | Idle | None:
        if self.monitor:  # self.files: my files found and not read yet
            if not self.files:
                self.files = self.monitor.discover(self.files)
                if not self.files:
                    return IDLE
            paths, self.files = self.files[: self.files_per_batch], self.files[self.files_per_batch :]
            self.monitor.read(paths)
        else:  # self.files: all my files; the offset is how many were read
            if self.offset >= len(self.files):
                self._collect(FINAL_OBSERVATION_WAIT)
                if self.reader.pending:
                    log.warning(
                        "%d batch(es) still have no malformed-row count after %.0f s: records_malformed may be short",
                        len(self.reader.pending),
                        FINAL_OBSERVATION_WAIT,
                    )
                    self.reader.pending = []
                return None
            paths = self.files[self.offset : self.offset + self._batch_files()]
        self.offset += len(paths)
        return Batch(self.engine, df=self._read(paths))

    def _batch_files(self) -> int:
        """How many of my next files one Spark call reads: the adaptive count, or in BATCH
        mode as many as fit in the byte budget (sizes listed once, at the first call)."""
        if self.byte_budget is None:
            return self.files_per_batch
        if self._sizes is None:
            fs, _ = resolve(self.path)
            self._sizes = {i.path: max(i.size or 0, 0) for i in fs.get_file_info(self.files)}
        count, total = 0, 0
        for path in self.files[self.offset :]:
            total += self._sizes.get(path, 0)
            if count and total > self.byte_budget:
                break
            count += 1
        return max(count, 1)

    def _read(self, paths: list[str]) -> Any:
        """A DataFrame of the rows of `paths` that go on (see the class docstring)."""
        return self.reader.read(paths)

    def _collect(self, wait: float) -> None:
        """Add up the malformed rows of the batches whose Spark action has run (the observation is
        complete then); wait up to `wait` seconds for the others."""
        deadline = time.monotonic() + wait  # real time: the source's clock is for listing only
        while True:
            for metrics in self.reader.observed():
                malformed = int(metrics.get("malformed") or 0)
                self.records_read += int(metrics.get("rows") or 0)
                self.records_malformed += malformed
                if self.reader.policy == "drop":
                    self.records_dropped += malformed
                for key in ("first", "last"):
                    line = metrics.get(key)
                    if (
                        line
                        and len(self.bad_record_samples) < SAMPLES
                        and printable(line) not in self.bad_record_samples
                    ):
                        self.bad_record_samples.append(printable(line))
            if not self.reader.pending or time.monotonic() >= deadline:
                return
            time.sleep(0.01)


class GeneratorSource(Source):
    """Subtask i of p generates ids i, i+p, i+2p, ... below `count` (or
    forever); `body` turns each DataFrame of ids into records inside Spark.

    Its position is the progressions of ids it has still to emit ("streams": next id,
    step); one at first, more after a savepoint restored at another parallelism split
    them (sluice/checkpoints/rescale.py). It emits a batch of each in turn."""

    def __init__(self, payload: Payload, subtask: int, parallelism: int, engine: SparkEngine) -> None:
        self.engine = engine
        self.body = payload["body"]
        self.count = payload.get("count")
        self.batch_size = int(payload.get("batch_size") or 100_000)
        self.subtask, self.parallelism = subtask, parallelism
        self.offset = 0  # ids emitted by this subtask
        self.streams: list[tuple[int, int]] = [(subtask, parallelism)]

    def snapshot(self) -> dict[str, Any]:
        return {"offset": self.offset, "streams": [list(st) for st in self.streams]}

    def restore(self, handle: dict[str, Any]) -> None:
        super().restore(handle)
        self.streams = generator_streams(handle, self.subtask, self.parallelism)

    def next_batch(self) -> Batch | None:
        while self.streams:
            start, step = self.streams[0]
            end = start + self.batch_size * step
            if self.count is not None:
                end = min(end, self.count)
            if start < end:
                break
            self.streams.pop(0)  # exhausted (a bounded generator)
        else:
            return None
        n = len(range(start, end, step))
        self.offset += n
        self.records_read += n
        self.streams = [*self.streams[1:], (start + n * step, step)]  # in turn: an unbounded one starves none
        df = self.body(self.engine.spark.range(start, end, step))
        return Batch(self.engine, df=df)


class CollectionSource(Source):
    """Subtask i of p emits rows i, i+p, ... of the payload's list in one batch."""

    def __init__(self, payload: Payload, subtask: int, parallelism: int, engine: SparkEngine) -> None:
        self.engine = engine
        self.all_rows = payload["rows"]
        self.subtask, self.parallelism = subtask, parallelism
        self.rows = self.all_rows[subtask::parallelism]
        self.skip: set[str] = set()  # after a rescale: indices (as text) of rows emitted before it
        self.offset = 0

    def snapshot(self) -> dict[str, Any]:
        return {"offset": self.offset, **({"skip": sorted(self.skip, key=int)} if self.skip else {})}

    def restore(self, handle: dict[str, Any]) -> None:
        super().restore(handle)
        if "skip" in handle or "rescale_from" in handle:
            indices = [str(i) for i in range(len(self.all_rows))]
            self.skip = items_read(indices, handle["rescale_from"]) if "rescale_from" in handle else set(handle["skip"])
            left = [row for i, row in zip(indices, self.all_rows, strict=True) if i not in self.skip]
            self.rows = left[self.subtask :: self.parallelism]

    def next_batch(self) -> Batch | None:
        if self.offset >= len(self.rows) or not self.rows:
            return None
        table = pa.Table.from_pylist(self.rows[self.offset :])
        self.offset = len(self.rows)
        self.records_read += table.num_rows
        return Batch(self.engine, table=table)


SOURCES: dict[OperatorKind, Callable[[Payload, int, int, SparkEngine], Source]] = {
    OperatorKind.SOURCE_FILES: FileSource,
    OperatorKind.SOURCE_GENERATOR: GeneratorSource,
    OperatorKind.SOURCE_COLLECTION: CollectionSource,
}


# BATCH mode (docs/batch.md): no checkpoint barrier waits behind a batch, so a file source's
# Spark calls may be fewer and larger — each pays Spark's fixed cost of a job. Measured on
# 2 cores, 80 files of 125k events in a plain SparkSession: 20 calls of 4 files 6.4-7.2 s,
# 8 of 10 files 4.2-4.3 s, one call 3.6-4.2 s (bench/README.md, batch_bench.py). The budget
# bounds what one call may bring into the TaskManager when no combiner shrinks it.
BATCH_BYTES_PER_CALL = 512 * 1024 * 1024


def make_source(
    kind: OperatorKind, payload: Payload, subtask: int, parallelism: int, engine: SparkEngine, batch: bool = False
) -> Source:
    """Build subtask `subtask` of `parallelism` of a source of `kind` (`batch`: for a BATCH job)."""
    if batch and kind == OperatorKind.SOURCE_FILES:
        return FileSource(payload, subtask, parallelism, engine, byte_budget=BATCH_BYTES_PER_CALL)
    return SOURCES[kind](payload, subtask, parallelism, engine)
