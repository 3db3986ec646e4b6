"""RecordWriter: splits a task's output batch over the subpartitions of one
result partition.

hash: key groups are computed inside Spark and mapped to subtasks as
sluice/key_groups.py defines (contiguous key-group ranges). When the consumer
offers a combiner (a keyed aggregate does: Operator.combiner_for), only the
key, its key group and the columns the combiner reads leave Spark (a narrow
projection, no Spark shuffle), and the batch is pre-aggregated per key with
Arrow's group_by, so one row per key and batch crosses the wire. A key is
one or more columns (a composite key hashes the tuple: sluice/key_groups.py).
Null keys: a row with a null in any key column is dropped here, before the
combiner and the exchange (so nothing is merged under a null key), counted in
`null_keys_dropped` and logged: the first drop, the running total at each
checkpoint barrier after more were dropped, and the total at the end.
Measured on 2 cores: a Spark groupBy costs ~0.2 s more per call than the
projection, while Arrow aggregates 10k-160k rows in a few milliseconds. rebalance: whole batches round robin.
broadcast: every subpartition. forward: the subpartition of our own index.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sluice import key_groups
from sluice.graph import Partitioning
from taskmanager.network.partition import BARRIER, BATCH, END, ResultPartition
from taskmanager.operators.base import Combiner
from taskmanager.spark_engine import Batch

log = logging.getLogger("sluice.taskmanager.record_writer")


class RecordWriter:
    def __init__(
        self,
        partition: ResultPartition,
        partitioning: Partitioning,
        keys: Sequence[str],
        subtask: int,
        max_parallelism: int,
        combiner: Combiner | None,
        cancelled: Callable[[], bool],
    ) -> None:
        self.partition = partition
        self.partitioning = partitioning
        self.keys = list(keys)  # key columns, in key order (hash only)
        self.null_keys_dropped = 0
        self._null_keys_logged = 0
        self.subtask = subtask
        self.max_parallelism = max_parallelism
        self.combiner = combiner
        self.cancelled = cancelled
        self._next = 0
        self.records_produced = 0  # rows the chain gave this output: before null keys and pre-aggregation
        self.records_sent = 0  # rows put into subpartitions: after pre-aggregation, once per target

    def emit(self, batch: Batch) -> None:
        subs = self.partition.subpartitions
        if self.partitioning == Partitioning.HASH:
            for i, part in self._split_by_key(batch):
                self._add(i, part)
            return
        table = batch.table()
        self.records_produced += table.num_rows
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

    def _split_by_key(self, batch: Batch) -> Iterator[tuple[int, pa.Table]]:
        df = batch.dataframe()
        n, maxp = len(self.partition.subpartitions), self.max_parallelism
        kg = key_groups.spark_key_group(self.keys, maxp)
        if self.combiner is not None:
            df = df.select(*self.keys, kg, *[c for c in self.combiner.columns() if c not in self.keys])
        else:
            df = df.select("*", kg)
        table = df.toArrow()
        self.records_produced += table.num_rows
        table = self._drop_null_keys(table)
        if table.num_rows == 0:
            return
        if self.combiner is not None:
            table = self.combiner.combine(table, self.keys)
        if n == 1:
            yield 0, table
            return
        targets = key_groups.owners(table.column(key_groups.KEY_GROUP), n, maxp)
        for i in range(n):
            part = table.filter(pc.equal(targets, i))
            if part.num_rows:
                yield i, part

    def _drop_null_keys(self, table: pa.Table) -> pa.Table:
        """Rows whose key has a null in any column are dropped, counted and logged."""
        nulls = None
        for k in self.keys:
            column = table.column(k)
            if column.null_count:
                nulls = column.is_null() if nulls is None else pc.or_(nulls, column.is_null())
        if nulls is None:
            return table
        dropped = pc.sum(nulls).as_py() or 0
        if not self.null_keys_dropped:
            log.warning(
                "partition %s: dropped %d rows with a null in key (%s); further drops are counted and "
                "logged at checkpoints and at the end",
                self.partition.partition_id,
                dropped,
                ", ".join(self.keys),
            )
        self.null_keys_dropped += dropped
        self._null_keys_logged = self._null_keys_logged or self.null_keys_dropped
        return table.filter(pc.invert(nulls))

    def _add(self, index: int, table: pa.Table) -> None:
        self.partition.subpartitions[index].add((BATCH, table), self.cancelled)
        self.records_sent += table.num_rows

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
