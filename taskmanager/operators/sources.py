"""Replayable sources. Each subtask owns a deterministic share of the input
and an offset (its state): the next split of its files, or the next
sequence number of a generator."""

from __future__ import annotations

import collections
import collections.abc
import logging
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice.checkpoints.rescale import generator_streams, items_read
from sluice.graph import OperatorKind
from sluice.job_options import SourceReads
from sluice.storage import list_file_infos
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
        self.sizes: dict[str, int] = {}  # bytes of the files found and not read yet (a read's budget counts them)
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
        infos = list_file_infos(self.path, self.suffix)
        listed = [(f.path, f.mtime_ms) for f in infos]
        self.mtimes.update(listed)
        if self.forget_after is not None and listed:
            self.newest_mtime = max(self.newest_mtime, max(m for _p, m in listed))
        horizon = self.horizon()
        fresh = set()
        sizes = {f.path: f.size for f in infos}
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
            self.sizes[p] = sizes[p]
        if horizon is not None:  # names older than the horizon can never be listed as new again
            self.done = {n: m for n, m in self.done.items() if m >= horizon}
        return sorted(set(queued) | fresh)

    def read(self, paths: list[str]) -> None:
        """`paths` are being read: remembered, with their modification times."""
        mtimes = self.mtimes
        self.done.update((os.path.basename(p), mtimes.get(p, 0)) for p in paths)
        for p in paths:
            self.sizes.pop(p, None)


DEFAULT_READS = SourceReads()  # the job options' defaults


class ReadBudget:
    """How many of its next files a file source reads in one Spark call (FileSource's docstring,
    "Batch sizing"): as many as fit a byte budget, at least one. Streaming, the budget follows
    the cost of the last calls; BATCH mode's is `fixed`."""

    MAX_GROWTH = 4.0  # a budget is at most this many times the bytes of the last call, at least half
    HISTORY = 6  # calls the cost line is fitted over
    SPREAD = 0.25  # their sizes must differ by this share of the largest for a fit (else: the pace alone)
    # the pace the first call is sized by, before any call was measured: one warm local[2] Spark
    # call reads and projects page-views JSON at ~31 MB/s here (bench/spark_call_costs.py). Starting
    # at one file instead cost a 1 M-event job ~35 % of its time in small calls (bench/README.md).
    FIRST_PACE = 32 * 1024 * 1024  # bytes per second

    def __init__(self, target: float, fixed: int | None = None, max_files: int = DEFAULT_READS.max_files) -> None:
        self.target = target  # seconds one call should take
        self.fixed = fixed
        self.max_files = max_files  # files one call may read, whatever their size
        self.budget: float = fixed if fixed is not None else self.FIRST_PACE * target  # bytes
        self.last_bytes = 0  # what the last call read
        self.calls: collections.deque[tuple[int, float]] = collections.deque(maxlen=self.HISTORY)
        self.line: tuple[float, float] | None = None  # the last (fixed seconds, seconds per byte)

    def take(self, files: list[str], sizes: dict[str, int]) -> int:
        """How many of `files` (the next ones, in order) the next call reads; `sizes` in bytes
        (a file missing there counts 0)."""
        count, total = 0, 0
        # BATCH: never over the budget; streaming: the nearest fit (a file counts in if half of it fits)
        share = 1.0 if self.fixed is not None else 0.5
        for path in files[: self.max_files]:
            size = sizes.get(path, 0)
            if count and total + share * size > self.budget:
                break
            count, total = count + 1, total + size
        self.last_bytes = total
        return max(count, 1)

    def done(self, seconds: float) -> None:
        """The last call took `seconds` of its own. A call costs a fixed part plus a part per
        byte: fitted over the last calls, the next budget is the bytes that take `target`
        seconds (none when the fixed part alone takes that long: one file per call). When
        the last calls' sizes are too alike for a fit, the last line scaled to the last
        call's time (a loaded machine slows both parts); after a call within the target, never
        less than the bytes its pace reads in `target` seconds; before any line that pace, and
        at least twice the last call's bytes when it took less than that. Within MAX_GROWTH of
        the last call's bytes."""
        last = self.last_bytes
        if self.fixed is not None or last <= 0:
            return
        self.calls.append((last, max(seconds, 1e-3)))
        wanted = last / max(seconds, 1e-3) * self.target
        line = _cost_line(self.calls, self.SPREAD)
        if line is None and self.line is not None:  # sizes alike: the last line, scaled to this call
            fixed, per_byte = self.line
            scale = max(seconds, 1e-3) / (fixed + per_byte * last)
            line = fixed * scale, per_byte * scale
        if line is not None:
            self.line = line
            fixed, per_byte = line
            from_line = max(self.target - fixed, 0.0) / per_byte  # nothing: one file per call
            # after a call within the target, never below its pace: with a fixed part >= 0, reading at
            # that pace takes at most `target` again. A slow outlier still in the history (a young
            # JVM's first call took 5 s for 23 files, its next ones 0.6 s) flattens the line to a few
            # files per call until it leaves; the pace does not follow it
            wanted = max(wanted, from_line) if seconds <= self.target else from_line
        elif seconds < self.target:  # no line yet and the sizes too alike for one: try twice as much
            wanted = max(wanted, 2 * last)
        self.budget = min(max(wanted, last / 2), last * self.MAX_GROWTH)


def _cost_line(calls: collections.abc.Iterable[tuple[int, float]], spread: float) -> tuple[float, float] | None:
    """(fixed seconds >= 0, seconds per byte > 0) of a least-squares line through (bytes, seconds),
    or None when the sizes are too alike or the line does not slope up."""
    points = list(calls)
    xs = [float(b) for b, _ in points]
    if len(points) < 2 or max(xs) - min(xs) < spread * max(xs):
        return None
    n, mx = len(points), sum(xs) / len(points)
    my = sum(t for _, t in points) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (t - my) for x, (_, t) in zip(xs, points, strict=True)) / sxx
    if slope <= 0:
        return None
    return max(my - slope * mx, 0.0), slope


class FileSource(Source):
    """Subtask i of p reads files i, i+p, ... (sorted) through Spark.

    Batch sizing: a Spark call has a large fixed cost (one call reading 10 files of
    50k events took 0.93 s on 2 cores, ten calls of one file 2.67 s:
    bench/spark_call_costs.py), so a subtask with a backlog reads as many of its next files
    as fit a byte budget in one call (`ReadBudget`). A call's cost is a fixed part
    plus a part per byte, fitted over the last calls' own times (the batch through
    the chain, minus waits for room downstream); the budget is what takes `target`
    seconds (the job's `execution.source.batch-duration`), at most 4x and at least
    half the bytes of the last call; the first call assumes ~32 MB/s. A call reads at
    most `execution.source.max-files-per-read` files (256) in either mode. A checkpoint
    barrier waits for at most one batch. BATCH mode reads up to a fixed byte budget
    instead (`byte_budget`).

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
    meets Spark's refusal of a query of the corrupt-record column alone (a JSON
    source of a job with execution.source.malformed-columns "read" references
    the first column only: the columns the job reads and that one are checked). CSV
    is read without the parser's column pruning (a row's field count is
    checked against the whole schema) and a row with undecodable bytes in a
    string column is malformed too (malformed_checks.py)."""

    def __init__(
        self,
        payload: Payload,
        subtask: int,
        parallelism: int,
        engine: SparkEngine | None,
        reads: SourceReads = DEFAULT_READS,
        clock: Callable[[], float] = time.monotonic,
        byte_budget: int | None = None,
    ) -> None:
        self.engine = engine
        self.reader = FileFormatReader(payload, engine, reads.malformed_columns)
        self.path, self.suffix = payload["path"], payload.get("suffix", "")
        self.subtask, self.parallelism = subtask, parallelism
        interval: float | None = payload.get("monitor_interval")
        self.idle_wait = min(interval or 0.1, 0.1)
        # monitoring: the directory listed again every interval (the source is unbounded)
        self.monitor = ContinuousFileMonitor(payload, interval, subtask, parallelism, clock) if interval else None
        infos = list_file_infos(self.path, self.suffix)  # a missing input directory fails the task in both modes
        listed = [f.path for f in infos]
        self.reader.infer_schema(self.suffix)
        self.records_malformed = 0
        self.records_dropped = 0
        self.bad_record_samples: list[str] = []
        self._listed = listed
        self.skip: set[str] = set()  # fixed listing, after a rescale: names read before it (rescale.items_read)
        self.files = [] if self.monitor else listed[subtask::parallelism]
        # BATCH: each Spark call reads as many files as fit in byte_budget (at least one)
        self.budget = ReadBudget(reads.batch_duration, fixed=byte_budget, max_files=reads.max_files)
        self._sizes = {} if self.monitor else {f.path: f.size for f in infos}  # a fixed listing's files
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
        """Size the next call from the pace of the last one (`seconds`: its own time through the
        chain, the waits for room downstream left out), and collect the malformed-row counts of
        the batches the chain has run."""
        self._collect(0.0)
        self.budget.done(seconds)

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
            take = self.budget.take(self.files, self.monitor.sizes)
            paths, self.files = self.files[:take], self.files[take:]
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
            paths = self.files[self.offset : self.offset + self.budget.take(self.files[self.offset :], self._sizes)]
        self.offset += len(paths)
        return Batch(self.engine, df=self._read(paths))

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
    kind: OperatorKind,
    payload: Payload,
    subtask: int,
    parallelism: int,
    engine: SparkEngine,
    batch: bool = False,
    reads: SourceReads = DEFAULT_READS,
) -> Source:
    """Build subtask `subtask` of `parallelism` of a source of `kind` (`batch`: for a BATCH job;
    `reads`: how a file source sizes its Spark calls)."""
    if kind == OperatorKind.SOURCE_FILES:
        return FileSource(
            payload, subtask, parallelism, engine, reads=reads, byte_budget=BATCH_BYTES_PER_CALL if batch else None
        )
    return SOURCES[kind](payload, subtask, parallelism, engine)
