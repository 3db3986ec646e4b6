"""Task: one subtask of a chain, run on its own thread.

The head of the chain is either a source (it produces batches until its
input is exhausted) or an input gate over every upstream subtask (it takes
everything buffered at once: big batches under load, small ones when idle).
Each batch passes through the chained operators and is written to every
result partition of the chain's tail.

Checkpoints: a source snapshots its offset when the JobManager triggers it
and emits barrier n downstream; a task with inputs aligns barrier n on all
its channels (BarrierAligner), then snapshots. The snapshot is copied on the
task thread, forwarded as a barrier, and written to checkpoint storage off
the task thread; the write's state handle is acknowledged to the
JobManager. At the end of the input, with checkpointing on, the task waits
for the final checkpoint to complete (its sinks commit then) and finishes.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import queue
import threading
import time
import traceback
from typing import Callable

import pyarrow as pa

from sluice import graph
from sluice.checkpoints.storage import CheckpointStorage
from sluice.v1 import taskmanager_pb2
from taskmanager import barrier_aligner as ba
from taskmanager.network.input_gate import InputGate, LocalInputChannel, RemoteInputChannel
from taskmanager.network.partition import BARRIER, BATCH, END, PartitionManager, ResultPartition, TaskCancelled
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.keyed_aggregate import KeyedAggregate
from taskmanager.operators.sinks import FileSinkWriter, PrintSink
from taskmanager.operators.sources import IDLE, make_source
from taskmanager.operators.transforms import SparkBody
from taskmanager.spark_engine import Batch, SparkEngine

log = logging.getLogger("sluice.taskmanager.task")

SUBPARTITION_CAPACITY = 2   # batches a producer may queue per consumer
CHANNEL_CREDIT = 2          # batches a consumer buffers per channel
# Log lines tools read (bench/compare.py derives latency and throughput timelines from them)
SOURCE_BATCH_LOG = "%s source batch: offset %d -> %d in %.3fs"        # tag, offset before, after, seconds
SOURCE_SNAPSHOT_LOG = "%s checkpoint %d: source snapshot at %s"         # tag, checkpoint, "offset N"


def task_tag(job_id: str, attempt: int, chain_id: str, subtask: int) -> str:
    """The correlation ids that start each of a task's log lines."""
    return f"[job {job_id} attempt {attempt} task {chain_id}#{subtask}]"


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> tuple[int, int]:
    """The contiguous key groups [lo, hi] owned by `subtask` (kg * p // maxp == subtask)."""
    lo = (subtask * max_parallelism + parallelism - 1) // parallelism
    hi = ((subtask + 1) * max_parallelism + parallelism - 1) // parallelism - 1
    return lo, hi


class Task:
    def __init__(self, tdd: taskmanager_pb2.TaskDeploymentDescriptor, engine: SparkEngine,
                 partitions: PartitionManager, own_address: str,
                 report: Callable[..., None], acknowledge: Callable[..., None], decline: Callable[..., None]):
        self.tdd = tdd
        self.execution_id = tdd.execution_id
        self.job_id = tdd.job_id
        self.engine = engine
        self.partitions = partitions
        self.own_address = own_address
        self.report, self._acknowledge, self._decline = report, acknowledge, decline
        self.state = "DEPLOYING"
        self.records_in = 0
        self._sink_rows = 0
        self._cancel = threading.Event()
        self._control: queue.Queue = queue.Queue()
        self._gate: InputGate | None = None
        self._aligner: ba.BarrierAligner | None = None
        self._writers: list[RecordWriter] = []
        self._operators: list[tuple[str, object]] = []  # (operator id, operator)
        self._source = None
        self._source_id = ""
        self._ended = False
        self._final_committed = False
        self._last_snapshot = 0
        self.maxp = tdd.job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
        self.key_groups = key_group_range(tdd.subtask_index, tdd.parallelism, self.maxp)
        self.storage = CheckpointStorage(tdd.checkpoint_dir, tdd.job_id) if tdd.checkpoint_dir else None
        self._uploader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-upload")
        self._thread = threading.Thread(target=self._run, name=f"task-{tdd.chain_id}-{tdd.subtask_index}", daemon=True)
        self.tag = task_tag(tdd.job_id, tdd.attempt, tdd.chain_id, tdd.subtask_index)

    @property
    def records_out(self) -> int:
        """Rows written to result partitions, or to the sink for a sink chain."""
        return sum(w.records_out for w in self._writers) + self._sink_rows

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

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def trigger_checkpoint(self, checkpoint_id: int, final: bool) -> None:
        self._post(("trigger", checkpoint_id, final))

    def notify_complete(self, checkpoint_id: int, final: bool) -> None:
        self._post(("complete", checkpoint_id, final))

    def notify_aborted(self, checkpoint_id: int) -> None:
        self._post(("aborted", checkpoint_id, False))

    def _post(self, message) -> None:
        self._control.put(message)
        if self._gate is not None:
            self._gate.wake()

    # -- setup ----------------------------------------------------------------------------------
    def _setup(self) -> None:
        tdd = self.tdd
        ops = {op.id: op for op in tdd.job.operators}
        for out in tdd.outputs:
            partition = ResultPartition(out.partition_id, out.num_subpartitions, SUBPARTITION_CAPACITY,
                                        on_consumed=self.partitions.release)
            target = ops[out.target_chain]
            combiner = None
            if target.kind == "aggregate" and out.partitioning == "hash":
                combiner = graph.loads_payload(target.payload)["aggs"]
            self._writers.append(RecordWriter(partition, out.partitioning, out.key, tdd.subtask_index, self.maxp,
                                              combiner, self.cancelled))
            self.partitions.register(partition)
        head = ops[tdd.operator_ids[0]]
        rest = list(tdd.operator_ids)
        if head.kind in graph.SOURCE_KINDS:
            self._source = make_source(head.kind, graph.loads_payload(head.payload), tdd.subtask_index,
                                       tdd.parallelism, self.engine)
            self._source_id = head.id
            rest = rest[1:]
        else:
            gate = InputGate()
            for gate_desc in tdd.inputs:
                for ch in gate_desc.channels:
                    # Our subpartition in each producer's partition is our subtask index.
                    index = len(gate.channels)
                    if ch.address == self.own_address:
                        gate.add(LocalInputChannel(gate, index, ch.partition_id, tdd.subtask_index, CHANNEL_CREDIT,
                                                   self.partitions))
                    else:
                        gate.add(RemoteInputChannel(gate, index, ch.partition_id, tdd.subtask_index, CHANNEL_CREDIT,
                                                    ch.address))
            self._gate = gate
            self._aligner = ba.BarrierAligner(len(gate.channels))
        for op_id in rest:
            op = ops[op_id]
            payload = graph.loads_payload(op.payload)
            name = op.name or op.id
            if op.kind in graph.BODY_KINDS or op.kind == "select":
                impl = SparkBody(op.kind, payload, name)
            elif op.kind == "aggregate":
                impl = KeyedAggregate(payload, name)
            elif op.kind == "sink_file":
                impl = FileSinkWriter(payload, tdd.subtask_index, tdd.job_id, tdd.restore_checkpoint_id,
                                      self.checkpointing, tag=self.tag)
            elif op.kind == "sink_print":
                impl = PrintSink(tdd.subtask_index, tdd.parallelism)
            else:
                raise ValueError(f"operator {op.id} of kind {op.kind} cannot be chained here")
            self._operators.append((op_id, impl))
        if tdd.restore_checkpoint_id:
            self._restore(json.loads(tdd.restore_state or b"{}"))

    def _restore(self, state: dict) -> None:
        """Restore every operator from the checkpoint's handles: nothing else is kept."""
        ops_state = state.get("operators", {})
        if self._source is not None:
            self._source.restore(ops_state[self._source_id])
        for op_id, op in self._operators:
            if isinstance(op, KeyedAggregate):
                op.restore_table(self.storage.read_keyed_state(state.get("keyed", {}).get(op_id, []), self.key_groups))
            elif isinstance(op, FileSinkWriter):
                op.restore(ops_state.get(op_id, {}))
        log.info("%s restored from checkpoint %d%s", self.tag, self.tdd.restore_checkpoint_id,
                 f" (source {self._source.describe_offset()})" if self._source is not None else "")

    # -- run ------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.engine.spark is not None:
                self.engine.tag_current_thread(self.spark_tag)
            self._setup()
            self.state = "RUNNING"
            self.report(self, "RUNNING", "")
            if self._source is not None:
                self._run_source()
            else:
                self._run_inputs()
            self._end_input()
            if self.checkpointing:
                self.report(self, "RUNNING", "", end_of_input=True)
                log.info("%s reached end of input; waiting for the final checkpoint", self.tag)
                while not self._final_committed:
                    self._check_cancelled()
                    self._drain_control(wait=0.2)
            self._uploader.shutdown(wait=True)
            self.state = "FINISHED"
            log.info("%s finished: %d records in, %d out", self.tag, self.records_in, self.records_out)
            self.report(self, "FINISHED", "")
        except TaskCancelled:
            self._abort()
            self.state = "CANCELED"
            log.info("%s canceled", self.tag)
            self.report(self, "CANCELED", "")
        except Exception:  # noqa: BLE001 — the traceback goes to the JobManager
            self._abort()
            if self.cancelled():
                self.state = "CANCELED"
                self.report(self, "CANCELED", "")
                return
            error = traceback.format_exc()
            self.state = "FAILED"
            log.error("%s failed:\n%s", self.tag, error)
            self.report(self, "FAILED", error)
        finally:
            if self._gate is not None:
                self._gate.close()
            self._uploader.shutdown(wait=False, cancel_futures=True)

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise TaskCancelled()

    def _run_source(self) -> None:
        feedback = getattr(self._source, "batch_done", None)
        while True:
            self._drain_control()
            self._check_cancelled()
            started, first = time.monotonic(), self._source.offset
            batch = self._source.next_batch()
            if batch is None:
                return
            if batch is IDLE:  # an unbounded source with nothing new: checkpoints go on meanwhile
                self._drain_control(wait=self._source.idle_wait)
                continue
            self._process(batch)
            took = time.monotonic() - started
            if feedback is not None:
                feedback(took)
            log.info(SOURCE_BATCH_LOG, self.tag, first, self._source.offset, took)

    def _run_inputs(self) -> None:
        gate, aligner = self._gate, self._aligner
        gate.start()
        while True:
            self._drain_control()
            self._check_cancelled()
            if gate.finished:
                return
            tables, events = [], []
            for channel, (kind, value) in gate.poll_all(0.2, aligner.is_blocked):
                if kind == BATCH:
                    tables.append(value)
                elif kind == BARRIER:
                    events.append(ba.BarrierReceived(channel.global_index, value))
                elif kind == END:
                    events.append(ba.EndOfPartition(channel.global_index))
            if tables:
                table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
                self.records_in += table.num_rows
                self._process(Batch(self.engine, table=table))
            for event in events:
                for action in aligner.handle(event):
                    if isinstance(action, ba.Snapshot):
                        self._snapshot(action.checkpoint_id)
                    elif isinstance(action, ba.AlignmentAborted):
                        log.info("%s alignment of checkpoint %d aborted: %s", self.tag, action.checkpoint_id,
                                 action.reason)

    def _process(self, batch: Batch | None, start: int = 0) -> None:
        for _op_id, op in self._operators[start:]:
            if batch is None:
                return
            if isinstance(op, (FileSinkWriter, PrintSink)):
                op.process(batch)
                self._sink_rows += batch.table().num_rows
                return
            batch = op.process(batch)
        if batch is None:
            return
        if len(self._writers) > 1:
            batch = Batch(self.engine, table=batch.table())  # materialize once for several outputs
        for w in self._writers:
            w.emit(batch)

    def _end_input(self) -> None:
        for i, (_op_id, op) in enumerate(self._operators):
            out = op.end_input()
            if out is not None:
                self._process(out, start=i + 1)
        for w in self._writers:
            w.end()
        self._ended = True

    # -- checkpoints (task thread) -----------------------------------------------------------------
    def _drain_control(self, wait: float = 0.0) -> None:
        while True:
            try:
                kind, checkpoint_id, final = self._control.get(timeout=wait) if wait else self._control.get_nowait()
            except queue.Empty:
                return
            wait = 0.0
            if kind == "trigger":
                # Sources are triggered directly; so are tasks whose inputs all ended.
                if checkpoint_id > self._last_snapshot and (self._source is not None or self._ended):
                    self._snapshot(checkpoint_id)
            elif kind == "complete":
                for _op_id, op in self._operators:
                    if isinstance(op, FileSinkWriter):
                        op.notify_complete(checkpoint_id)
                if final and self._ended:
                    self._final_committed = True
            elif kind == "aborted" and self._aligner is not None:
                self._aligner.handle(ba.CheckpointAbortedNotice(checkpoint_id))

    def _snapshot(self, checkpoint_id: int) -> None:
        """Copy state now, forward the barrier, write and acknowledge off this thread."""
        if self.storage is None:
            return
        self._last_snapshot = checkpoint_id
        inline: dict[str, dict] = {}
        keyed: dict[str, pa.Table] = {}
        try:
            if self._source is not None:
                inline[self._source_id] = self._source.snapshot()
                log.info(SOURCE_SNAPSHOT_LOG, self.tag, checkpoint_id,
                         self._source.describe_offset())
            for op_id, op in self._operators:
                if isinstance(op, KeyedAggregate):
                    keyed[op_id] = op.snapshot_table()
                elif isinstance(op, FileSinkWriter):
                    inline[op_id] = op.snapshot(checkpoint_id)
        except Exception as exc:  # noqa: BLE001
            self._decline(self, checkpoint_id, f"snapshot failed: {type(exc).__name__}: {exc}")
            return
        if not self._ended:
            for w in self._writers:
                w.barrier(checkpoint_id)
        self._uploader.submit(self._upload, checkpoint_id, inline, keyed)

    def _upload(self, checkpoint_id: int, inline: dict, keyed: dict) -> None:
        try:
            handle: dict = {"operators": inline, "keyed": {}}
            size = len(json.dumps(inline))
            for op_id, table in keyed.items():
                h = self.storage.write_keyed_state(checkpoint_id, op_id, self.tdd.subtask_index, table, self.key_groups)
                handle["keyed"][op_id] = h
                size += h["size"]
            self._acknowledge(self, checkpoint_id, json.dumps(handle).encode(), size)
        except Exception as exc:  # noqa: BLE001
            log.warning("%s checkpoint %d upload failed: %s", self.tag, checkpoint_id, exc)
            self._decline(self, checkpoint_id, f"upload failed: {type(exc).__name__}: {exc}")

    def _abort(self) -> None:
        for _op_id, op in self._operators:
            if hasattr(op, "abort"):
                op.abort()
        for w in self._writers:
            self.partitions.release(w.partition.partition_id)
