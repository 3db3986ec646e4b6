"""RecordWriter: splits a task's output batch over the subpartitions of one
result partition.

hash: key groups are computed inside Spark and mapped to subtasks as
sluice/key_groups.py defines (contiguous key-group ranges). When the consumer
offers a combiner (a keyed aggregate does: Operator.combiner_for), only the
key, its key group and the columns the combiner reads leave Spark (a narrow
projection, no Spark shuffle), and the batch is pre-aggregated per key with
Arrow's group_by, so one row per key and batch crosses the wire.
Measured on 2 cores: a Spark groupBy costs ~0.2 s more per call than the
projection, while Arrow aggregates 10k-160k rows in a few milliseconds. rebalance: whole batches round robin.
broadcast: every subpartition. forward: the subpartition of our own index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sluice import key_groups
from sluice.graph import Partitioning
from taskmanager.network.partition import BARRIER, BATCH, END, ResultPartition
from taskmanager.operators.base import Combiner
from taskmanager.spark_engine import Batch


class RecordWriter:
    def __init__(
        self,
        partition: ResultPartition,
        partitioning: Partitioning,
        key: str,
        subtask: int,
        max_parallelism: int,
        combiner: Combiner | None,
        cancelled: Callable[[], bool],
    ) -> None:
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
        if self.partitioning == Partitioning.HASH:
            for i, part in self._split_by_key(batch):
                self._add(i, part)
            return
        table = batch.table()
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
        kg = key_groups.spark_key_group(self.key, maxp)
        if self.combiner is not None:
            df = df.select(self.key, kg, *self.combiner.columns())
        else:
            df = df.select("*", kg)
        table = df.toArrow()
        if table.num_rows == 0:
            return
        if self.combiner is not None:
            table = self.combiner.combine(table, self.key)
        if n == 1:
            yield 0, table
            return
        targets = key_groups.owners(table.column(key_groups.KEY_GROUP), n, maxp)
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
