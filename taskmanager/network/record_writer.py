"""RecordWriter: splits a task's output batch over the subpartitions of one
result partition.

hash: key groups are computed inside Spark and mapped to subtasks as
sluice/key_groups.py defines (contiguous key-group ranges); a batch that is an
Arrow table already (a keyed operator's output, say), of up to
ARROW_HASH_MAX_ROWS rows, with key columns of string, integer, floating point or
boolean type has them computed in Python instead (`arrow_key_groups`, the same
function), which costs no Spark call. When the consumer
offers a combiner (a keyed aggregate does: Operator.combiner_for), only the
key, its key group and the columns the combiner reads leave Spark (a narrow
projection, no Spark shuffle), and the batch is pre-aggregated per key with
Arrow's group_by, so one row per key and batch crosses the wire. A key is
one or more columns (a composite key hashes the tuple: sluice/key_groups.py).
Null keys: a row with a null in any key column is dropped here, before the
combiner and the exchange (so nothing is merged under a null key), counted in
`null_keys_dropped` and logged: the first drop, the running total at each
checkpoint barrier after more were dropped, and the total at the end.
Event time: a writer of a chain that assigns timestamps (`timestamp_column`)
takes that column along when it materializes a batch, drops and counts rows
whose timestamp is null (with the null keys), and keeps the largest timestamp
it saw for the task's watermark generator (`take_max_timestamp`), so reading
event time costs no Spark call of its own. Watermarks and stream status go to
every subpartition, never held back by capacity (docs/event-time.md).
Measured on 2 cores: a Spark groupBy costs ~0.2 s more per call than the
projection, while Arrow aggregates 10k-160k rows in a few milliseconds. rebalance: whole batches round robin.
broadcast: every subpartition. forward: the subpartition of our own index.
A blocking partition (BATCH, taskmanager/network/blocking_partition.py) is
written exactly the same way: its subpartitions append to files and are never
full.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice import key_groups
from sluice.eventtime.timestamps import timestamps_ms
from sluice.graph import Partitioning
from sluice.v1.common_pb2 import TaskCounters
from taskmanager.network.combiner import ROWS, Combiner
from taskmanager.network.partition import BARRIER, BATCH, END, STATUS, WATERMARK, Partition
from taskmanager.spark_engine import Batch, to_arrow

log = logging.getLogger("sluice.taskmanager.record_writer")

# An Arrow batch up to this many rows has its key groups computed in Python; a larger one by
# Spark, which is as fast from ~50,000 rows on (bench/hash_exchange_bench.py, bench/RESULTS.md)
ARROW_HASH_MAX_ROWS = 25_000


class RecordWriter:
    def __init__(
        self,
        partition: Partition,
        partitioning: Partitioning,
        keys: Sequence[str],
        subtask: int,
        max_parallelism: int,
        combiner: Combiner | None,
        cancelled: Callable[[], bool],
        timestamp_column: str | None = None,
    ) -> None:
        self.partition = partition
        self.target_chain = ""  # the chain this output feeds (a live reconfiguration finds outputs by it)
        self.owners_table: list[int] = []  # HASH: the subtask of each key group, when not contiguous ranges
        self.last_watermark: int | None = None  # the last watermark written (a successor partition starts at it)
        self.timestamp_column = timestamp_column  # observed for the chain's watermarks (None: no event time here)
        self._max_timestamp: int | None = None
        self.partitioning = partitioning
        self.keys = list(keys)  # key columns, in key order (hash only)
        self.null_keys_dropped = 0
        self._null_keys_logged = 0
        self.subtask = subtask
        self.max_parallelism = max_parallelism
        self.combiner = combiner
        # BATCH (docs/batch.md): a combiner that can pre-aggregate inside Spark does, so that a
        # large batch crosses into Python as one row per key; a streaming batch is small and the
        # Arrow combine after the projection is cheaper than a Spark groupBy (module docstring)
        self.combine_in_spark = False
        self.cancelled = cancelled
        self._next = 0
        self.records_produced = 0  # rows the chain gave this output: before null keys and pre-aggregation
        self.records_sent = 0  # rows put into subpartitions: after pre-aggregation, once per target
        self.bytes_sent = 0  # Arrow bytes of those rows
        self.backpressured_seconds = 0.0  # waits for room in a full subpartition, ended ones
        self.blocked_since: float | None = None  # the wait in progress (monotonic time)

    def emit(self, batch: Batch) -> None:
        subs = self.partition.subpartitions
        if self.partitioning == Partitioning.HASH:
            for i, part in self._split_by_key(batch):
                self._add(i, part)
            return
        table = batch.table()
        self.records_produced += table.num_rows
        table = self._drop_nulls(table)
        if table.num_rows == 0:
            return
        if self.partitioning == Partitioning.BROADCAST:
            for i in range(len(subs)):
                self._add(i, table)
        elif self.partitioning == Partitioning.REBALANCE:
            self._add(self._next % len(subs), table)
            self._next += 1
        else:  # forward
            self._add(self.subtask % len(subs), table)

    def _columns_out(self, names: Sequence[str]) -> list[str] | None:
        """The columns that leave for the consumer besides the key group: with a combiner the
        key, the columns it reads and the timestamp; without one, all (None)."""
        if self.combiner is None:
            return None
        wanted = [c for c in self.combiner.columns() if c not in self.keys]
        ts = self.timestamp_column
        extra = [ts] if ts and ts not in wanted and ts not in self.keys and ts in names else []
        return [*self.keys, *wanted, *extra]

    def _arrow_keyed(self, table: pa.Table) -> pa.Table | None:
        """An Arrow batch with its key group computed in Python (no Spark call: a batch that is
        a table already, such as a keyed operator's output), or None when Spark must do it."""
        groups = key_groups.arrow_key_groups(table, self.keys, self.max_parallelism)
        if groups is None:
            return None
        columns = self._columns_out(table.column_names)
        if columns is None:
            return table.append_column(key_groups.KEY_GROUP, groups)
        return table.select(columns).add_column(len(self.keys), key_groups.KEY_GROUP, groups)

    def _split_by_key(self, batch: Batch) -> Iterator[tuple[int, pa.Table]]:
        n = len(self.partition.subpartitions)
        small = batch.is_table and batch.table().num_rows <= ARROW_HASH_MAX_ROWS
        table = self._arrow_keyed(batch.table()) if small else None
        if table is None:
            df = batch.dataframe()
            kg = key_groups.spark_key_group(self.keys, self.max_parallelism)
            in_spark = getattr(self.combiner, "combine_in_spark", None) if self.combine_in_spark else None
            if self.combiner is not None and in_spark is not None and self.timestamp_column is None:
                wanted = [c for c in self.combiner.columns() if c not in self.keys]
                partials = self._spark_partials(to_arrow(in_spark(df.select(*self.keys, kg, *wanted), self.keys)))
                if partials.num_rows:
                    yield from self._by_owner(partials, n)
                return
            columns = self._columns_out(df.columns)
            if columns is not None:
                nk = len(self.keys)
                df = df.select(*columns[:nk], kg, *columns[nk:])
            else:
                df = df.select("*", kg)
            table = to_arrow(df)
        self.records_produced += table.num_rows
        table = self._drop_nulls(table)
        if table.num_rows == 0:
            return
        if self.combiner is not None:
            table = self.combiner.combine(table, self.keys)
        yield from self._by_owner(table, n)

    def _by_owner(self, table: pa.Table, n: int) -> Iterator[tuple[int, pa.Table]]:
        """The rows of each of the `n` subpartitions, by the owner of their key group."""
        if n == 1:
            yield 0, table
            return
        targets = key_groups.owners(table.column(key_groups.KEY_GROUP), n, self.max_parallelism, self.owners_table)
        for i in range(n):
            part = table.filter(pc.equal(targets, i))
            if part.num_rows:
                yield i, part

    def _spark_partials(self, table: pa.Table) -> pa.Table:
        """Partials Spark computed (`combine_in_spark`): count the rows they fold, drop the
        groups of a null key (counting their rows as dropped), drop the row counts."""
        rows = table.column(ROWS)
        self.records_produced += pc.sum(rows).as_py() or 0
        nulls = _null_mask(table, self.keys)
        if nulls is not None:
            dropped = pc.sum(pc.if_else(nulls, rows, 0)).as_py() or 0
            if dropped and not self.null_keys_dropped:
                log.warning(
                    "partition %s: dropped %d rows with a null in key (%s); further drops are counted",
                    self.partition.partition_id,
                    dropped,
                    ", ".join(self.keys),
                )
            self.null_keys_dropped += dropped
            self._null_keys_logged = self._null_keys_logged or self.null_keys_dropped
            table = table.filter(pc.invert(nulls))
        return table.drop_columns([ROWS])

    def take_max_timestamp(self) -> int | None:
        """The largest timestamp of the batches emitted since the last call (None: none)."""
        ts, self._max_timestamp = self._max_timestamp, None
        return ts

    def _drop_nulls(self, table: pa.Table) -> pa.Table:
        """Rows with a null in a key column or in the event-time column are dropped, counted
        and logged; the largest timestamp is kept for the watermark."""
        ts = self.timestamp_column
        if ts is None:  # a window's combiner reads a timestamp too: its rows need one
            return self._drop_null_keys(table, [*self.keys, *getattr(self.combiner, "not_null", [])])
        if ts not in table.column_names:
            raise KeyError(
                f"the event-time column {ts!r} is not in the stream here (columns: {', '.join(table.column_names)}); "
                "keep it in the operators after assign_timestamps_and_watermarks"
            )
        table = self._drop_null_keys(table, [*self.keys, *([ts] if ts not in self.keys else [])])
        if table.num_rows:
            high = pc.max(timestamps_ms(table.column(ts))).as_py()
            if high is not None and (self._max_timestamp is None or high > self._max_timestamp):
                self._max_timestamp = high
        return table

    def _drop_null_keys(self, table: pa.Table, columns: Sequence[str]) -> pa.Table:
        """Rows with a null in any of `columns` (the key's, and the timestamp's) are dropped,
        counted and logged."""
        nulls = _null_mask(table, columns)
        if nulls is None:
            return table
        dropped = pc.sum(nulls).as_py() or 0
        if not self.null_keys_dropped:
            log.warning(
                "partition %s: dropped %d rows with a null in %s (%s); further drops are counted and "
                "logged at checkpoints and at the end",
                self.partition.partition_id,
                dropped,
                "key" if list(columns) == self.keys else "key or timestamp",
                ", ".join(columns),
            )
        self.null_keys_dropped += dropped
        self._null_keys_logged = self._null_keys_logged or self.null_keys_dropped
        return table.filter(pc.invert(nulls))

    def _add(self, index: int, table: pa.Table) -> None:
        sub = self.partition.subpartitions[index]
        if sub.backlog() >= sub.capacity:  # no room downstream: backpressured until there is
            self.blocked_since = time.monotonic()
            try:
                sub.add((BATCH, table), self.cancelled)
            finally:
                self.backpressured_seconds += time.monotonic() - self.blocked_since
                self.blocked_since = None
        else:
            sub.add((BATCH, table), self.cancelled)
        self.records_sent += table.num_rows
        self.bytes_sent += table.nbytes

    def add_counters(self, counters: TaskCounters) -> None:
        """Rows sent on and rows dropped for a null key or timestamp (records_out: the chain's)."""
        counters.records_sent += self.records_sent
        counters.records_dropped += self.null_keys_dropped

    def backpressured_until(self, now: float) -> float:
        """Seconds spent waiting for room downstream so far, a wait in progress included."""
        since = self.blocked_since
        return self.backpressured_seconds + (now - since if since is not None else 0.0)

    def queue_usage(self) -> tuple[int, int]:
        """(batches queued, capacity) over the subpartitions."""
        subs = self.partition.subpartitions
        return sum(s.backlog() for s in subs), sum(s.capacity for s in subs)

    def barrier(self, checkpoint_id: int) -> None:
        """Barriers overtake nothing and are never held back by capacity."""
        if self.null_keys_dropped > self._null_keys_logged:
            self._null_keys_logged = self.null_keys_dropped
            log.warning(
                "partition %s: %d rows with a null in key (%s) dropped so far (checkpoint %d)",
                self.partition.partition_id,
                self.null_keys_dropped,
                ", ".join(self.keys),
                checkpoint_id,
            )
        for s in self.partition.subpartitions:
            s.add((BARRIER, checkpoint_id))

    def watermark(self, timestamp: int) -> None:
        """Event time advanced to `timestamp` on this output (after the batches before it)."""
        self.last_watermark = timestamp
        for s in self.partition.subpartitions:
            s.add((WATERMARK, timestamp))

    def stream_status(self, idle: bool) -> None:
        """This output goes idle (it must not hold back its consumers' watermark) or active."""
        for s in self.partition.subpartitions:
            s.add((STATUS, idle))

    def end(self) -> None:
        if self.null_keys_dropped:
            log.warning(
                "partition %s: %d rows with a null in key (%s) were dropped in all",
                self.partition.partition_id,
                self.null_keys_dropped,
                ", ".join(self.keys),
            )
        for s in self.partition.subpartitions:
            s.add((END, None))


def _null_mask(table: pa.Table, columns: Sequence[str]) -> Any:
    """Rows with a null in any of `columns` (a boolean array), or None when there is none."""
    nulls = None
    for k in columns:
        column = table.column(k)
        if column.null_count:
            nulls = column.is_null() if nulls is None else pc.or_(nulls, column.is_null())
    return nulls
