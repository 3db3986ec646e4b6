"""Dispatcher: the JobManager's adapter around its pure cores.

It owns the slot pool and one ExecutionGraph per job, feeds them events
(client calls, TaskManager registrations/heartbeats/reports, ticks) under one
lock, and turns their actions into gRPC calls to TaskManagers, made outside
the lock on a small thread pool. Only the leader acts: without a leader
session id every call is refused and nothing is deployed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
import uuid
from typing import Callable

import grpc

from jobmanager.scheduler import execution_graph as eg
from jobmanager.scheduler import slot_pool as sp
from sluice import graph
from sluice.v1 import common_pb2, jobmanager_pb2, taskmanager_pb2, taskmanager_pb2_grpc

log = logging.getLogger("sluice.jobmanager")


class NotLeader(Exception):
    pass


class JobNotFound(KeyError):
    pass


@dataclasses.dataclass
class JobRecord:
    job_id: str
    job: common_pb2.JobGraph
    chains: list[graph.Chain]
    graph: eg.ExecutionGraph
    submitted_ms: int
    ended_ms: int = 0
    message: str = ""
    slots_required: int = 0
    metrics: dict = dataclasses.field(default_factory=dict)  # execution id -> (in, out)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Dispatcher:
    def __init__(self, address: str, heartbeat_timeout: float = 6.0, heartbeat_interval: float = 1.0,
                 cancel_timeout: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.address = address
        self.heartbeat_timeout = heartbeat_timeout
        self.heartbeat_interval = heartbeat_interval
        self.cancel_timeout = cancel_timeout
        self.clock = clock
        self._lock = threading.RLock()
        self._pool = sp.SlotPool(heartbeat_timeout)
        self._jobs: dict[str, JobRecord] = {}
        self._session: str | None = None
        self._rpc = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="jm-rpc")
        self._channels: dict[str, grpc.Channel] = {}

    # -- leadership ---------------------------------------------------------------
    def grant_leadership(self, session_id: str) -> None:
        with self._lock:
            self._session = session_id
            self._pool = sp.SlotPool(self.heartbeat_timeout)  # TaskManagers register anew with each leader
        log.info("leadership granted, session %s", session_id)

    def revoke_leadership(self) -> None:
        with self._lock:
            self._session = None
        log.warning("leadership revoked: stop acting")

    @property
    def session_id(self) -> str | None:
        return self._session

    def _require_leader(self) -> str:
        if self._session is None:
            raise NotLeader()
        return self._session

    # -- client calls ---------------------------------------------------------------
    def submit(self, job: common_pb2.JobGraph) -> str:
        self._require_leader()
        graph.validate(job)
        if not job.max_parallelism:
            job.max_parallelism = graph.DEFAULT_MAX_PARALLELISM
        chains = graph.build_chains(job)
        job_id = uuid.uuid4().hex
        infos = [eg.ChainInfo(c.id, c.name, c.parallelism) for c in chains]
        rec = JobRecord(job_id, job, chains, eg.ExecutionGraph(job_id, infos, cancel_timeout=self.cancel_timeout),
                        _now_ms(), slots_required=graph.slots_required(job))
        with self._lock:
            self._jobs[job_id] = rec
            log.info("[job %s] submitted %r: %d tasks in %d slots", job_id, job.name, len(rec.graph.executions),
                     rec.slots_required)
            self._apply_pool(sp.SlotsRequested(job_id, rec.slots_required, self.clock()))
        return job_id

    def cancel(self, job_id: str) -> str:
        self._require_leader()
        with self._lock:
            rec = self._record(job_id)
            if rec.graph.state in eg.JOB_TERMINAL:
                raise ValueError(f"job {job_id} already ended {rec.graph.state}")
            log.info("[job %s] cancel requested", job_id)
            if rec.graph.state == eg.CREATED:
                self._apply_pool(sp.SlotsReleased(job_id))
            self._apply_job(rec, rec.graph.handle(eg.CancelRequested(self.clock())))
            return public_state(rec.graph.state)

    def job_info(self, job_id: str) -> common_pb2.JobInfo:
        self._require_leader()
        with self._lock:
            return self._info(self._record(job_id))

    def list_jobs(self) -> list[common_pb2.JobInfo]:
        self._require_leader()
        with self._lock:
            return [self._info(r) for r in sorted(self._jobs.values(), key=lambda r: r.submitted_ms)]

    def cluster_overview(self) -> jobmanager_pb2.ClusterOverview:
        self._require_leader()
        with self._lock:
            now = self.clock()
            out = jobmanager_pb2.ClusterOverview(leader=self.address, total_slots=self._pool.total_slots(),
                                                 free_slots=self._pool.free_slots())
            for tm in self._pool.taskmanagers():
                out.taskmanagers.add(resource_id=tm.resource_id, address=tm.address, slots=tm.slots,
                                     free_slots=tm.free, seconds_since_heartbeat=max(0.0, now - tm.last_heartbeat))
            return out

    def _record(self, job_id: str) -> JobRecord:
        rec = self._jobs.get(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        return rec

    def _info(self, rec: JobRecord) -> common_pb2.JobInfo:
        g = rec.graph
        info = common_pb2.JobInfo(
            job_id=rec.job_id, name=rec.job.name, state=public_state(g.state), restarts=0,
            leader=self.address, message=rec.message, failure=g.failure, submitted_ms=rec.submitted_ms,
            ended_ms=rec.ended_ms, slots_required=rec.slots_required, slots_available=self._pool.free_slots())
        if g.state == eg.FAILING:
            info.message = "failing: cancelling the remaining tasks"
        elif g.state == eg.CANCELLING:
            info.message = "cancelling"
        for ex in g.executions.values():
            address = ""
            if ex.slot is not None:
                try:
                    address = self._pool.address_of(ex.slot.resource_id)
                except KeyError:
                    address = ex.slot.resource_id
            rin, rout = rec.metrics.get(ex.execution_id, (0, 0))
            info.tasks.add(operator=ex.name, subtask=ex.subtask, state=ex.state, taskmanager=address,
                           error=ex.error, records_in=rin, records_out=rout)
        return info

    # -- TaskManager calls -------------------------------------------------------------
    def register_taskmanager(self, resource_id: str, address: str, slots: int) -> str:
        session = self._require_leader()
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        with self._lock:
            log.info("TaskManager %s registered at %s with %d slots", resource_id, address, slots)
            self._apply_pool(sp.TaskManagerRegistered(resource_id, address, slots, self.clock()))
        return session

    def heartbeat(self, resource_id: str, session_id: str, metrics: list[tuple[str, int, int]]) -> bool:
        self._check_session(session_id)
        with self._lock:
            actions = self._pool.handle(sp.HeartbeatReceived(resource_id, self.clock()))
            if any(isinstance(a, sp.UnknownTaskManager) for a in actions):
                return False
            for eid, rin, rout in metrics:
                rec = self._jobs.get(eid.split("/", 1)[0])
                if rec is not None:
                    rec.metrics[eid] = (rin, rout)
            return True

    def update_task_state(self, session_id: str, job_id: str, execution_id: str, state: str, error: str,
                          records: tuple[int, int] = (0, 0)) -> bool:
        self._check_session(session_id)
        with self._lock:
            rec = self._jobs.get(job_id)
            if rec is None:
                return False
            if execution_id in rec.graph.executions:
                rec.metrics[execution_id] = records
            log.info("[job %s] task %s -> %s%s", job_id, execution_id, state, f": {error.splitlines()[-1]}" if error else "")
            actions = rec.graph.handle(eg.TaskStateReported(execution_id, state, error, self.clock()))
            self._apply_job(rec, actions)
            return not any(isinstance(a, eg.Ignored) for a in actions)

    def _check_session(self, session_id: str) -> None:
        current = self._require_leader()
        if session_id != current:
            raise PermissionError(f"leader session {session_id!r} is not the current one")

    # -- time ----------------------------------------------------------------------------
    def tick(self) -> None:
        if self._session is None:
            return
        with self._lock:
            now = self.clock()
            self._apply_pool(sp.Tick(now))
            for rec in list(self._jobs.values()):
                self._apply_job(rec, rec.graph.handle(eg.Tick(now)))

    # -- actions -------------------------------------------------------------------------
    def _apply_pool(self, event) -> None:
        for action in self._pool.handle(event):
            if isinstance(action, sp.SlotsAllocated):
                rec = self._jobs[action.job_id]
                rec.message = ""
                log.info("[job %s] slots allocated: %s", rec.job_id,
                         ", ".join(f"{s.resource_id}:{s.index}" for s in action.slots))
                self._apply_job(rec, rec.graph.handle(eg.SlotsAssigned(action.slots, self.clock())))
            elif isinstance(action, sp.JobWaitingForSlots):
                rec = self._jobs[action.job_id]
                rec.message = (f"waiting for slots: needs {action.required}, {action.available} free "
                               f"of {self._pool.total_slots()} in the cluster")
                log.info("[job %s] %s", rec.job_id, rec.message)
            elif isinstance(action, sp.TaskManagerLost):
                log.warning("TaskManager %s (%s) lost: %s", action.resource_id, action.address, action.reason)
                for job_id in action.affected_jobs:
                    rec = self._jobs[job_id]
                    self._apply_job(rec, rec.graph.handle(eg.TaskManagerLost(action.resource_id, action.reason, self.clock())))

    def _apply_job(self, rec: JobRecord, actions: list) -> None:
        for action in actions:
            if isinstance(action, eg.DeployExecutions):
                for eid in action.execution_ids:
                    self._submit_rpc(rec, eid)
            elif isinstance(action, eg.CancelExecutions):
                for eid in action.execution_ids:
                    self._cancel_rpc(rec, eid)
            elif isinstance(action, eg.JobStatusChanged):
                log.info("[job %s] %s -> %s", rec.job_id, action.old, action.new)
            elif isinstance(action, eg.JobTerminated):
                rec.ended_ms = _now_ms()
                rec.message = ""
                log.info("[job %s] ended %s%s", rec.job_id, action.state,
                         f": {action.failure.splitlines()[0]}" if action.failure else "")
                self._apply_pool(sp.SlotsReleased(rec.job_id))
            elif isinstance(action, eg.Ignored):
                log.debug("[job %s] ignored: %s", rec.job_id, action.reason)

    # -- RPCs (run outside the lock) ------------------------------------------------------
    def _stub(self, address: str) -> taskmanager_pb2_grpc.TaskExecutorStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.insecure_channel(address)
        return taskmanager_pb2_grpc.TaskExecutorStub(ch)

    def _submit_rpc(self, rec: JobRecord, eid: str) -> None:
        tdd = self._deployment_descriptor(rec, eid)
        address = self._pool.address_of(rec.graph.executions[eid].slot.resource_id)
        session = self._session

        def call() -> None:
            try:
                self._stub(address).SubmitTask(tdd, timeout=30)
            except grpc.RpcError as err:
                log.warning("[job %s] deploying %s to %s failed: %s", rec.job_id, eid, address, err.details())
                with self._lock:
                    if self._session == session:
                        self._apply_job(rec, rec.graph.handle(eg.DeploymentFailed(eid, f"{address}: {err.details()}", self.clock())))
        self._rpc.submit(call)

    def _cancel_rpc(self, rec: JobRecord, eid: str) -> None:
        slot = rec.graph.executions[eid].slot
        try:
            address = self._pool.address_of(slot.resource_id)
        except KeyError:
            return  # its TaskManager is gone; the cancel timeout settles it
        req = taskmanager_pb2.CancelTaskRequest(leader_session_id=self._session or "", job_id=rec.job_id, execution_id=eid)

        def call() -> None:
            try:
                self._stub(address).CancelTask(req, timeout=10)
            except grpc.RpcError as err:
                log.warning("[job %s] cancelling %s on %s failed: %s", rec.job_id, eid, address, err.details())
        self._rpc.submit(call)

    def _deployment_descriptor(self, rec: JobRecord, eid: str) -> taskmanager_pb2.TaskDeploymentDescriptor:
        g, ex = rec.graph, rec.graph.executions[eid]
        by_id = {c.id: c for c in rec.chains}
        chain_of = graph.chain_of(rec.chains)
        chain = by_id[ex.chain_id]
        tdd = taskmanager_pb2.TaskDeploymentDescriptor(
            leader_session_id=self._session or "", job_id=rec.job_id, attempt=g.attempt, execution_id=eid,
            chain_id=chain.id, operator_ids=list(chain.operator_ids), subtask_index=ex.subtask,
            parallelism=chain.parallelism, slot_index=ex.slot.index, job=rec.job)
        for edge in chain.inputs:
            upstream = chain_of[edge.source]
            gate = tdd.inputs.add(upstream_chain=upstream.id)
            for j in range(upstream.parallelism):
                slot = g.slot_of(upstream.id, j)
                gate.channels.add(partition_id=partition_id(rec.job_id, g.attempt, upstream.id, edge.target, j),
                                  address=self._pool.address_of(slot.resource_id))
        for edge in chain.outputs:
            target = chain_of[edge.target]
            tdd.outputs.add(partition_id=partition_id(rec.job_id, g.attempt, chain.id, edge.target, ex.subtask),
                            target_chain=target.id, partitioning=edge.partitioning, key=edge.key,
                            num_subpartitions=target.parallelism)
        return tdd

    def close(self) -> None:
        self._rpc.shutdown(wait=False, cancel_futures=True)
        for ch in self._channels.values():
            ch.close()


def partition_id(job_id: str, attempt: int, chain_id: str, target_op: str, subtask: int) -> str:
    return f"{job_id}/{attempt}/{chain_id}->{target_op}/{subtask}"


def public_state(internal: str) -> str:
    """States of the status contract; winding down still counts as RUNNING."""
    return {eg.FAILING: "RUNNING", eg.CANCELLING: "RUNNING"}.get(internal, internal)
