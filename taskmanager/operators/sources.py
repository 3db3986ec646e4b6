"""Replayable sources. Each subtask owns a deterministic share of the input
and an offset (its state): the next split of its files, or the next
sequence number of a generator."""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice import parquet_schema, schema_inference
from sluice import schema as schemas
from sluice.checkpoints.rescale import generator_streams, items_read
from sluice.graph import OperatorKind
from sluice.storage import list_files, list_files_with_mtime, resolve
from taskmanager.operators.base import IDLE, Idle, Payload, Source
from taskmanager.operators.malformed_checks import UNDECODABLE, malformed_checks
from taskmanager.spark_engine import Batch, SparkEngine

__all__ = ["IDLE", "CollectionSource", "FileSource", "GeneratorSource", "Source", "make_source"]

log = logging.getLogger("sluice.taskmanager.sources")

CORRUPT_COLUMN = schema_inference.CORRUPT_COLUMN  # malformed rows' text (emitted only towards a dead letter)
FILE_COLUMN = schema_inference.FILE_COLUMN  # dead letter: the file a malformed row came from
SAMPLES = 5  # malformed lines kept as a sample for `sluice status`
SAMPLE_CHARS = 160  # of each, from its start
PENDING_OBSERVATIONS = 16  # batches whose malformed-row count is not known yet (kept, then forgotten)
# seconds to wait, at the end of the input, for the counts of the batches already run: Spark
# completes an observation from its listener bus, asynchronously after the action, which lags
# by seconds on a loaded machine (1 s once lost half a job's count). Only batches still pending
# wait, so a prompt bus costs nothing.
FINAL_OBSERVATION_WAIT = 15.0


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
    with their modification times (which grows with the input, as a continuous
    file enumerator's does, unless `forget_after_ms` bounds it: a file modified
    that long before the newest one listed is neither read nor remembered, and
    names older than that are dropped from the state, safely, since such a
    file would be ignored if listed again); writers must make a file visible
    atomically (write `.name`, rename).

    Reading: the payload's schema is fixed (inferred at submit when the user
    gave none: sluice/schema_inference.py) and its reader options go to
    Spark as they are. Parquet: each file's footer is checked against the
    schema before Spark reads it (`_check_parquet`); a file that does not
    match fails the job naming it. Malformed rows of CSV and JSON, in one Spark pass: the
    files are read PERMISSIVE with a corrupt-record column (the user's when
    the schema has it, else CORRUPT_COLUMN, added here); a row is malformed
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
        self.engine, self.clock = engine, clock
        self.format = payload["format"]
        self.options: dict[str, Any] = dict(payload.get("options") or {})
        self.policy: str = payload.get("on_error") or schema_inference.error_policy(self.format, self.options, None)[0]
        self.path, self.suffix = payload["path"], payload.get("suffix", "")
        self.subtask, self.parallelism = subtask, parallelism
        self.monitor_interval: float | None = payload.get("monitor_interval")
        self.idle_wait = min(self.monitor_interval or 0.1, 0.1)
        self.done: dict[str, int] = {}  # monitoring: names of the files read -> their modification time (ms)
        # Monitoring with forget_after (ms): a file modified that long before the newest file seen is
        # neither read nor remembered, so the names kept stay bounded (sources' docstring)
        self.forget_after: int | None = payload.get("forget_after_ms")
        self.newest_mtime = 0
        self.files_ignored = 0
        self._mtimes: dict[str, int] = {}  # modification times of the files listed
        self._listed_at = float("-inf")
        listed = list_files(self.path, self.suffix)  # a missing input directory fails the task in both modes
        self.schema: str | None = payload.get("schema")
        if not self.schema and self.format != "text":
            # A job graph built without from_files' inference: infer here, from the same first files
            # for every subtask, once per deployment (never per batch).
            self.schema = schema_inference.infer_schema(self.path, self.format, self.options, self.suffix)
        self._read_plan: _ReadPlan | None = None  # CSV and JSON: built with the first batch
        self._pending: list[Any] = []  # observations of batches read, not collected yet
        self.records_malformed = 0
        self.records_dropped = 0
        self.bad_record_samples: list[str] = []
        self._listed = listed
        self.skip: set[str] = set()  # fixed listing, after a rescale: names read before it (rescale.items_read)
        self.files = [] if self.monitor_interval else listed[subtask::parallelism]
        self.files_per_batch = 1
        self.target = target
        # BATCH: each Spark call reads as many files as fit in this many bytes of input (at least one)
        self.byte_budget = byte_budget
        self._sizes: dict[str, int] | None = None
        self.offset = 0  # number of my files fully emitted

    def snapshot(self) -> dict[str, Any]:
        if not self.monitor_interval:
            return {"offset": self.offset, **({"skip": sorted(self.skip)} if self.skip else {})}
        return {"offset": self.offset, "done": dict(sorted(self.done.items())), "newest_mtime": self.newest_mtime}

    def restore(self, handle: dict[str, Any]) -> None:
        super().restore(handle)
        if not self.monitor_interval and ("skip" in handle or "rescale_from" in handle):
            names = [os.path.basename(p) for p in self._listed]
            if "rescale_from" in handle:  # a savepoint of another parallelism (sluice/checkpoints/rescale.py)
                self.skip = items_read(names, handle["rescale_from"])
            else:
                self.skip = set(handle["skip"])
            left = [p for p, n in zip(self._listed, names, strict=True) if n not in self.skip]
            self.files = left[self.subtask :: self.parallelism]
        if self.monitor_interval:  # the queue (self.files) is still empty: the next listing fills it
            done = handle.get("done", {})
            self.done = dict(done) if isinstance(done, dict) else dict.fromkeys(done, 0)  # a list: before forget_after
            self.newest_mtime = int(handle.get("newest_mtime", 0))

    def _mine(self, path: str) -> bool:
        name = os.path.basename(path)
        return name not in self.done and zlib.crc32(name.encode()) % self.parallelism == self.subtask

    def _horizon(self) -> int | None:
        """Files modified before this (ms) are forgotten: None without forget_after."""
        return None if self.forget_after is None else self.newest_mtime - self.forget_after

    def _discover(self) -> None:
        """Monitoring: queue my files not read yet, once per interval."""
        now = self.clock()
        if self.monitor_interval is None or now - self._listed_at < self.monitor_interval:
            return
        self._listed_at = now
        listed = list_files_with_mtime(self.path, self.suffix)
        self._mtimes.update(listed)
        if self.forget_after is not None and listed:
            self.newest_mtime = max(self.newest_mtime, max(m for _p, m in listed))
        horizon = self._horizon()
        fresh = set()
        for p, mtime in listed:
            if not self._mine(p):
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
        self.files = sorted(set(self.files) | fresh)
        if horizon is not None:  # names older than the horizon can never be listed as new again
            self.done = {n: m for n, m in self.done.items() if m >= horizon}

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
        if not self.monitor_interval:
            return self.offset < len(self.files)
        if not self.files:
            self._listed_at = float("-inf")
            self._discover()
        return bool(self.files)

    def next_batch(self) -> Batch | Idle | None:
        if self.monitor_interval:  # self.files: my files found and not read yet
            if not self.files:
                self._discover()
                if not self.files:
                    return IDLE
            paths, self.files = self.files[: self.files_per_batch], self.files[self.files_per_batch :]
            mtimes = self._mtimes
            self.done.update((os.path.basename(p), mtimes.get(p, 0)) for p in paths)
        else:  # self.files: all my files; the offset is how many were read
            if self.offset >= len(self.files):
                self._collect(FINAL_OBSERVATION_WAIT)
                if self._pending:
                    log.warning(
                        "%d batch(es) still have no malformed-row count after %.0f s: records_malformed may be short",
                        len(self._pending),
                        FINAL_OBSERVATION_WAIT,
                    )
                    self._pending = []
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

    # -- reading --------------------------------------------------------------------------------
    def _read(self, paths: list[str]) -> Any:
        """A DataFrame of the rows of `paths` that go on (see the class docstring)."""
        reader = self.engine.spark.read.options(**schema_inference.spark_options(self.options))
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        if self.format in ("text", "parquet"):  # no malformed rows: only the rows are counted
            if self.format == "parquet":
                self._check_parquet(paths)
                df = reader.schema(self.schema).parquet(*paths)
            else:
                df = reader.text(paths)
            observation = Observation()
            self._pending = [*self._pending[-(PENDING_OBSERVATIONS - 1) :], observation]
            return df.observe(observation, F.count(F.lit(1)).alias("rows"))

        plan = self._plan()
        df = (
            reader.schema(plan.schema)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", plan.corrupt)
            .options(**plan.reader_options)
            .format(self.format)
            .load(paths)
        )
        if plan.corrupt_text is not None:  # CSV: undecodable bytes mark the row too (malformed_checks.py)
            df = df.withColumn(plan.corrupt, plan.corrupt_text)
        observation = Observation()
        df = df.observe(observation, *plan.metrics)
        self._pending = [*self._pending[-(PENDING_OBSERVATIONS - 1) :], observation]
        if plan.keep is not None:
            df = df.filter(plan.keep)
        if plan.file is not None:
            df = df.withColumn(FILE_COLUMN, plan.file)
        return df if plan.internal is None else df.drop(plan.internal)

    def _check_parquet(self, paths: list[str]) -> None:
        """Each Parquet file's footer against the source's schema before Spark reads it: a file that
        is not Parquet, or lacks a column or has it with another type, fails the task naming the
        file (PARQUET_FAILURE: not restarted, the same file would fail the same way)."""
        assert self.schema, "a Parquet source has a schema: given, or the first file's footer"
        fs, _ = resolve(self.path)
        for path in paths:
            try:
                found = parquet_schema.parquet_schema(fs, path)
                parquet_schema.check_parquet_schema(self.schema, found, path)
            except parquet_schema.ParquetSchemaError as exc:
                raise RuntimeError(f"{schema_inference.PARQUET_FAILURE}: {exc}") from None

    def _plan(self) -> _ReadPlan:
        """How this source reads CSV or JSON with malformed rows (built once: Spark expressions are
        unresolved until they meet a DataFrame, so every batch reuses them)."""
        if self._read_plan is not None:
            return self._read_plan
        from pyspark.sql import functions as F

        assert self.schema, "CSV and JSON always have a schema: given, or inferred in __init__"
        parsed = schemas.parse_or_none(self.schema)
        if parsed is not None:
            fields = [(f.name, f.type) for f in parsed]
        else:  # a DDL Sluice's parser does not model (sluice/schema.py): Spark knows the names and types
            struct = self.engine.spark.createDataFrame([], self.schema).schema
            fields = [(f.name, f.dataType.simpleString()) for f in struct.fields]
        user_column = schema_inference.corrupt_column_of(self.options)
        if user_column not in [name for name, _type in fields]:
            user_column = None
        corrupt = user_column or CORRUPT_COLUMN
        separator = schema_inference.option(self.options, "sep") or schema_inference.option(self.options, "delimiter")
        checks = malformed_checks(self.format, fields, corrupt, None if separator is None else str(separator))
        text = F.col(schemas.quote(corrupt))
        corrupt_text = None
        if checks.undecodable:  # Spark's text, else the fields of a row with undecodable bytes
            undecodable = functools.reduce(
                operator.or_, (F.col(schemas.quote(c)).contains(UNDECODABLE) for c in checks.undecodable)
            )
            fields_text = F.concat_ws(
                checks.separator,
                *(F.coalesce(F.col(schemas.quote(c)).cast("string"), F.lit("")) for c in checks.parsed),
            )
            corrupt_text = F.coalesce(text, F.when(undecodable, fields_text))
        malformed = text.isNotNull()
        # the file's name and the line's start; evaluated only for malformed rows (CASE WHEN)
        sample = F.concat(
            F.substring_index(F.input_file_name(), "/", -1), F.lit(": "), F.substring(text, 1, SAMPLE_CHARS)
        )
        metrics = (
            F.count(F.lit(1)).alias("rows"),
            # every column referenced: Spark parses (and checks) each in every row (malformed_checks.py)
            F.count(F.when(malformed, F.struct(*(F.col(schemas.quote(c)) for c in checks.parsed)))).alias("malformed"),
            F.min(F.when(malformed, sample)).alias("first"),
            F.max(F.when(malformed, sample)).alias("last"),
        )
        keep = None
        if self.policy == "drop":  # the malformed rows stop here (Spark's DROPMALFORMED)
            keep = ~malformed
        elif self.policy == "fail":  # Spark raises on the first malformed row it parses
            message = F.concat(
                F.lit(f"{schema_inference.MALFORMED_FAILURE} in "),
                F.input_file_name(),
                F.lit(": "),
                F.substring(text, 1, 2 * SAMPLE_CHARS),
                F.lit(
                    ' (from_files(on_error="fail") fails the job on a malformed row; on_error="drop" drops and '
                    'counts such rows, on_error="dead_letter:DIR" writes them to DIR)'
                ),
            )
            keep = F.when(malformed, F.raise_error(message)).otherwise(F.lit(True))
        dead_letter = self.policy == "dead_letter"
        self._read_plan = _ReadPlan(
            schema=self.schema if user_column else f"{self.schema}, {CORRUPT_COLUMN} string",
            corrupt=corrupt,
            reader_options=dict(checks.reader_options),
            corrupt_text=corrupt_text,
            internal=None if user_column or dead_letter else CORRUPT_COLUMN,
            metrics=metrics,
            keep=keep,
            file=F.input_file_name() if dead_letter else None,
        )
        return self._read_plan

    def _collect(self, wait: float) -> None:
        """Add up the malformed rows of the batches whose Spark action has run (the observation is
        complete then); wait up to `wait` seconds for the others."""
        deadline = time.monotonic() + wait  # real time: the source's clock is for listing only
        while True:
            left = []
            for observation in self._pending:
                metrics = _observed(observation)
                if metrics is None:
                    left.append(observation)
                    continue
                malformed = int(metrics.get("malformed") or 0)
                self.records_read += int(metrics.get("rows") or 0)
                self.records_malformed += malformed
                if self.policy == "drop":
                    self.records_dropped += malformed
                for key in ("first", "last"):
                    line = metrics.get(key)
                    if (
                        line
                        and len(self.bad_record_samples) < SAMPLES
                        and printable(line) not in self.bad_record_samples
                    ):
                        self.bad_record_samples.append(printable(line))
            self._pending = left
            if not left or time.monotonic() >= deadline:
                return
            time.sleep(0.01)


@dataclasses.dataclass(frozen=True)
class _ReadPlan:
    """How a file source reads CSV or JSON that may hold malformed rows (FileSource._plan)."""

    schema: str  # the DDL Spark reads with: the payload's, plus the internal corrupt-record column
    corrupt: str  # the corrupt-record column Spark fills
    reader_options: dict[str, str]  # after the user's (CSV: the field count checked against the whole schema)
    corrupt_text: Any  # CSV: the corrupt-record column's new value (None: Spark's as it is)
    internal: str | None  # that column when Sluice added it (dropped before the chain sees the rows)
    metrics: tuple[Any, ...]  # observed per batch: the malformed rows
    keep: Any  # the condition of the rows that go on (None: all); raises for on_error "fail"
    file: Any  # dead letter: the FILE_COLUMN expression (None: no such column)


def printable(text: str) -> str:
    """A sample line as a status can show it: control characters and other unprintable ones
    (binary input) escaped, e.g. \\x00."""
    return "".join(c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}") for c in text)


def _observed(observation: Any) -> dict[str, Any] | None:
    """An observation's metrics once its batch's first Spark action ended, else None (never blocks:
    a batch that no operator materialized has none). A failed action counts nothing."""
    try:
        jvm_observation = getattr(observation, "_jo", None)
        if jvm_observation is not None:  # classic Spark: the JVM object completes a future
            if not jvm_observation.future().isCompleted():
                return None
            return dict(observation.get)
        result = observation.get  # Spark Connect: {} until the action's result arrived
        return dict(result) if result else None
    except Exception as exc:  # noqa: BLE001 — a metric: the action's own failure fails the task
        log.debug("malformed-row count unavailable: %s", exc)
        return {}


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
