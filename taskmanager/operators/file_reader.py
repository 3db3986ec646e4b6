"""How a file source (taskmanager/operators/sources.py) reads its files through Spark:
`FileFormatReader` holds the payload's format, reader options, error policy and schema, builds
the read plan of CSV and JSON that may hold malformed rows, checks Parquet footers, and keeps
the per-batch observations whose malformed-row counts the source adds up (`FileSource`'s
docstring says what each policy does)."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import operator
import threading
import weakref
from typing import Any

from sluice import parquet_schema, schema_inference
from sluice import schema as schemas
from sluice.storage import resolve
from taskmanager.operators.base import Payload
from taskmanager.operators.malformed_checks import UNDECODABLE, malformed_checks
from taskmanager.spark_engine import SparkEngine

log = logging.getLogger("sluice.taskmanager.sources")

CORRUPT_COLUMN = schema_inference.CORRUPT_COLUMN  # malformed rows' text (emitted only towards a dead letter)
FILE_COLUMN = schema_inference.FILE_COLUMN  # dead letter: the file a malformed row came from
SAMPLES = 5  # malformed lines kept as a sample for `sluice status`
SAMPLE_CHARS = 160  # of each, from its start
PENDING_OBSERVATIONS = 16  # batches whose malformed-row count is not known yet (kept, then forgotten)
PLANS_KEPT = 64  # read plans kept per SparkSession (FileFormatReader._plan), the oldest dropped first
_PLANS: weakref.WeakKeyDictionary[Any, dict[str, _ReadPlan]] = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


class FileFormatReader:
    """Reads a file source's files of one format into DataFrames, observing each batch's rows
    and malformed rows while the chain's own Spark action runs (no second pass)."""

    def __init__(self, payload: Payload, engine: SparkEngine | None, malformed_columns: str = "all") -> None:
        self.engine = engine  # None: no Spark (listing, budgets and monitoring work; reading does not)
        # JSON: "all" columns parsed and checked for malformed values, or those the job "read"s
        # (execution.source.malformed-columns; malformed_checks.py)
        self.malformed_columns = malformed_columns
        self.format = payload["format"]
        self.options: dict[str, Any] = dict(payload.get("options") or {})
        self.policy: str = payload.get("on_error") or schema_inference.error_policy(self.format, self.options, None)[0]
        self.path: str = payload["path"]
        self.schema: str | None = payload.get("schema")
        self.plan: _ReadPlan | None = None  # CSV and JSON: built with the first batch
        self.pending: list[Any] = []  # observations of batches read, not collected yet

    def infer_schema(self, suffix: str) -> None:
        """The schema when the payload has none (a job graph built without from_files' inference):
        inferred from the same first files for every subtask, once per deployment (never per batch)."""
        if not self.schema and self.format != "text":
            self.schema = schema_inference.infer_schema(self.path, self.format, self.options, suffix)

    @property
    def spark(self) -> Any:
        """The engine's SparkSession, which every read goes through."""
        assert self.engine is not None, "a file source without a SparkEngine cannot read"
        return self.engine.spark

    def read(self, paths: list[str]) -> Any:
        """A DataFrame of the rows of `paths` that go on (see FileSource's docstring)."""
        reader = self.spark.read.options(**schema_inference.spark_options(self.options))
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        if self.format in ("text", "parquet"):  # no malformed rows: only the rows are counted
            if self.format == "parquet":
                self.check_parquet(paths)
                df = reader.schema(self.schema).parquet(*paths)
            else:
                df = reader.text(paths)
            observation = Observation()
            self.pending = [*self.pending[-(PENDING_OBSERVATIONS - 1) :], observation]
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
        self.pending = [*self.pending[-(PENDING_OBSERVATIONS - 1) :], observation]
        if plan.keep is not None:
            df = df.filter(plan.keep)
        if plan.file is not None:
            df = df.withColumn(FILE_COLUMN, plan.file)
        return df if plan.internal is None else df.drop(plan.internal)

    def check_parquet(self, paths: list[str]) -> None:
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
        unresolved until they meet a DataFrame, so every batch reuses them, and so does every
        reader of the same session with the same format, schema, options and policy: building
        them costs ~230 py4j calls, 30 ms on an idle TaskManager and several times that on a
        busy one, which each source subtask of every job paid on its first batch)."""
        if self.plan is None:
            key = json.dumps(
                [self.format, self.schema, self.options, self.policy, self.malformed_columns],
                sort_keys=True,
                default=str,
            )
            with _PLANS_LOCK:
                plan = _PLANS.setdefault(self.spark, {}).get(key)
            if plan is None:
                plan = self._build_plan()  # outside the lock: py4j calls; two tasks may both build one
                with _PLANS_LOCK:
                    plans = _PLANS.setdefault(self.spark, {})
                    plans[key] = plan
                    while len(plans) > PLANS_KEPT:
                        del plans[next(iter(plans))]  # the oldest
            self.plan = plan
        return self.plan

    def _build_plan(self) -> _ReadPlan:
        from pyspark.sql import functions as F

        assert self.schema, "CSV and JSON always have a schema: given, or inferred (infer_schema)"
        parsed = schemas.parse_or_none(self.schema)
        if parsed is not None:
            fields = [(f.name, f.type) for f in parsed]
        else:  # a DDL Sluice's parser does not model (sluice/schema.py): Spark knows the names and types
            struct = self.spark.createDataFrame([], self.schema).schema
            fields = [(f.name, f.dataType.simpleString()) for f in struct.fields]
        user_column = schema_inference.corrupt_column_of(self.options)
        if user_column not in [name for name, _type in fields]:
            user_column = None
        corrupt = user_column or CORRUPT_COLUMN
        separator = schema_inference.option(self.options, "sep") or schema_inference.option(self.options, "delimiter")
        checks = malformed_checks(
            self.format, fields, corrupt, None if separator is None else str(separator), self.malformed_columns
        )
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
            # the columns referenced (every one by default): Spark parses (and checks) each in every row
            # (malformed_checks.py)
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
        return _ReadPlan(
            schema=self.schema if user_column else f"{self.schema}, {CORRUPT_COLUMN} string",
            corrupt=corrupt,
            reader_options=dict(checks.reader_options),
            corrupt_text=corrupt_text,
            internal=None if user_column or dead_letter else CORRUPT_COLUMN,
            metrics=metrics,
            keep=keep,
            file=F.input_file_name() if dead_letter else None,
        )

    def observed(self) -> list[dict[str, Any]]:
        """The metrics of the batches whose Spark action has run (their observations are complete
        then), in the order they were read; the others stay pending. Never blocks."""
        done, left = [], []
        for observation in self.pending:
            metrics = _observed(observation)
            if metrics is None:
                left.append(observation)
            else:
                done.append(metrics)
        self.pending = left
        return done


@dataclasses.dataclass(frozen=True)
class _ReadPlan:
    """How a file source reads CSV or JSON that may hold malformed rows (FileFormatReader._plan)."""

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
