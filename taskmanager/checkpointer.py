"""Checkpointer: a task's part in checkpoints (Flink's SubtaskCheckpointCoordinator).

It takes the control messages the JobManager sends the task (trigger,
complete, aborted; `post` from any thread, `drain` on the task thread), the
barrier aligner's actions, and snapshots: the chain's state is copied on the
task thread, the barrier forwarded to every output, and the copy written to
checkpoint storage on the upload thread, whose state handle is acknowledged
to the JobManager (declined when the snapshot or the write fails). See
docs/checkpoints.md.

It also keeps where the task stops: a stop with a savepoint (docs/savepoints.md)
or a live reconfiguration (docs/reconfiguration.md) names a checkpoint; once
that snapshot is taken the task reads nothing more (`stopping`) and, when it
completes, finishes without ending its input (`stopped`). A prepared
reconfiguration takes effect at its barrier: the task stops there, or its
outputs to the redeployed tasks move over to new partitions, the old ones
released when that checkpoint completes.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import queue
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, assert_never

import pyarrow as pa

from sluice.checkpoints.storage import CheckpointStorage
from sluice.metrics.task_metrics import TaskIO
from sluice.v1 import taskmanager_pb2
from taskmanager import barrier_aligner as ba
from taskmanager.network.partition import PartitionManager
from taskmanager.operator_chain import OperatorChain
from taskmanager.task_messages import (
    CheckpointAborted,
    CheckpointComplete,
    ControlMessage,
    TaskReports,
    TriggerCheckpoint,
)

if TYPE_CHECKING:
    from taskmanager.task import Task

log = logging.getLogger("sluice.taskmanager.task")  # the task's log lines, whichever part writes them


class Checkpointer:
    def __init__(
        self,
        task: Task,
        chain: OperatorChain,
        reports: TaskReports,
        partitions: PartitionManager,
        io: TaskIO,
        key_groups: tuple[int, int],
        owned_key_groups: Any,
    ) -> None:
        tdd = task.tdd
        self.task = task  # what reports name
        self.chain = chain
        self.reports = reports
        self.partitions = partitions
        self.io = io
        self.tag = task.tag
        self.key_groups = key_groups  # the range snapshots are tagged with
        self.owned_key_groups = owned_key_groups  # None: the whole range (else those a live rebalance gave it)
        self.storage = CheckpointStorage(tdd.checkpoint_dir, tdd.job_id) if tdd.checkpoint_dir else None
        self.uploader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-upload")
        self.control: queue.Queue[ControlMessage] = queue.Queue()
        self.wake: Callable[[], None] = lambda: None  # wakes the task thread (its input gate) for a message
        self.aligner: ba.BarrierAligner | None = None  # a task with inputs: aligns barrier n on all channels
        self.last_snapshot = 0
        self.final_committed = False
        self.stop_at: int | None = None  # the checkpoint this task stops at (a stop with savepoint, a reconfiguration)
        self.stopped = False  # that checkpoint completed: finish without ending the input
        self.reconfiguration: taskmanager_pb2.PrepareReconfigurationRequest | None = None
        self.retired_partitions: list[tuple[int, str]] = []  # (checkpoint, partition) ended by a reconfiguration

    @property
    def checkpointing(self) -> bool:
        return self.storage is not None

    def stopping(self) -> bool:
        """Past the snapshot of the checkpoint that stops the job: read nothing more."""
        return self.stop_at is not None and self.last_snapshot >= self.stop_at

    # -- control messages ---------------------------------------------------------------------------
    def post(self, message: ControlMessage) -> None:
        """Any thread: a message for the task thread."""
        self.control.put(message)
        self.wake()

    def drain(self, wait: float = 0.0) -> None:
        """The task thread: carry out the control messages queued (waiting up to `wait` for one)."""
        while True:
            try:
                message = self.control.get(timeout=wait) if wait else self.control.get_nowait()
            except queue.Empty:
                return
            wait = 0.0
            match message:
                case TriggerCheckpoint(checkpoint_id=checkpoint_id, stop=stop):
                    if stop:
                        self.stop_at = checkpoint_id
                    # Sources are triggered directly; so are tasks whose inputs all ended.
                    if checkpoint_id > self.last_snapshot and (self.chain.source is not None or self.chain.ended):
                        self.snapshot(checkpoint_id)
                case CheckpointComplete(checkpoint_id=checkpoint_id, final=final):
                    self.chain.notify_checkpoint_complete(checkpoint_id)
                    if final and self.chain.ended:
                        self.final_committed = True
                    elif checkpoint_id == self.stop_at or (final and checkpoint_id == self.last_snapshot):
                        # final before the end of the input: the checkpoint that stops the job
                        self.stop_at, self.stopped = checkpoint_id, True
                    for cid, pid in [p for p in self.retired_partitions if p[0] <= checkpoint_id]:
                        self.partitions.release(pid)  # its consumers stopped at that barrier
                        self.retired_partitions.remove((cid, pid))
                case CheckpointAborted(checkpoint_id=checkpoint_id):
                    if checkpoint_id == self.stop_at:
                        self.stop_at = None  # the stop failed: the job goes on
                    if self.aligner is not None:
                        self.on_alignment(self.aligner.handle(ba.CheckpointAbortedNotice(checkpoint_id)))
                case _:
                    assert_never(message)

    def on_alignment(self, actions: Sequence[ba.AlignerAction]) -> None:
        """Carry out the barrier aligner's actions."""
        for action in actions:
            match action:
                case ba.Snapshot():
                    self.snapshot(action.checkpoint_id)
                case ba.AlignmentAborted():
                    log.info("%s alignment of checkpoint %d aborted: %s", self.tag, action.checkpoint_id, action.reason)
                case ba.Unblock() | ba.Ignored():
                    pass  # the aligner unblocks its channels itself; outcomes need nothing
                case _:
                    assert_never(action)

    # -- snapshots ----------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> None:
        """Copy state now, forward the barrier, write and acknowledge off this thread."""
        if self.storage is None:
            return
        self.last_snapshot = checkpoint_id
        started = time.monotonic()
        inline: dict[str, dict[str, Any]] = {}
        keyed: dict[str, pa.Table] = {}
        native: dict[str, Any] = {}  # RocksDB checkpoints on local disk, uploaded off this thread
        try:
            self.chain.snapshot(checkpoint_id, inline, keyed, native)
        except Exception as exc:  # noqa: BLE001 — declined, the checkpoint fails, the task goes on
            for snap in native.values():
                snap.discard()
            self.reports.decline(self.task, checkpoint_id, f"snapshot failed: {type(exc).__name__}: {exc}")
            return
        if not self.chain.ended:
            for w in self.chain.all_writers:
                w.barrier(checkpoint_id)
            self._reconfigure_at(checkpoint_id)
        now = time.monotonic()
        self.io.snapshot_taken(checkpoint_id, now - started, now)
        self.uploader.submit(self._upload, self.storage, checkpoint_id, inline, keyed, native)

    def _upload(
        self,
        storage: CheckpointStorage,
        checkpoint_id: int,
        inline: dict[str, dict[str, Any]],
        keyed: dict[str, pa.Table],
        native: dict[str, Any],
    ) -> None:
        started = time.monotonic()
        subtask = self.task.tdd.subtask_index
        try:
            handles: dict[str, Any] = {}
            size = len(json.dumps(inline))
            for op_id, table in keyed.items():
                h = storage.write_keyed_state(checkpoint_id, op_id, subtask, table, self.key_groups)
                handles[op_id] = h
                size += h["size"]
            for op_id, snap in native.items():  # size: what this checkpoint uploaded (incremental)
                h = snap.upload(
                    storage.fs,
                    storage.checkpoint_dir(checkpoint_id),
                    storage.shared_dir(),
                    op_id,
                    subtask,
                    self.key_groups,
                )
                handles[op_id] = h
                size += h["size"]
            handle = {"operators": inline, "keyed": handles}
            self.io.snapshot_written(checkpoint_id, time.monotonic() - started)
            self.reports.acknowledge(self.task, checkpoint_id, json.dumps(handle).encode(), size)
        except Exception as exc:  # noqa: BLE001 — declined, the checkpoint fails, the task goes on
            for snap in native.values():
                snap.discard()
            log.warning("%s checkpoint %d upload failed: %s", self.tag, checkpoint_id, exc)
            self.reports.decline(self.task, checkpoint_id, f"upload failed: {type(exc).__name__}: {exc}")

    # -- live reconfiguration (docs/reconfiguration.md) ---------------------------------------------
    def prepare_reconfiguration(self, request: taskmanager_pb2.PrepareReconfigurationRequest) -> bool:
        """The RPC thread: the plan is in place before the JobManager triggers the barrier, so the
        snapshot that meets it (on the task thread) sees it."""
        if self.stopped:
            return False
        self.reconfiguration = request
        return True

    def abort_reconfiguration(self, reconfiguration_id: str) -> None:
        r = self.reconfiguration
        if r is not None and r.reconfiguration_id == reconfiguration_id:
            self.reconfiguration = None

    def _reconfigure_at(self, checkpoint_id: int) -> None:
        """The barrier of a prepared reconfiguration: stop here (retire), or move the outputs to
        the redeployed tasks over to new partitions (the old ones end after this barrier)."""
        r = self.reconfiguration
        if r is None or checkpoint_id < r.from_checkpoint_id:
            return
        self.reconfiguration = None
        if r.retire:
            self.stop_at = checkpoint_id
            log.info("%s reconfiguration %s: stops at checkpoint %d", self.tag, r.reconfiguration_id, checkpoint_id)
            return
        for pid in self.chain.switch_outputs(r):
            self.retired_partitions.append((checkpoint_id, pid))
        log.info(
            "%s reconfiguration %s: outputs to %s switched at checkpoint %d",
            self.tag,
            r.reconfiguration_id,
            ", ".join(o.target_chain for o in r.outputs),
            checkpoint_id,
        )
