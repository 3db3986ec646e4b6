"""DataStream and KeyedStream: the fluent half of the job API."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.api.connectors import FileSink
from sluice.graph import OperatorKind, Partitioning

# A PySpark function DataFrame -> DataFrame (a filter's may return a boolean Column).
Body = Callable[[Any], Any]

if TYPE_CHECKING:
    from sluice.api.environment import StreamExecutionEnvironment


class DataStream:
    """A stream produced by one operator. Bodies are PySpark functions
    `DataFrame -> DataFrame` applied to each batch of the stream."""

    def __init__(self, env: StreamExecutionEnvironment, op_id: str, partitioning: Partitioning | None = None):
        self._env = env
        self._op_id = op_id
        self._partitioning = partitioning  # of the edges out of this view (None = forward when possible)

    # -- stateless transformations ------------------------------------------
    def map(self, body: Body, name: str | None = None) -> DataStream:
        """`body(df) -> df`, one output row per input row by convention."""
        return self._then(OperatorKind.MAP, {"body": body}, name)

    def flat_map(self, body: Body, name: str | None = None) -> DataStream:
        """`body(df) -> df` producing any number of rows per input row (e.g. with explode)."""
        return self._then(OperatorKind.FLAT_MAP, {"body": body}, name)

    def filter(self, predicate: Body | str, name: str | None = None) -> DataStream:
        """Keep rows matching `predicate`: a SQL condition string, or
        `fn(df)` returning a boolean Column or the filtered DataFrame."""
        return self._then(OperatorKind.FILTER, {"body": predicate}, name)

    def select(self, *exprs: str, name: str | None = None) -> DataStream:
        """Project with SQL expressions, e.g. `select("url", "user * 2 AS u2")`."""
        return self._then(OperatorKind.SELECT, {"columns": list(exprs)}, name)

    # -- partitioning ---------------------------------------------------------
    def key_by(self, column: str) -> KeyedStream:
        """Partition by `column` (key groups: xxhash64(key) mod max_parallelism)."""
        return KeyedStream(self, column)

    def rebalance(self) -> DataStream:
        """Round-robin whole batches to the next operator's subtasks."""
        return DataStream(self._env, self._op_id, Partitioning.REBALANCE)

    def broadcast(self) -> DataStream:
        """Every batch to every subtask of the next operator."""
        return DataStream(self._env, self._op_id, Partitioning.BROADCAST)

    def union(self, *others: DataStream, name: str | None = None) -> DataStream:
        """Merge streams of the same schema."""
        op = self._then(OperatorKind.MAP, {"body": _identity}, name or "union")
        for other in others:
            self._env._connect(other._op_id, op._op_id, partitioning=other._partitioning)
        return op

    # -- sinks ----------------------------------------------------------------
    def sink_to(self, sink: FileSink, name: str | None = None) -> DataStream:
        if not isinstance(sink, FileSink):
            raise TypeError(f"sink_to expects a FileSink, got {type(sink).__name__}")
        return self._then(OperatorKind.SINK_FILE, sink.payload(), name or "file sink")

    def print(self, name: str | None = None) -> DataStream:
        """Print rows to the TaskManager's log (its .out), as Flink's print() does."""
        return self._then(OperatorKind.SINK_PRINT, {}, name or "print")

    # -- settings -------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> DataStream:
        self._env._set_parallelism(self._op_id, parallelism)
        return self

    def name(self, name: str) -> DataStream:
        self._env._operators[self._op_id]["name"] = name
        return self

    def _then(self, kind: OperatorKind, payload: dict[str, Any], name: str | None, key: str = "") -> DataStream:
        op_id = self._env._add(kind, payload, name)
        self._env._connect(self._op_id, op_id, key=key, partitioning=self._partitioning)
        return DataStream(self._env, op_id)


class KeyedStream:
    """A stream partitioned by a key column; aggregations keep running
    per-key state in the runtime and emit a key's new row when it changes
    (an update stream)."""

    def __init__(self, stream: DataStream, key: str):
        self._stream = stream
        self.key = key

    def count(self, name: str = "count") -> DataStream:
        return self.aggregate(**{name: ("count", "*")})

    def sum(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("sum", column)})

    def min(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("min", column)})

    def max(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("max", column)})

    def aggregate(self, **aggs: tuple[str, str]) -> DataStream:
        """Running aggregates, e.g. `aggregate(views=("count", "*"), last=("max", "ts"))`.
        Functions: count, sum, min, max (mergeable, so batches are pre-aggregated
        in Spark before the shuffle)."""
        payload = {"key": self.key, "aggs": {k: tuple(v) for k, v in aggs.items()}}
        return self._stream._then(OperatorKind.AGGREGATE, payload, f"aggregate by {self.key}", key=self.key)


def _identity(df: Any) -> Any:
    return df
