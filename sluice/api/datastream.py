"""DataStream and KeyedStream: the fluent half of the job API.

Output columns (what a sink's `columns`, a later `key_by` or `select` name):
a keyed aggregate emits every key column, in key order, then one column per
aggregate: `count()` -> `count`, `sum("v")` / `min("v")` / `max("v")` /
`avg("v")` -> `v`, `aggregate(total=("sum", "v"))` -> `total`. The client
derives each operator's columns where it can (sluice/schema.py; `stream.schema`
shows them), and the job is rejected at submit when a key, an aggregate input
or a sink column names a column that is not there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sluice import schema as schemas
from sluice.api.connectors import FileSink, SqliteSink
from sluice.api.joins import IntervalJoinBuilder, JoinBuilder
from sluice.api.windowing import WindowedStream
from sluice.connectors.api import Sink
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import WindowAssigner
from sluice.graph import AGGREGATE_FUNCTIONS, OperatorKind, Partitioning

# A PySpark function DataFrame -> DataFrame (a filter's may return a boolean Column).
Body = Callable[[Any], Any]
# An output schema given by the user: a Spark DDL string or a pyspark StructType.
SchemaLike = Any

UID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
KEY_BY_USAGE = 'key_by() takes column names: key_by("a") or key_by("a", "b") or key_by(["a", "b"])'

if TYPE_CHECKING:
    from sluice.api.environment import StreamExecutionEnvironment


class DataStream:
    """A stream produced by one operator. Bodies are PySpark functions
    `DataFrame -> DataFrame` applied to each batch of the stream."""

    def __init__(
        self,
        env: StreamExecutionEnvironment,
        op_id: str,
        partitioning: Partitioning | None = None,
        output_tag: str = "",
    ):
        self._env = env
        self._op_id = op_id
        self._partitioning = partitioning  # of the edges out of this view (None = forward when possible)
        self._output_tag = output_tag  # "": the operator's main output; "late": a window's late data

    # -- stateless transformations ------------------------------------------
    def map(self, body: Body, name: str | None = None, output_schema: SchemaLike = None) -> DataStream:
        """`body(df) -> df`, one output row per input row by convention.
        `output_schema` (a DDL string such as "url string, n bigint", or a StructType)
        declares the columns `body` returns, so that later keys and sink columns are
        checked at submit; without it the columns after a map are unknown."""
        return self._declared(OperatorKind.MAP, body, name, output_schema)

    def flat_map(self, body: Body, name: str | None = None, output_schema: SchemaLike = None) -> DataStream:
        """`body(df) -> df` producing any number of rows per input row (e.g. with explode).
        `output_schema`: as for `map`."""
        return self._declared(OperatorKind.FLAT_MAP, body, name, output_schema)

    def filter(self, predicate: Body | str, name: str | None = None) -> DataStream:
        """Keep rows matching `predicate`: a SQL condition string, or
        `fn(df)` returning a boolean Column or the filtered DataFrame."""
        return self._then(OperatorKind.FILTER, {"body": predicate}, name)

    def select(self, *exprs: str, name: str | None = None) -> DataStream:
        """Project with SQL expressions, e.g. `select("url", "user * 2 AS u2")`. The output
        columns are known before running for `*`, plain columns, `expr AS alias` and
        `col alias` (sluice/schema.py); name computed columns with AS."""
        return self._then(OperatorKind.SELECT, {"columns": list(exprs)}, name)

    def join(self, other: DataStream) -> JoinBuilder:
        """A windowed join: `.where(cols).equal_to(cols).window(TumblingEventTimeWindows.of(ms))`
        pairs rows with equal keys in the same event-time window (sluice/api/joins.py)."""
        return JoinBuilder(self, other)

    # -- event time -----------------------------------------------------------
    def assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy, name: str | None = None) -> DataStream:
        """Event time from here on: each record's time is `strategy`'s timestamp column (epoch
        ms, or a timestamp), and each subtask sends watermarks that trail the largest
        timestamp it saw by the strategy's out-of-orderness bound (docs/event-time.md). Rows
        whose timestamp is null are dropped and counted in `records_dropped`."""
        if not isinstance(strategy, WatermarkStrategy):
            raise TypeError(
                "assign_timestamps_and_watermarks() takes a WatermarkStrategy, e.g. "
                f"WatermarkStrategy.for_bounded_out_of_orderness(2000).with_timestamp_column('ts'); got {strategy!r}"
            )
        strategy.check()
        column = strategy.timestamp_column
        known = self.schema
        if known is not None and column is not None:
            t = known.type_of(column)
            if t is None:
                raise ValueError(f"assign_timestamps_and_watermarks(): the stream has {known.missing(column)}")
            if t != schemas.UNKNOWN and t not in schemas.EVENT_TIME_TYPES:
                raise ValueError(
                    f"assign_timestamps_and_watermarks(): the timestamp column {column!r} is {t}; it must hold "
                    "epoch milliseconds (an integer) or a timestamp: select() a converted column first"
                )
        return self._then(OperatorKind.TIMESTAMPS, {"strategy": strategy.to_config()}, name or "timestamps")

    def window(self, assigner: Any) -> WindowedStream:
        """Windows are per key: key_by(...).window(...)."""
        raise TypeError(
            f"window({type(assigner).__name__}...) needs a keyed stream: call key_by(col).window(...); "
            "windows hold each key's records apart"
        )

    def join_table(
        self,
        table_fn: Callable[[Any], Any],
        on: str | Sequence[str],
        how: str = "inner",
        refresh_ms: int | None = None,
        name: str | None = None,
    ) -> DataStream:
        """Enrich each row from a table: `table_fn(spark) -> DataFrame` loads it inside Spark
        (e.g. `lambda spark: spark.read.parquet("users/")`), once per TaskManager, again every
        `refresh_ms` when given; each batch is joined with it in Spark on the `on` columns
        (`how`: "inner" drops rows without a match, "left" keeps them with nulls)."""
        if not callable(table_fn):
            raise TypeError(f"join_table() takes a function spark -> DataFrame, got {_describe(table_fn)}")
        columns = [on] if isinstance(on, str) else list(on)
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise TypeError(f"join_table(on=...) takes one or more column names, got {on!r}")
        if how not in ("inner", "left"):
            raise ValueError(f"join_table(how=...) is 'inner' or 'left', got {how!r}")
        if refresh_ms is not None and (
            isinstance(refresh_ms, bool) or not isinstance(refresh_ms, int) or refresh_ms <= 0
        ):
            raise ValueError(f"join_table(refresh_ms=...) must be a whole number of ms > 0, got {refresh_ms!r}")
        payload: dict[str, Any] = {"table_fn": table_fn, "on": columns, "how": how, "refresh_ms": refresh_ms}
        known = self.schema
        if known is not None:
            for c in columns:
                if c not in known:
                    raise ValueError(f"join_table(on=...): the stream has {known.missing(c)}")
        return self._then(OperatorKind.JOIN_TABLE, payload, name or f"join table on {', '.join(columns)}")

    # -- partitioning ---------------------------------------------------------
    def key_by(self, *columns: str | Sequence[str]) -> KeyedStream:
        """Partition by one or more key columns: `key_by("url")`, `key_by("country", "device")`
        or `key_by(["country", "device"])`. A key's key group is
        pmod(xxhash64(k1, k2, ...), max_parallelism) (sluice/key_groups.py). Rows with a null
        in any key column are dropped before the exchange, counted and logged by the
        producer (taskmanager/network/record_writer.py)."""
        return KeyedStream(self, key_columns(columns))

    def rebalance(self) -> DataStream:
        """Round-robin whole batches to the next operator's subtasks."""
        return DataStream(self._env, self._op_id, Partitioning.REBALANCE, self._output_tag)

    def broadcast(self) -> DataStream:
        """Every batch to every subtask of the next operator."""
        return DataStream(self._env, self._op_id, Partitioning.BROADCAST, self._output_tag)

    def union(self, *others: DataStream, name: str | None = None) -> DataStream:
        """Merge streams of the same schema (batches pass through as they are: the columns
        after a union are known when every input's are and their names agree). Each input
        must be another operator's output: a union of a stream with itself is refused."""
        op = self._then(OperatorKind.MAP, {"body": _identity}, name or "union")
        self._env._operators[op._op_id]["union"] = True
        for other in others:
            self._env._connect(other._op_id, op._op_id, partitioning=other._partitioning, output_tag=other._output_tag)
        return op

    # -- sinks ----------------------------------------------------------------
    def sink_to(self, sink: FileSink | SqliteSink | Sink, name: str | None = None) -> DataStream:
        """Write to `sink`. Its `columns` are checked at submit against this stream's
        columns when they are known (`schema`). A `SqliteSink` needs each key's rows to
        reach one of its subtasks: give it the parallelism of the keyed aggregate before
        it (the default: they chain) or parallelism 1."""
        if isinstance(sink, FileSink):
            return self._then(OperatorKind.SINK_FILE, sink.payload(), name or "file sink")
        if isinstance(sink, SqliteSink):
            stream = self._then(OperatorKind.SINK_SQLITE, sink.payload(), name or "sqlite sink")
            # the sink's identity in the database's commit table (taskmanager/operators/sqlite_sink.py)
            self._env._operators[stream._op_id]["payload"]["sink_id"] = stream._op_id
            return stream
        if isinstance(sink, Sink):  # a connector sink (docs/connectors.md)
            payload = {"sink": sink, "guarantee": str(sink.guarantee)}
            return self._then(OperatorKind.SINK_CONNECTOR, payload, name or type(sink).__name__)
        hint = f"; to write files there: sink_to(FileSink({sink!r}))" if isinstance(sink, str) else ""
        raise TypeError(
            f"sink_to expects a FileSink, a SqliteSink or a sluice.connectors.Sink, got {type(sink).__name__}{hint}"
        )

    def print(self, name: str | None = None) -> DataStream:
        """Print rows to the TaskManager's log (its .out), as Flink's print() does."""
        return self._then(OperatorKind.SINK_PRINT, {}, name or "print")

    # -- settings -------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> DataStream:
        self._env._set_parallelism(self._op_id, parallelism)
        return self

    def uid(self, uid: str) -> DataStream:
        """A stable id for this operator: its state in a savepoint is found by it, so a new
        version of the job keeps the operator's state as long as it keeps its uid
        (docs/savepoints.md). Letters, digits, `_`, `.` and `-`, at most 128 characters,
        unique in the job. Without one, the id is the operator's position and kind
        (`3-aggregate`), which changes when operators are added before it."""
        if not isinstance(uid, str) or not UID_PATTERN.fullmatch(uid):
            raise ValueError(
                f"uid must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit; got {uid!r}"
            )
        for op_id, op in self._env._operators.items():
            if op_id != self._op_id and op.get("uid") == uid:
                raise ValueError(f"uid {uid!r} is already the uid of operator {op['name']!r}")
        self._env._operators[self._op_id]["uid"] = uid
        return self

    def name(self, name: str) -> DataStream:
        self._env._operators[self._op_id]["name"] = name
        return self

    @property
    def schema(self) -> schemas.Schema | None:
        """The columns of this stream as the client derives them (sluice/schema.py):
        None when they cannot be known before running (after a map without
        `output_schema`); a column of type `unknown` has a known name only. A window's late
        data has the window's input columns."""
        if self._output_tag:
            upstream = [e["source"] for e in self._env._edges if e["target"] == self._op_id]
            return self._env._schemas()[upstream[0]] if upstream else None
        return self._env._schemas()[self._op_id]

    def _then(
        self, kind: OperatorKind, payload: dict[str, Any], name: str | None, keys: Sequence[str] = ()
    ) -> DataStream:
        op_id = self._env._add(kind, payload, name)
        self._env._connect(self._op_id, op_id, keys=keys, partitioning=self._partitioning, output_tag=self._output_tag)
        return DataStream(self._env, op_id)

    def _declared(self, kind: OperatorKind, body: Body, name: str | None, output_schema: SchemaLike) -> DataStream:
        """A body operator with the columns its user declared (checked before anything is added)."""
        declared = None if output_schema is None else schemas.to_schema(output_schema, f"{kind}(output_schema=...)")
        stream = self._then(kind, {"body": body}, name)
        if declared is not None:
            self._env._operators[stream._op_id]["schema"] = declared
        return stream


class KeyedStream:
    """A stream partitioned by one or more key columns; aggregations keep running
    per-key state in the runtime and emit a key's new row when it changes
    (an update stream). Output: every key column in key order, then one column
    per aggregate, named as listed on each method."""

    def __init__(self, stream: DataStream, keys: Sequence[str]):
        self._stream = stream
        self.keys: tuple[str, ...] = tuple(keys)

    def count(self, name: str = "count") -> DataStream:
        """Rows per key, in column `name` (default `count`, bigint)."""
        return self.aggregate(**{name: ("count", "*")})

    def sum(self, column: str, name: str | None = None) -> DataStream:
        """Running sum of `column`, in column `name` (default: `column` itself). bigint for
        integer columns, double for floating ones; NULLs are skipped."""
        return self.aggregate(**{name or _column("sum", column): ("sum", column)})

    def min(self, column: str, name: str | None = None) -> DataStream:
        """Running minimum of `column`, in column `name` (default: `column`), of its type."""
        return self.aggregate(**{name or _column("min", column): ("min", column)})

    def max(self, column: str, name: str | None = None) -> DataStream:
        """Running maximum of `column`, in column `name` (default: `column`), of its type."""
        return self.aggregate(**{name or _column("max", column): ("max", column)})

    def avg(self, column: str, name: str | None = None) -> DataStream:
        """Running mean of the non-NULL values of `column`, in column `name` (default:
        `column`), a double. Kept as (sum, count) in state and on the wire, so it is
        exact across the shuffle and a restore; NULL until a value arrives."""
        return self.aggregate(**{name or _column("avg", column): ("avg", column)})

    def process(
        self,
        fn: Any,
        output_schema: SchemaLike = None,
        on_timer: Callable[[Any, int, Any], Any] | None = None,
        name: str | None = None,
    ) -> DataStream:
        """A keyed process function: `fn(key, rows: pandas.DataFrame, ctx) -> DataFrame | None`,
        called once per key present in each batch (a composite key is a tuple), with keyed
        state and timers on `ctx` (docs/user-state.md). `fn` may also be an object with
        `process(key, rows, ctx)` and `on_timer(key, timestamp, ctx)`; or give `on_timer`
        here. `output_schema` (DDL or StructType) declares the rows it returns: later keys
        and sinks are checked against it, and every batch is given its types."""
        payload, declared = process_payload(self.keys, fn, output_schema, on_timer)
        stream = self._stream._then(
            OperatorKind.PROCESS, payload, name or f"process by {', '.join(self.keys)}", keys=self.keys
        )
        if declared is not None:
            stream._env._operators[stream._op_id]["schema"] = declared
        return stream

    def connect(self, broadcast: DataStream) -> ConnectedStreams:
        """Connect a broadcast stream (`rules.broadcast()`): `.process(fn)` then gets each of its
        batches on every subtask (`fn.process_broadcast(rows, ctx)`, which may change
        `ctx.broadcast_state(name)`) beside this stream's rows per key (`fn.process`). The two
        must come from different operators: to broadcast the keyed stream's own source, pass
        one of them through an operator of its own (e.g. `select("*")`)."""
        if not isinstance(broadcast, DataStream) or broadcast._partitioning != Partitioning.BROADCAST:
            raise TypeError(
                f"connect() takes a broadcast stream, e.g. rules.broadcast(); got {_describe(broadcast)}"
                if not isinstance(broadcast, DataStream)
                else "connect() takes a broadcast stream: call .broadcast() on it first"
            )
        return ConnectedStreams(self, broadcast)

    def interval_join(self, other: KeyedStream) -> IntervalJoinBuilder:
        """Join with another keyed stream on event time: `.between(lower_ms, upper_ms)` pairs each
        row of this stream with the other's rows of the same key whose timestamp lies in
        [ts + lower_ms, ts + upper_ms] (sluice/api/joins.py)."""
        return IntervalJoinBuilder(self, other)

    def window(self, assigner: WindowAssigner) -> WindowedStream:
        """Cut each key's records into windows: `TumblingEventTimeWindows.of(ms)`,
        `SlidingEventTimeWindows.of(size_ms, slide_ms)`, `EventTimeSessionWindows.with_gap(ms)`
        or `TumblingProcessingTimeWindows.of(ms)`; then `.count()`, `.sum(col)`, ...,
        `.aggregate(...)` or `.apply(fn)` (sluice/api/windowing.py)."""
        return WindowedStream(self, assigner)

    def aggregate(self, **aggs: tuple[str, str]) -> DataStream:
        """Running aggregates, each output column named by its keyword, e.g.
        `aggregate(views=("count", "*"), total=("sum", "bytes"), mean=("avg", "bytes"))`
        emits the key columns, then `views`, `total`, `mean`. Functions: count, sum, min,
        max, avg (all mergeable, so batches are pre-aggregated before the shuffle)."""
        checked = _check_aggs(aggs, self.keys)
        payload = {"keys": list(self.keys), "aggs": checked}
        name = f"aggregate by {', '.join(self.keys)}"
        return self._stream._then(OperatorKind.AGGREGATE, payload, name, keys=self.keys)


class ConnectedStreams:
    """A keyed stream and a broadcast stream, for a process function with broadcast state."""

    def __init__(self, keyed: KeyedStream, broadcast: DataStream) -> None:
        self._keyed, self._broadcast = keyed, broadcast

    def process(
        self,
        fn: Any,
        output_schema: SchemaLike = None,
        on_timer: Callable[[Any, int, Any], Any] | None = None,
        name: str | None = None,
    ) -> DataStream:
        """`fn` has `process(key, rows, ctx)` (the keyed side, as KeyedStream.process) and
        `process_broadcast(rows, ctx)` (each broadcast batch, on every subtask), optionally
        `on_timer(key, ts, ctx)`; both read `ctx.broadcast_state(name)`, a dict that only
        process_broadcast may change (docs/user-state.md)."""
        if not callable(getattr(fn, "process_broadcast", None)):
            raise TypeError("connect(...).process() takes an object with process() and process_broadcast(rows, ctx)")
        keys = self._keyed.keys
        payload, declared = process_payload(keys, fn, output_schema, on_timer)
        stream = self._keyed._stream
        payload["left"] = stream._op_id
        env = stream._env
        op_id = env._add(OperatorKind.BROADCAST_PROCESS, payload, name or f"broadcast process by {', '.join(keys)}")
        env._connect(stream._op_id, op_id, keys=keys, output_tag=stream._output_tag)
        b = self._broadcast
        env._connect(b._op_id, op_id, partitioning=Partitioning.BROADCAST, output_tag=b._output_tag)
        if declared is not None:
            env._operators[op_id]["schema"] = declared
        return DataStream(env, op_id)


def process_payload(
    keys: Sequence[str], fn: Any, output_schema: SchemaLike, on_timer: Any
) -> tuple[dict[str, Any], schemas.Schema | None]:
    """A process function's settings, checked, and its declared output columns."""
    target = getattr(fn, "process", fn)
    if not callable(target):
        raise TypeError(f"process() takes a function (key, rows, ctx) or an object with process(); got {_describe(fn)}")
    if on_timer is not None and not callable(on_timer):
        raise TypeError(f"process(on_timer=...) takes a function (key, timestamp, ctx); got {_describe(on_timer)}")
    declared = None if output_schema is None else schemas.to_schema(output_schema, "process(output_schema=...)")
    payload: dict[str, Any] = {"keys": list(keys), "process": fn}
    if on_timer is not None:
        payload["on_timer"] = on_timer
    if declared is not None:
        payload["output_schema"] = declared.ddl()
    return payload, declared


def key_columns(args: Sequence[Any]) -> tuple[str, ...]:
    """The key columns of `key_by(*args)`; a TypeError or ValueError naming the bad argument."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        columns, where = list(args[0]), "key_by([...]): item"
    else:
        columns, where = list(args), "key_by(): argument"
    if not columns:
        raise TypeError(f"key_by() got no column; {KEY_BY_USAGE}")
    seen: set[str] = set()
    for i, c in enumerate(columns, 1):
        if not isinstance(c, str):
            raise TypeError(f"{where} {i} is {_describe(c)}, not a column name; {KEY_BY_USAGE}")
        if not c.strip():
            raise ValueError(f"{where} {i} is an empty string, not a column name; {KEY_BY_USAGE}")
        if c in seen:
            raise ValueError(f"{where} {i}: column {c!r} is given twice; {KEY_BY_USAGE}")
        seen.add(c)
    return tuple(columns)


def _describe(value: Any) -> str:
    kind = type(value).__name__
    if kind == "Column":  # a pyspark Column: key_by takes names, Spark expressions go in select()
        return f"a pyspark Column ({value!r}; select() it into a named column first)"
    if isinstance(value, (list, tuple)):
        return f"a {kind} ({value!r}; pass one list, or names as separate arguments)"
    if callable(value):
        return f"a function ({getattr(value, '__name__', kind)}; key selectors are column names)"
    return f"a {kind} ({value!r})"


def _column(fn: str, column: Any) -> str:
    if not isinstance(column, str) or not column:
        raise TypeError(f"{fn}() takes a column name (a non-empty string), got {_describe(column)}")
    return column


def _check_aggs(aggs: dict[str, Any], keys: Sequence[str]) -> dict[str, tuple[str, str]]:
    """`aggregate(**aggs)` checked in the client: (function, column) pairs of known functions,
    output names that neither repeat a key column nor start with `__` (internal columns)."""
    if not aggs:
        raise TypeError('aggregate() needs at least one output, e.g. aggregate(total=("sum", "v"))')
    out: dict[str, tuple[str, str]] = {}
    for name, spec in aggs.items():
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2 and all(isinstance(x, str) for x in spec)):
            raise TypeError(
                f"aggregate({name}=...): expected a (function, column) pair such as ('sum', 'v'), got {spec!r}"
            )
        fn, column = spec
        if fn not in AGGREGATE_FUNCTIONS:
            raise ValueError(f"aggregate({name}=...): unknown function {fn!r}; known: {', '.join(AGGREGATE_FUNCTIONS)}")
        if not column:
            raise ValueError(f"aggregate({name}=...): the column is empty (count takes '*')")
        if name in keys:
            raise ValueError(
                f"aggregate({name}=...): {name!r} is also a key column and the output keeps the key columns; "
                f"name the aggregate otherwise, e.g. {fn}({column!r}, name='{fn}_{column}')"
            )
        if name.startswith("__"):
            raise ValueError(f"aggregate({name}=...): names starting with '__' are reserved for internal columns")
        out[name] = (fn, column)
    return out


def _identity(df: Any) -> Any:
    return df
