"""Task: one subtask of a chain, run on its own thread.

The head of the chain is either a source (it produces batches until its
input is exhausted) or an input gate over every upstream subtask (it takes
everything buffered at once: big batches under load, small ones when idle).
Each batch passes through the chained operators and is written to every
result partition of the chain's tail. The task keeps the thread and its
loop; what it runs is split as Flink splits a StreamTask:
`OperatorChain` (taskmanager/operator_chain.py: the source, operators and
outputs, known only through `Operator` and `Source`,
taskmanager/operators/base.py), `Checkpointer`
(taskmanager/checkpointer.py: control messages, barriers, snapshots, their
upload and acknowledgement) and `EventTime` (taskmanager/event_time.py:
watermarks, idleness, the timestamp assigner's and the windows' hooks).

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
import ctypes
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, assert_never

import pyarrow as pa
import pyarrow.compute as pc

from sluice import graph
from sluice.key_groups import KEY_GROUP, key_group_range, owned_key_groups
from sluice.metrics.task_metrics import TaskIO, TaskIOSnapshot
from sluice.states import ExecutionState
from sluice.v1 import common_pb2, taskmanager_pb2
from taskmanager import barrier_aligner as ba
from taskmanager.checkpointer import Checkpointer
from taskmanager.event_time import EventTime
from taskmanager.network.input_gate import InputGate, LocalInputChannel, RemoteInputChannel
from taskmanager.network.partition import ItemKind, PartitionManager, TaskCancelled
from taskmanager.operator_chain import SOURCE_SNAPSHOT_LOG, SUBPARTITION_CAPACITY, OperatorChain
from taskmanager.operators.base import IDLE, Source
from taskmanager.spark_engine import Batch, SparkEngine, spark_seconds
from taskmanager.task_messages import (
    CheckpointAborted,
    CheckpointComplete,
    Failure,
    TaskReports,
    TriggerCheckpoint,
)

log = logging.getLogger("sluice.taskmanager.task")

__all__ = ["CHANNEL_CREDIT", "SOURCE_BATCH_LOG", "SOURCE_SNAPSHOT_LOG", "SUBPARTITION_CAPACITY", "Task", "task_tag"]

CHANNEL_CREDIT = 2  # batches a consumer buffers per channel
# Log lines tools read (bench/compare.py derives latency and throughput timelines from them;
# SOURCE_SNAPSHOT_LOG is written by the chain, taskmanager/operator_chain.py)
# tag, offset before, after, seconds in all; of them: building the batch's plan, and Spark's action
# (scan, projection, Arrow transfer: spark_engine.to_arrow); the rest is the chain's Python and waits
SOURCE_BATCH_LOG = "%s source batch: offset %d -> %d in %.3fs (plan %.3fs, spark %.3fs)"


def task_tag(job_id: str, attempt: int, chain_id: str, subtask: int) -> str:
    """The correlation ids that start each of a task's log lines."""
    return f"[job {job_id} attempt {attempt} task {chain_id}#{subtask}]"


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
        self._cancel = threading.Event()
        self._gate: InputGate | None = None
        self.tag = task_tag(tdd.job_id, tdd.attempt, tdd.chain_id, tdd.subtask_index)
        self.chain = OperatorChain(tdd, engine, partitions, self.tag, self.cancelled)
        self.event_time: EventTime | None = None  # once the chain is built
        self.io = TaskIO()  # rates, time shares, queues, checkpoint timings (docs/monitoring.md)
        # The key groups this subtask owns: a contiguous range, or those a live rebalance gave it
        # (docs/reconfiguration.md); snapshots are tagged with their bounding range.
        maxp = self.chain.maxp
        table = graph.key_group_owners(tdd.job, tdd.chain_id)
        owned = owned_key_groups(tdd.subtask_index, tdd.parallelism, maxp, table) if table else None
        self.checkpointer = Checkpointer(
            self,
            self.chain,
            reports,
            partitions,
            self.io,
            (min(owned), max(owned)) if owned else key_group_range(tdd.subtask_index, tdd.parallelism, maxp),
            owned,
        )
        self.checkpointer.wake = self._wake  # a control message wakes a task waiting on its input gate
        self.key_group_records: collections.Counter[int] = collections.Counter()  # input rows per key group
        self._thread = threading.Thread(target=self._main, name=f"task-{tdd.chain_id}-{tdd.subtask_index}", daemon=True)
        self._exit_hooks: list[Callable[[Task], None]] = []
        self._interruptible = False  # the thread runs the task's work (not its ending): interrupt() may raise in it
        ops = {o.id: o for o in tdd.job.operators}
        # the chain's name as the JobManager shows it (sluice/graph.py build_chains)
        self.name = " -> ".join(ops[i].name or graph.kind_of(ops[i]) if i in ops else i for i in tdd.operator_ids)
        self._backpressured_seen = 0.0  # the writers' blocked seconds already added to self.io

    def io_snapshot(self, now: float) -> TaskIOSnapshot:
        """The task's I/O metrics now (any thread): the writers' backpressure and queues are
        folded in first."""
        writers = self.chain.all_writers
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

    # -- counters (any thread; proto/sluice/v1/common.proto TaskCounters) ----------------------------
    def counters(self) -> common_pb2.TaskCounters:
        """The task's counters now: rows in from its input gate (a source chain: the rows its
        source read, counted by Spark as it reads, so a batch's rows arrive with its end), and
        what the chain's source, operators and outputs counted."""
        counters = common_pb2.TaskCounters()
        if self.chain.source is None:
            counters.records_in = self._records_in
        self.chain.add_counters(counters)
        return counters

    @property
    def records_in(self) -> int:
        return self.counters().records_in

    @property
    def records_out(self) -> int:
        return self.counters().records_out

    @property
    def records_sent(self) -> int:
        return self.counters().records_sent

    @property
    def records_malformed(self) -> int:
        return self.counters().records_malformed

    @property
    def records_dropped(self) -> int:
        return self.counters().records_dropped

    @property
    def records_late_dropped(self) -> int:
        return self.counters().records_late_dropped

    @property
    def watermark(self) -> int | None:
        """The task's current input watermark in ms (a source chain: the watermark it sends);
        None before the first one, or without event time."""
        return self.event_time.watermark if self.event_time is not None else None

    @property
    def bad_record_samples(self) -> list[str]:
        """A few malformed lines of the source, truncated, with their file's name."""
        source = self.chain.source
        return list(source.bad_record_samples) if source is not None else []

    @property
    def checkpointing(self) -> bool:
        return self.checkpointer.checkpointing

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
    def thread(self) -> threading.Thread:
        return self._thread

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
        self.checkpointer.post(TriggerCheckpoint(checkpoint_id, stop))

    def notify_complete(self, checkpoint_id: int, final: bool) -> None:
        self.checkpointer.post(CheckpointComplete(checkpoint_id, final))

    def notify_aborted(self, checkpoint_id: int) -> None:
        self.checkpointer.post(CheckpointAborted(checkpoint_id))

    def _wake(self) -> None:
        if self._gate is not None:
            self._gate.wake()

    # -- live reconfiguration (docs/reconfiguration.md) ----------------------------------------------
    def prepare_reconfiguration(self, request: taskmanager_pb2.PrepareReconfigurationRequest) -> bool:
        """Called on the RPC thread: the plan is in place before the JobManager triggers the
        barrier, so the snapshot that meets it (on the task thread) sees it."""
        if self.state.terminal:
            return False
        return self.checkpointer.prepare_reconfiguration(request)

    def abort_reconfiguration(self, reconfiguration_id: str) -> None:
        self.checkpointer.abort_reconfiguration(reconfiguration_id)

    # -- setup ----------------------------------------------------------------------------------
    def _setup(self) -> None:
        tdd = self.tdd
        request_splits = getattr(self.reports, "request_splits", None)
        splits = (
            (lambda op_id, received, last, idle: request_splits(self, op_id, received, last, idle))
            if request_splits is not None
            else None
        )
        if not self.chain.build(splits):
            self._gate = self._input_gate()
            self.checkpointer.aligner = ba.BarrierAligner(len(self._gate.channels))
        self.event_time = EventTime(self.chain, len(self._gate.channels) if self._gate is not None else None)
        if tdd.restore_checkpoint_id:
            cp = self.checkpointer
            self.chain.restore(json.loads(tdd.restore_state or b"{}"), cp.storage, cp.key_groups, cp.owned_key_groups)

    KEY_GROUP_RECORDS_REPORTED = 4096  # the heaviest key groups a heartbeat carries

    def _count_key_groups(self, column: Any) -> None:
        counts = pc.value_counts(column)
        self.key_group_records.update(
            dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
        )

    def key_group_load(self) -> dict[int, int]:
        """Input rows per key group, the heaviest KEY_GROUP_RECORDS_REPORTED (for heartbeats)."""
        return dict(self.key_group_records.most_common(self.KEY_GROUP_RECORDS_REPORTED))

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

    # -- run ------------------------------------------------------------------------------------
    def _main(self) -> None:
        """The thread: the task, then its exit hooks, which must run whatever happened."""
        try:
            self._run()
        except TaskCancelled:  # an interrupt() that reached the thread while the task was ending
            self._interruptible = False
            if not self.state.terminal:
                self.chain.release_outputs()  # not finished: a blocking partition's files are incomplete
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
        cp = self.checkpointer
        try:
            if self.engine.spark is not None:
                self.engine.tag_current_thread(self.spark_tag)
            self._setup()
            assert self.event_time is not None
            self.state = ExecutionState.RUNNING
            self.io.running(time.monotonic())
            self.reports.report(self, ExecutionState.RUNNING)
            self.event_time.resend_watermark()
            if self.chain.source is not None:
                self._run_source(self.chain.source, self.event_time)
            elif self._gate is not None and cp.aligner is not None:
                self._run_inputs(self._gate, cp.aligner, self.event_time)
            if cp.stopped:
                self._end_stopped()
            else:
                self._end_input(self.event_time)
            if self.checkpointing and not cp.stopped:
                self.reports.report(self, ExecutionState.RUNNING, end_of_input=True)
                log.info("%s reached end of input; waiting for the final checkpoint", self.tag)
                while not cp.final_committed:
                    self._check_cancelled()
                    cp.drain(wait=0.2)
            cp.uploader.shutdown(wait=True)
            if not cp.stopped:
                for w in self.chain.all_writers:
                    w.partition.finish()  # a blocking partition is readable from now on
            self.state = ExecutionState.FINISHED
            counters = self.counters()
            log.info(
                "%s finished: %d records in, %d out, %d sent, %d malformed, %d dropped",
                self.tag,
                counters.records_in,
                counters.records_out,
                counters.records_sent,
                counters.records_malformed,
                counters.records_dropped,
            )
            self.reports.report(self, ExecutionState.FINISHED)
        except TaskCancelled:
            self._interruptible = False
            self.chain.abort()
            self.state = ExecutionState.CANCELED
            log.info("%s canceled", self.tag)
            self.reports.report(self, ExecutionState.CANCELED)
        except Exception as exc:  # noqa: BLE001 — the traceback goes to the JobManager
            self._interruptible = False
            if self.cancelled():
                self.chain.abort()
                self.state = ExecutionState.CANCELED
                self.reports.report(self, ExecutionState.CANCELED)
                return
            error = traceback.format_exc()
            self.state = ExecutionState.FAILED
            log.error("%s failed:\n%s", self.tag, error)
            # Reported before the partitions are released: the consumers then fail ("released before
            # its end") and report after this task, so the job's root cause is this task's error.
            self.reports.report(self, ExecutionState.FAILED, Failure.of(exc, error))
            self.chain.abort()
        finally:
            self._interruptible = False
            if self._gate is not None:
                self._gate.close()
            cp.uploader.shutdown(wait=False, cancel_futures=True)
            self.chain.dispose()

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise TaskCancelled()

    def _idle_while_stopping(self) -> bool:
        """Wait for the stop's outcome; True once it completed (the task then finishes)."""
        cp = self.checkpointer
        while cp.stopping() and not cp.stopped:
            self._check_cancelled()
            cp.drain(wait=0.2)
        return cp.stopped

    def _end_input(self, event_time: EventTime) -> None:
        """The end of the input is the final watermark: every window fires (end_input), and
        downstream tasks get it before the end of each output."""
        self.chain.end_operators()
        event_time.end_input()
        self.chain.end_outputs()

    def _end_stopped(self) -> None:
        """Finish after a stop with a savepoint: the savepoint holds the state; nothing is
        flushed, and the partitions go (the consumers have stopped reading them)."""
        for w in self.chain.all_writers:
            self.partitions.release(w.partition.partition_id)
        log.info("%s stopped with the savepoint of checkpoint %s", self.tag, self.checkpointer.stop_at)

    def _run_source(self, source: Source, event_time: EventTime) -> None:
        cp = self.checkpointer
        while True:
            cp.drain()
            self._check_cancelled()
            if self._idle_while_stopping():
                return
            started, first, read_before = time.monotonic(), source.offset, source.records_read
            blocked_before, spark_before = self._blocked_seconds(), spark_seconds()
            batch = source.next_batch()
            planned = time.monotonic()
            if batch is None:
                return
            if batch is IDLE:  # an unbounded source with nothing new: checkpoints go on meanwhile
                event_time.on_quiet()
                waited = time.monotonic()
                cp.drain(wait=source.idle_wait)
                now = time.monotonic()
                self.io.idle(now - waited, now)
                continue
            self.chain.process(batch)
            event_time.after_batch()
            took = time.monotonic() - started
            source.batch_done(took - (self._blocked_seconds() - blocked_before))  # its own time: sizes the next
            self.io.read(source.records_read - read_before, 0, time.monotonic())
            log.info(
                SOURCE_BATCH_LOG,
                self.tag,
                first,
                source.offset,
                took,
                planned - started,
                spark_seconds() - spark_before,
            )

    def _blocked_seconds(self) -> float:
        """Seconds the chain's writers have waited for room downstream, in all (ended waits)."""
        return sum(w.backpressured_seconds for w in self.chain.all_writers)

    def _run_inputs(self, gate: InputGate, aligner: ba.BarrierAligner, event_time: EventTime) -> None:
        gate.start()
        cp, chain = self.checkpointer, self.chain
        while True:
            cp.drain()
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
                        sides.append(chain.channel_side[channel.global_index] if chain.channel_side else 0)
                    case ItemKind.BARRIER | ItemKind.END | ItemKind.WATERMARK | ItemKind.STATUS:
                        events.append((kind, channel.global_index, value))
                    case _:
                        assert_never(kind)
            if tables and chain.channel_side is not None:  # a two-input head: each side apart
                self._take_sides(tables, sides, now)
                event_time.after_batch()
            elif tables:
                table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
                self._records_in += table.num_rows
                self.io.read(table.num_rows, table.nbytes, now)
                if KEY_GROUP in table.column_names:  # a keyed input: its load per key group
                    self._count_key_groups(table.column(KEY_GROUP))
                chain.process(Batch(self.engine, table=table))
                event_time.after_batch()
            elif not events:
                event_time.on_quiet()
            for kind, channel_index, value in events:
                if kind == ItemKind.BARRIER:
                    self.io.first_barrier(value, time.monotonic())
                    cp.on_alignment(aligner.handle(ba.BarrierReceived(channel_index, value)))
                elif kind == ItemKind.END:
                    cp.on_alignment(aligner.handle(ba.EndOfPartition(channel_index)))
                    event_time.on_end(channel_index)
                elif kind == ItemKind.WATERMARK:
                    event_time.on_watermark(channel_index, value)
                else:
                    event_time.on_status(channel_index, bool(value))

    def _take_sides(self, tables: list[pa.Table], sides: list[int], now: float) -> None:
        """A two-input head's rows of one poll, each side counted and handed over apart."""
        head = self.chain.operators[0][1]
        for side in head.input_order:
            mine = [t for t, s in zip(tables, sides, strict=True) if s == side]
            if mine:
                table = pa.concat_tables(mine, promote_options="default") if len(mine) > 1 else mine[0]
                self._records_in += table.num_rows
                self.io.read(table.num_rows, table.nbytes, now)
                out = head.process_input(Batch(self.engine, table=table), side)
                if out is not None:
                    self.chain.process(out, start=1)
