"""Dispatcher: the JobManager's adapter around its cores.

It owns the slot pool (pure core) and one JobMaster per job, feeds them
events (client calls, TaskManager registrations, heartbeats and reports,
ticks) under one lock, and carries out their work: gRPC calls to
TaskManagers and storage I/O run on a small thread pool outside the lock.
Only the leader acts: without a leader session every call is refused
(NotLeader), reports under another session are refused (StaleLeaderSession),
and results of calls made under an older session are dropped.

A TaskManager's calls are bound to who it is (docs/protocols.md, "Fencing"):
its registration binds the resource id to the caller's identity (the
certificate's common name; none on a plaintext cluster) and address, and a
heartbeat, task state, acknowledgement or decline is taken only for a
resource id, or an execution this JobManager deployed to a TaskManager, whose
bound identity is the caller's (NotOwner otherwise). A report for an
execution that is not (or no longer) deployed on a living TaskManager is a
late report, not accepted as before. Nothing is allocated in proportion to a
number a caller sends before it is checked against its bound.

Log lines about a job carry its correlation id, "[job <id>]".
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, assert_never

from jobmanager import fencing, job_listing
from jobmanager.errors import InvalidRequest, JobNotFound, NotLeader, NotOwner, StaleLeaderSession
from jobmanager.job_master import JobMaster
from jobmanager.leader.driver import LeadershipLostError
from jobmanager.master.exception_history import TRACEBACK_LIMIT, bounded
from jobmanager.master.ports import JobHandle
from jobmanager.master.status import TaskRecords
from jobmanager.reconfiguration.runner import retry_until_fresh
from jobmanager.recovery import HaStores, read_ha_stores, savepoint_of
from jobmanager.scheduler import execution_graph as eg
from jobmanager.scheduler import slot_pool as sp
from jobmanager.taskmanager_rpc import TaskManagerRpc
from sluice import config, graph, job_options, rpc
from sluice.checkpoints.savepoint import Savepoint, SavepointError
from sluice.security.identity import Identity
from sluice.states import AckOutcome, ExecutionState, FailureCause, JobStatus, from_proto
from sluice.v1 import common_pb2, jobmanager_pb2, taskmanager_pb2

if TYPE_CHECKING:
    from jobmanager.checkpoint.id_counter import CheckpointIDCounter
    from jobmanager.leader.guarded_transaction import GuardedTransaction

log = logging.getLogger("sluice.jobmanager")

HeartbeatMetrics = tuple[str, str, TaskRecords]  # (job id, execution id, record counters) of one task


class Dispatcher:
    def __init__(
        self,
        address: str,
        heartbeat_timeout: float,
        heartbeat_interval: float,  # defaults: sluice/config.py
        cancel_timeout: float = eg.CANCEL_TIMEOUT,
        checkpoint_dir: str | None = None,
        max_taskmanager_losses: int = config.TASKMANAGER_LOSS_MAX_PER_JOB.default,
        clock: Callable[[], float] = time.monotonic,
        ha: Any = None,
        guard_factory: Callable[[str], GuardedTransaction] | None = None,
        max_slots_per_taskmanager: int = config.MAX_SLOTS_PER_TASKMANAGER.default,
    ) -> None:
        self.address = address
        self.max_slots_per_taskmanager = max_slots_per_taskmanager
        self.heartbeat_timeout = heartbeat_timeout
        self.heartbeat_interval = heartbeat_interval
        self.cancel_timeout = cancel_timeout
        self.checkpoint_dir = checkpoint_dir
        self.max_taskmanager_losses = max_taskmanager_losses
        self._last_loss = ""  # the latest TaskManager loss, for jobs waiting for slots
        self.clock = clock
        self._lock = threading.RLock()
        self._pool = sp.SlotPool(heartbeat_timeout)
        self._jobs: dict[str, JobMaster] = {}
        self._session: str | None = None
        self._calls = TaskManagerRpc(self._lock, lambda: self._session, self.address_of, self._disconnect, clock)
        self.ha = ha  # ZooKeeperHaServices, or None without HA stores
        self._guard_factory = guard_factory  # session id -> guarded ZooKeeper transaction
        self._results: dict[str, common_pb2.JobInfo] = {}  # ended jobs known from the job result store

    # -- leadership ---------------------------------------------------------------------------
    def grant_leadership(self, session_id: str) -> None:
        stored = read_ha_stores(self.ha) if self.ha is not None else None  # storage reads, off the lock
        with self._lock:
            self._session = session_id
            self._pool = sp.SlotPool(self.heartbeat_timeout)  # TaskManagers register anew with each leader
            self._jobs = {}  # whatever this process knew as an earlier leader is stale
            self._results = {}
            log.info("leadership granted, session %s", session_id)
            if stored is not None:
                self._recover_jobs(stored)

    def _recover_jobs(self, stored: HaStores) -> None:
        """Take over the jobs of the previous leader (read by `read_ha_stores`): every job graph
        without a result restarts from its latest completed checkpoint once slots are offered."""
        self._results = stored.results
        for s in stored.jobs:
            job_id, job, latest = s.job_id, s.job, s.latest
            try:
                master = self._job_master(job_id, job, self.ha.checkpoint_id_counter(job_id), s.savepoint)
                master.counters = s.counters or master.counters
            except Exception as exc:  # noqa: BLE001 — one unreadable job must not stop recovering the others
                log.error("[job %s] cannot recover: %s", job_id, exc)
                continue
            self._jobs[job_id] = master
            log.info(
                "[job %s] recovered %r from the job graph store; restoring %s",
                job_id,
                job.name,
                f"checkpoint {latest}" if latest else "from the beginning (no checkpoint yet)",
            )
            master.start(self.clock(), recover_from=latest)

    def _job_master(
        self,
        job_id: str,
        job: common_pb2.JobGraph,
        counter: CheckpointIDCounter | None,
        savepoint: Savepoint | None = None,
    ) -> JobMaster:
        """The JobMaster of a submitted or recovered job, with this JobManager's settings."""
        return JobMaster(
            job_id,
            job,
            self,
            self.checkpoint_dir,
            self.cancel_timeout,
            counter=counter,
            max_tm_losses=self.max_taskmanager_losses,
            savepoint=savepoint,
        )

    def revoke_leadership(self) -> None:
        with self._lock:
            self._session = None
        log.warning("leadership revoked: stop acting")

    @property
    def session_id(self) -> str:
        return self._session or ""

    def guard(self) -> GuardedTransaction:
        """A ZooKeeper transaction that commits only while our leader session holds."""
        session = self._session
        if session is None or self._guard_factory is None:
            raise LeadershipLostError("not the leader")
        return self._guard_factory(session)

    def _require_leader(self) -> str:
        if self._session is None:
            raise NotLeader()
        return self._session

    # -- client calls ---------------------------------------------------------------------------
    def submit(self, job: common_pb2.JobGraph, restore_path: str = "", allow_non_restored_state: bool = False) -> str:
        """Accept a job; `restore_path`: start it from that savepoint (docs/savepoints.md)."""
        self._require_leader()
        graph.validate(job)
        if not job.max_parallelism:
            job.max_parallelism = graph.DEFAULT_MAX_PARALLELISM
        if restore_path:
            job.config[job_options.SAVEPOINT_PATH.key] = restore_path
            job.config[job_options.SAVEPOINT_IGNORE_UNCLAIMED.key] = str(allow_non_restored_state).lower()
        try:
            savepoint = savepoint_of(job)  # read before anything is kept: a bad one is the client's error
        except SavepointError as exc:
            raise graph.JobValidationError("restore_path", str(exc)) from None
        if savepoint is not None and savepoint.retained:
            self._check_not_running(savepoint)
        job_id = uuid.uuid4().hex
        counter = self.ha.checkpoint_id_counter(job_id) if self.ha is not None else None
        with self._lock:
            try:
                master = self._job_master(job_id, job, counter, savepoint)
            except SavepointError as exc:
                raise graph.JobValidationError("restore_path", str(exc)) from None
            except ValueError as exc:
                raise graph.JobValidationError("config", str(exc)) from None
        if savepoint is not None:  # its checkpoint ids continue the savepoint's
            master.checkpointing.counter.advance_to(savepoint.checkpoint_id + 1)
        if self.ha is not None:  # persist before announcing the job id
            try:
                self.ha.put_job_graph(self.guard, job_id, job)
            except LeadershipLostError:
                raise NotLeader() from None
        with self._lock:
            self._require_leader()
            self._jobs[job_id] = master
            tasks = sum(c.parallelism for c in master.chains)
            log.info("[job %s] submitted %r: %d tasks in %d slots", job_id, job.name, tasks, master.slots_required)
            master.start(self.clock())
        return job_id

    def _check_not_running(self, savepoint: Savepoint) -> None:
        """A retained checkpoint of a job still running here is refused: that job deletes it once
        newer ones complete, maybe while the new job restores from it (docs/savepoints.md)."""
        old = savepoint.metadata["job_id"]
        with self._lock:
            running = old in self._jobs and not self._jobs[old].terminal
        if running:
            raise graph.JobValidationError(
                "restore_path",
                f"retained checkpoint {savepoint.path} belongs to job {old}, which is still running and deletes "
                f"its checkpoints as newer ones complete: take a savepoint (sluice savepoint {old}), or cancel "
                "the job first",
            )

    def cancel(self, job_id: str) -> JobStatus:
        self._require_leader()
        with self._lock:
            return self._running_job(job_id).cancel(self.clock())

    def _running_job(self, job_id: str) -> JobMaster:
        """The JobMaster of `job_id` (under the lock); ValueError when the job already ended."""
        if job_id not in self._jobs and job_id in self._results:
            raise ValueError(f"job {job_id} already ended {from_proto(JobStatus, self._results[job_id].state)}")
        return self._job(job_id)

    def trigger_savepoint(self, job_id: str, target: str, stop: bool) -> str:
        """Request a savepoint of a running job (`stop`: then stop it); the request id."""
        self._require_leader()
        with self._lock:
            return self._running_job(job_id).trigger_savepoint(target, stop, self.clock())

    def reconfigure(
        self,
        job_id: str,
        operator: str,
        parallelism: int,
        new_job: common_pb2.JobGraph | None,
        rebalance_keys: bool = False,
    ) -> str:
        """Start a live reconfiguration of a running job (docs/reconfiguration.md); its id."""
        self._require_leader()
        if new_job is not None:
            graph.validate(new_job)  # JobValidationError naming the field
        since = self.clock() if rebalance_keys else None  # a key rebalance plans on loads reported after this

        def attempt() -> str:
            with self._lock:
                job = self._running_job(job_id)
                return job.reconfigure(operator, parallelism, new_job, self.clock(), rebalance_keys, since)

        return retry_until_fresh(attempt, self.heartbeat_interval)  # off the lock between attempts

    def job_graph(self, job_id: str) -> common_pb2.JobGraph:
        self._require_leader()
        with self._lock:
            if job_id not in self._jobs and job_id in self._results:
                raise ValueError(f"job {job_id} ended before this JobManager led: its graph is no longer kept")
            return self._job(job_id).job

    def job_info(self, job_id: str) -> common_pb2.JobInfo:
        self._require_leader()
        with self._lock:
            if job_id not in self._jobs and job_id in self._results:
                return self._ended_info(job_id)
            return self._job(job_id).info(self._pool.free_slots())

    def list_jobs(self, page_size: int = 0, page_token: str = "") -> tuple[list[common_pb2.JobInfo], str]:
        """One page of job summaries, oldest first (by submission time, then job id), and the
        token of the next page ("" after the last). A summary is the job's `JobInfo` without
        tasks, checkpoints and exception history, its failure cut (job_listing.py)."""
        self._require_leader()
        size = job_listing.page_size(page_size)
        after = job_listing.page_position(page_token) if page_token else None
        with self._lock:
            keys = [(j.submitted_ms, job_id) for job_id, j in self._jobs.items()]
            keys += [(r.submitted_ms, job_id) for job_id, r in self._results.items() if job_id not in self._jobs]
            chosen, token = job_listing.page(keys, size, after)
            free = self._pool.free_slots()
            infos = [
                job_listing.summary(self._jobs[job_id].info(free) if job_id in self._jobs else self._ended_info(job_id))
                for _, job_id in chosen
            ]
            return infos, token

    def _ended_info(self, job_id: str) -> common_pb2.JobInfo:
        """A job that ended under an earlier leader, as this leader reports it."""
        info = common_pb2.JobInfo()
        info.CopyFrom(self._results[job_id])
        info.leader = self.address
        return info

    def cluster_overview(self) -> jobmanager_pb2.ClusterOverview:
        self._require_leader()
        with self._lock:
            return job_listing.cluster_overview(self._pool, self.address, self.clock())

    def _job(self, job_id: str) -> JobMaster:
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    # -- TaskManager calls ------------------------------------------------------------------------
    def register_taskmanager(self, resource_id: str, address: str, slots: int, identity: Identity | None = None) -> str:
        """Bind `resource_id` to the caller's identity and address and offer its slots; the
        leader session id in return. NotOwner when a living TaskManager of another identity
        (without identities: at another address) holds the resource id."""
        session = self._require_leader()
        if not 1 <= slots <= self.max_slots_per_taskmanager:
            raise InvalidRequest(
                "slots",
                f"must be between 1 and {self.max_slots_per_taskmanager} "
                f"({config.MAX_SLOTS_PER_TASKMANAGER.key}), got {slots}",
            )
        fencing.check_caller_role(identity)
        with self._lock:
            event = sp.TaskManagerRegistered(resource_id, address, slots, self.clock(), fencing.bound_name(identity))
            actions = self._pool.handle(event)
            rejected = next((a for a in actions if isinstance(a, sp.RegistrationRejected)), None)
            if rejected is not None:
                log.warning(
                    "refused to register TaskManager %s at %s (caller %s): %s",
                    resource_id,
                    address,
                    identity or "without identity",
                    rejected.reason,
                )
                raise NotOwner(
                    f"resource id {resource_id!r} belongs to a living TaskManager: {rejected.reason}. "
                    "Each TaskManager needs a resource id of its own"
                )
            log.info("TaskManager %s registered at %s with %d slots", resource_id, address, slots)
            self._calls.forget(address)  # a channel to an earlier process at this address may be backing off
            self._pool_actions(actions)
        return session

    def heartbeat(
        self,
        resource_id: str,
        session_id: str,
        metrics: list[HeartbeatMetrics],
        held: frozenset[int] | None = None,  # slots its tasks still hold (the slot report); None: no report
        identity: Identity | None = None,
    ) -> bool:
        """False when the pool does not know `resource_id` (the TaskManager registers again);
        NotOwner when another identity registered it. Metrics count only for executions
        deployed to that TaskManager."""
        self._check_session(session_id)
        with self._lock:
            tm = self._pool.registered(resource_id)
            if tm is not None and tm.identity != fencing.bound_name(identity):
                raise NotOwner(f"TaskManager {resource_id!r} is registered by another identity")
            actions = self._pool.handle(sp.HeartbeatReceived(resource_id, self.clock(), held))
            if any(isinstance(a, sp.UnknownTaskManager) for a in actions):
                return False
            self._pool_actions(actions)  # a slot the report freed may go to a waiting job
            for job_id, eid, records in metrics:
                if (job := self._jobs.get(job_id)) is not None:
                    job.on_heartbeat(resource_id, eid, records, self.clock())
            return True

    def _owned(self, job: JobMaster, execution_id: str, identity: Identity | None, resource_id: str = "") -> bool:
        """Whether a report about `execution_id` of `job` may be taken from the caller (fencing.py)."""
        return fencing.owned(self._pool, job, execution_id, identity, resource_id)

    def update_task_state(
        self,
        session_id: str,
        job_id: str,
        execution_id: str,
        state: ExecutionState,
        error: str,
        records: TaskRecords = TaskRecords(),  # noqa: B008 — an immutable tuple: no reports yet
        end_of_input: bool = False,
        failure_cause: FailureCause | None = None,
        unreachable_peer: str = "",
        identity: Identity | None = None,
        resource_id: str = "",
    ) -> bool:
        """A TaskManager's report about an execution it owns (`_owned`). A failure caused by
        an unreachable peer TaskManager (`failure_cause` PEER_UNREACHABLE, its address in
        `unreachable_peer`) gets that peer probed at once instead of waiting for its heartbeat
        timeout. The error text is kept to TRACEBACK_LIMIT characters, with a note of the cut."""
        self._check_session(session_id)
        error = bounded(error, TRACEBACK_LIMIT)
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not self._owned(job, execution_id, identity, resource_id):
                return False
            log.info(
                "[job %s] task %s -> %s%s%s",
                job_id,
                execution_id,
                state,
                " (end of input)" if end_of_input else "",
                f": {error.strip().splitlines()[-1]}" if error else "",
            )
            accepted = job.on_task_state(
                execution_id, state, error, records, end_of_input, self.clock(), cause=failure_cause
            )
            if failure_cause == FailureCause.PEER_UNREACHABLE and unreachable_peer:
                self._probe_peer(job_id, unreachable_peer)
            return accepted

    def acknowledge_checkpoint(
        self,
        session_id: str,
        job_id: str,
        execution_id: str,
        checkpoint_id: int,
        handle: bytes,
        size: int,
        identity: Identity | None = None,
    ) -> AckOutcome:
        """An acknowledgement from the TaskManager that owns the execution; its state handle
        must point inside the checkpoint's directory (InvalidStateHandle otherwise, and the
        checkpoint keeps waiting for a valid one)."""
        self._check_session(session_id)
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not self._owned(job, execution_id, identity):
                return AckOutcome.UNKNOWN
            return job.on_ack(execution_id, checkpoint_id, handle, size, self.clock())

    def decline_checkpoint(
        self,
        session_id: str,
        job_id: str,
        execution_id: str,
        checkpoint_id: int,
        reason: str,
        identity: Identity | None = None,
    ) -> None:
        self._check_session(session_id)
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and self._owned(job, execution_id, identity):
                job.on_decline(
                    execution_id, checkpoint_id, bounded(reason, job_listing.SUMMARY_FAILURE_LIMIT), self.clock()
                )

    def request_splits(
        self,
        session_id: str,
        job_id: str,
        execution_id: str,
        operator_id: str,
        received: int,
        last_checkpoint: int,
        idle: bool,
        identity: Identity | None = None,
    ) -> Any:
        """A connector source reader's split request (docs/connectors.md): its subtask's
        assignments from `received` on, or None for a late request (nothing to give)."""
        self._check_session(session_id)
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not self._owned(job, execution_id, identity):
                return None
            try:
                return job.request_splits(execution_id, operator_id, received, last_checkpoint, idle)
            except ValueError as exc:  # SplitRequestError: the request contradicts the assignment log
                raise InvalidRequest("received", str(exc)) from None

    def _check_session(self, session_id: str) -> None:
        current = self._require_leader()
        if session_id != current:
            raise StaleLeaderSession(session_id)

    # -- time ------------------------------------------------------------------------------------
    def tick(self) -> None:
        if self._session is None:
            return
        with self._lock:
            now = self.clock()
            self._pool_event(sp.Tick(now))
            for job in list(self._jobs.values()):
                try:
                    job.tick(now)
                except Exception:  # e.g. the checkpoint id counter gave up: the other jobs still tick
                    log.exception("[job %s] tick failed", job.job_id)

    # -- gateway for JobMasters (called under the lock) ----------------------------------------------
    def request_slots(self, job_id: str, count: int, minimum: int | None = None, extend: bool = False) -> None:
        self._pool_event(sp.SlotsRequested(job_id, count, self.clock(), minimum, extend))

    def release_slots(self, job_id: str) -> None:
        self._pool_event(sp.SlotsReleased(job_id))

    def address_of(self, resource_id: str) -> str | None:
        try:
            return self._pool.address_of(resource_id)
        except KeyError:
            return None

    def call_task(
        self,
        job: JobHandle,
        execution_id: str,
        method: str,
        request: Any,
        on_reply: Callable[[Any, str], None] | None = None,
    ) -> None:
        """An RPC to the TaskManager running `execution_id` (taskmanager_rpc.py)."""
        self._calls.call_task(job, execution_id, method, request, on_reply)

    def release_partitions(
        self, job: JobHandle, resource_id: str, partition_ids: Sequence[str], all_of_job: bool = False
    ) -> None:
        """BATCH: ask a TaskManager to delete blocking results (best effort)."""
        self._calls.release_partitions(job, resource_id, partition_ids, all_of_job)

    def run_io(self, job: JobHandle, fn: Callable[[], object], done: Callable[[Exception | None], None]) -> None:
        """Storage I/O off the lock; `done(error)` runs back under the lock (if still leader)."""
        self._calls.run_io(job, fn, done)

    @property
    def _rpc(self) -> concurrent.futures.ThreadPoolExecutor:
        """The thread pool RPCs and storage I/O run on."""
        return self._calls.executor

    def _disconnect(self, resource_id: str, reason: str) -> None:
        self._pool_event(sp.TaskManagerDisconnected(resource_id, reason))

    def _probe_peer(self, job_id: str, address: str) -> None:
        """A task of `job_id` lost its input from the TaskManager at `address`: check it now."""
        for tm in self._pool.taskmanagers():
            if tm.address == address:
                log.info(
                    "[job %s] probing TaskManager %s at %s: a task lost its input from it",
                    job_id,
                    tm.resource_id,
                    address,
                )
                self._rpc.submit(self._probe, tm.resource_id, tm.address, self._session)

    def _probe(self, resource_id: str, address: str, session: str | None) -> None:
        if rpc.is_serving(address, timeout=1.0):
            return
        with self._lock:
            if self._session == session:
                self._pool_event(sp.TaskManagerDisconnected(resource_id, f"unreachable at {address}"))

    # -- slot pool actions -------------------------------------------------------------------------
    def _pool_event(self, event: sp.SlotPoolEvent) -> None:
        self._pool_actions(self._pool.handle(event))

    def _pool_actions(self, actions: list[sp.SlotPoolAction]) -> None:
        for action in actions:
            match action:
                case sp.SlotsAllocated():
                    job = self._jobs[action.job_id]
                    log.info(
                        "[job %s] slots allocated: %s",
                        job.job_id,
                        ", ".join(f"{s.resource_id}:{s.index}" for s in action.slots),
                    )
                    job.on_slots(action.slots, self.clock(), added=action.added)
                case sp.JobWaitingForSlots():
                    job = self._jobs[action.job_id]
                    draining = self._pool.draining_slots()
                    job.on_waiting(
                        f"waiting for slots: needs {action.required}, {action.available} free "
                        f"of {self._pool.total_slots()} in the cluster"
                        + (f"; {draining} still held by cancelled tasks that have not stopped" if draining else "")
                        + (f"; last TaskManager loss: {self._last_loss}" if self._last_loss else "")
                    )
                    log.info("[job %s] %s", job.job_id, job.message)
                case sp.TaskManagerLost():
                    log.warning("TaskManager %s (%s) lost: %s", action.resource_id, action.address, action.reason)
                    self._last_loss = f"TaskManager {action.resource_id} ({action.address}): {action.reason}"
                    self._calls.forget(action.address)
                    for job_id in action.affected_jobs:
                        self._jobs[job_id].on_tm_lost(action.resource_id, action.reason, self.clock(), action.address)
                case sp.UnknownTaskManager():
                    pass  # a disconnect of a TaskManager already lost: nothing left to do
                case sp.RegistrationRejected():
                    pass  # register_taskmanager refuses the caller before carrying out actions
                case _:
                    assert_never(action)

    def read_taskmanager_log(self, resource_id: str, max_bytes: int) -> taskmanager_pb2.ReadLogResponse | None:
        """The tail of a TaskManager's log file through its ReadLog RPC (the REST API's
        /taskmanagers/{id}/log), called on the caller's thread outside the lock; None when no
        living TaskManager has that id. grpc.RpcError when it does not answer within 10 s."""
        session = self._require_leader()
        with self._lock:
            address = self.address_of(resource_id)
        if address is None:
            return None
        return self._calls.read_log(address, session, max_bytes)

    def close(self) -> None:
        self._calls.close()
