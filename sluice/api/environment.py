"""StreamExecutionEnvironment: sources, settings, and submission."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from sluice import graph, states
from sluice.api.datastream import DataStream
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
    ) -> DataStream:
        """Read every file under `path` (a directory, local or any pyarrow.fs URI)
        through Spark. Each file is a split; a split's offset is state.
        `format`: json (newline-delimited) or csv; `schema`: a Spark DDL string.
        `monitor_interval_ms`: keep watching `path` and read files that appear
        later, listing it at most this often (the stream is then unbounded;
        make each new file visible atomically: write `.name`, then rename)."""
        if format not in ("json", "csv", "text"):
            raise ValueError(f"from_files: unknown format {format!r}; use json, csv or text")
        if monitor_interval_ms is not None and not graph.positive_number(monitor_interval_ms):
            raise ValueError(
                f"from_files: monitor_interval_ms must be a positive number of milliseconds "
                f"(or None for a bounded read), got {monitor_interval_ms!r}"
            )
        suffix = {"json": ".jsonl", "csv": ".csv", "text": ""}[format] if suffix is None else suffix
        payload: dict[str, Any] = {"path": path, "format": format, "schema": schema, "suffix": suffix}
        if monitor_interval_ms is not None:
            payload["monitor_interval"] = monitor_interval_ms / 1000
        return self._source(OperatorKind.SOURCE_FILES, payload, name or f"files {os.path.basename(path.rstrip('/'))}")

    def from_generator(
        self, body: Callable[[Any], Any], count: int | None = None, batch_size: int = 100_000, name: str | None = None
    ) -> DataStream:
        """A deterministic, replayable source: `body(df)` turns a DataFrame of
        sequence numbers (column `id`) into records, inside Spark. `count`
        bounds the stream (None: unbounded); the offset is the next id."""
        return self._source(
            OperatorKind.SOURCE_GENERATOR, {"body": body, "count": count, "batch_size": batch_size}, name or "generator"
        )

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

    def _connect(self, source: str, target: str, key: str = "", partitioning: Partitioning | None = None) -> None:
        self._edges.append(
            {"source": source, "target": target, "partitioning": Partitioning.HASH if key else partitioning, "key": key}
        )

    def _set_parallelism(self, op_id: str, parallelism: int) -> None:
        self._operators[op_id]["parallelism"] = parallelism

    def get_job_graph(self, name: str = "job") -> common_pb2.JobGraph:
        job = common_pb2.JobGraph(name=name, max_parallelism=self._max_parallelism)
        job.config.update(self._config)
        par = {}
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
            )
        for e in self._edges:
            partitioning = e["partitioning"] or (
                Partitioning.FORWARD if par[e["source"]] == par[e["target"]] else Partitioning.REBALANCE
            )
            job.edges.add(
                source=e["source"],
                target=e["target"],
                partitioning=states.to_proto(partitioning),
                keys=[e["key"]] if e["key"] else [],
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
