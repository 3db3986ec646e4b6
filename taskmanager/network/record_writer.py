"""RecordWriter: splits a task's output batch over the subpartitions of one
result partition.

hash: key groups are computed inside Spark (`pmod(xxhash64(key), max_parallelism)`,
the same in every process and run), and subtask = key_group * p // max_parallelism
(contiguous key-group ranges). When the consumer is a keyed aggregate, only the
key, its key group and the aggregated columns leave Spark (a narrow projection,
no Spark shuffle), and the batch is pre-aggregated per key with Arrow's
group_by (a combiner), so one row per key and batch crosses the wire.
Measured on 2 cores: a Spark groupBy costs ~0.2 s more per call than the
projection, while Arrow aggregates 10k-160k rows in a few milliseconds. rebalance: whole batches round robin.
broadcast: every subpartition. forward: the subpartition of our own index.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from taskmanager.network.partition import BARRIER, BATCH, END, ResultPartition
from taskmanager.operators.keyed_aggregate import KEY_GROUP, combine, combiner_columns
from taskmanager.spark_engine import Batch

TARGET = "__target"


def key_group_range_owner(key_group: int, parallelism: int, max_parallelism: int) -> int:
    return key_group * parallelism // max_parallelism


class RecordWriter:
    def __init__(self, partition: ResultPartition, partitioning: str, key: str, subtask: int,
                 max_parallelism: int, combiner: dict | None, cancelled):
        self.partition = partition
        self.partitioning = partitioning
        self.key = key
        self.subtask = subtask
        self.max_parallelism = max_parallelism
        self.combiner = combiner
        self.cancelled = cancelled
        self._next = 0
        self.records_out = 0

    def emit(self, batch: Batch) -> None:
        subs = self.partition.subpartitions
        if self.partitioning == "hash":
            for i, part in self._split_by_key(batch):
                self._add(i, part)
            return
        table = batch.table()
        if table.num_rows == 0:
            return
        if self.partitioning == "broadcast":
            for i in range(len(subs)):
                self._add(i, table)
        elif self.partitioning == "rebalance":
            self._add(self._next % len(subs), table)
            self._next += 1
        else:  # forward
            self._add(self.subtask % len(subs), table)

    def _split_by_key(self, batch: Batch):
        from pyspark.sql import functions as F
        df = batch.dataframe()
        n, maxp = len(self.partition.subpartitions), self.max_parallelism
        kg = F.pmod(F.xxhash64(F.col(self.key)), F.lit(maxp)).cast("int").alias(KEY_GROUP)
        if self.combiner is not None:
            df = df.select(F.col(self.key), kg, *[F.col(c) for c in combiner_columns(self.combiner)])
        else:
            df = df.select("*", kg)
        table = df.toArrow()
        if table.num_rows == 0:
            return
        if self.combiner is not None:
            table = combine(table, self.key, self.combiner)
        if n == 1:
            yield 0, table
            return
        targets = pc.divide(pc.multiply(table.column(KEY_GROUP).cast(pa.int64()), n), maxp)
        for i in range(n):
            part = table.filter(pc.equal(targets, i))
            if part.num_rows:
                yield i, part

    def _add(self, index: int, table: pa.Table) -> None:
        self.partition.subpartitions[index].add((BATCH, table), self.cancelled)
        self.records_out += table.num_rows

    def barrier(self, checkpoint_id: int) -> None:
        """Barriers overtake nothing and are never held back by capacity."""
        for s in self.partition.subpartitions:
            s.add((BARRIER, checkpoint_id))

    def end(self) -> None:
        for s in self.partition.subpartitions:
            s.add((END, None))
