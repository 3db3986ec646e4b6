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
from typing import Any

from sluice import schema as schemas
from sluice.api.arguments import (
    SchemaLike,
    check_aggs,
    column_name,
    describe,
    key_columns,
    process_payload,
)
from sluice.api.connectors import FileSink, SqliteSink
from sluice.api.joins import IntervalJoinBuilder, JoinBuilder
from sluice.api.stream_graph import StreamGraph
from sluice.api.windowing import WindowedStream
from sluice.connectors.api import Sink
from sluice.eventtime import TimeDomain
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import WindowAssigner
from sluice.graph import OperatorKind, Partitioning
from sluice.kinds.config_checks import MAX_DEDUPLICATE_WITHIN_MS

# A PySpark function DataFrame -> DataFrame (a filter's may return a boolean Column).
Body = Callable[[Any], Any]

UID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class DataStream:
    """A stream produced by one operator. Bodies are PySpark functions
    `DataFrame -> DataFrame` applied to each batch of the stream."""

    def __init__(
        self,
        graph: StreamGraph,
        op_id: str,
        partitioning: Partitioning | None = None,
        output_tag: str = "",
    ):
        self._graph = graph  # the job's operators and edges (sluice/api/stream_graph.py)
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
        if not isinstance(other, DataStream):
            raise TypeError(f"join() takes another stream, got {type(other).__name__}")
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

    def deduplicate(
        self, keys: str | Sequence[str], within_ms: int, time: str = "event", name: str | None = None
    ) -> DataStream:
        """Per key (one column or several), the first row, then each row at least `within_ms`
        after the last one kept; the others are dropped (docs/user-state.md#deduplicate).
        Vectorized: no Python call per key. `time="event"` (needs assign_timestamps_and_watermarks
        upstream): rows wait for the watermark and go in event-time order, so the result does
        not depend on batching; rows behind the watermark are late, dropped and counted.
        `time="processing"`: each row is decided as it arrives. A key is forgotten `within_ms`
        after its last kept row. The output has the input's columns."""
        columns = key_columns([keys] if isinstance(keys, str) else [list(keys)])
        most = MAX_DEDUPLICATE_WITHIN_MS
        if isinstance(within_ms, bool) or not isinstance(within_ms, int) or not 0 < within_ms <= most:
            raise ValueError(
                f"deduplicate(within_ms=...) must be a whole number of ms in 1..{most:,}, got {within_ms!r}"
            )
        if time not in tuple(TimeDomain):
            raise ValueError(f"deduplicate(time=...) is 'event' or 'processing', got {time!r}")
        known = self.schema
        for c in columns:
            if known is not None and c not in known:
                raise ValueError(f"deduplicate(keys=...): the stream has {known.missing(c)}")
        payload: dict[str, Any] = {"keys": list(columns), "within_ms": within_ms, "time": time}
        if time == TimeDomain.EVENT_TIME:
            column = self._graph.timestamp_column(self._op_id)
            if column is None:
                raise ValueError(
                    "deduplicate(time='event'): the stream has no event time; call "
                    "assign_timestamps_and_watermarks(...) first, or use time='processing'"
                )
            payload["timestamp"] = column
        name = name or f"deduplicate by {', '.join(columns)}"
        return self._then(OperatorKind.DEDUPLICATE, payload, name, keys=columns)

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
            raise TypeError(f"join_table() takes a function spark -> DataFrame, got {describe(table_fn)}")
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
        return DataStream(self._graph, self._op_id, Partitioning.REBALANCE, self._output_tag)

    def broadcast(self) -> DataStream:
        """Every batch to every subtask of the next operator."""
        return DataStream(self._graph, self._op_id, Partitioning.BROADCAST, self._output_tag)

    def union(self, *others: DataStream, name: str | None = None) -> DataStream:
        """Merge streams of the same schema (batches pass through as they are: the columns
        after a union are known when every input's are and their names agree). Each input
        must be another operator's output: a union of a stream with itself is refused."""
        op = self._then(OperatorKind.MAP, {"body": _identity}, name or "union")
        self._graph.node(op._op_id).union = True
        for other in others:
            self._graph.connect(other._op_id, op._op_id, partitioning=other._partitioning, output_tag=other._output_tag)
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
            self._graph.node(stream._op_id).payload["sink_id"] = stream._op_id
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
        self._graph.node(self._op_id).parallelism = parallelism
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
        self._graph.set_uid(self._op_id, uid)
        return self

    def name(self, name: str) -> DataStream:
        self._graph.node(self._op_id).name = name
        return self

    @property
    def schema(self) -> schemas.Schema | None:
        """The columns of this stream as the client derives them (sluice/schema.py):
        None when they cannot be known before running (after a map without
        `output_schema`); a column of type `unknown` has a known name only. A window's late
        data has the window's input columns."""
        return self._graph.schema_of(self._op_id, self._output_tag)

    def _then(
        self, kind: OperatorKind, payload: dict[str, Any], name: str | None, keys: Sequence[str] = ()
    ) -> DataStream:
        op_id = self._graph.add(kind, payload, name)
        self._graph.connect(self._op_id, op_id, keys=keys, partitioning=self._partitioning, output_tag=self._output_tag)
        return DataStream(self._graph, op_id)

    def _output(self, op_id: str, output_tag: str = "") -> DataStream:
        """The stream operator `op_id` of this stream's job produces (`output_tag`: a side output)."""
        return DataStream(self._graph, op_id, output_tag=output_tag)

    def _declared(self, kind: OperatorKind, body: Body, name: str | None, output_schema: SchemaLike) -> DataStream:
        """A body operator with the columns its user declared (checked before anything is added)."""
        declared = None if output_schema is None else schemas.to_schema(output_schema, f"{kind}(output_schema=...)")
        stream = self._then(kind, {"body": body}, name)
        if declared is not None:
            self._graph.node(stream._op_id).schema = declared
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
        return self.aggregate(**{name or column_name("sum", column): ("sum", column)})

    def min(self, column: str, name: str | None = None) -> DataStream:
        """Running minimum of `column`, in column `name` (default: `column`), of its type."""
        return self.aggregate(**{name or column_name("min", column): ("min", column)})

    def max(self, column: str, name: str | None = None) -> DataStream:
        """Running maximum of `column`, in column `name` (default: `column`), of its type."""
        return self.aggregate(**{name or column_name("max", column): ("max", column)})

    def avg(self, column: str, name: str | None = None) -> DataStream:
        """Running mean of the non-NULL values of `column`, in column `name` (default:
        `column`), a double. Kept as (sum, count) in state and on the wire, so it is
        exact across the shuffle and a restore; NULL until a value arrives."""
        return self.aggregate(**{name or column_name("avg", column): ("avg", column)})

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
            stream._graph.node(stream._op_id).schema = declared
        return stream

    def process_batch(
        self,
        fn: Any,
        output_schema: SchemaLike = None,
        on_timer: Callable[[Any, Any], Any] | None = None,
        name: str | None = None,
    ) -> DataStream:
        """The batch form of `process`: `fn(rows: pandas.DataFrame, ctx) -> DataFrame | None`,
        called once per batch with all its rows sorted by key; `ctx.keys` are the batch's keys
        and `ctx.offsets` where each one's rows start. State is read and written for lists of
        keys (`ctx.value_state(name).get(keys)`, `.update(keys, values)`), timers registered
        the same way, and `on_timer(timers: pandas.DataFrame, ctx)` gets every due timer at
        once (the key columns and `timestamp`). The same state, timers and snapshots as the
        per-key form's, without a Python call per key (docs/user-state.md#the-batch-form)."""
        payload, declared = process_payload(self.keys, fn, output_schema, on_timer, batch=True)
        stream = self._stream._then(
            OperatorKind.PROCESS, payload, name or f"process batches by {', '.join(self.keys)}", keys=self.keys
        )
        if declared is not None:
            stream._graph.node(stream._op_id).schema = declared
        return stream

    def connect(self, broadcast: DataStream) -> ConnectedStreams:
        """Connect a broadcast stream (`rules.broadcast()`): `.process(fn)` then gets each of its
        batches on every subtask (`fn.process_broadcast(rows, ctx)`, which may change
        `ctx.broadcast_state(name)`) beside this stream's rows per key (`fn.process`). The two
        must come from different operators: to broadcast the keyed stream's own source, pass
        one of them through an operator of its own (e.g. `select("*")`)."""
        if not isinstance(broadcast, DataStream) or broadcast._partitioning != Partitioning.BROADCAST:
            raise TypeError(
                f"connect() takes a broadcast stream, e.g. rules.broadcast(); got {describe(broadcast)}"
                if not isinstance(broadcast, DataStream)
                else "connect() takes a broadcast stream: call .broadcast() on it first"
            )
        return ConnectedStreams(self, broadcast)

    def interval_join(self, other: KeyedStream) -> IntervalJoinBuilder:
        """Join with another keyed stream on event time: `.between(lower_ms, upper_ms)` pairs each
        row of this stream with the other's rows of the same key whose timestamp lies in
        [ts + lower_ms, ts + upper_ms] (sluice/api/joins.py)."""
        if not isinstance(other, KeyedStream):
            raise TypeError(f"interval_join() takes another keyed stream: b.key_by(col); got {type(other).__name__}")
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
        checked = check_aggs(aggs, self.keys)
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
        graph = stream._graph
        op_id = graph.add(OperatorKind.BROADCAST_PROCESS, payload, name or f"broadcast process by {', '.join(keys)}")
        graph.connect(stream._op_id, op_id, keys=keys, output_tag=stream._output_tag)
        b = self._broadcast
        graph.connect(b._op_id, op_id, partitioning=Partitioning.BROADCAST, output_tag=b._output_tag)
        if declared is not None:
            graph.node(op_id).schema = declared
        return DataStream(graph, op_id)


def _identity(df: Any) -> Any:
    return df
