"""Task: one subtask of a chain, run on its own thread.

The head of the chain is either a source (it produces batches until its
input is exhausted) or an input gate over every upstream subtask (it takes
everything buffered at once: big batches under load, small ones when idle).
Each batch passes through the chained operators and is written to every
result partition of the chain's tail. The task knows its operators only
through the `Operator` interface (taskmanager/operators/base.py).

Checkpoints: a source snapshots its offset when the JobManager triggers it
and emits barrier n downstream; a task with inputs aligns barrier n on all
its channels (BarrierAligner), then snapshots. The snapshot is copied on the
task thread, forwarded as a barrier, and written to checkpoint storage off
the task thread; the write's state handle is acknowledged to the
JobManager. At the end of the input, with checkpointing on, the task waits
for the final checkpoint to complete (its sinks commit then) and finishes.
See docs/checkpoints.md.

Stop with a savepoint (docs/savepoints.md): every task is told which
checkpoint stops the job. Once it has snapshotted that checkpoint, a task
reads nothing more (a source stops at its barrier) and waits: when the
checkpoint completes (a final notification while its input has not ended)
its sinks commit and it finishes without ending its input — no final
watermark, nothing after the savepoint; when it is aborted, the task goes on.

Event time (docs/event-time.md): a task with inputs turns its channels'
watermarks and idleness into its input watermark (WatermarkValve) and passes
it down the chain (`Operator.on_watermark`: windows fire) and on to its
outputs; a chain that assigns timestamps generates its own watermarks after
each batch instead. The end of the input is the final watermark (+inf).

BATCH mode (`sluice.graph.is_batch`, docs/batch.md): checkpointing is off
(the descriptor has no checkpoint_dir), so nothing waits for a final
checkpoint; operators learn the mode from `OperatorContext.batch` (a keyed
aggregate emits its final values once at the end, a file sink commits its
part first-wins). An output marked `blocking` is written to local files
(taskmanager/network/blocking_partition.py): the task finishes when its input
ended and those files are closed (`finish()`, before it reports FINISHED);
the partition stays registered and readable after the task ended. A task
that fails or is cancelled releases its partitions, deleting the files of
blocking ones.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import json
import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, assert_never

import pyarrow as pa
import pyarrow.compute as pc

from sluice import graph
from sluice.checkpoints.storage import CheckpointStorage
from sluice.connectors.api import ReaderContext
from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.eventtime import watermarks as wm
from sluice.key_groups import KEY_GROUP, key_group_range, owned_key_groups
from sluice.metrics.task_metrics import TaskIO, TaskIOSnapshot
from sluice.states import ExecutionState
from sluice.v1 import taskmanager_pb2
from taskmanager import barrier_aligner as ba
from taskmanager.connectors.source import ConnectorSource
from taskmanager.network.blocking_partition import BlockingResultPartition
from taskmanager.network.input_gate import InputGate, LocalInputChannel, RemoteInputChannel
from taskmanager.network.partition import ItemKind, Partition, PartitionManager, ResultPartition, TaskCancelled
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.base import IDLE, Operator, OperatorContext, OperatorSnapshot, Source
from taskmanager.operators.registry import combiner_for, make_operator
from taskmanager.operators.sources import make_source
from taskmanager.operators.timestamps import TimestampAssigner
from taskmanager.operators.window import WindowOperator
from taskmanager.spark_engine import Batch, SparkEngine
from taskmanager.state.backend import NativeRestore, StateBackendConfig, is_native
from taskmanager.task_messages import (
    CheckpointAborted,
    CheckpointComplete,
    ControlMessage,
    Failure,
    TaskReports,
    TriggerCheckpoint,
)

log = logging.getLogger("sluice.taskmanager.task")

SUBPARTITION_CAPACITY = 2  # batches a producer may queue per consumer
CHANNEL_CREDIT = 2  # batches a consumer buffers per channel
# Log lines tools read (bench/compare.py derives latency and throughput timelines from them)
SOURCE_BATCH_LOG = "%s source batch: offset %d -> %d in %.3fs"  # tag, offset before, after, seconds
SOURCE_SNAPSHOT_LOG = "%s checkpoint %d: source snapshot at %s"  # tag, checkpoint, "offset N"


def task_tag(job_id: str, attempt: int, chain_id: str, subtask: int) -> str:
    """The correlation ids that start each of a task's log lines."""
    return f"[job {job_id} attempt {attempt} task {chain_id}#{subtask}]"


def _no_input() -> bool:
    """A chain with inputs whose gate gave nothing has no input pending."""
    return False


class Task:
    def __init__(
        self,
        tdd: taskmanager_pb2.TaskDeploymentDescriptor,
        engine: SparkEngine,
        partitions: PartitionManager,
        own_address: str,
        reports: TaskReports,
    ) -> None:
        self.tdd = tdd
        self.execution_id = tdd.execution_id
        self.job_id = tdd.job_id
        self.engine = engine
        self.partitions = partitions
        self.own_address = own_address
        self.reports = reports
        self.state = ExecutionState.DEPLOYING
        self._records_in = 0  # rows taken from the input gate
        self._sink_rows = 0
        self._cancel = threading.Event()
        self._control: queue.Queue[ControlMessage] = queue.Queue()
        self._gate: InputGate | None = None
        self._aligner: ba.BarrierAligner | None = None
        self._writers: list[RecordWriter] = []  # the chain's main outputs
        self._side_writers: list[RecordWriter] = []  # a window's late-data side output
        self._valve: wm.WatermarkValve | None = None
        self._assigner: TimestampAssigner | None = None
        self._assigner_index = -1  # its place in self._operators
        self._event_time = False  # watermarks flow through this task: send the final one at the end
        self._channel_side: list[int] | None = None  # a two-input head: each input channel's side (0 left, 1 right)
        self._operators: list[tuple[str, Operator]] = []  # (operator id, operator), head first
        self._source: Source | None = None
        self._source_id = ""
        self._ended = False
        self._final_committed = False
        self._stop_at: int | None = None  # the checkpoint this task stops at (a stop with savepoint, a reconfiguration)
        self._reconfiguration: taskmanager_pb2.PrepareReconfigurationRequest | None = None
        self._retired_partitions: list[tuple[int, str]] = []  # (checkpoint, partition) ended by a reconfiguration
        self._stopped = False  # that checkpoint completed: finish without ending the input
        self._last_snapshot = 0
        self.maxp = tdd.job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
        # The key groups this subtask owns: a contiguous range, or those a live rebalance gave it
        # (docs/reconfiguration.md); snapshots are tagged with their bounding range.
        table = graph.key_group_owners(tdd.job, tdd.chain_id)
        self.owned_key_groups = (
            owned_key_groups(tdd.subtask_index, tdd.parallelism, self.maxp, table) if table else None
        )
        self.key_groups = (
            (min(self.owned_key_groups), max(self.owned_key_groups))
            if self.owned_key_groups
            else key_group_range(tdd.subtask_index, tdd.parallelism, self.maxp)
        )
        self.key_group_records: collections.Counter[int] = collections.Counter()  # input rows per key group
        self.storage = CheckpointStorage(tdd.checkpoint_dir, tdd.job_id) if tdd.checkpoint_dir else None
        self.batch = graph.is_batch(tdd.job)  # BATCH mode: operators behave accordingly (OperatorContext.batch)
        self._uploader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-upload")
        self._thread = threading.Thread(target=self._main, name=f"task-{tdd.chain_id}-{tdd.subtask_index}", daemon=True)
        self._exit_hooks: list[Callable[[Task], None]] = []
        self._interruptible = False  # the thread runs the task's work (not its ending): interrupt() may raise in it
        self.tag = task_tag(tdd.job_id, tdd.attempt, tdd.chain_id, tdd.subtask_index)
        ops = {o.id: o for o in tdd.job.operators}
        # the chain's name as the JobManager shows it (sluice/graph.py build_chains)
        self.name = " -> ".join(ops[i].name or graph.kind_of(ops[i]) if i in ops else i for i in tdd.operator_ids)
        self.io = TaskIO()  # rates, time shares, queues, checkpoint timings (docs/monitoring.md)
        self._backpressured_seen = 0.0  # the writers' blocked seconds already added to self.io

    def io_snapshot(self, now: float) -> TaskIOSnapshot:
        """The task's I/O metrics now (any thread): the writers' backpressure and queues are
        folded in first."""
        writers = [*self._writers, *self._side_writers]
        blocked = sum(w.backpressured_until(now) for w in writers)
        if blocked > self._backpressured_seen:
            self.io.backpressured(blocked - self._backpressured_seen, now)
            self._backpressured_seen = blocked
        out_used = out_capacity = 0
        for w in writers:
            used, capacity = w.queue_usage()
            out_used, out_capacity = out_used + used, out_capacity + capacity
        gate = self._gate
        in_used = sum(len(c.buffer) for c in gate.channels) if gate is not None else 0
        in_capacity = sum(c.credit for c in gate.channels) if gate is not None else 0
        self.io.queues(in_used / in_capacity if in_capacity else 0.0, out_used / out_capacity if out_capacity else 0.0)
        self.io.wrote(self.records_out, sum(w.bytes_sent for w in writers), now)
        return self.io.snapshot(now)

    @property
    def records_in(self) -> int:
        """Rows the task took in: from its input gate, or for a source chain the rows its
        source read (counted by Spark as it reads, so a batch's rows arrive with its end)."""
        return self._source.records_read if self._source is not None else self._records_in

    @property
    def records_out(self) -> int:
        """Rows the chain produced: for a source chain without other operators, the rows read
        (malformed rows dropped); counted before any pre-aggregation for the next tasks (every
        output gets the same rows, so the first one's count is the chain's), or the sink's input
        for a sink chain."""
        return (self._writers[0].records_produced if self._writers else 0) + self._sink_rows

    @property
    def records_sent(self) -> int:
        """Rows sent to the next tasks: after pre-aggregation, summed over outputs and targets."""
        return sum(w.records_sent for w in self._writers)

    @property
    def records_malformed(self) -> int:
        """Input rows the chain's source could not parse (sluice/schema_inference.py, the modes)."""
        return self._source.records_malformed if self._source is not None else 0

    @property
    def records_dropped(self) -> int:
        """Rows dropped: malformed rows the source dropped (on_error "drop") and rows with a null
        key column that a hash exchange dropped (taskmanager/network/record_writer.py)."""
        dropped = self._source.records_dropped if self._source is not None else 0
        for _op_id, op in self._operators:
            dropped += getattr(op, "null_timestamps_dropped", 0)
        return dropped + sum(w.null_keys_dropped for w in self._writers)

    @property
    def records_late_dropped(self) -> int:
        """Rows the chain's windows dropped for arriving after their allowed lateness."""
        return sum(getattr(op, "records_late_dropped", 0) for _op_id, op in self._operators)

    @property
    def watermark(self) -> int | None:
        """The task's current input watermark in ms (a source chain: the watermark it sends);
        None before the first one, or without event time."""
        if self._valve is not None and self._valve.watermark != MIN_WATERMARK:
            return self._valve.watermark
        if self._assigner is not None:
            return self._assigner.current_watermark
        return None

    @property
    def bad_record_samples(self) -> list[str]:
        """A few malformed lines of the source, truncated, with their file's name."""
        return list(self._source.bad_record_samples) if self._source is not None else []

    @property
    def checkpointing(self) -> bool:
        return self.storage is not None

    # -- control (any thread) ---------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def spark_tag(self) -> str:
        return "sluice-" + self.execution_id.replace("/", "-").replace(",", "-")

    def cancel(self) -> None:
        self._cancel.set()
        if self._gate is not None:
            self._gate.close()
        if self.engine.spark is not None:  # stop a Spark call in flight instead of waiting for it
            self.engine.cancel_tag(self.spark_tag)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """The task's thread has started and not ended."""
        return self._thread.is_alive()

    @property
    def thread_ident(self) -> int | None:
        return self._thread.ident

    def add_exit_hook(self, hook: Callable[[Task], None]) -> None:
        """`hook(task)` runs as the task thread's last act: the task has really stopped (its slot
        may be given to another task). Add hooks before start()."""
        self._exit_hooks.append(hook)

    def interrupt(self) -> bool:
        """Escalate a cancel that did not take (Flink's task cancellation interval): cancel the
        task's Spark jobs again and raise TaskCancelled inside its thread, as far as Python allows
        — the exception arrives at the thread's next bytecode, so a body blocked in one long C
        call (a sleep, a socket read) is not reached. True when an interrupt was sent."""
        if self.engine.spark is not None:
            self.engine.cancel_tag(self.spark_tag)
        ident = self._thread.ident
        if ident is None or not self._thread.is_alive() or not self._interruptible:
            return False
        sent = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(TaskCancelled))
        return bool(sent == 1)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def trigger_checkpoint(self, checkpoint_id: int, final: bool, stop: bool = False) -> None:  # noqa: ARG002 — a trigger is a trigger
        self._post(TriggerCheckpoint(checkpoint_id, stop))

    def notify_complete(self, checkpoint_id: int, final: bool) -> None:
        self._post(CheckpointComplete(checkpoint_id, final))

    def notify_aborted(self, checkpoint_id: int) -> None:
        self._post(CheckpointAborted(checkpoint_id))

    def _post(self, message: ControlMessage) -> None:
        self._control.put(message)
        if self._gate is not None:
            self._gate.wake()

    # -- setup ----------------------------------------------------------------------------------
    def _setup(self) -> None:
        tdd = self.tdd
        specs = {op.id: op for op in tdd.job.operators}
        for out in tdd.outputs:
            writer = self._writer(out, specs)
            (self._side_writers if out.output_tag else self._writers).append(writer)
        head = specs[tdd.operator_ids[0]]
        chained = list(tdd.operator_ids)
        if graph.kind_of(head) == graph.OperatorKind.SOURCE_CONNECTOR:
            self._source = self._connector_source(head)
            self._source_id = head.id
            chained = chained[1:]
        elif graph.kind_of(head) in graph.SOURCE_KINDS:
            self._source = make_source(
                graph.kind_of(head),
                graph.operator_settings(head),
                tdd.subtask_index,
                tdd.parallelism,
                self.engine,
                batch=self.batch,
            )
            self._source_id = head.id
            chained = chained[1:]
        else:
            self._gate = self._input_gate()
            self._aligner = ba.BarrierAligner(len(self._gate.channels))
            self._valve = wm.WatermarkValve(len(self._gate.channels))
        for op_id in chained:
            spec = specs[op_id]
            ctx = OperatorContext(
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
            )
            op = make_operator(graph.kind_of(spec), graph.operator_settings(spec), ctx)
            if isinstance(op, TimestampAssigner):
                self._assigner, self._assigner_index = op, len(self._operators)
                op.deferred = bool(self._writers)  # the outputs read the timestamps as they materialize
                self._event_time = True
            if isinstance(op, WindowOperator):
                # late rows go to the side output when the job reads it; else they are counted as dropped
                op.side_output = self._emit_late if self._side_writers else None
                self._event_time = True
            self._operators.append((op_id, op))
        if self._operators and self._operators[0][1].two_inputs:
            self._channel_side = self._sides(self._operators[0][1])
        if tdd.restore_checkpoint_id:
            self._restore(json.loads(tdd.restore_state or b"{}"))

    def _connector_source(self, head: Any) -> ConnectorSource:
        """A connector source's reader (docs/connectors.md), asking the JobManager for splits
        through this TaskManager's leader connection."""
        request_splits = getattr(self.reports, "request_splits", None)
        if request_splits is None:
            raise RuntimeError("this task's reports cannot request splits: connector sources need a leader connection")
        ctx = ReaderContext(
            subtask=self.tdd.subtask_index,
            parallelism=self.tdd.parallelism,
            job_id=self.job_id,
            operator_id=head.id,
            restored_checkpoint=self.tdd.restore_checkpoint_id,
        )
        return ConnectorSource(
            graph.operator_settings(head),
            ctx,
            self.engine,
            lambda op_id, received, last, idle: request_splits(self, op_id, received, last, idle),
            tag=self.tag,
        )

    def _writer(self, out: Any, specs: dict[str, Any]) -> RecordWriter:
        """A record writer on a new, registered result partition for output `out` (a
        ResultPartitionDescriptor); `specs`: operator specs by id, for the target's head. A
        blocking output (BATCH) writes local files, read once this task finished."""
        partition: Partition
        if out.blocking:
            partition = BlockingResultPartition.create(
                self.partitions, self.job_id, out.partition_id, out.num_subpartitions, tag=self.tag
            )
        else:
            partition = ResultPartition(
                out.partition_id,
                out.num_subpartitions,
                SUBPARTITION_CAPACITY,
                on_consumed=self.partitions.release,
                job_id=self.job_id,
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

    # -- live reconfiguration (docs/reconfiguration.md) ----------------------------------------------
    def prepare_reconfiguration(self, request: taskmanager_pb2.PrepareReconfigurationRequest) -> bool:
        """Called on the RPC thread: the plan is in place before the JobManager triggers the
        barrier, so the snapshot that meets it (on the task thread) sees it."""
        if self.state.terminal or self._stopped:
            return False
        self._reconfiguration = request
        return True

    def abort_reconfiguration(self, reconfiguration_id: str) -> None:
        r = self._reconfiguration
        if r is not None and r.reconfiguration_id == reconfiguration_id:
            self._reconfiguration = None

    def _reconfigure_at(self, checkpoint_id: int) -> None:
        """The barrier of a prepared reconfiguration: stop here (retire), or move the outputs to
        the redeployed tasks over to new partitions (the old ones end after this barrier)."""
        r = self._reconfiguration
        if r is None or checkpoint_id < r.from_checkpoint_id:
            return
        self._reconfiguration = None
        if r.retire:
            self._stop_at = checkpoint_id
            log.info("%s reconfiguration %s: stops at checkpoint %d", self.tag, r.reconfiguration_id, checkpoint_id)
            return
        specs = {op.id: op for op in self.tdd.job.operators} | {op.id: op for op in r.targets}
        for out in r.outputs:
            writers = self._side_writers if out.output_tag else self._writers
            i = next(i for i, w in enumerate(writers) if w.target_chain == out.target_chain)
            old, new = writers[i], self._writer(out, specs)
            # the task's counters go on across the switch
            new.records_produced, new.records_sent = old.records_produced, old.records_sent
            new.null_keys_dropped = new._null_keys_logged = old.null_keys_dropped
            old.end()
            self._retired_partitions.append((checkpoint_id, old.partition.partition_id))
            if old.last_watermark is not None:
                new.watermark(old.last_watermark)
            writers[i] = new
        log.info(
            "%s reconfiguration %s: outputs to %s switched at checkpoint %d",
            self.tag,
            r.reconfiguration_id,
            ", ".join(o.target_chain for o in r.outputs),
            checkpoint_id,
        )

    KEY_GROUP_RECORDS_REPORTED = 4096  # the heaviest key groups a heartbeat carries

    def _count_key_groups(self, column: Any) -> None:
        counts = pc.value_counts(column)
        self.key_group_records.update(
            dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
        )

    def key_group_load(self) -> dict[int, int]:
        """Input rows per key group, the heaviest KEY_GROUP_RECORDS_REPORTED (for heartbeats)."""
        return dict(self.key_group_records.most_common(self.KEY_GROUP_RECORDS_REPORTED))

    def _sides(self, head: Operator) -> list[int]:
        """Each input channel's side for a two-input head: 0 for the gate from the chain that ends
        in the head's left input operator, 1 for the other."""
        left_op = getattr(head, "left_input", "")
        chain_of = graph.chain_of(graph.build_chains(self.tdd.job))
        left_chain = chain_of[left_op].id if left_op in chain_of else None
        return [0 if gate.upstream_chain == left_chain else 1 for gate in self.tdd.inputs for _ch in gate.channels]

    def _assigner_column(self, specs: dict[str, Any]) -> str | None:
        """The timestamp column of the chain's assign_timestamps_and_watermarks, if it has one."""
        for op_id in self.tdd.operator_ids:
            if graph.kind_of(specs[op_id]) == graph.OperatorKind.TIMESTAMPS:
                return str(graph.operator_config(specs[op_id])["strategy"]["timestamp_column"])
        return None

    def _input_gate(self) -> InputGate:
        gate = InputGate(self.tag)
        for gate_desc in self.tdd.inputs:
            for ch in gate_desc.channels:
                # Our subpartition in each producer's partition is our subtask index.
                index, sub = len(gate.channels), self.tdd.subtask_index
                if ch.address == self.own_address:
                    gate.add(LocalInputChannel(gate, index, ch.partition_id, sub, CHANNEL_CREDIT, self.partitions))
                else:
                    gate.add(RemoteInputChannel(gate, index, ch.partition_id, sub, CHANNEL_CREDIT, ch.address))
        return gate

    def _restore(self, state: dict[str, Any]) -> None:
        """Restore every operator from the checkpoint's handles: nothing else is kept."""
        inline: dict[str, Any] = state.get("operators", {})
        keyed: dict[str, list[dict[str, Any]]] = state.get("keyed", {})
        started = time.monotonic()
        if self._source is not None and self._source_id in inline:  # a new source (savepoint) starts afresh
            self._source.restore(inline[self._source_id])
        for op_id, op in self._operators:
            handles = keyed.get(op_id, [])
            rows = [h for h in handles if not is_native(h)]  # Arrow files (the memory backend, savepoints)
            native = [h for h in handles if is_native(h)]  # RocksDB databases (taskmanager/state/rocksdb_backend.py)
            table = (
                self.storage.read_keyed_state(rows, self.key_groups, self.owned_key_groups)
                if rows and self.storage
                else None
            )
            restore = (
                NativeRestore(
                    native,
                    self.storage.fs,
                    self.key_groups,
                    self.owned_key_groups,
                    os.path.join(self.partitions.local_dir, "state", f"restore-{self.execution_id}-{op_id}"),
                )
                if native and self.storage
                else None
            )
            op.restore(OperatorSnapshot(inline=inline.get(op_id), keyed=table, native=restore))
        log.info(
            "%s restored from checkpoint %d%s in %.3f s",
            self.tag,
            self.tdd.restore_checkpoint_id,
            f" (source {self._source.describe_offset()})" if self._source is not None else "",
            time.monotonic() - started,
        )

    # -- run ------------------------------------------------------------------------------------
    def _main(self) -> None:
        """The thread: the task, then its exit hooks, which must run whatever happened."""
        try:
            self._run()
        except TaskCancelled:  # an interrupt() that reached the thread while the task was ending
            self._interruptible = False
            if not self.state.terminal:
                self._release_outputs()  # not finished: a blocking partition's files are incomplete
                self.state = ExecutionState.CANCELED
                self.reports.report(self, ExecutionState.CANCELED)
        finally:
            self._interruptible = False
            for hook in self._exit_hooks:
                try:
                    hook(self)
                except Exception:  # every hook runs; the log has the traceback
                    log.exception("%s exit hook failed", self.tag)

    def _run(self) -> None:
        self._interruptible = True
        try:
            if self.engine.spark is not None:
                self.engine.tag_current_thread(self.spark_tag)
            self._setup()
            self.state = ExecutionState.RUNNING
            self.io.running(time.monotonic())
            self.reports.report(self, ExecutionState.RUNNING)
            self._resend_watermark()
            if self._source is not None:
                self._run_source(self._source)
            elif self._gate is not None and self._aligner is not None:
                self._run_inputs(self._gate, self._aligner)
            if self._stopped:
                self._end_stopped()
            else:
                self._end_input()
            if self.checkpointing and not self._stopped:
                self.reports.report(self, ExecutionState.RUNNING, end_of_input=True)
                log.info("%s reached end of input; waiting for the final checkpoint", self.tag)
                while not self._final_committed:
                    self._check_cancelled()
                    self._drain_control(wait=0.2)
            self._uploader.shutdown(wait=True)
            if not self._stopped:
                for w in [*self._writers, *self._side_writers]:
                    w.partition.finish()  # a blocking partition is readable from now on
            self.state = ExecutionState.FINISHED
            log.info(
                "%s finished: %d records in, %d out, %d sent, %d malformed, %d dropped",
                self.tag,
                self.records_in,
                self.records_out,
                self.records_sent,
                self.records_malformed,
                self.records_dropped,
            )
            self.reports.report(self, ExecutionState.FINISHED)
        except TaskCancelled:
            self._interruptible = False
            self._abort()
            self.state = ExecutionState.CANCELED
            log.info("%s canceled", self.tag)
            self.reports.report(self, ExecutionState.CANCELED)
        except Exception as exc:  # noqa: BLE001 — the traceback goes to the JobManager
            self._interruptible = False
            if self.cancelled():
                self._abort()
                self.state = ExecutionState.CANCELED
                self.reports.report(self, ExecutionState.CANCELED)
                return
            error = traceback.format_exc()
            self.state = ExecutionState.FAILED
            log.error("%s failed:\n%s", self.tag, error)
            # Reported before the partitions are released: the consumers then fail ("released before
            # its end") and report after this task, so the job's root cause is this task's error.
            self.reports.report(self, ExecutionState.FAILED, Failure.of(exc, error))
            self._abort()
        finally:
            self._interruptible = False
            if self._gate is not None:
                self._gate.close()
            self._uploader.shutdown(wait=False, cancel_futures=True)
            for _op_id, op in self._operators:
                try:
                    op.dispose()
                except Exception:  # best effort: the working directory goes with the process
                    log.exception("%s releasing %s failed", self.tag, _op_id)

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise TaskCancelled()

    def _stopping(self) -> bool:
        """Past the snapshot of the checkpoint that stops the job: read nothing more."""
        return self._stop_at is not None and self._last_snapshot >= self._stop_at

    def _idle_while_stopping(self) -> bool:
        """Wait for the stop's outcome; True once it completed (the task then finishes)."""
        while self._stopping() and not self._stopped:
            self._check_cancelled()
            self._drain_control(wait=0.2)
        return self._stopped

    def _end_stopped(self) -> None:
        """Finish after a stop with a savepoint: the savepoint holds the state; nothing is
        flushed, and the partitions go (the consumers have stopped reading them)."""
        for w in [*self._writers, *self._side_writers]:
            self.partitions.release(w.partition.partition_id)
        log.info("%s stopped with the savepoint of checkpoint %s", self.tag, self._stop_at)

    def _run_source(self, source: Source) -> None:
        while True:
            self._drain_control()
            self._check_cancelled()
            if self._idle_while_stopping():
                return
            started, first, read_before = time.monotonic(), source.offset, source.records_read
            batch = source.next_batch()
            if batch is None:
                return
            if batch is IDLE:  # an unbounded source with nothing new: checkpoints go on meanwhile
                self._on_quiet()
                waited = time.monotonic()
                self._drain_control(wait=source.idle_wait)
                now = time.monotonic()
                self.io.idle(now - waited, now)
                continue
            self._process(batch)
            self._after_batch()
            took = time.monotonic() - started
            source.batch_done(took)
            self.io.read(source.records_read - read_before, 0, time.monotonic())
            log.info(SOURCE_BATCH_LOG, self.tag, first, source.offset, took)

    def _run_inputs(self, gate: InputGate, aligner: ba.BarrierAligner) -> None:
        gate.start()
        valve = self._valve
        assert valve is not None
        while True:
            self._drain_control()
            self._check_cancelled()
            if self._idle_while_stopping():
                return
            if gate.finished:
                return
            tables: list[pa.Table] = []
            sides: list[int] = []
            # Barriers, ends, watermarks and stream status in arrival order, after the batches
            # before them: a channel's items are taken up to its next barrier (poll_all).
            events: list[tuple[ItemKind, int, Any]] = []
            waited = time.monotonic()
            items = gate.poll_all(0.2, aligner.is_blocked)
            now = time.monotonic()
            self.io.idle(now - waited, now)
            for channel, (kind, value) in items:
                match kind:
                    case ItemKind.BATCH:
                        tables.append(value)
                        sides.append(self._channel_side[channel.global_index] if self._channel_side else 0)
                    case ItemKind.BARRIER | ItemKind.END | ItemKind.WATERMARK | ItemKind.STATUS:
                        events.append((kind, channel.global_index, value))
                    case _:
                        assert_never(kind)
            if tables and self._channel_side is not None:  # a two-input head: each side apart
                for side in self._operators[0][1].input_order:
                    mine = [t for t, s in zip(tables, sides, strict=True) if s == side]
                    if mine:
                        table = pa.concat_tables(mine, promote_options="default") if len(mine) > 1 else mine[0]
                        self._records_in += table.num_rows
                        self.io.read(table.num_rows, table.nbytes, now)
                        out = self._operators[0][1].process_input(Batch(self.engine, table=table), side)
                        if out is not None:
                            self._process(out, start=1)
                self._after_batch()
            elif tables:
                table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
                self._records_in += table.num_rows
                self.io.read(table.num_rows, table.nbytes, now)
                if KEY_GROUP in table.column_names:  # a keyed input: its load per key group
                    self._count_key_groups(table.column(KEY_GROUP))
                self._process(Batch(self.engine, table=table))
                self._after_batch()
            elif not events:
                self._on_quiet()
            for kind, channel_index, value in events:
                if kind == ItemKind.BARRIER:
                    self.io.first_barrier(value, time.monotonic())
                    self._on_alignment(aligner.handle(ba.BarrierReceived(channel_index, value)))
                elif kind == ItemKind.END:
                    self._on_alignment(aligner.handle(ba.EndOfPartition(channel_index)))
                    self._on_valve(valve.on_end(channel_index))
                elif kind == ItemKind.WATERMARK:
                    self._event_time = True
                    self._on_valve(valve.on_watermark(channel_index, value))
                else:
                    self._on_valve(valve.on_idle(channel_index) if value else valve.on_active(channel_index))

    # -- event time -------------------------------------------------------------------------------
    def _on_valve(self, actions: Sequence[wm.WatermarkAction]) -> None:
        """The input watermark or idleness changed: pass it down the chain (up to an assigner,
        which makes its own)."""
        end = self._assigner_index if self._assigner is not None else len(self._operators)
        self._on_watermark_actions(actions, 0, end)

    def _on_watermark_actions(self, actions: Sequence[wm.WatermarkAction], start: int, end: int) -> None:
        for action in actions:
            match action:
                case wm.EmitWatermark(timestamp=timestamp):
                    self._advance_watermark(timestamp, start, end)
                case wm.EmitIdle() | wm.EmitActive():
                    if end == len(self._operators):
                        for w in self._writers:
                            w.stream_status(isinstance(action, wm.EmitIdle))
                case _:
                    assert_never(action)

    def _advance_watermark(self, timestamp: int, start: int, end: int) -> None:
        """Operators `start`..`end - 1` see the watermark (rows they fire go down the chain
        first); when it passes the whole chain, the outputs send it on."""
        for i in range(start, end):
            out = self._operators[i][1].on_watermark(timestamp)
            if out is not None:
                self._process(out, start=i + 1)
        if end == len(self._operators):
            for w in self._writers:
                w.watermark(timestamp)

    def _after_batch(self) -> None:
        """A batch went through the chain: the assigner's generator may advance the watermark."""
        now = int(time.time() * 1000)
        self._on_clock(now)
        if self._assigner is None:
            return
        observed = [t for w in self._writers if (t := w.take_max_timestamp()) is not None]
        actions = self._assigner.after_batch(max(observed, default=None), now)
        self._on_watermark_actions(actions, self._assigner_index + 1, len(self._operators))

    def _on_clock(self, now: int) -> None:
        """Processing-time windows due by the task's clock fire."""
        for i, (_op_id, op) in enumerate(self._operators):
            out = op.on_processing_time(now)
            if out is not None:
                self._process(out, start=i + 1)

    def _on_quiet(self) -> None:
        """No input now: processing-time windows may fire, a source without input says it is idle."""
        now = int(time.time() * 1000)
        self._on_clock(now)
        if self._assigner is not None:
            # a source with input still to read is never idle (docs/event-time.md, "Idleness");
            # a chain with inputs has none pending when its gate gave nothing
            source = self._source
            actions = self._assigner.idle_check(now, source.has_pending_input if source is not None else _no_input)
            self._on_watermark_actions(actions, self._assigner_index + 1, len(self._operators))

    def _emit_late(self, table: pa.Table) -> None:
        """A window's late rows, to its late-data side output (if the job sinks it)."""
        for w in self._side_writers:
            w.emit(Batch(self.engine, table=table))

    def _resend_watermark(self) -> None:
        """A restored assigner sends the watermark it had reached, so downstream tasks, whose
        valves start from nothing, continue from it."""
        if self._assigner is not None and (restored := self._assigner.current_watermark) is not None:
            for w in self._writers:
                w.watermark(restored)

    def _on_alignment(self, actions: Sequence[ba.AlignerAction]) -> None:
        """Carry out the barrier aligner's actions."""
        for action in actions:
            match action:
                case ba.Snapshot():
                    self._snapshot(action.checkpoint_id)
                case ba.AlignmentAborted():
                    log.info("%s alignment of checkpoint %d aborted: %s", self.tag, action.checkpoint_id, action.reason)
                case ba.Unblock() | ba.Ignored():
                    pass  # the aligner unblocks its channels itself; outcomes need nothing
                case _:
                    assert_never(action)

    def _process(self, batch: Batch, start: int = 0) -> None:
        """Pass `batch` down the chain from operator `start`, then to every output."""
        for _op_id, op in self._operators[start:]:
            if op.is_sink:
                op.process(batch)
                self._sink_rows += batch.table().num_rows
                return
            out = op.process(batch)
            if out is None:
                return
            batch = out
        if len(self._writers) > 1:
            batch = Batch(self.engine, table=batch.table())  # materialize once for several outputs
        for w in self._writers:
            w.emit(batch)

    def _end_input(self) -> None:
        """The end of the input is the final watermark: every window fires (end_input), and
        downstream tasks get it before the end of each output."""
        for i, (_op_id, op) in enumerate(self._operators):
            out = op.end_input()
            if out is not None:
                self._process(out, start=i + 1)
        if self._assigner is not None:
            self._assigner.generator.end_of_input()
        if self._event_time:
            for w in self._writers:
                w.watermark(MAX_WATERMARK)
        for w in [*self._writers, *self._side_writers]:
            w.end()
        self._ended = True

    # -- checkpoints (task thread) -----------------------------------------------------------------
    def _drain_control(self, wait: float = 0.0) -> None:
        while True:
            try:
                message = self._control.get(timeout=wait) if wait else self._control.get_nowait()
            except queue.Empty:
                return
            wait = 0.0
            match message:
                case TriggerCheckpoint(checkpoint_id=checkpoint_id, stop=stop):
                    if stop:
                        self._stop_at = checkpoint_id
                    # Sources are triggered directly; so are tasks whose inputs all ended.
                    if checkpoint_id > self._last_snapshot and (self._source is not None or self._ended):
                        self._snapshot(checkpoint_id)
                case CheckpointComplete(checkpoint_id=checkpoint_id, final=final):
                    if isinstance(self._source, ConnectorSource):
                        self._source.notify_checkpoint_complete(checkpoint_id)
                    for _op_id, op in self._operators:
                        op.notify_checkpoint_complete(checkpoint_id)
                    if final and self._ended:
                        self._final_committed = True
                    elif checkpoint_id == self._stop_at or (final and checkpoint_id == self._last_snapshot):
                        # final before the end of the input: the checkpoint that stops the job
                        self._stop_at, self._stopped = checkpoint_id, True
                    for cid, pid in [p for p in self._retired_partitions if p[0] <= checkpoint_id]:
                        self.partitions.release(pid)  # its consumers stopped at that barrier
                        self._retired_partitions.remove((cid, pid))
                case CheckpointAborted(checkpoint_id=checkpoint_id):
                    if checkpoint_id == self._stop_at:
                        self._stop_at = None  # the stop failed: the job goes on
                    if self._aligner is not None:
                        self._on_alignment(self._aligner.handle(ba.CheckpointAbortedNotice(checkpoint_id)))
                case _:
                    assert_never(message)

    def _snapshot(self, checkpoint_id: int) -> None:
        """Copy state now, forward the barrier, write and acknowledge off this thread."""
        if self.storage is None:
            return
        self._last_snapshot = checkpoint_id
        started = time.monotonic()
        inline: dict[str, dict[str, Any]] = {}
        keyed: dict[str, pa.Table] = {}
        native: dict[str, Any] = {}  # RocksDB checkpoints on local disk, uploaded off this thread
        try:
            if self._source is not None:
                inline[self._source_id] = (
                    self._source.snapshot_at(checkpoint_id)
                    if isinstance(self._source, ConnectorSource)
                    else self._source.snapshot()
                )
                log.info(SOURCE_SNAPSHOT_LOG, self.tag, checkpoint_id, self._source.describe_offset())
            for op_id, op in self._operators:
                snapshot = op.snapshot(checkpoint_id)
                if snapshot.inline is not None:
                    inline[op_id] = snapshot.inline
                if snapshot.keyed is not None:
                    keyed[op_id] = snapshot.keyed
                if snapshot.native is not None:
                    native[op_id] = snapshot.native
        except Exception as exc:  # noqa: BLE001 — declined, the checkpoint fails, the task goes on
            for snap in native.values():
                snap.discard()
            self.reports.decline(self, checkpoint_id, f"snapshot failed: {type(exc).__name__}: {exc}")
            return
        if not self._ended:
            for w in [*self._writers, *self._side_writers]:
                w.barrier(checkpoint_id)
            self._reconfigure_at(checkpoint_id)
        now = time.monotonic()
        self.io.snapshot_taken(checkpoint_id, now - started, now)
        self._uploader.submit(self._upload, self.storage, checkpoint_id, inline, keyed, native)

    def _upload(
        self,
        storage: CheckpointStorage,
        checkpoint_id: int,
        inline: dict[str, dict[str, Any]],
        keyed: dict[str, pa.Table],
        native: dict[str, Any],
    ) -> None:
        started = time.monotonic()
        try:
            handles: dict[str, Any] = {}
            size = len(json.dumps(inline))
            for op_id, table in keyed.items():
                h = storage.write_keyed_state(checkpoint_id, op_id, self.tdd.subtask_index, table, self.key_groups)
                handles[op_id] = h
                size += h["size"]
            for op_id, snap in native.items():  # size: what this checkpoint uploaded (incremental)
                h = snap.upload(
                    storage.fs,
                    storage.checkpoint_dir(checkpoint_id),
                    storage.shared_dir(),
                    op_id,
                    self.tdd.subtask_index,
                    self.key_groups,
                )
                handles[op_id] = h
                size += h["size"]
            handle = {"operators": inline, "keyed": handles}
            self.io.snapshot_written(checkpoint_id, time.monotonic() - started)
            self.reports.acknowledge(self, checkpoint_id, json.dumps(handle).encode(), size)
        except Exception as exc:  # noqa: BLE001 — declined, the checkpoint fails, the task goes on
            for snap in native.values():
                snap.discard()
            log.warning("%s checkpoint %d upload failed: %s", self.tag, checkpoint_id, exc)
            self.reports.decline(self, checkpoint_id, f"upload failed: {type(exc).__name__}: {exc}")

    def _abort(self) -> None:
        if isinstance(self._source, ConnectorSource):
            self._source.close()
        for _op_id, op in self._operators:
            op.abort()
        self._release_outputs()

    def _release_outputs(self) -> None:
        """The task failed or was cancelled: its partitions go (a blocking one's files are deleted)."""
        for w in [*self._writers, *self._side_writers]:
            self.partitions.release(w.partition.partition_id, w.partition)
