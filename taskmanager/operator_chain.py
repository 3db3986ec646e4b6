"""OperatorChain: what a task runs, head to outputs (Flink's OperatorChain).

The head is a source or the task's input gate (taskmanager/task.py); the
chained operators follow, known only through `Operator` and `Source`
(taskmanager/operators/base.py), built by the registry; the tail writes to
every result partition of the chain's outputs (a `RecordWriter` each, the
late-data side output apart). The chain builds all of it (`build`), passes a
batch down from any operator (`process`), ends its input (`end_operators`,
then `end_outputs`), and takes part in checkpoints: `snapshot` fills the
checkpoint's state from every operator, `restore` hands each its state back,
`notify_checkpoint_complete` lets sinks commit. It adds up the task's
counters (`add_counters`): each operator, source and writer adds what it
counted.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice import graph, job_options
from sluice.checkpoints.storage import CheckpointStorage
from sluice.metrics import counters as task_counters
from sluice.v1 import common_pb2, taskmanager_pb2
from taskmanager.network.blocking_partition import BlockingResultPartition
from taskmanager.network.partition import Partition, PartitionManager, ResultPartition
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Source
from taskmanager.operators.registry import combiner_for, make_operator, make_source_for
from taskmanager.spark_engine import Batch, SparkEngine
from taskmanager.state.backend import NativeRestore, StateBackendConfig, is_native

log = logging.getLogger("sluice.taskmanager.task")  # the task's log lines, whichever part writes them

SUBPARTITION_CAPACITY = 2  # batches a producer may queue per consumer
SOURCE_SNAPSHOT_LOG = "%s checkpoint %d: source snapshot at %s"  # tag, checkpoint, "offset N"

Splits = Callable[[str, int, int, bool], Any]  # a connector source's split requests (LeaderConnection.request_splits)


class OperatorChain:
    def __init__(
        self,
        tdd: taskmanager_pb2.TaskDeploymentDescriptor,
        engine: SparkEngine,
        partitions: PartitionManager,
        tag: str,
        cancelled: Callable[[], bool],
    ) -> None:
        self.tdd = tdd
        self.engine = engine
        self.partitions = partitions
        self.tag = tag
        self.cancelled = cancelled
        self.maxp = tdd.job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
        self.batch = graph.is_batch(tdd.job)  # BATCH mode: operators behave accordingly (OperatorContext.batch)
        self.checkpointing = bool(tdd.checkpoint_dir)
        self.source: Source | None = None
        self.source_id = ""
        self.operators: list[tuple[str, Operator]] = []  # (operator id, operator), head first
        self.writers: list[RecordWriter] = []  # the chain's main outputs
        self.side_writers: list[RecordWriter] = []  # a window's late-data side output
        self.channel_side: list[int] | None = None  # a two-input head: each input channel's side (0 left, 1 right)
        self.sink_rows = 0
        self.counted = common_pb2.TaskCounters()  # what operators count into themselves (OperatorContext.counters)
        self.ended = False  # the input ended and the outputs were told

    @property
    def all_writers(self) -> list[RecordWriter]:
        return [*self.writers, *self.side_writers]

    # -- build --------------------------------------------------------------------------------------
    def build(self, request_splits: Splits | None) -> bool:
        """The source (if the head is one), the outputs and the operators; True when the chain
        has a source, False when its head reads the input gate."""
        tdd = self.tdd
        specs = {op.id: op for op in tdd.job.operators}
        for out in tdd.outputs:
            writer = self.writer(out, specs)
            (self.side_writers if out.output_tag else self.writers).append(writer)
        head = specs[tdd.operator_ids[0]]
        chained = list(tdd.operator_ids)
        kind = graph.kind_of(head)
        if kind in graph.SOURCE_KINDS or kind == graph.OperatorKind.SOURCE_CONNECTOR:
            ctx = self._context(head.id, head)
            self.source = make_source_for(kind, graph.operator_settings(head), ctx, request_splits)
            self.source_id = head.id
            chained = chained[1:]
        for op_id in chained:
            spec = specs[op_id]
            op = make_operator(graph.kind_of(spec), graph.operator_settings(spec), self._context(op_id, spec))
            self.operators.append((op_id, op))
        late_output = self.emit_late if self.side_writers else None
        for _op_id, op in self.operators:
            op.wire(bool(self.writers), late_output)
        if self.operators and self.operators[0][1].two_inputs:
            self.channel_side = self._sides(self.operators[0][1])
        return self.source is not None

    def _context(self, op_id: str, spec: Any) -> OperatorContext:
        tdd = self.tdd
        return OperatorContext(
            name=spec.name or spec.id,
            subtask=tdd.subtask_index,
            parallelism=tdd.parallelism,
            job_id=tdd.job_id,
            restore_checkpoint_id=tdd.restore_checkpoint_id,
            checkpointing=self.checkpointing,
            tag=self.tag,
            engine=self.engine,
            operator_id=op_id,
            batch=self.batch,
            state_backend=StateBackendConfig.for_task(
                tdd.job.config, lambda: self.partitions.local_dir, tdd.execution_id, op_id
            ),
            counters=self.counted,
            source_reads=job_options.source_reads(tdd.job.config),
        )

    def writer(self, out: Any, specs: dict[str, Any]) -> RecordWriter:
        """A record writer on a new, registered result partition for output `out` (a
        ResultPartitionDescriptor); `specs`: operator specs by id, for the target's head. A
        blocking output (BATCH) writes local files, read once this task finished."""
        partition: Partition
        if out.blocking:
            partition = BlockingResultPartition.create(
                self.partitions, self.tdd.job_id, out.partition_id, out.num_subpartitions, tag=self.tag
            )
        else:
            partition = ResultPartition(
                out.partition_id,
                out.num_subpartitions,
                SUBPARTITION_CAPACITY,
                on_consumed=self.partitions.release,
                job_id=self.tdd.job_id,
            )
        partitioning = graph.partitioning_of(out)
        combiner = None
        if partitioning == graph.Partitioning.HASH:  # the consumer may let us pre-aggregate
            target = specs[out.target_chain]
            combiner = combiner_for(graph.kind_of(target), graph.operator_settings(target))
        writer = RecordWriter(
            partition,
            partitioning,
            list(out.keys),
            self.tdd.subtask_index,
            self.maxp,
            combiner,
            self.cancelled,
            self._assigner_column(specs) if not out.output_tag else None,
        )
        writer.target_chain = out.target_chain
        writer.owners_table = list(out.key_group_owners)
        writer.combine_in_spark = self.batch
        self.partitions.register(partition)
        return writer

    def _assigner_column(self, specs: dict[str, Any]) -> str | None:
        """The timestamp column of the chain's assign_timestamps_and_watermarks, if it has one."""
        for op_id in self.tdd.operator_ids:
            if graph.kind_of(specs[op_id]) == graph.OperatorKind.TIMESTAMPS:
                return str(graph.operator_config(specs[op_id])["strategy"]["timestamp_column"])
        return None

    def _sides(self, head: Operator) -> list[int]:
        """Each input channel's side for a two-input head: 0 for the gate from the chain that ends
        in the head's left input operator, 1 for the other."""
        chain_of = graph.chain_of(graph.build_chains(self.tdd.job))
        left_chain = chain_of[head.left_input].id if head.left_input in chain_of else None
        return [0 if gate.upstream_chain == left_chain else 1 for gate in self.tdd.inputs for _ch in gate.channels]

    def switch_outputs(self, r: taskmanager_pb2.PrepareReconfigurationRequest) -> list[str]:
        """A live reconfiguration's barrier: the outputs to the redeployed tasks move over to new
        partitions; the old ones end here. Returns the ended partitions' ids."""
        specs = {op.id: op for op in self.tdd.job.operators} | {op.id: op for op in r.targets}
        ended = []
        for out in r.outputs:
            writers = self.side_writers if out.output_tag else self.writers
            i = next(i for i, w in enumerate(writers) if w.target_chain == out.target_chain)
            old, new = writers[i], self.writer(out, specs)
            # the task's counters go on across the switch
            new.records_produced, new.records_sent = old.records_produced, old.records_sent
            new.null_keys_dropped = new._null_keys_logged = old.null_keys_dropped
            old.end()
            ended.append(old.partition.partition_id)
            if old.last_watermark is not None:
                new.watermark(old.last_watermark)
            writers[i] = new
        return ended

    # -- records ------------------------------------------------------------------------------------
    def process(self, batch: Batch, start: int = 0) -> None:
        """Pass `batch` down the chain from operator `start`, then to every output."""
        for _op_id, op in self.operators[start:]:
            if op.is_sink:
                op.process(batch)
                self.sink_rows += batch.table().num_rows
                return
            out = op.process(batch)
            if out is None:
                return
            batch = out
        if len(self.writers) > 1:
            batch = Batch(self.engine, table=batch.table())  # materialize once for several outputs
        for w in self.writers:
            w.emit(batch)

    def emit_late(self, table: pa.Table) -> None:
        """A window's late rows, to its late-data side output (if the job sinks it)."""
        for w in self.side_writers:
            w.emit(Batch(self.engine, table=table))

    def on_processing_time(self, now: int) -> None:
        """Processing-time windows due by the task's clock fire."""
        for i, (_op_id, op) in enumerate(self.operators):
            out = op.on_processing_time(now)
            if out is not None:
                self.process(out, start=i + 1)

    def end_operators(self) -> None:
        """The input ended: every operator's last rows (a window fires) go down the chain."""
        for i, (_op_id, op) in enumerate(self.operators):
            out = op.end_input()
            if out is not None:
                self.process(out, start=i + 1)

    def end_outputs(self) -> None:
        for w in self.all_writers:
            w.end()
        self.ended = True

    def add_counters(self, counters: common_pb2.TaskCounters) -> None:
        """records_out: the rows the chain produced (counted before any pre-aggregation for the
        next tasks; every output gets the same rows, so the first one's count is the chain's), or
        the sink's input for a sink chain; the rest as each part counted it."""
        task_counters.add(counters, self.counted)
        counters.records_out += (self.writers[0].records_produced if self.writers else 0) + self.sink_rows
        if self.source is not None:
            self.source.add_counters(counters)
        for _op_id, op in self.operators:
            op.add_counters(counters)
        for w in self.writers:
            w.add_counters(counters)

    # -- checkpoints --------------------------------------------------------------------------------
    def snapshot(
        self,
        checkpoint_id: int,
        inline: dict[str, dict[str, Any]],
        keyed: dict[str, pa.Table],
        native: dict[str, Any],
    ) -> None:
        """Every part's state in checkpoint `checkpoint_id`, copied now (on the task thread): small
        state into `inline`, keyed rows into `keyed`, a native backend's snapshot into `native`."""
        if self.source is not None:
            inline[self.source_id] = self.source.snapshot_at(checkpoint_id)
            log.info(SOURCE_SNAPSHOT_LOG, self.tag, checkpoint_id, self.source.describe_offset())
        for op_id, op in self.operators:
            snapshot = op.snapshot(checkpoint_id)
            if snapshot.inline is not None:
                inline[op_id] = snapshot.inline
            if snapshot.keyed is not None:
                keyed[op_id] = snapshot.keyed
            if snapshot.native is not None:
                native[op_id] = snapshot.native

    def restore(
        self,
        state: dict[str, Any],
        storage: CheckpointStorage | None,
        key_groups: tuple[int, int],
        owned_key_groups: Any,
    ) -> None:
        """Restore every operator from the checkpoint's handles: nothing else is kept."""
        inline: dict[str, Any] = state.get("operators", {})
        keyed: dict[str, list[dict[str, Any]]] = state.get("keyed", {})
        started = time.monotonic()
        if self.source is not None and self.source_id in inline:  # a new source (savepoint) starts afresh
            self.source.restore(inline[self.source_id])
        for op_id, op in self.operators:
            handles = keyed.get(op_id, [])
            rows = [h for h in handles if not is_native(h)]  # Arrow files (the memory backend, savepoints)
            native = [h for h in handles if is_native(h)]  # RocksDB databases (taskmanager/state/rocksdb_backend.py)
            table = storage.read_keyed_state(rows, key_groups, owned_key_groups) if rows and storage else None
            restore = (
                NativeRestore(
                    native,
                    storage.fs,
                    key_groups,
                    owned_key_groups,
                    os.path.join(self.partitions.local_dir, "state", f"restore-{self.tdd.execution_id}-{op_id}"),
                )
                if native and storage
                else None
            )
            op.restore(OperatorSnapshot(inline=inline.get(op_id), keyed=table, native=restore))
        log.info(
            "%s restored from checkpoint %d%s in %.3f s",
            self.tag,
            self.tdd.restore_checkpoint_id,
            f" (source {self.source.describe_offset()})" if self.source is not None else "",
            time.monotonic() - started,
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.source is not None:
            self.source.notify_checkpoint_complete(checkpoint_id)
        for _op_id, op in self.operators:
            op.notify_checkpoint_complete(checkpoint_id)

    # -- the end ------------------------------------------------------------------------------------
    def abort(self) -> None:
        """The task failed or was cancelled: discard uncommitted work, release the outputs."""
        if self.source is not None:
            self.source.close()
        for _op_id, op in self.operators:
            op.abort()
        self.release_outputs()

    def release_outputs(self) -> None:
        """The task failed or was cancelled: its partitions go (a blocking one's files are deleted)."""
        for w in self.all_writers:
            self.partitions.release(w.partition.partition_id, w.partition)

    def dispose(self) -> None:
        for op_id, op in self.operators:
            try:
                op.dispose()
            except Exception:  # best effort: the working directory goes with the process
                log.exception("%s releasing %s failed", self.tag, op_id)
