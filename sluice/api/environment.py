"""StreamExecutionEnvironment: sources, settings, and submission."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sluice import graph, states
from sluice import schema as schemas
from sluice import schema_inference as inference
from sluice.api.datastream import DataStream, SchemaLike
from sluice.graph import OperatorKind, Partitioning
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
        self._operators: dict[str, dict[str, Any]] = {}
        self._edges: list[dict[str, Any]] = []
        self._parallelism = int(_context.get("parallelism") or 1)
        self._parallelism_forced = _context.get("parallelism") is not None
        self._max_parallelism = graph.DEFAULT_MAX_PARALLELISM
        self._config: dict[str, str] = {}

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
        self._config["execution.checkpointing.interval"] = str(int(interval_ms))
        return self

    def set_config(self, key: str, value: Any) -> StreamExecutionEnvironment:
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
    ) -> DataStream:
        """Read every file under `path` (a directory, local or any pyarrow.fs URI)
        through Spark. Each file is a split; a split's offset is state.
        `format`: json (newline-delimited), csv or text (one `value` per line).
        `schema`: a Spark DDL string; without one, a CSV or JSON source infers
        it now from a sample of the files (sluice/schema_inference.py) and the
        job keeps it, so every subtask and restore reads the same columns.
        `options`: Spark reader options, e.g. {"header": True, "sep": ";",
        "mode": "DROPMALFORMED"}, with Spark's defaults (CSV `header` is false).
        `mode` PERMISSIVE (the default) keeps a malformed row with nulls where
        it could not be parsed (its text in the `columnNameOfCorruptRecord`
        column when the schema has one); DROPMALFORMED drops every malformed
        row; FAILFAST fails the task. A row with a null key column is never
        keyed (key_by drops it). Rows that did not parse in a column the job
        reads are counted (`records_malformed` in `sluice status`).
        `monitor_interval_ms`: keep watching `path` and read files that appear
        later, listing it at most this often (the stream is then unbounded;
        make each new file visible atomically: write `.name`, then rename)."""
        if format not in inference.FORMATS:
            raise ValueError(f"from_files: unknown format {format!r}; use json, csv or text")
        if monitor_interval_ms is not None and not graph.positive_number(monitor_interval_ms):
            raise ValueError(
                f"from_files: monitor_interval_ms must be a positive number of milliseconds "
                f"(or None for a bounded read), got {monitor_interval_ms!r}"
            )
        if schema is not None and (not isinstance(schema, str) or not schema.strip()):
            raise ValueError(f"from_files: schema is a Spark DDL string such as 'url string, n bigint', got {schema!r}")
        try:
            checked = inference.check_options(format, options)
        except inference.ReaderOptionError as exc:
            raise ValueError(f"from_files: {exc}") from None
        suffix = {"json": ".jsonl", "csv": ".csv", "text": ""}[format] if suffix is None else suffix
        if schema is None and format != "text":
            schema = _infer_file_schema(path, format, checked, suffix, monitored=monitor_interval_ms is not None)
        try:
            inference.check_corrupt_column(schema, checked)
        except inference.ReaderOptionError as exc:
            raise ValueError(f"from_files: {exc}") from None
        payload: dict[str, Any] = {"path": path, "format": format, "schema": schema, "suffix": suffix}
        if checked:
            payload["options"] = checked
        if monitor_interval_ms is not None:
            payload["monitor_interval"] = monitor_interval_ms / 1000
        return self._source(OperatorKind.SOURCE_FILES, payload, name or f"files {os.path.basename(path.rstrip('/'))}")

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
            self._operators[stream._op_id]["schema"] = declared
        return stream

    def from_collection(self, rows: Iterable[dict[str, Any]], name: str | None = None) -> DataStream:
        """A small bounded source from Python dicts (for tests and examples)."""
        rows = list(rows)
        if rows and not all(isinstance(r, dict) for r in rows):
            raise TypeError("from_collection expects dicts, e.g. [{'url': '/a', 'n': 1}]")
        return self._source(OperatorKind.SOURCE_COLLECTION, {"rows": rows}, name or "collection")

    # -- graph ----------------------------------------------------------------
    def _source(self, kind: OperatorKind, payload: dict[str, Any], name: str) -> DataStream:
        return DataStream(self, self._add(kind, payload, name))

    def _add(self, kind: OperatorKind, payload: dict[str, Any], name: str | None) -> str:
        op_id = f"{len(self._operators) + 1}-{kind}"
        self._operators[op_id] = {"kind": kind, "payload": payload, "name": name or kind, "parallelism": None}
        return op_id

    def _connect(
        self, source: str, target: str, keys: Sequence[str] = (), partitioning: Partitioning | None = None
    ) -> None:
        self._edges.append(
            {
                "source": source,
                "target": target,
                "partitioning": Partitioning.HASH if keys else partitioning,
                "keys": list(keys),
            }
        )

    def _schemas(self) -> dict[str, schemas.Schema | None]:
        """Each operator's output columns, derived from the sources through the operators
        (rules in sluice/schema.py); None where they cannot be known before running."""
        inputs: dict[str, list[str]] = {op_id: [] for op_id in self._operators}
        for e in self._edges:
            inputs[e["target"]].append(e["source"])
        out: dict[str, schemas.Schema | None] = {}
        for op_id, op in self._operators.items():  # ids are added in order: inputs come first
            out[op_id] = _derive(op, [out[i] for i in inputs[op_id]])
        return out

    def _set_parallelism(self, op_id: str, parallelism: int) -> None:
        self._operators[op_id]["parallelism"] = parallelism

    def get_job_graph(self, name: str = "job") -> common_pb2.JobGraph:
        job = common_pb2.JobGraph(name=name, max_parallelism=self._max_parallelism)
        job.config.update(self._config)
        par = {}
        derived = self._schemas()
        for op_id, op in self._operators.items():
            p = op["parallelism"]
            if p is None:
                p = 1 if op["kind"] == OperatorKind.SOURCE_COLLECTION else self._parallelism
            par[op_id] = p
            job.operators.add(
                id=op_id,
                name=op["name"],
                kind=states.to_proto(op["kind"]),
                parallelism=p,
                payload=graph.dumps_payload(op["payload"]),
                output_schema=s.ddl() if (s := derived[op_id]) is not None else "",
            )
        for e in self._edges:
            partitioning = e["partitioning"] or (
                Partitioning.FORWARD if par[e["source"]] == par[e["target"]] else Partitioning.REBALANCE
            )
            job.edges.add(
                source=e["source"],
                target=e["target"],
                partitioning=states.to_proto(partitioning),
                keys=e["keys"],
            )
        return job

    # -- submission -----------------------------------------------------------
    def execute(self, job_name: str = "job") -> JobExecutionResult:
        """Submit to the cluster. Attached (default): wait for the end and
        raise if the job failed. Detached (`sluice run --detach`): print the
        job id on the last line and return at once."""
        from sluice.client import JobFailed, JobManagerClient  # local: keeps the API import light

        job = self.get_job_graph(job_name)
        graph.validate(job)  # fail fast, before any network call
        client = JobManagerClient.from_context(_context)
        try:
            job_id = client.submit(job)
            if _context.get("detach"):
                print(job_id, flush=True)
                return JobExecutionResult(job_id, "SUBMITTED")
            print(f"Submitted job {job_name} ({job_id})", file=sys.stderr, flush=True)
            info = client.wait(job_id, progress=_context.get("progress", True))
            state = states.from_proto(states.JobStatus, info.state)
            if state != states.JobStatus.FINISHED:
                raise JobFailed(f"job {job_id} ended {state}" + (f":\n{info.failure}" if info.failure else ""))
            return JobExecutionResult(job_id, state, info)
        finally:
            client.close()


def _derive(op: dict[str, Any], inputs: list[schemas.Schema | None]) -> schemas.Schema | None:
    """One operator's output columns from its inputs' (see sluice/schema.py)."""
    kind, payload = op["kind"], op["payload"]
    if op.get("schema") is not None:  # declared: from_generator(schema=...), map(output_schema=...)
        declared: schemas.Schema = op["schema"]
        return declared
    if kind == OperatorKind.SOURCE_FILES:
        if payload.get("format") == "text":
            return schemas.of(("value", "string"))
        return schemas.parse_or_none(payload.get("schema"))
    if kind == OperatorKind.SOURCE_COLLECTION:
        return schemas.from_rows(payload.get("rows") or [])
    if op.get("union"):
        return schemas.union(inputs)
    if kind == OperatorKind.FILTER:
        return inputs[0] if len(inputs) == 1 else None
    if kind == OperatorKind.SELECT:
        return schemas.select(inputs[0] if len(inputs) == 1 else None, payload.get("columns") or [])
    if kind == OperatorKind.AGGREGATE:
        return schemas.aggregate(inputs[0] if len(inputs) == 1 else None, payload["keys"], payload["aggs"])
    return None  # generator and map/flat_map bodies without a declared schema; sinks


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
