"""Fencing that cannot be forged (docs/protocols.md, "Fencing" and "Bounds"), replayed
against local clusters from `sluice cluster start` — one secured (mutual TLS), one
plaintext (`--insecure`) — by a caller who knows the leader session id (read from
ZooKeeper with the cluster's credentials) and the execution ids (read from the
TaskManagers' logs):

- a rogue RegisterTaskManager with 2^31-1 slots is INVALID_ARGUMENT and the leader lives;
- reusing a real TaskManager's resource id is refused, and it keeps its slots;
- forged FINISHED/FAILED reports for a running job's executions are refused and the job
  runs on; an acknowledgement whose state handle points outside the job's checkpoint
  directory is refused even from the owning TaskManager; the job's output is exact;
- no error text carries the leader session id.

On a secured cluster the impostor holds a TaskManager certificate of the cluster's CA
(`taskmanager/rogue`, or another real TaskManager's own); on a plaintext one it has no
identity, so it can only lie about the resource id (docs/protocols.md: plaintext is for
trusted networks)."""

from __future__ import annotations

import json
import os
import re
import sys

import grpc
import psutil
import pytest
from harness import EXAMPLES, read_counts, running_cluster
from helpers import wait_until

from sluice import rpc
from sluice.security.identity import Role
from sluice.states import AckOutcome, ExecutionState, from_proto, to_proto
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc
from sluice.zk.leader_retrieval import read_leader
from sluice.zk.paths import ZkPaths

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration

ERRORS: list[str] = []  # every error text the attacks got back (checked for the session id last)


@pytest.fixture(scope="module", params=[False, True], ids=["secured", "insecure"])
def cluster(request, tmp_path_factory, shared_cluster):
    """Each attack against a secured cluster (the shared one, healed and left without a job) and
    against a plaintext (`--insecure`) one of its own."""
    if not request.param:
        shared_cluster.heal()
        yield shared_cluster
        shared_cluster.cancel_running()
        return
    directory = tmp_path_factory.mktemp("fencing") / "cluster"
    with running_cluster(directory, taskmanagers=2, slots=2, insecure=True) as c:
        yield c


def secured(cluster) -> bool:
    return "tls" in cluster.info


def credentials(cluster, role: Role = Role.TASKMANAGER, name: str = "rogue"):
    """TLS files of `role/name`: a real process's own ("taskmanager-0"), else a new certificate
    from the cluster's CA; None on a plaintext cluster."""
    if not secured(cluster):
        return None
    from sluice.security.tls import TlsFiles, issue_from

    tls_dir = os.path.dirname(cluster.info["tls"]["ca"])
    own = os.path.join(tls_dir, f"{name}.pem")
    if os.path.exists(own):
        return TlsFiles(cluster.info["tls"]["ca"], own, os.path.join(tls_dir, f"{name}.key"))
    return issue_from(tls_dir, role, name)


def leader(cluster) -> tuple[str, str]:
    zk = cluster.zk_client()
    try:
        found = read_leader(zk, ZkPaths(cluster.info["cluster_id"]))
    finally:
        zk.stop()
        zk.close()
    assert found is not None, "no leader published"
    return found


def resource_manager(cluster, creds) -> jobmanager_pb2_grpc.ResourceManagerStub:
    return jobmanager_pb2_grpc.ResourceManagerStub(rpc.channel(leader(cluster)[0], creds))


def refused(call, code: grpc.StatusCode) -> str:
    """Run `call`, which must fail with `code`; its error text (kept for the last test)."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, info.value.details()
    ERRORS.append(info.value.details() or "")
    return info.value.details() or ""


def overview(cluster) -> dict[str, tuple[str, int]]:
    with cluster.client() as client:
        return {tm.resource_id: (tm.address, tm.slots) for tm in client.cluster().taskmanagers}


def taskmanager_processes(cluster) -> list[dict]:
    return [p for p in cluster.info["processes"] if p["role"] == "taskmanager"]


def deployed(cluster, job_id: str) -> dict[str, int]:
    """Execution id -> index of the TaskManager it was deployed to, from the TaskManagers' logs."""
    found = {}
    pattern = re.compile(rf"\[job {job_id} attempt \d+\] deploying (\S+) to slot")
    for i, p in enumerate(taskmanager_processes(cluster)):
        with open(p["log"], errors="replace") as f:
            for line in f:
                if m := pattern.search(line):
                    found[m.group(1)] = i
    return found


def test_a_rogue_registration_with_huge_slots_is_invalid_and_the_leader_lives(cluster):
    before = overview(cluster)
    stub = resource_manager(cluster, credentials(cluster))
    request = jobmanager_pb2.RegisterTaskManagerRequest(resource_id="rogue", address="127.0.0.1:1", slots=2**31 - 1)
    details = refused(lambda: stub.RegisterTaskManager(request, timeout=10), grpc.StatusCode.INVALID_ARGUMENT)
    assert "slots" in details
    assert psutil.Process(cluster.pid_of("jobmanager")).is_running()
    assert overview(cluster) == before  # nothing registered, nobody evicted


def test_reusing_a_real_resource_id_is_refused_and_the_taskmanager_keeps_its_slots(cluster):
    before = overview(cluster)
    resource_id, (address, slots) = sorted(before.items())[0]
    stub = resource_manager(cluster, credentials(cluster))
    for addr, n in ((f"127.0.0.1:{int(address.rsplit(':', 1)[1]) + 1}", slots), (address, 64)):
        request = jobmanager_pb2.RegisterTaskManagerRequest(resource_id=resource_id, address=addr, slots=n)
        refused(lambda r=request: stub.RegisterTaskManager(r, timeout=10), grpc.StatusCode.PERMISSION_DENIED)
    assert overview(cluster) == before
    with cluster.client() as client:  # and it is still alive: its heartbeats are taken
        (tm,) = [t for t in client.cluster().taskmanagers if t.resource_id == resource_id]
        assert tm.seconds_since_heartbeat < 5 and client.cluster().free_slots == sum(s for _, s in before.values())


@pytest.fixture(scope="module")
def page_views(cluster, tmp_path_factory):
    """The reference job with checkpoints every 300 ms, long enough to be attacked while it runs."""
    work = tmp_path_factory.mktemp("page-views")
    expected = generate(str(work / "in"), events=300_000, files=120, urls=3_000, seed=5)
    job_id = cluster.run_page_views(work, "--checkpoint-interval", "300")
    eids = wait_until(
        lambda: (cluster.status(job_id)["state"] == "RUNNING" and len(d := deployed(cluster, job_id)) >= 2) and d,
        timeout=120,
        message="the job's tasks deployed",
    )
    return job_id, eids, expected, work


def test_forged_task_states_are_refused_and_the_job_runs_on(cluster, page_views):
    job_id, eids, _, _ = page_views
    session = leader(cluster)[1]
    tms = taskmanager_processes(cluster)
    ids = {address: rid for rid, (address, _) in overview(cluster).items()}
    for eid, i in sorted(eids.items()):
        other = (i + 1) % len(tms)
        if secured(cluster):  # a certificate of the cluster, but not the owner's
            impostors = [
                (credentials(cluster), ids[tms[i]["address"]]),
                (credentials(cluster, name=f"taskmanager-{other}"), ids[tms[i]["address"]]),
            ]
        else:  # no identities: the impostor can only name the wrong TaskManager
            impostors = [(None, ids[tms[other]["address"]])]
        for creds, resource_id in impostors:
            stub = resource_manager(cluster, creds)
            for state in (ExecutionState.FINISHED, ExecutionState.FAILED):
                report = jobmanager_pb2.TaskExecutionState(
                    resource_id=resource_id,
                    leader_session_id=session,
                    job_id=job_id,
                    execution_id=eid,
                    state=to_proto(state),
                    error="forged",
                )
                refused(
                    lambda r=report, s=stub: s.UpdateTaskExecutionState(r, timeout=10),
                    grpc.StatusCode.PERMISSION_DENIED,
                )
    status = cluster.status(job_id)
    assert status["state"] in ("RUNNING", "FINISHED") and status["restarts"] == 0, status
    assert not [t for t in status["tasks"] if t["state"] in ("FAILED", "CANCELED")], status["tasks"]


def test_an_ack_with_a_foreign_state_handle_is_refused_and_the_output_is_exact(cluster, page_views):
    job_id, eids, expected, work = page_views
    session = leader(cluster)[1]
    foreign = work / "foreign.arrow"
    foreign.write_bytes(b"not state")
    checkpoints = os.path.join(cluster.dir, "checkpoints", job_id)
    last = cluster.status(job_id)["last_completed_checkpoint"] or 0
    refusals = 0
    for eid, i in sorted(eids.items()):
        op_id = eid.split("/")[-2]
        stub = resource_manager(cluster, credentials(cluster, name=f"taskmanager-{i}"))  # the owner's own
        for path in (str(foreign), f"{checkpoints}/chk-{last + 1}/../../elsewhere/0.arrow"):
            handle = {"operators": {}, "keyed": {op_id: {"path": path, "key_groups": [0, 1], "rows": 1}}}
            request = jobmanager_pb2.AcknowledgeCheckpointRequest(
                leader_session_id=session,
                job_id=job_id,
                execution_id=eid,
                checkpoint_id=last + 1,
                state_handle=json.dumps(handle).encode(),
            )
            try:
                reply = stub.AcknowledgeCheckpoint(request, timeout=10)
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
                assert "not inside the checkpoint directory" in (err.details() or "")
                ERRORS.append(err.details() or "")
                refusals += 1
            else:  # the attempt already ended (the job finished): nothing to acknowledge
                assert from_proto(AckOutcome, reply.outcome) is AckOutcome.UNKNOWN
    assert refusals, "the job ended before its acknowledgements could be forged"
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=240,
        message="the job to end",
    )
    assert status["state"] == "FINISHED" and status["restarts"] == 0, status
    final, _ = read_counts(str(work / "out"))
    assert final == expected


def test_no_error_text_carries_the_session_id(cluster):
    address, session = leader(cluster)
    stale = jobmanager_pb2.HeartbeatRequest(resource_id="rogue", leader_session_id=session[::-1])
    stub = resource_manager(cluster, credentials(cluster))
    refused(lambda: stub.Heartbeat(stale, timeout=10), grpc.StatusCode.FAILED_PRECONDITION)
    tm = taskmanager_pb2_grpc.TaskExecutorStub(
        rpc.channel(taskmanager_processes(cluster)[0]["address"], credentials(cluster, Role.JOBMANAGER, "rogue-jm"))
    )
    cancel = taskmanager_pb2.CancelTaskRequest(leader_session_id="not-the-session", job_id="j", execution_id="e")
    refused(lambda: tm.CancelTask(cancel, timeout=10), grpc.StatusCode.FAILED_PRECONDITION)
    assert len(ERRORS) >= 5
    assert not [e for e in ERRORS if session in e], ERRORS
