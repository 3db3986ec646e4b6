"""The JobManager's wire edge (jobmanager/servicers.py over the dispatcher), without
sockets: proto enums become sluice.states members on the way in and back on the way
out, bad values are INVALID_ARGUMENT naming the field, a report from another leader
session is FAILED_PRECONDITION, heartbeat metrics find their job by the job id they
carry, and a task failing on an unreachable peer gets exactly that peer probed."""

from __future__ import annotations

import grpc
import pytest

from jobmanager.dispatcher import Dispatcher
from jobmanager.servicers import JobManagerServicer, ResourceManagerServicer
from sluice.api import StreamExecutionEnvironment
from sluice.states import AckOutcome, ExecutionState, FailureCause, JobStatus, from_proto, to_proto
from sluice.v1 import jobmanager_pb2

SESSION = "session-1"


class Aborted(Exception):
    pass


class Context:
    """The part of grpc.ServicerContext the servicers use."""

    def __init__(self) -> None:
        self._code: grpc.StatusCode | None = None
        self.details = ""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self.details = code, details
        raise Aborted(details)

    def code(self) -> grpc.StatusCode | None:
        return self._code


@pytest.fixture
def dispatcher():
    d = Dispatcher("127.0.0.1:1", heartbeat_timeout=6.0, heartbeat_interval=1.0, clock=lambda: 0.0)
    d.grant_leadership(SESSION)
    d.call_task = lambda *_: None  # no TaskManager to call
    yield d
    d.close()


def rm(d: Dispatcher) -> ResourceManagerServicer:
    return ResourceManagerServicer(d, lambda: None)


def call(method, request) -> tuple[object, Context]:
    context = Context()
    try:
        return method(request, context), context
    except Aborted:
        return None, context


def running_job(d: Dispatcher) -> tuple[str, list[str]]:
    """A submitted job holding slots on two TaskManagers, every task deployed."""
    d.register_taskmanager("tm-a", "127.0.0.1:7001", 1)
    d.register_taskmanager("tm-b", "127.0.0.1:7002", 1)
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_collection([{"k": "a"}]).print()
    job_id = d.submit(env.get_job_graph("edges"))
    return job_id, sorted(d._jobs[job_id].graph.executions)


def report(job_id: str, eid: str, state: int, session: str = SESSION, **fields) -> jobmanager_pb2.TaskExecutionState:
    return jobmanager_pb2.TaskExecutionState(
        leader_session_id=session, job_id=job_id, execution_id=eid, state=state, **fields
    )


def test_task_state_arrives_as_a_member(dispatcher):
    job_id, eids = running_job(dispatcher)
    resp, _ = call(rm(dispatcher).UpdateTaskExecutionState, report(job_id, eids[0], to_proto(ExecutionState.RUNNING)))
    assert resp.accepted
    state = dispatcher._jobs[job_id].graph.executions[eids[0]].state
    assert state is ExecutionState.RUNNING


@pytest.mark.parametrize(
    "field,fields",
    [
        ("state", {"state": 0}),  # UNSPECIFIED
        ("state", {"state": 99}),  # not a value of the enum
        ("failure_cause", {"state": to_proto(ExecutionState.FAILED), "failure_cause": 99}),
    ],
)
def test_bad_enum_values_are_invalid_arguments_naming_the_field(dispatcher, field, fields):
    job_id, eids = running_job(dispatcher)
    request = jobmanager_pb2.TaskExecutionState(
        leader_session_id=SESSION, job_id=job_id, execution_id=eids[0], **fields
    )
    resp, context = call(rm(dispatcher).UpdateTaskExecutionState, request)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{field}:" in context.details
    assert dispatcher._jobs[job_id].graph.executions[eids[0]].state is ExecutionState.DEPLOYING


def test_a_report_from_another_leader_session_is_a_failed_precondition(dispatcher):
    job_id, eids = running_job(dispatcher)
    resp, context = call(
        rm(dispatcher).UpdateTaskExecutionState,
        report(job_id, eids[0], to_proto(ExecutionState.RUNNING), session="old-session"),
    )
    assert resp is None and context.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "old-session" in context.details


def test_states_leave_as_proto_enums(dispatcher):
    job_id, eids = running_job(dispatcher)
    jm = JobManagerServicer(dispatcher, lambda: None)
    info, _ = call(jm.GetJob, jobmanager_pb2.GetJobRequest(job_id=job_id))
    assert from_proto(JobStatus, info.state) is JobStatus.RUNNING
    assert {from_proto(ExecutionState, t.state) for t in info.tasks} == {ExecutionState.DEPLOYING}
    ack, _ = call(
        rm(dispatcher).AcknowledgeCheckpoint,
        jobmanager_pb2.AcknowledgeCheckpointRequest(
            leader_session_id=SESSION, job_id=job_id, execution_id=eids[0], checkpoint_id=1, state_handle=b"{}"
        ),
    )
    assert from_proto(AckOutcome, ack.outcome) is AckOutcome.UNKNOWN  # checkpointing is off
    cancelled, _ = call(jm.CancelJob, jobmanager_pb2.CancelJobRequest(job_id=job_id))
    assert from_proto(JobStatus, cancelled.state) is JobStatus.RUNNING  # until the tasks stopped


def test_heartbeat_metrics_find_their_job_by_job_id(dispatcher):
    job_id, eids = running_job(dispatcher)
    request = jobmanager_pb2.HeartbeatRequest(
        resource_id="tm-a",
        leader_session_id=SESSION,
        tasks=[
            jobmanager_pb2.TaskMetrics(
                job_id=job_id, execution_id=eids[0], records_in=5, records_out=3, records_sent=2, records_malformed=1
            ),
            jobmanager_pb2.TaskMetrics(job_id="another-job", execution_id=eids[1], records_in=9, records_out=9),
        ],
    )
    resp, _ = call(rm(dispatcher).Heartbeat, request)
    assert resp.known
    assert dispatcher._jobs[job_id].metrics == {eids[0]: (5, 3, 2, 1)}


def test_a_peer_unreachable_failure_probes_exactly_that_peer(dispatcher):
    job_id, eids = running_job(dispatcher)
    probed = []
    dispatcher._probe = lambda resource_id, address, session: probed.append((resource_id, address, session))
    failed = report(
        job_id,
        eids[0],
        to_proto(ExecutionState.FAILED),
        error="ChannelError: 127.0.0.1:7001 gone",
        failure_cause=to_proto(FailureCause.PEER_UNREACHABLE),
        unreachable_peer="127.0.0.1:7002",
    )
    call(rm(dispatcher).UpdateTaskExecutionState, failed)
    dispatcher._rpc.shutdown(wait=True)
    assert probed == [("tm-b", "127.0.0.1:7002", SESSION)]


def test_a_task_error_probes_nobody_whatever_its_traceback_says(dispatcher):
    job_id, eids = running_job(dispatcher)
    probed = []
    dispatcher._probe = lambda *probe: probed.append(probe)
    failed = report(
        job_id,
        eids[0],
        to_proto(ExecutionState.FAILED),
        error="ChannelError: 127.0.0.1:7002 gone",
        failure_cause=to_proto(FailureCause.TASK_ERROR),
    )
    call(rm(dispatcher).UpdateTaskExecutionState, failed)
    dispatcher._rpc.shutdown(wait=True)
    assert probed == []
