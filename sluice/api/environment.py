"""StreamExecutionEnvironment: sources, settings, and submission."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from sluice import graph, job_options, states
from sluice import schema as schemas
from sluice import schema_inference as inference
from sluice.api.arguments import SchemaLike
from sluice.api.datastream import DataStream
from sluice.api.stream_graph import StreamGraph
from sluice.connectors.api import Source
from sluice.graph import OperatorKind
from sluice.v1 import common_pb2

# `sluice run` fills these in before it runs the job file.
_context: dict[str, Any] = {}


def set_execution_context(**ctx: Any) -> None:
    """Used by `sluice run`: where to submit, default parallelism, detach."""
    _context.clear()
    _context.update(ctx)


@dataclasses.dataclass
class JobExecutionResult:
    job_id: str
    state: str
    info: Any = None


class StreamExecutionEnvironment:
    def __init__(self) -> None:
        self.stream_graph = StreamGraph()  # what the job's API calls recorded (sluice/api/stream_graph.py)
        self._parallelism = int(_context.get("parallelism") or 1)
        self._parallelism_forced = _context.get("parallelism") is not None
        self._max_parallelism = graph.DEFAULT_MAX_PARALLELISM
        self._config: dict[str, str] = {}
        self._forced_options: dict[str, str] = dict(_context.get("options") or {})  # `sluice run -D`
        # Whether building the job may read input files (a schema inferred from a sample, a Parquet
        # schema checked against the first footer). The JobManager builds declarative jobs with it
        # off: it reads no file a client names; the tasks check every file as they read it.
        self.read_inputs_at_build = True

    @staticmethod
    def get_execution_environment() -> StreamExecutionEnvironment:
        return StreamExecutionEnvironment()

    # -- settings -------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        """Default parallelism of operators (`sluice run --parallelism` wins)."""
        if not self._parallelism_forced:
            self._parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        """Number of key groups; fixes how far a job can later be rescaled."""
        self._max_parallelism = max_parallelism
        return self

    def enable_checkpointing(self, interval_ms: int) -> StreamExecutionEnvironment:
        """Checkpoint every `interval_ms` milliseconds (a positive number; 0 leaves checkpointing off)."""
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int | float) or not interval_ms >= 0:
            raise ValueError(
                f"enable_checkpointing: interval_ms is a number of milliseconds > 0 (0 leaves checkpointing off), "
                f"got {interval_ms!r}"
            )
        if interval_ms == float("inf"):
            raise ValueError("enable_checkpointing: interval_ms must be finite; leave checkpointing off instead")
        return self.set_config(job_options.CHECKPOINTING_INTERVAL.key, str(int(interval_ms)))

    def set_runtime_mode(self, mode: str) -> StreamExecutionEnvironment:
        """Run the job as "STREAMING" (the default) or "BATCH": a job of bounded sources run stage
        by stage, through blocking exchanges, with final results once per key (docs/batch.md)."""
        if not isinstance(mode, str) or mode.strip().upper() not in ("STREAMING", "BATCH"):
            raise ValueError(f'set_runtime_mode: "STREAMING" or "BATCH", got {mode!r}')
        return self.set_config(job_options.RUNTIME_MODE.key, mode.strip().upper())

    def set_config(self, key: str, value: Any) -> StreamExecutionEnvironment:
        """Set job option `key` (sluice/job_options.py; keys outside its families belong to the job).
        A mistyped or unknown Sluice option, or a bad value, is a ValueError here. `sluice run -D
        key=value` wins over this, as `--parallelism` wins over set_parallelism."""
        try:
            job_options.check_option(key, str(value))
        except job_options.JobConfigError as exc:
            raise ValueError(f"set_config: {exc}") from None
        self._config[key] = str(value)
        return self

    # -- sources --------------------------------------------------------------
    def from_files(
        self,
        path: str,
        format: str = "json",
        schema: str | None = None,
        suffix: str | None = None,
        name: str | None = None,
        monitor_interval_ms: int | None = None,
        options: dict[str, str | bool | int | float] | None = None,
        on_error: str | None = None,
        forget_after_ms: int | None = None,
    ) -> DataStream:
        """Read every file under `path` (a directory, local or any pyarrow.fs URI)
        through Spark. Each file is a split; a split's offset is state.
        `format`: json (newline-delimited), csv, text (one `value` per line)
        or parquet (docs/file-formats.md).
        `schema`: a Spark DDL string; without one, a CSV or JSON source infers
        it now from a sample of the files, a Parquet source takes the first
        file's footer (sluice/schema_inference.py), and the job keeps it, so
        every subtask and restore reads the same columns. A schema given for
        Parquet is checked against that footer now and against each file's
        as it is read.
        `options`: Spark reader options, e.g. {"header": True, "sep": ";"},
        with Spark's defaults (CSV `header` is false).
        `on_error` (Parquet: only "fail", its default: a file that cannot be
        read as the schema says fails the job, naming it): what happens to a malformed row (one that did not parse in
        any column of the schema, a CSV row of the wrong width or with undecodable
        bytes; every one is counted, `records_malformed` in `sluice status`,
        which also shows a sample): "drop" (the default) drops it and counts it
        in `records_dropped`; "fail" fails the job at once,
        naming the file and the line; "dead_letter:DIR" writes each malformed
        line as it was, with its file (columns file, record), to a file sink
        at DIR, committed exactly once like any file sink, and the stream goes
        on with the parsed rows (one more exchange: the source's rows go
        through a task that parts them). Spark's `mode` option means the same
        (DROPMALFORMED is "drop", FAILFAST "fail"; PERMISSIVE, or a
        `columnNameOfCorruptRecord` without `on_error`, keeps the row with
        nulls where it did not parse, as Spark does); given both, they must
        agree (sluice/schema_inference.py has the table). A row with a null
        key column is never keyed: key_by drops it and counts it in
        `records_dropped`.
        `monitor_interval_ms`: keep watching `path` and read files that appear
        later, listing it at most this often (the stream is then unbounded;
        make each new file visible atomically: write `.name`, then rename).
        `forget_after_ms` (with monitoring): the names of the files read are state; a file
        modified this long before the newest file seen is neither read nor remembered, so
        that state stays bounded (files must then arrive within that horizon of each other)."""
        if format not in inference.FORMATS:
            raise ValueError(f"from_files: unknown format {format!r}; use json, csv, text or parquet")
        if monitor_interval_ms is not None and not graph.positive_number(monitor_interval_ms):
            raise ValueError(
                f"from_files: monitor_interval_ms must be a positive number of milliseconds "
                f"(or None for a bounded read), got {monitor_interval_ms!r}"
            )
        if forget_after_ms is not None and (
            monitor_interval_ms is None
            or isinstance(forget_after_ms, bool)
            or not isinstance(forget_after_ms, int)
            or forget_after_ms <= 0
        ):
            raise ValueError(
                "from_files: forget_after_ms takes a whole number of ms > 0 and needs monitor_interval_ms, "
                f"got {forget_after_ms!r}"
            )
        if schema is not None and (not isinstance(schema, str) or not schema.strip()):
            raise ValueError(f"from_files: schema is a Spark DDL string such as 'url string, n bigint', got {schema!r}")
        try:
            checked = inference.check_options(format, options)
            policy, dead_letter_dir = inference.error_policy(format, checked, on_error)
        except inference.ReaderOptionError as exc:
            raise ValueError(f"from_files: {exc}") from None
        if suffix is None:
            suffix = {"json": ".jsonl", "csv": ".csv", "text": "", "parquet": ".parquet"}[format]
        if schema is None and format != "text":
            if not self.read_inputs_at_build:
                raise ValueError(f"from_files: a {format} source built without reading its files needs a schema")
            schema = _infer_file_schema(path, format, checked, suffix, monitored=monitor_interval_ms is not None)
        elif format == "parquet" and schema is not None and self.read_inputs_at_build:
            from sluice import parquet_schema  # local: pyarrow is heavy for the API import

            try:
                parquet_schema.check_parquet_input(path, suffix, schema)
            except inference.SchemaInferenceError as exc:
                raise ValueError(f"from_files: {exc}") from None
        try:
            inference.check_corrupt_column(schema, checked)
        except inference.ReaderOptionError as exc:
            raise ValueError(f"from_files: {exc}") from None
        payload: dict[str, Any] = {"path": path, "format": format, "schema": schema, "suffix": suffix}
        if checked:
            payload["options"] = checked
        if monitor_interval_ms is not None:
            payload["monitor_interval"] = monitor_interval_ms / 1000
        if forget_after_ms is not None:
            payload["forget_after_ms"] = forget_after_ms
        if format != "text":
            payload["on_error"] = policy
        name = name or f"files {os.path.basename(path.rstrip('/'))}"
        source = self._source(OperatorKind.SOURCE_FILES, payload, name)
        if dead_letter_dir is None:
            return source
        return _part_dead_letters(source, schema, checked, dead_letter_dir, name)

    def from_generator(
        self,
        body: Callable[[Any], Any],
        count: int | None = None,
        batch_size: int = 100_000,
        name: str | None = None,
        schema: SchemaLike = None,
    ) -> DataStream:
        """A deterministic, replayable source: `body(df)` turns a DataFrame of
        sequence numbers (column `id`) into records, inside Spark. `count`
        bounds the stream (None: unbounded); the offset is the next id.
        `schema` (a DDL string or a StructType) declares the columns `body`
        returns, so that keys and sink columns are checked at submit; without
        it they are unknown until the job runs."""
        declared = None if schema is None else schemas.to_schema(schema, "from_generator(schema=...)")
        stream = self._source(
            OperatorKind.SOURCE_GENERATOR, {"body": body, "count": count, "batch_size": batch_size}, name or "generator"
        )
        if declared is not None:
            self.stream_graph.node(stream._op_id).schema = declared
        return stream

    def from_collection(self, rows: Iterable[dict[str, Any]], name: str | None = None) -> DataStream:
        """A small bounded source from Python dicts (for tests and examples)."""
        rows = list(rows)
        if rows and not all(isinstance(r, dict) for r in rows):
            raise TypeError("from_collection expects dicts, e.g. [{'url': '/a', 'n': 1}]")
        return self._source(OperatorKind.SOURCE_COLLECTION, {"rows": rows}, name or "collection")

    def from_source(self, source: Source, name: str | None = None) -> DataStream:
        """Read with a connector `Source` (sluice.connectors, docs/connectors.md): its
        enumerator (one of the built-ins, configured here on the client) runs in the
        JobManager, its readers on the TaskManagers. `source.schema` (Spark DDL), when set,
        declares the rows' columns."""
        from sluice.connectors import api, enumerators  # local: only connector jobs need them

        if not isinstance(source, api.Source):
            raise TypeError(f"from_source expects a sluice.connectors.Source, got {type(source).__name__}")
        spec = enumerators.spec_of(source.create_enumerator())
        stream = self._source(
            OperatorKind.SOURCE_CONNECTOR,
            {"source": source, "enumerator": spec, "bounded": bool(source.bounded)},
            name or type(source).__name__,
        )
        if source.schema is not None:
            self.stream_graph.node(stream._op_id).schema = schemas.to_schema(source.schema, "Source.schema")
        return stream

    # -- graph ----------------------------------------------------------------
    def _source(self, kind: OperatorKind, payload: dict[str, Any], name: str) -> DataStream:
        return DataStream(self.stream_graph, self.stream_graph.add(kind, payload, name))

    def get_job_graph(self, name: str = "job") -> common_pb2.JobGraph:
        job = common_pb2.JobGraph(name=name, max_parallelism=self._max_parallelism)
        job.config.update(self._config)
        job.config.update(self._forced_options)
        return self.stream_graph.job_graph(job, self._parallelism)

    # -- submission -----------------------------------------------------------
    def execute(self, job_name: str = "job") -> JobExecutionResult:
        """Submit to the cluster. Attached (default): wait for the end and
        raise if the job failed. Detached (`sluice run --detach`): print the
        job id on the last line and return at once."""
        from sluice.client import JobFailed, JobManagerClient  # local: keeps the API import light

        _context["executions"] = _context.get("executions", 0) + 1  # `sluice run` checks a job was submitted
        before_submit = _context.get("before_submit")
        if before_submit is not None:  # `sluice run`: helper modules next to the job file go with the job
            before_submit()
        job = self.get_job_graph(job_name)
        graph.validate(job)  # fail fast, before any network call
        if "capture" in _context:  # `sluice reconfigure --jobfile`: the graph is wanted, not a job
            _context["capture"] = job
            return JobExecutionResult("", "CAPTURED")
        client = JobManagerClient.from_context(_context)
        try:
            job_id = client.submit(
                job,
                restore_path=_context.get("from_savepoint") or "",
                allow_non_restored_state=bool(_context.get("allow_non_restored_state")),
            )
            if _context.get("detach"):
                print(job_id, flush=True)
                return JobExecutionResult(job_id, "SUBMITTED")
            print(f"Submitted job {job_name} ({job_id})", file=sys.stderr, flush=True)
            watcher = _context.get("watcher")  # `sluice run`: live progress (sluice/cli/progress.py)
            info = (
                watcher(client, job_id)
                if watcher is not None
                else client.wait(job_id, progress=_context.get("progress", True))
            )
            state = states.from_proto(states.JobStatus, info.state)
            if state != states.JobStatus.FINISHED:
                raise JobFailed(f"job {job_id} ended {state}" + (f":\n{info.failure}" if info.failure else ""))
            return JobExecutionResult(job_id, state, info)
        finally:
            client.close()


def _part_dead_letters(
    source: DataStream, schema: str | None, options: dict[str, inference.OptionValue], directory: str, name: str
) -> DataStream:
    """from_files(on_error="dead_letter:DIR"): the source's malformed rows (their text and file
    in internal columns: taskmanager/operators/sources.py) go to a file sink at `directory` as
    `file,record` lines; the stream returned holds the parsed rows, without internal columns."""
    import functools

    from sluice.api.connectors import FileSink

    declared = schemas.parse_or_none(schema)
    user = inference.corrupt_column_of(options)
    corrupt = user if user is not None and declared is not None and user in declared else inference.CORRUPT_COLUMN
    source.map(
        functools.partial(_dead_letter_rows, corrupt=corrupt),
        name=f"{name}: malformed",
        output_schema="file string, record string",
    ).sink_to(FileSink(directory, columns=("file", "record")), name=f"{name}: dead letters")
    return source.map(
        functools.partial(_parsed_rows, corrupt=corrupt),
        name=f"{name}: parsed",
        output_schema=declared.ddl() if declared is not None else None,
    )


def _dead_letter_rows(df: Any, corrupt: str) -> Any:
    """The malformed rows of a dead-letter source's batch, as (file, record): a map body."""
    from pyspark.sql import functions as F

    text = F.col(schemas.quote(corrupt))
    return df.filter(text.isNotNull()).select(F.col(inference.FILE_COLUMN).alias("file"), text.alias("record"))


def _parsed_rows(df: Any, corrupt: str) -> Any:
    """The parsed rows of a dead-letter source's batch, without Sluice's internal columns: a map body."""
    from pyspark.sql import functions as F

    parsed = df.filter(F.col(schemas.quote(corrupt)).isNull())
    return parsed.drop(*(c for c in df.columns if c.startswith(inference.INTERNAL_PREFIX)))


def _infer_file_schema(
    path: str, format: str, options: dict[str, inference.OptionValue], suffix: str, monitored: bool
) -> str | None:
    """from_files without a schema: the schema inferred once from a sample of the files
    (sluice/schema_inference.py). None when a bounded source has no files to look at: validation
    then names the path (graph.validate)."""
    from sluice.storage import list_files  # local: pyarrow.fs is heavy for the API import

    try:
        files = list_files(path, suffix)
    except FileNotFoundError:
        files = []
    if not files:
        if not monitored:
            return None
        raise ValueError(
            f"from_files: no files ending in {suffix!r} under {path!r} yet, so no schema can be inferred: "
            "a monitored directory that may start empty needs schema=..., e.g. schema='url string, n bigint'"
        )
    try:
        return inference.infer_schema(path, format, options, suffix)
    except inference.SchemaInferenceError as exc:
        raise ValueError(f"from_files: {path}: {exc}") from None
