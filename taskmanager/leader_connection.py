"""A TaskManager's connection to the leading JobManager's ResourceManager service.

* It follows the leader address and session published in ZooKeeper
  (`on_leader`, called by sluice/zk/leader_retrieval.py), registers with each
  new leader and heartbeats at the interval the leader asks for in its
  registration answer (`heartbeat_interval_ms`; this TaskManager's own
  setting until then, or when the leader sends none). A heartbeat the leader
  does not know, or a lost leader, means registering again. This is an event
  loop, not a retry: it runs for as long as the process does.
* Task reports (state changes, checkpoint acknowledgements and declines) go
  through one ordered queue, so that a task's acks reach the leader before
  its FINISHED. Each report is retried with backoff (tenacity) until
  REPORT_DEADLINE, and dropped once the leader session it was made under has
  ended: the new leader redeploys (docs/architecture.md, "Retries").
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import grpc

from sluice import rpc
from sluice.retries import RetryCallState, retrying
from sluice.states import ExecutionState, FailureCause, to_proto
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc
from taskmanager.task import Task
from taskmanager.task_messages import Failure
from taskmanager.task_registry import TaskRegistry

log = logging.getLogger("sluice.taskmanager")

RPC_TIMEOUT = 5.0  # seconds per call to the leader
REPORT_DEADLINE = 30.0  # seconds a report is retried before it is dropped
MAX_REGISTRATION_BACKOFF = 2.0

Report = (
    jobmanager_pb2.TaskExecutionState
    | jobmanager_pb2.AcknowledgeCheckpointRequest
    | jobmanager_pb2.DeclineCheckpointRequest
)


class _NoLeader(Exception):
    """Between two leaders: no address to send to yet."""


class LeaderConnection:
    def __init__(
        self, resource_id: str, slots: int, tasks: TaskRegistry, heartbeat_interval: float, stopped: threading.Event
    ) -> None:
        self.resource_id = resource_id
        self.slots = slots
        self.tasks = tasks
        self.heartbeat_interval = heartbeat_interval  # configured; the leader's value wins once registered
        self._interval = heartbeat_interval
        self._stopped = stopped
        self._own_address = ""
        self._leader: tuple[str | None, str | None] = (None, None)  # address, session id published in ZooKeeper
        self._leader_changed = threading.Event()
        self._reports: queue.Queue[tuple[str, Report]] = queue.Queue()
        self._report_channel: tuple[str, grpc.Channel] | None = None
        self._split_channel: tuple[str, grpc.Channel] | None = None
        self._split_lock = threading.Lock()
        # A freed slot is told to the leader at once (the next heartbeat's slot report), not an interval later.
        tasks.on_slot_freed(self._leader_changed.set)

    def start(self, own_address: str) -> None:
        """Register as `own_address` with each leader, and deliver reports (daemon threads)."""
        self._own_address = own_address
        threading.Thread(target=self._registration_loop, name="tm-registration", daemon=True).start()
        threading.Thread(target=self._report_loop, name="tm-reports", daemon=True).start()

    def on_leader(self, address: str | None, session_id: str | None) -> None:
        if (address, session_id) != self._leader:
            log.info("leader is now %s (session %s)", address, session_id)
            self._leader = (address, session_id)
            self._leader_changed.set()

    # -- registration and heartbeats -----------------------------------------------------------
    def _registration_loop(self) -> None:
        stub: jobmanager_pb2_grpc.ResourceManagerStub | None = None
        channel: grpc.Channel | None = None
        registered_with: tuple[str, str | None] | None = None
        delay = 0.2
        while not self._stopped.is_set():
            address, session = self._leader
            if address is None:
                self._wait_for_leader_change(1.0)
                continue
            try:
                if stub is None or registered_with != (address, session):
                    # Follow the session published in ZooKeeper before registering: the leader
                    # may deploy to us before its answer to RegisterTaskManager arrives.
                    if session:
                        self.tasks.follow(session)
                    if channel is not None:
                        channel.close()
                    channel = rpc.channel(address)
                    stub = jobmanager_pb2_grpc.ResourceManagerStub(channel)
                    self._register(stub, address)
                    registered_with = (address, session)
                    delay = 0.2
                if not self._heartbeat(stub):
                    log.warning("leader %s does not know this TaskManager; registering again", address)
                    registered_with = None
                    continue
            except grpc.RpcError as err:
                log.warning(
                    "leader %s unreachable (%s: %s); retrying in %.1fs", address, err.code().name, err.details(), delay
                )
                if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    registered_with = None
                self._wait_for_leader_change(delay)
                delay = min(delay * 2, MAX_REGISTRATION_BACKOFF)
                continue
            except Exception:  # this thread must outlive any failure
                log.exception("registration with leader %s failed; retrying", address)
                registered_with = None
                self._stopped.wait(delay)
                continue
            self._wait_for_leader_change(self._interval)

    def _register(self, stub: jobmanager_pb2_grpc.ResourceManagerStub, address: str) -> None:
        resp = stub.RegisterTaskManager(
            jobmanager_pb2.RegisterTaskManagerRequest(
                resource_id=self.resource_id, address=self._own_address, slots=self.slots
            ),
            timeout=RPC_TIMEOUT,
        )
        self.tasks.follow(resp.leader_session_id)
        leader_interval = resp.heartbeat_interval_ms / 1000
        self._interval = leader_interval if leader_interval > 0 else self.heartbeat_interval
        log.info(
            "registered with leader %s (session %s); heartbeats every %.3gs",
            address,
            resp.leader_session_id,
            self._interval,
        )

    def _heartbeat(self, stub: jobmanager_pb2_grpc.ResourceManagerStub) -> bool:
        """One heartbeat with every task's metrics; False when the leader does not know us."""
        resp = stub.Heartbeat(
            jobmanager_pb2.HeartbeatRequest(
                resource_id=self.resource_id,
                leader_session_id=self.tasks.session or "",
                tasks=self.tasks.metrics(),
                slots=self.tasks.slot_report(),  # a slot is free only once its tasks' threads ended
            ),
            timeout=RPC_TIMEOUT,
        )
        return bool(resp.known)

    def _wait_for_leader_change(self, timeout: float) -> None:
        self._leader_changed.wait(timeout)
        self._leader_changed.clear()

    # -- reports (taskmanager.task.TaskReports), one ordered queue: acks before FINISHED -----------------
    def report(
        self, task: Task, state: ExecutionState, failure: Failure | None = None, end_of_input: bool = False
    ) -> None:
        msg = jobmanager_pb2.TaskExecutionState(
            resource_id=self.resource_id,
            leader_session_id=task.tdd.leader_session_id,
            job_id=task.job_id,
            attempt=task.tdd.attempt,
            execution_id=task.execution_id,
            state=to_proto(state),
            counters=task.counters(),
            bad_record_samples=task.bad_record_samples,
            end_of_input=end_of_input,
        )
        if (watermark := task.watermark) is not None:
            msg.watermark = watermark
        if failure is not None:
            msg.error = failure.error
            msg.failure_cause = to_proto(failure.cause)
            if failure.cause == FailureCause.PEER_UNREACHABLE:
                msg.unreachable_peer = failure.unreachable_peer
        self._reports.put(("UpdateTaskExecutionState", msg))

    def acknowledge(self, task: Task, checkpoint_id: int, handle: bytes, size: int) -> None:
        self._reports.put(
            (
                "AcknowledgeCheckpoint",
                jobmanager_pb2.AcknowledgeCheckpointRequest(
                    leader_session_id=task.tdd.leader_session_id,
                    job_id=task.job_id,
                    execution_id=task.execution_id,
                    checkpoint_id=checkpoint_id,
                    state_handle=handle,
                    size_bytes=size,
                ),
            )
        )

    def decline(self, task: Task, checkpoint_id: int, reason: str) -> None:
        self._reports.put(
            (
                "DeclineCheckpoint",
                jobmanager_pb2.DeclineCheckpointRequest(
                    leader_session_id=task.tdd.leader_session_id,
                    job_id=task.job_id,
                    execution_id=task.execution_id,
                    checkpoint_id=checkpoint_id,
                    reason=reason,
                ),
            )
        )

    def request_splits(
        self, task: Task, operator_id: str, received: int, last_checkpoint: int, idle: bool
    ) -> jobmanager_pb2.RequestSplitsResponse | None:
        """A connector source's split request (docs/connectors.md), on the task thread: one
        attempt within RPC_TIMEOUT, None when it failed (the reader asks again later; an
        answer lost on the way is sent again, since the request says what the reader holds)."""
        address = self._leader[0]
        if address is None or task.tdd.leader_session_id != self.tasks.session:
            return None
        with self._split_lock:  # one channel for every task's requests, replaced when the leader moves
            if self._split_channel is None or self._split_channel[0] != address:
                if self._split_channel is not None:
                    self._split_channel[1].close()
                self._split_channel = (address, rpc.channel(address))
            channel = self._split_channel[1]
        try:
            return jobmanager_pb2_grpc.ResourceManagerStub(channel).RequestSplits(
                jobmanager_pb2.RequestSplitsRequest(
                    leader_session_id=task.tdd.leader_session_id,
                    job_id=task.job_id,
                    execution_id=task.execution_id,
                    operator_id=operator_id,
                    received=received,
                    last_checkpoint=last_checkpoint,
                    idle=idle,
                ),
                timeout=RPC_TIMEOUT,
            )
        except grpc.RpcError as err:
            if err.code() in REFUSED:  # the request contradicts the enumerator's log: retrying cannot help
                raise RuntimeError(f"RequestSplits refused by the leader: {_describe(err)}") from None
            log.warning("%s RequestSplits failed: %s", task.tag, _describe(err))
            return None

    def _report_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                method, msg = self._reports.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._deliver(method, msg)
            finally:
                self._reports.task_done()

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until every queued report was delivered (or dropped);
        True when none is left. Before the process gives up: the leader should hear why."""
        deadline = time.monotonic() + timeout
        while self._reports.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _deliver(self, method: str, msg: Report) -> None:
        retry = retrying(
            deadline=REPORT_DEADLINE,
            stopped=self._stopped,
            retry_on=Exception,
            first_wait=0.2,
            max_wait=2.0,
            before_sleep=self._log_retry,
        )
        try:
            retry(self._send, method, msg)
        except Exception as exc:  # noqa: BLE001 — this thread must outlive any failure
            if not self._stopped.is_set():
                log.warning(
                    "[job %s] %s for %s dropped after %.0fs: %s",
                    msg.job_id,
                    method,
                    msg.execution_id,
                    REPORT_DEADLINE,
                    _describe(exc),
                )

    def _send(self, method: str, msg: Report) -> None:
        """One attempt to deliver a report; nothing to do once its leader session has ended."""
        if msg.leader_session_id != self.tasks.session:
            return  # that leader is gone; the new one redeploys
        address = self._leader[0]
        if address is None:
            raise _NoLeader()
        if self._report_channel is None or self._report_channel[0] != address:
            if self._report_channel is not None:
                self._report_channel[1].close()
            self._report_channel = (address, rpc.channel(address))
        stub = jobmanager_pb2_grpc.ResourceManagerStub(self._report_channel[1])
        try:
            getattr(stub, method)(msg, timeout=RPC_TIMEOUT)
        except grpc.RpcError as err:
            if err.code() not in REFUSED:
                raise
            # the leader refused this report for good: retrying would block the ordered queue
            log.warning(
                "[job %s] %s for %s refused by the leader: %s", msg.job_id, method, msg.execution_id, _describe(err)
            )

    def _log_retry(self, state: RetryCallState) -> None:
        method, msg = state.args
        exc = state.outcome.exception() if state.outcome is not None else None
        level = logging.DEBUG if isinstance(exc, _NoLeader) else logging.WARNING
        log.log(
            level,
            "[job %s] %s for %s failed: %s; retrying in %.1fs",
            msg.job_id,
            method,
            msg.execution_id,
            _describe(exc),
            state.upcoming_sleep,
        )


# Answers that no retry can change (docs/protocols.md, Fencing and Bounds).
REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.NOT_FOUND,
    }
)


def _describe(exc: BaseException | None) -> str:
    if isinstance(exc, grpc.RpcError):
        return f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, _NoLeader):
        return "no leader"
    return repr(exc)
