"""The JobManager's wire edge (jobmanager/servicers.py over the dispatcher), without
sockets: proto enums become sluice.states members on the way in and back on the way
out, bad values are INVALID_ARGUMENT naming the field, a report from another leader
session is FAILED_PRECONDITION, heartbeat metrics find their job by the job id they
carry, and a task failing on an unreachable peer gets exactly that peer probed.

Fencing that cannot be forged (docs/protocols.md, "Fencing"): a resource id is bound
to the identity (or, on plaintext, the address) that registered it; reports, acks and
heartbeats are taken only from the TaskManager an execution was deployed to; a state
handle must point inside its checkpoint's directory; no error text carries the leader
session id; every request meets its bounds (INVALID_ARGUMENT), and ListJobs pages."""

from __future__ import annotations

import json
import os

import grpc
import pytest
from servicer_calls import SESSION, call, register, report, rm, where

from jobmanager.dispatcher import Dispatcher
from jobmanager.servicers import (
    MAX_HEARTBEAT_TASKS,
    MAX_ID_LENGTH,
    MAX_KEY_GROUP_RECORDS,
    JobManagerServicer,
)
from sluice.api import StreamExecutionEnvironment
from sluice.states import AckOutcome, ExecutionState, FailureCause, JobStatus, from_proto, to_proto
from sluice.v1 import common_pb2, jobmanager_pb2


@pytest.fixture
def dispatcher(monkeypatch):
    d = Dispatcher("127.0.0.1:1", heartbeat_timeout=6.0, heartbeat_interval=1.0, clock=lambda: 0.0)
    d.grant_leadership(SESSION)
    monkeypatch.setattr(d, "call_task", lambda *_: None)  # no TaskManager to call
    yield d
    d.close()


def running_job(d: Dispatcher) -> tuple[str, list[str]]:
    """A submitted job holding slots on two TaskManagers (tm-a and tm-b, registered here
    unless they are already), every task deployed."""
    for rid, port in (("tm-a", 7001), ("tm-b", 7002)):
        if d._pool.registered(rid) is None:
            d.register_taskmanager(rid, f"127.0.0.1:{port}", 1)
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_collection([{"k": "a"}]).print()
    job_id = d.submit(env.get_job_graph("edges"))
    return job_id, sorted(d._jobs[job_id].graph.executions)


def test_task_state_arrives_as_a_member(dispatcher):
    job_id, eids = running_job(dispatcher)
    resp, _ = call(
        rm(dispatcher).UpdateTaskExecutionState, report(dispatcher, job_id, eids[0], to_proto(ExecutionState.RUNNING))
    )
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
        leader_session_id=SESSION,
        resource_id=where(dispatcher, job_id, eids[0]),
        job_id=job_id,
        execution_id=eids[0],
        **fields,
    )
    resp, context = call(rm(dispatcher).UpdateTaskExecutionState, request)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{field}:" in context.details
    assert dispatcher._jobs[job_id].graph.executions[eids[0]].state is ExecutionState.DEPLOYING


def test_a_report_from_another_leader_session_is_a_failed_precondition(dispatcher):
    job_id, eids = running_job(dispatcher)
    resp, context = call(
        rm(dispatcher).UpdateTaskExecutionState,
        report(dispatcher, job_id, eids[0], to_proto(ExecutionState.RUNNING), session="old-session"),
    )
    assert resp is None and context.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "earlier leader" in context.details
    assert "old-session" not in context.details and SESSION not in context.details


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
        resource_id=where(dispatcher, job_id, eids[0]),
        leader_session_id=SESSION,
        tasks=[
            jobmanager_pb2.TaskMetrics(
                job_id=job_id,
                execution_id=eids[0],
                counters=common_pb2.TaskCounters(records_in=5, records_out=3, records_sent=2, records_malformed=1),
            ),
            jobmanager_pb2.TaskMetrics(
                job_id="another-job",
                execution_id=eids[1],
                counters=common_pb2.TaskCounters(records_in=9, records_out=9),
            ),
        ],
    )
    resp, _ = call(rm(dispatcher).Heartbeat, request)
    assert resp.known
    metrics = dispatcher._jobs[job_id].metrics
    c = metrics[eids[0]].counters
    assert list(metrics) == [eids[0]]
    assert (c.records_in, c.records_out, c.records_sent, c.records_malformed) == (5, 3, 2, 1)


def test_a_peer_unreachable_failure_probes_exactly_that_peer(dispatcher):
    job_id, eids = running_job(dispatcher)
    probed = []
    dispatcher._probe = lambda resource_id, address, session: probed.append((resource_id, address, session))
    failed = report(
        dispatcher,
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
        dispatcher,
        job_id,
        eids[0],
        to_proto(ExecutionState.FAILED),
        error="ChannelError: 127.0.0.1:7002 gone",
        failure_cause=to_proto(FailureCause.TASK_ERROR),
    )
    call(rm(dispatcher).UpdateTaskExecutionState, failed)
    dispatcher._rpc.shutdown(wait=True)
    assert probed == []


# -- registration: bounds and binding ------------------------------------------------------------


@pytest.mark.parametrize("slots", [0, -1, 257, 2**31 - 1])
def test_slots_out_of_bounds_are_invalid_arguments_and_allocate_nothing(dispatcher, slots):
    resp, context = register(dispatcher, "rogue", "127.0.0.1:7009", slots)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "slots" in context.details and "slotmanager.max-slots-per-taskmanager" in context.details
    assert dispatcher.cluster_overview().total_slots == 0


def test_the_slot_limit_is_the_dispatchers_option():
    d = Dispatcher("127.0.0.1:1", 6.0, 1.0, clock=lambda: 0.0, max_slots_per_taskmanager=4)
    d.grant_leadership(SESSION)
    try:
        assert register(d, "tm", "127.0.0.1:7001", 4)[0].leader_session_id == SESSION
        assert register(d, "tm2", "127.0.0.1:7002", 5)[1].code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        d.close()


@pytest.mark.parametrize(
    "resource_id,address,field",
    [
        ("", "127.0.0.1:7001", "resource_id"),
        ("x" * (MAX_ID_LENGTH + 1), "127.0.0.1:7001", "resource_id"),
        ("tm", "", "address"),
        ("tm", "no-port", "address"),
        ("tm", "host:99999", "address"),
        ("tm", "h" * 400 + ":1", "address"),
    ],
)
def test_registration_fields_are_bounded(dispatcher, resource_id, address, field):
    resp, context = register(dispatcher, resource_id, address, 1)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{field}:" in context.details


def test_a_resource_id_registered_by_another_identity_is_refused(dispatcher):
    assert register(dispatcher, "tm-1", "10.0.0.1:7001", 2, "taskmanager/tm-1")[0] is not None
    resp, context = register(dispatcher, "tm-1", "10.0.0.9:7001", 2, "taskmanager/rogue")
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    resp, context = register(dispatcher, "tm-1", "10.0.0.1:7001", 2, "taskmanager/rogue")  # even at its address
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    (tm,) = dispatcher.cluster_overview().taskmanagers
    assert (tm.resource_id, tm.address, tm.slots) == ("tm-1", "10.0.0.1:7001", 2)


def test_the_same_identity_registering_again_is_its_restart(dispatcher):
    register(dispatcher, "tm-1", "10.0.0.1:7001", 2, "taskmanager/tm-1")
    assert register(dispatcher, "tm-1", "10.0.0.1:7002", 3, "taskmanager/tm-1")[0] is not None
    (tm,) = dispatcher.cluster_overview().taskmanagers
    assert (tm.address, tm.slots) == ("10.0.0.1:7002", 3)


def test_on_plaintext_a_resource_id_is_bound_to_its_address(dispatcher):
    register(dispatcher, "tm-1", "10.0.0.1:7001", 2)
    assert register(dispatcher, "tm-1", "10.0.0.1:7001", 2)[0] is not None  # the same registration again
    resp, context = register(dispatcher, "tm-1", "10.0.0.9:7001", 2)
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "own" in context.details  # says what to fix: a resource id of its own
    resp, context = register(dispatcher, "tm-1", "10.0.0.1:7001", 64)
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    (tm,) = dispatcher.cluster_overview().taskmanagers
    assert (tm.address, tm.slots) == ("10.0.0.1:7001", 2)


def test_only_taskmanager_certificates_register(dispatcher):
    resp, context = register(dispatcher, "tm-1", "10.0.0.1:7001", 2, "client/admin")
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED


# -- reports only from the owner ---------------------------------------------------------------
def identified_job(d: Dispatcher) -> tuple[str, list[str]]:
    """`running_job` on a secured cluster: tm-a and tm-b registered by their own certificates."""
    register(d, "tm-a", "127.0.0.1:7001", 1, "taskmanager/tm-a")
    register(d, "tm-b", "127.0.0.1:7002", 1, "taskmanager/tm-b")
    return running_job(d)


def owner(d: Dispatcher, job_id: str, eid: str) -> str:
    return f"taskmanager/{where(d, job_id, eid)}"


@pytest.mark.parametrize("state", [ExecutionState.FINISHED, ExecutionState.FAILED])
def test_a_report_from_another_taskmanager_is_permission_denied(dispatcher, state):
    job_id, eids = identified_job(dispatcher)
    eid = eids[0]
    other = "taskmanager/tm-b" if owner(dispatcher, job_id, eid) == "taskmanager/tm-a" else "taskmanager/tm-a"
    for identity in (other, "taskmanager/rogue", None):
        resp, context = call(
            rm(dispatcher).UpdateTaskExecutionState, report(dispatcher, job_id, eid, to_proto(state)), identity
        )
        assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED, identity
    assert dispatcher._jobs[job_id].graph.executions[eid].state is ExecutionState.DEPLOYING
    resp, _ = call(
        rm(dispatcher).UpdateTaskExecutionState,
        report(dispatcher, job_id, eid, to_proto(ExecutionState.RUNNING)),
        owner(dispatcher, job_id, eid),
    )
    assert resp.accepted  # the owner still reports


def test_on_plaintext_a_report_must_name_the_taskmanager_it_runs_on(dispatcher):
    job_id, eids = running_job(dispatcher)
    elsewhere = "tm-b" if where(dispatcher, job_id, eids[0]) == "tm-a" else "tm-a"
    finished = report(dispatcher, job_id, eids[0], to_proto(ExecutionState.FINISHED), resource_id=elsewhere)
    resp, context = call(rm(dispatcher).UpdateTaskExecutionState, finished)
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    assert dispatcher._jobs[job_id].graph.executions[eids[0]].state is ExecutionState.DEPLOYING


def test_a_report_about_an_execution_never_deployed_is_not_accepted(dispatcher):
    job_id, _ = running_job(dispatcher)
    forged = report(dispatcher, job_id, f"{job_id}/made-up/0", to_proto(ExecutionState.FINISHED), resource_id="tm-a")
    resp, context = call(rm(dispatcher).UpdateTaskExecutionState, forged)
    assert context.code() is None and not resp.accepted


def test_a_heartbeat_for_another_identitys_resource_id_is_permission_denied(dispatcher):
    job_id, eids = identified_job(dispatcher)
    rid = where(dispatcher, job_id, eids[0])
    beat = jobmanager_pb2.HeartbeatRequest(
        resource_id=rid,
        leader_session_id=SESSION,
        tasks=[
            jobmanager_pb2.TaskMetrics(
                job_id=job_id, execution_id=eids[0], counters=common_pb2.TaskCounters(records_in=7)
            )
        ],
    )
    resp, context = call(rm(dispatcher).Heartbeat, beat, "taskmanager/rogue")
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    assert dispatcher._jobs[job_id].metrics == {}
    assert call(rm(dispatcher).Heartbeat, beat, f"taskmanager/{rid}")[0].known


def test_heartbeat_metrics_count_only_for_the_senders_executions(dispatcher):
    job_id, eids = running_job(dispatcher)
    elsewhere = "tm-b" if where(dispatcher, job_id, eids[0]) == "tm-a" else "tm-a"
    beat = jobmanager_pb2.HeartbeatRequest(
        resource_id=elsewhere,
        leader_session_id=SESSION,
        tasks=[
            jobmanager_pb2.TaskMetrics(
                job_id=job_id, execution_id=eids[0], counters=common_pb2.TaskCounters(records_in=7)
            )
        ],
    )
    assert call(rm(dispatcher).Heartbeat, beat)[0].known
    assert dispatcher._jobs[job_id].metrics == {}


def test_a_heartbeat_older_than_a_tasks_final_report_does_not_overwrite_its_counts(dispatcher):
    """A heartbeat built before a task finished may arrive after its FINISHED report: the final
    report's counts stay (e.g. the malformed rows a source counted at its very end)."""
    job_id, eids = running_job(dispatcher)
    finished = report(
        dispatcher,
        job_id,
        eids[0],
        to_proto(ExecutionState.FINISHED),
        counters=common_pb2.TaskCounters(records_in=106, records_malformed=5),
    )
    assert call(rm(dispatcher).UpdateTaskExecutionState, finished)[0].accepted
    late = jobmanager_pb2.HeartbeatRequest(
        resource_id=where(dispatcher, job_id, eids[0]),
        leader_session_id=SESSION,
        tasks=[
            jobmanager_pb2.TaskMetrics(
                job_id=job_id,
                execution_id=eids[0],
                counters=common_pb2.TaskCounters(records_in=100, records_malformed=0),
            )
        ],
    )
    assert call(rm(dispatcher).Heartbeat, late)[0].known
    kept = dispatcher._jobs[job_id].metrics[eids[0]]
    assert (kept.counters.records_in, kept.counters.records_malformed) == (106, 5)


def test_a_heartbeat_with_too_many_tasks_is_refused(dispatcher):
    running_job(dispatcher)
    beat = jobmanager_pb2.HeartbeatRequest(
        resource_id="tm-a",
        leader_session_id=SESSION,
        tasks=[jobmanager_pb2.TaskMetrics(job_id="j", execution_id="e")] * (MAX_HEARTBEAT_TASKS + 1),
    )
    resp, context = call(rm(dispatcher).Heartbeat, beat)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and "tasks:" in context.details


def test_a_stored_task_error_is_cut_with_a_note(dispatcher):
    job_id, eids = running_job(dispatcher)
    huge = "Traceback (most recent call last):\n" + "x" * 1_000_000 + "\nValueError: the end"
    failed = report(dispatcher, job_id, eids[0], to_proto(ExecutionState.FAILED), error=huge)
    assert call(rm(dispatcher).UpdateTaskExecutionState, failed)[0].accepted
    stored = dispatcher._jobs[job_id].graph.executions[eids[0]].error
    assert len(stored) < 10_000 and "characters cut" in stored and stored.endswith("ValueError: the end")


# -- acknowledgements -----------------------------------------------------------------------------
@pytest.fixture
def checkpointing(tmp_path, monkeypatch):
    """A dispatcher whose running job has checkpoint 1 pending; (dispatcher, job id, eids, dir)."""
    now = [0.0]
    d = Dispatcher("127.0.0.1:1", heartbeat_timeout=60.0, heartbeat_interval=1.0, clock=lambda: now[0])
    d.grant_leadership(SESSION)
    monkeypatch.setattr(d, "call_task", lambda *_: None)
    register(d, "tm-a", "127.0.0.1:7001", 1, "taskmanager/tm-a")
    register(d, "tm-b", "127.0.0.1:7002", 1, "taskmanager/tm-b")
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.set_config("execution.checkpointing.interval", "1s")
    env.set_config("state.checkpoints.dir", str(tmp_path / "checkpoints"))
    env.from_collection([{"k": "a"}]).print()
    job_id = d.submit(env.get_job_graph("checkpointed"))
    eids = sorted(d._jobs[job_id].graph.executions)
    for eid in eids:
        running = report(d, job_id, eid, to_proto(ExecutionState.RUNNING))
        assert call(rm(d).UpdateTaskExecutionState, running, f"taskmanager/{where(d, job_id, eid)}")[0].accepted
    now[0] = 5.0
    d.tick()
    coordinator = d._jobs[job_id].coordinator
    assert coordinator is not None and coordinator.pending_id == 1
    yield d, job_id, eids, d._jobs[job_id].storage
    d.close()


def ack(d: Dispatcher, job_id: str, eid: str, handle: bytes, identity: str | None = "owner"):
    request = jobmanager_pb2.AcknowledgeCheckpointRequest(
        leader_session_id=SESSION, job_id=job_id, execution_id=eid, checkpoint_id=1, state_handle=handle
    )
    who = f"taskmanager/{where(d, job_id, eid)}" if identity == "owner" else identity
    return call(rm(d).AcknowledgeCheckpoint, request, who)


def keyed_handle(op_id: str, path: str) -> bytes:
    return json.dumps({"operators": {}, "keyed": {op_id: {"path": path, "key_groups": [0, 1], "rows": 1}}}).encode()


def test_an_ack_from_a_non_owner_is_permission_denied_and_the_owners_ack_counts(checkpointing):
    d, job_id, eids, _ = checkpointing
    resp, context = ack(d, job_id, eids[0], b"{}", "taskmanager/rogue")
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    for eid in eids:
        assert from_proto(AckOutcome, ack(d, job_id, eid, b"{}")[0].outcome) is AckOutcome.SUCCESS


def test_an_ack_with_a_foreign_state_handle_is_refused_and_the_checkpoint_waits(checkpointing, tmp_path):
    d, job_id, eids, storage = checkpointing
    op_id = d._jobs[job_id].chain_by_id[d._jobs[job_id].graph.executions[eids[0]].chain_id].operator_ids[0]
    outside = tmp_path / "elsewhere.arrow"
    outside.write_bytes(b"x")
    link_dir = f"{storage.checkpoint_dir(1)}/{op_id}"
    os.makedirs(link_dir)
    os.symlink(outside, f"{link_dir}/0.arrow")
    for path in (str(outside), f"{storage.checkpoint_dir(1)}/../../x.arrow", f"{link_dir}/0.arrow"):
        resp, context = ack(d, job_id, eids[0], keyed_handle(op_id, path))
        assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT, path
        assert "not inside the checkpoint directory" in context.details
    coordinator = d._jobs[job_id].coordinator
    assert coordinator.pending_id == 1 and coordinator.latest_completed() is None
    inside = f"{storage.checkpoint_dir(1)}/{op_id}/1.arrow"
    assert from_proto(AckOutcome, ack(d, job_id, eids[0], keyed_handle(op_id, inside))[0].outcome) is (
        AckOutcome.SUCCESS
    )


@pytest.mark.parametrize("field,value", [("checkpoint_id", {"checkpoint_id": -1}), ("size_bytes", {"size_bytes": -5})])
def test_negative_checkpoint_numbers_are_invalid(checkpointing, field, value):
    d, job_id, eids, _ = checkpointing
    request = jobmanager_pb2.AcknowledgeCheckpointRequest(
        leader_session_id=SESSION, job_id=job_id, execution_id=eids[0], **{"checkpoint_id": 1, **value}
    )
    resp, context = call(rm(d).AcknowledgeCheckpoint, request, f"taskmanager/{where(d, job_id, eids[0])}")
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and f"{field}:" in context.details


# -- no session id in error texts -----------------------------------------------------------------
def test_no_error_text_carries_the_leader_session(dispatcher):
    job_id, eids = identified_job(dispatcher)
    update, deploying = rm(dispatcher).UpdateTaskExecutionState, common_pb2.EXECUTION_STATE_DEPLOYING
    texts = [
        call(update, report(dispatcher, job_id, eids[0], deploying, session="x"))[1].details,
        call(update, report(dispatcher, job_id, eids[0], deploying), "taskmanager/r")[1].details,
        register(dispatcher, "tm-a", "127.0.0.1:7001", 1, "taskmanager/rogue")[1].details,
        register(dispatcher, "tm-x", "127.0.0.1:7001", 2**31 - 1)[1].details,
    ]
    assert all(texts) and not [t for t in texts if SESSION in t]


# -- ListJobs pages ------------------------------------------------------------------------------
def submit_jobs(d: Dispatcher, n: int) -> list[str]:
    d.register_taskmanager("tm-a", "127.0.0.1:7001", 4)
    ids = []
    for i in range(n):
        env = StreamExecutionEnvironment()
        env.from_collection([{"k": "a"}]).print()
        ids.append(d.submit(env.get_job_graph(f"job-{i}")))
    return sorted(ids, key=lambda j: (d._jobs[j].submitted_ms, j))


def test_list_jobs_pages_through_summaries(dispatcher):
    expected = submit_jobs(dispatcher, 5)
    jm = JobManagerServicer(dispatcher, lambda: None)
    seen, token, pages = [], "", 0
    while True:
        page, _ = call(jm.ListJobs, jobmanager_pb2.ListJobsRequest(page_size=2, page_token=token))
        pages += 1
        assert len(page.jobs) <= 2
        assert all(not j.tasks and not j.checkpoints and not j.exceptions for j in page.jobs)
        seen += [j.job_id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == expected and pages == 3
    whole, _ = call(jm.ListJobs, jobmanager_pb2.ListJobsRequest())
    assert [j.job_id for j in whole.jobs] == expected and not whole.next_page_token


@pytest.mark.parametrize(
    "request_fields,field", [({"page_size": -1}, "page_size"), ({"page_token": "garbage"}, "page_token")]
)
def test_bad_list_jobs_requests_are_invalid(dispatcher, request_fields, field):
    resp, context = call(
        JobManagerServicer(dispatcher, lambda: None).ListJobs, jobmanager_pb2.ListJobsRequest(**request_fields)
    )
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and f"{field}:" in context.details


def test_a_heartbeat_with_too_many_key_group_counts_is_refused(dispatcher):
    running_job(dispatcher)
    metrics = jobmanager_pb2.TaskMetrics(job_id="j", execution_id="e")
    metrics.key_group_records.update({kg: 1 for kg in range(MAX_KEY_GROUP_RECORDS + 1)})
    beat = jobmanager_pb2.HeartbeatRequest(resource_id="tm-a", leader_session_id=SESSION, tasks=[metrics])
    resp, context = call(rm(dispatcher).Heartbeat, beat)
    assert (
        resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and "key_group_records" in context.details
    )


def jm(d: Dispatcher) -> JobManagerServicer:
    return JobManagerServicer(d, lambda: None)


@pytest.mark.parametrize(
    ("method", "request_", "code", "message"),
    [
        ("TriggerSavepoint", {"job_id": "x" * (MAX_ID_LENGTH + 1)}, "INVALID_ARGUMENT", "job_id"),
        ("TriggerSavepoint", {"job_id": "nope"}, "NOT_FOUND", "no job with id"),
        ("TriggerSavepoint", {"job_id": "J", "target_directory": "d" * 5000}, "INVALID_ARGUMENT", "target_directory"),
        ("StopJob", {"job_id": "J", "target_directory": "a\0b"}, "INVALID_ARGUMENT", "target_directory"),
        ("TriggerSavepoint", {"job_id": "J"}, "FAILED_PRECONDITION", "runs without checkpointing"),
        ("ReconfigureJob", {"job_id": "J", "operator_uid": "x", "parallelism": -1}, "INVALID_ARGUMENT", "parallelism"),
        ("ReconfigureJob", {"job_id": "J", "operator_uid": "", "parallelism": 2}, "INVALID_ARGUMENT", "operator_uid"),
        ("ReconfigureJob", {"job_id": "J", "operator_uid": "x", "parallelism": 2}, "FAILED_PRECONDITION", "without"),
        ("GetJobGraph", {"job_id": "nope"}, "NOT_FOUND", "no job with id"),
    ],
)
def test_savepoint_and_reconfiguration_requests_are_checked_at_the_edge(dispatcher, method, request_, code, message):
    job_id, _ = running_job(dispatcher)  # a job without checkpointing
    fields = {k: (job_id if v == "J" else v) for k, v in request_.items()}
    request_type = {
        "TriggerSavepoint": jobmanager_pb2.TriggerSavepointRequest,
        "StopJob": jobmanager_pb2.StopJobRequest,
        "ReconfigureJob": jobmanager_pb2.ReconfigureJobRequest,
        "GetJobGraph": jobmanager_pb2.GetJobGraphRequest,
    }[method]
    resp, context = call(getattr(jm(dispatcher), method), request_type(**fields))
    assert resp is None and context.code() == getattr(grpc.StatusCode, code) and message in context.details


def test_a_job_submitted_from_a_missing_savepoint_is_refused_and_not_kept(dispatcher, tmp_path):
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a"}]).print()
    request = jobmanager_pb2.SubmitJobRequest(job=env.get_job_graph("j"), restore_path=str(tmp_path / "none"))
    resp, context = call(jm(dispatcher).SubmitJob, request)
    assert (
        resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and "no _metadata there" in context.details
    )
    assert dispatcher._jobs == {}
