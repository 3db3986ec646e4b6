"""The JobMaster's checkpointing: the adapter around each attempt's CheckpointCoordinator.

It feeds the coordinator (pure core, jobmanager/checkpoint/coordinator.py) acknowledgements,
declines, ticks and requests, and carries out its actions: triggers and notifications to the
tasks, persisting (`_metadata` first, then the ZooKeeper pointer, then CheckpointPersisted:
persist before announce), discarding checkpoints beyond the retained ones and the shared
state files no retained checkpoint needs. Savepoints are checkpoints whose request the
coordinator carries (its target, its completion); `SavepointRequests` keeps their records for
the status. A new attempt restores every task from the latest completed checkpoint, read back
from storage — a checkpoint that cannot be read fails the job loudly, never a silent start from
empty state.

All methods run under the dispatcher's lock; storage writes and RPCs run on its thread pool
and come back through the JobMaster's `run_io`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any, assert_never

from jobmanager.checkpoint import coordinator as cc
from jobmanager.checkpoint import metadata, state_handles
from jobmanager.checkpoint.id_counter import CheckpointIDCounter, InMemoryCheckpointIDCounter
from jobmanager.checkpoint.restart_sweep import EndSweep, RestartSweep
from jobmanager.checkpoint.savepoints import SavepointRequest, SavepointRequests
from jobmanager.checkpoint.shared_registry import SharedStateRegistry
from jobmanager.master.ports import JobHost
from sluice import graph, job_options
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointCorrupt, CheckpointStorage
from sluice.states import AckOutcome, JobStatus
from sluice.v1 import taskmanager_pb2

log = logging.getLogger("sluice.jobmanager.job")

PAST_ATTEMPTS_SHOWN = 8  # ended attempts whose checkpoints the status still lists (then the last 50 of all)


def checkpoint_config(config: dict[str, str]) -> cc.CheckpointConfig | None:
    """The job's checkpoint options read through sluice/job_options.py; None when checkpointing is off.
    A bad value or an unknown execution.*/state.* key raises JobConfigError (a ValueError naming the key)."""
    o = job_options.checkpointing(config)
    if o.interval <= 0:
        return None
    return cc.CheckpointConfig(
        interval=o.interval,
        timeout=o.timeout,
        min_pause=o.min_pause,
        tolerable_failures=o.tolerable_failures,
        retained=o.retained,
    )


def now_ms() -> int:
    return int(time.time() * 1000)


def _ignore(error: Exception | None) -> None:
    """For background I/O whose failure only needs the log line run_io writes."""


class Checkpointing:
    def __init__(
        self,
        host: JobHost,
        ckpt_config: cc.CheckpointConfig | None,
        config: dict[str, str],
        checkpoint_dir: str | None,
        counter: CheckpointIDCounter | None,
    ) -> None:
        self.host = host
        self.config = ckpt_config  # None: checkpointing is off
        ckpt_dir = config.get("state.checkpoints.dir") or checkpoint_dir
        if self.config is not None and not ckpt_dir:
            raise ValueError(
                "config.execution.checkpointing.interval: checkpointing needs state.checkpoints.dir "
                "(set it in the job or start the JobManager with --checkpoint-dir)"
            )
        job_id = host.job_id
        self.storage = CheckpointStorage(ckpt_dir, job_id) if self.config is not None and ckpt_dir else None
        self.counter = counter or InMemoryCheckpointIDCounter()
        self.latest: cc.CompletedCheckpoint | None = None
        # shared state files of incremental checkpoints, by the retained checkpoints that need them
        self.shared_state = SharedStateRegistry()
        self.coordinator: cc.CheckpointCoordinator | None = None
        # coordinators of ended attempts, newest last: their checkpoints stay in the status
        self._past: list[cc.CheckpointCoordinator] = []
        self.end_of_input: set[str] = set()
        # checkpoints whose _metadata and pointer are being written, by id: set once the write ended
        self._persisting: dict[int, threading.Event] = {}
        self.savepoints = SavepointRequests()
        self.savepoints_dir = job_options.SAVEPOINTS_DIR.read(config) or (
            f"{ckpt_dir.rstrip('/')}/savepoints" if ckpt_dir else None
        )

    def storage_checked(self) -> CheckpointStorage:
        """Checkpoint storage; only called with checkpointing on (a checkpoint exists, or a coordinator runs)."""
        if self.storage is None:
            raise CheckpointCorrupt(f"job {self.host.job_id} has checkpoints but no state.checkpoints.dir")
        return self.storage

    # -- coordinators ---------------------------------------------------------------------------
    def retire(self) -> None:
        """The coordinator's executions are gone: keep it (by reference: a checkpoint still
        persisting completes in its history) for the status; a new one takes over."""
        old = self.coordinator
        if old is not None and old not in self._past:
            self._past = [*self._past[-(PAST_ATTEMPTS_SHOWN - 1) :], old]

    def history(self) -> list[cc.CheckpointStats]:
        """Every checkpoint of the kept coordinators, oldest first."""
        coordinators = list(self._past)
        if self.coordinator is not None and self.coordinator not in coordinators:
            coordinators.append(self.coordinator)
        return [stats for c in coordinators for stats in c.history()]

    def start_coordinator(self, now: float) -> None:
        g, chain_by_id = self.host.graph, self.host.chain_by_id
        executions = list(g.executions)
        sources = [eid for eid, ex in g.executions.items() if not chain_by_id[ex.chain_id].inputs]
        config = self.config
        if config is None:
            return  # checkpointing is off
        if self.latest is not None:  # an earlier attempt or leader may have left other checkpoints
            keep, upper = self.latest.checkpoint_id, self.counter.get()
            dropped = [c for c in self.shared_state.registered() if c != keep and c < upper]
            gateway, job_id = self.host.gateway, self.host.job_id
            ha = gateway.ha
            sweep = RestartSweep(
                self.storage_checked(),
                keep,
                upper,
                self.shared_state.files_of(keep),
                [f for c in dropped for f in self.shared_state.discard(c)],
                self._persists_in_flight(),
                None if ha is None else lambda cid: ha.remove_checkpoint(gateway.guard, job_id, cid),
                self.host.tag,
            )
            self.host.run_io(sweep, _ignore)
        self.coordinator = cc.CheckpointCoordinator(
            self.host.job_id, config, self.counter, sources, executions, now, restored=self.latest
        )

    def on_job_ended(self) -> None:
        """The job ended for good: the shared uploads none of its kept checkpoints lists go (its
        checkpoints stay: docs/checkpoints.md "Retention and clean-up")."""
        if self.storage is None:
            return
        try:  # read here, under the lock: ids a later leader hands out are never swept
            upper = self.counter.get()
        except Exception as exc:  # noqa: BLE001 — ZooKeeper unreachable: the files are kept this time
            log.info("%s ended; shared files not swept: %s", self.host.tag, exc)
            return
        self.host.run_io(EndSweep(self.storage, upper, self._persists_in_flight(), self.host.tag), _ignore)

    def _persists_in_flight(self) -> list[threading.Event]:
        """The persists not ended yet (a sweep waits for them)."""
        return [e for e in self._persisting.values() if not e.is_set()]

    def handle(self, event: cc.CoordinatorEvent, now: float) -> None:
        """Feed the current coordinator `event` and carry out its actions (none without one)."""
        coordinator = self.coordinator
        if coordinator is not None:
            self.apply(coordinator, coordinator.handle(event), now)

    def tasks_lost(self, reason: str, now: float) -> None:
        self.handle(cc.TasksLost(reason, now), now)

    # -- events ---------------------------------------------------------------------------------
    def on_ack(self, eid: str, checkpoint_id: int, handle: bytes, size: int, now: float) -> AckOutcome:
        coordinator, g = self.coordinator, self.host.graph
        if coordinator is None or eid not in g.executions:
            return AckOutcome.UNKNOWN
        storage, chain_id, job = self.storage_checked(), g.executions[eid].chain_id, self.host.job
        # Raises InvalidStateHandle (the ack is rejected; the checkpoint waits for a valid one)
        # when the handle points outside this checkpoint's directory: jobmanager/checkpoint/state_handles.py.
        parsed = state_handles.parse(
            handle,
            storage.checkpoint_dir(checkpoint_id),
            self.host.chain_by_id[chain_id].operator_ids,
            job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM,
            state_handles.resolver_for(storage.fs),
        )
        actions = coordinator.handle(cc.Acknowledge(eid, checkpoint_id, parsed, size, now))
        outcome = next((a.outcome for a in actions if isinstance(a, cc.AckResult)), AckOutcome.UNKNOWN)
        self.apply(coordinator, actions, now)
        return outcome

    def on_decline(self, eid: str, checkpoint_id: int, reason: str, now: float) -> None:
        coordinator = self.coordinator
        if coordinator is not None and eid in self.host.graph.executions:
            log.warning("%s checkpoint %d declined by %s: %s", self.host.tag, checkpoint_id, eid, reason)
            self.apply(coordinator, coordinator.handle(cc.Decline(eid, checkpoint_id, reason, now)), now)

    def on_end_of_input(self, eid: str, now: float) -> None:
        self.end_of_input.add(eid)
        coordinator = self.coordinator
        if coordinator is None:
            return
        pending = coordinator.pending_id
        if pending is not None:  # its barrier can no longer reach this task: trigger it directly
            self._send_trigger(eid, pending, final=False)
        if self.end_of_input == set(self.host.graph.executions):
            log.info("%s every task reached end of input: final checkpoint", self.host.tag)
            self.apply(coordinator, coordinator.handle(cc.FinalCheckpointRequested(now)), now)

    def request_savepoint(self, coordinator: cc.CheckpointCoordinator, target: str, stop: bool, now: float) -> str:
        """A savepoint into `target` (checked by the caller); its request id. ValueError, nothing
        changed, when the coordinator refuses."""
        actions = coordinator.handle(cc.SavepointRequested(stop, now, target))  # raises ValueError, nothing changed
        request = SavepointRequest(uuid.uuid4().hex[:12], stop, target, now_ms())
        self.savepoints.started(request)
        log.info("%s %s requested into %s", self.host.tag, "stop with savepoint" if stop else "savepoint", target)
        self.apply(coordinator, actions, now)
        return request.request_id

    def savepoint_failed(self, failure: str) -> None:
        request = self.savepoints.failed(failure, now_ms())
        if request is not None:
            log.warning("%s savepoint %s failed: %s", self.host.tag, request.request_id, failure)

    # -- actions --------------------------------------------------------------------------------
    def _send_trigger(self, eid: str, checkpoint_id: int, final: bool, stop: bool = False) -> None:
        self.host.call_task(
            eid,
            "TriggerCheckpoint",
            taskmanager_pb2.TriggerCheckpointRequest(
                leader_session_id=self.host.gateway.session_id,
                job_id=self.host.job_id,
                execution_id=eid,
                checkpoint_id=checkpoint_id,
                timestamp_ms=now_ms(),
                final=final,
                stop=stop,
            ),
        )

    def _notify(self, method: str, targets: Iterable[str], checkpoint_id: int, final: bool = False) -> None:
        for eid in targets:
            self.host.call_task(
                eid,
                method,
                taskmanager_pb2.CheckpointNotification(
                    leader_session_id=self.host.gateway.session_id,
                    job_id=self.host.job_id,
                    execution_id=eid,
                    checkpoint_id=checkpoint_id,
                    final=final,
                ),
            )

    def apply(self, coordinator: cc.CheckpointCoordinator, actions: Iterable[cc.CoordinatorAction], now: float) -> None:
        """Carry out the actions `coordinator` returned."""
        host = self.host
        for action in actions:
            match action:
                case cc.TriggerCheckpoint():
                    log.info(
                        "%s triggering checkpoint %d%s",
                        host.tag,
                        action.checkpoint_id,
                        " (final)" if action.final else "",
                    )
                    targets = set(action.targets) | (set() if action.final else self.end_of_input)
                    if action.savepoint:
                        self.savepoints.triggered(action.checkpoint_id)
                    host.on_checkpoint_triggered(action, now)  # before any reader snapshots it
                    if action.stop:  # every task is told: it idles once it has snapshotted
                        targets = set(host.graph.executions)
                    for eid in sorted(targets):
                        self._send_trigger(eid, action.checkpoint_id, action.final, action.stop)
                case cc.PersistCheckpoint():
                    self._persist(coordinator, action)
                case cc.NotifyComplete():
                    if action.savepoint_path:  # the savepoint's completion
                        request = self.savepoints.completed(action.checkpoint_id, action.savepoint_path, now_ms())
                        if request is not None:
                            log.info("%s savepoint %s completed: %s", host.tag, request.request_id, request.path)
                    log.info("%s checkpoint %d completed", host.tag, action.checkpoint_id)
                    self.latest = coordinator.latest_completed()
                    self._notify("NotifyCheckpointComplete", action.targets, action.checkpoint_id, action.final)
                    host.on_checkpoint_completed(self.latest, action.checkpoint_id, now)
                case cc.NotifyAborted():
                    log.warning("%s checkpoint %d aborted: %s", host.tag, action.checkpoint_id, action.reason)
                    if action.savepoint:
                        self.savepoint_failed(action.reason)
                    host.on_checkpoint_aborted(action, now)
                    if host.graph.state == JobStatus.RUNNING:
                        self._notify("NotifyCheckpointAborted", action.targets, action.checkpoint_id)
                case cc.DiscardCheckpoint():
                    self._discard(action.checkpoint_id, action.handles)
                case cc.FailJob():
                    host.fail_globally(f"checkpointing failed: {action.reason}", now)
                case cc.AckResult():
                    pass  # on_ack returns its outcome to the TaskManager
                case _:
                    assert_never(action)

    def _persist(self, coordinator: cc.CheckpointCoordinator, action: cc.PersistCheckpoint) -> None:
        """Persist before announcing: `_metadata` first, then CheckpointPersisted."""
        host = self.host
        executions, job, job_id = host.graph.executions, host.job, host.job_id
        content: dict[str, Any] = metadata.build(
            job_id,
            action.checkpoint_id,
            action.final,
            now_ms(),
            host.attempt,
            action.handles,
            lambda eid: (executions[eid].chain_id, executions[eid].subtask),
            job,
        )
        if coordinators := host.source_states(action.checkpoint_id):
            content["coordinators"] = coordinators  # the split enumerators' state at the trigger
        storage, cid, retained = self.storage_checked(), action.checkpoint_id, coordinator.config.retained
        gateway = host.gateway
        ha, target = gateway.ha, action.savepoint_target if action.savepoint else ""
        plan = sp.plan(content, job) if target else None
        written: list[str] = []

        ended = self._persisting[cid] = threading.Event()  # a restart's sweep waits for it

        def persist() -> None:
            try:
                path = storage.write_metadata(cid, content)
                if plan is not None:  # the savepoint copy, before the checkpoint counts
                    written.append(sp.write(plan, storage.fs, target, job_id))
                if ha is not None:  # the pointer in ZooKeeper, guarded by our leadership
                    ha.add_checkpoint(gateway.guard, job_id, cid, path, retained)
            finally:
                ended.set()

        def done(error: Exception | None) -> None:
            self._persisting.pop(cid, None)
            if self.coordinator is not coordinator:
                return  # a newer attempt: this result no longer matters
            now = time.monotonic()
            if error is None:  # before the discards its completion brings
                self.shared_state.register(cid, action.handles.values())
                event: cc.CoordinatorEvent = cc.CheckpointPersisted(cid, now, written[0] if written else "")
            else:
                event = cc.PersistFailed(cid, str(error), now)
            self.apply(coordinator, coordinator.handle(event), now)

        host.run_io(persist, done)

    def _discard(self, checkpoint_id: int, handles: tuple[object, ...] = ()) -> None:
        if self.host.terminal and checkpoint_id in self.shared_state.registered():
            # a completed checkpoint of an ended job is retained: a new job may be resuming from it
            log.info("%s ended: checkpoint %d retained", self.host.tag, checkpoint_id)
            return
        storage = self.storage_checked()
        files = self.shared_state.discard(checkpoint_id, handles)  # shared files no retained checkpoint needs
        if files:
            log.info("%s checkpoint %d discarded: %d shared state files go", self.host.tag, checkpoint_id, len(files))

        def discard() -> None:
            storage.discard(checkpoint_id)
            storage.delete_files(files)

        self.host.run_io(discard, _ignore)
