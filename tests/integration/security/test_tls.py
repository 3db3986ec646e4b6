"""Mutual TLS and the role table against a hostile client (docs/security.md): a
secured local cluster from `sluice cluster start`, where only the cluster's
own certificates get through the handshake and each may call only its role's
methods, while a job runs on and writes its exact output."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness import EXAMPLES, LocalCluster, assert_update_stream, read_counts, sluice
from helpers import wait_until

from sluice import config, rpc
from sluice.cluster_file import ClusterFile
from sluice.security.identity import Role
from sluice.security.tls import create_cluster, issue_from
from sluice.v1 import (
    dataexchange_pb2,
    dataexchange_pb2_grpc,
    jobmanager_pb2,
    jobmanager_pb2_grpc,
    taskmanager_pb2,
    taskmanager_pb2_grpc,
)

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration


def code_and_details(call) -> tuple[grpc.StatusCode, str]:
    try:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)  # a server stream: read it to its end or its error
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as err:
        return err.code(), err.details() or ""


def assert_denied(call, needed: str) -> None:
    """The call ends PERMISSION_DENIED, naming the certificate role it needs."""
    code, details = code_and_details(call)
    assert code == grpc.StatusCode.PERMISSION_DENIED, (code, details)
    assert f"a {needed} certificate" in details, details


def list_jobs(channel: grpc.Channel) -> tuple[grpc.StatusCode, str]:
    stub = jobmanager_pb2_grpc.JobManagerStub(channel)
    return code_and_details(lambda: stub.ListJobs(jobmanager_pb2.ListJobsRequest(), timeout=5))


def test_cluster_json_records_the_client_tls_files(cluster):
    tls = cluster.info["tls"]
    assert set(tls) == {"ca", "cert", "key"}
    assert all(os.path.isabs(p) and os.path.exists(p) for p in tls.values())
    assert oct(os.stat(tls["key"]).st_mode & 0o777) == "0o600"
    status = json.loads(sluice("cluster", "status", "--dir", cluster.dir, "--json").stdout)
    assert status["taskmanagers_registered"] == 2 and status["leader"]


def test_plaintext_clients_are_rejected(cluster):
    for address in cluster.addresses("jobmanager") + cluster.addresses("taskmanager"):
        with grpc.insecure_channel(address) as ch:
            code, _ = list_jobs(ch)
            assert code == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails: nothing is served
            health = health_pb2_grpc.HealthStub(ch)
            code, _ = code_and_details(lambda h=health: h.Check(health_pb2.HealthCheckRequest(), timeout=5))
            assert code == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_from_another_ca_is_rejected(cluster, tmp_path):
    other = create_cluster(str(tmp_path / "other"), jobmanagers=1, taskmanagers=0)
    jm = cluster.addresses("jobmanager")[0]
    with rpc.channel(jm, other.client) as ch:  # trusts the other CA: the server is not believed either
        assert list_jobs(ch)[0] == grpc.StatusCode.UNAVAILABLE
    # the cluster's CA to verify the server, but a client certificate the cluster never issued
    forged = type(other.client)(cluster.info["tls"]["ca"], other.client.cert, other.client.key)
    with rpc.channel(jm, forged) as ch:
        assert list_jobs(ch)[0] == grpc.StatusCode.UNAVAILABLE


def test_grpc_client_with_only_cluster_json_tls_lists_jobs(cluster):
    """What grpcurl -cacert -cert -key does: no Sluice code, the JobManager's address as it is."""
    tls = cluster.info["tls"]
    read = lambda name: open(tls[name], "rb").read()  # noqa: E731 — three one-line reads
    credentials = grpc.ssl_channel_credentials(read("ca"), read("key"), read("cert"))
    leader = json.loads(sluice("cluster", "status", "--dir", cluster.dir, "--json").stdout)["leader"]
    with grpc.secure_channel(leader, credentials) as ch:
        assert list_jobs(ch) == (grpc.StatusCode.OK, "")
    listing = sluice("list", "--cluster-dir", cluster.dir)  # the CLI finds the files by itself
    assert listing.returncode == 0


def test_client_certificate_cannot_act_as_a_cluster_process_and_the_job_is_unaffected(cluster, tmp_path):
    expected = generate(str(tmp_path / "in"), events=120_000, files=8, urls=1_000, seed=5)
    job_id = cluster.run_page_views(tmp_path)
    wait_until(lambda: cluster.status(job_id)["state"] != "CREATED", timeout=60, message="job deployed")
    client = cluster.tls("client")
    jm, tm = cluster.addresses("jobmanager")[0], cluster.addresses("taskmanager")[0]
    rogue = jobmanager_pb2.RegisterTaskManagerRequest(resource_id="rogue", address="127.0.0.1:1", slots=64)
    ack = jobmanager_pb2.AcknowledgeCheckpointRequest(job_id=job_id, checkpoint_id=1)
    tdd = taskmanager_pb2.TaskDeploymentDescriptor(job_id=job_id)
    subscribe = dataexchange_pb2.ConsumerMessage(
        request=dataexchange_pb2.PartitionRequest(partition_id=job_id, subpartition=0, initial_credit=2)
    )
    with rpc.channel(jm, client) as ch:
        rm = jobmanager_pb2_grpc.ResourceManagerStub(ch)
        assert_denied(lambda: rm.RegisterTaskManager(rogue, timeout=5), "taskmanager")
        assert_denied(lambda: rm.AcknowledgeCheckpoint(ack, timeout=5), "taskmanager")
    with rpc.channel(tm, client) as ch:
        assert_denied(lambda: taskmanager_pb2_grpc.TaskExecutorStub(ch).SubmitTask(tdd, timeout=5), "jobmanager")
        exchange = dataexchange_pb2_grpc.DataExchangeStub(ch)
        assert_denied(lambda: exchange.Subscribe(iter([subscribe]), timeout=5), "taskmanager")
    # A TaskManager's certificate may not deploy tasks either: only the JobManager's may.
    with rpc.channel(tm, cluster.tls("taskmanager-1")) as ch:
        assert_denied(lambda: taskmanager_pb2_grpc.TaskExecutorStub(ch).SubmitTask(tdd, timeout=5), "jobmanager")
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=180,
        message=f"job {job_id} ended",
    )
    assert status["state"] == "FINISHED" and status["restarts"] == 0, status
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_jobmanager_health_port_and_bearer_tokens(cluster, tmp_path):
    """A JobManager (never connected: a standby) with a plaintext health-only port and a token port."""
    from jobmanager.server import JobManagerProcess

    certs = os.path.dirname(cluster.info["tls"]["ca"])
    jm = issue_from(certs, Role.JOBMANAGER, "jobmanager-probe")
    token_file = tmp_path / "token"
    token_file.write_text("a-long-random-token-0123456789\n")
    health_port = free_port()
    process = JobManagerProcess(
        config.resolve(
            "jobmanager",
            flag_values={
                "zookeeper.quorum": "127.0.0.1:1",
                "rpc.port": "0",
                "rpc.health-port": str(health_port),
                "security.ssl.ca": jm.ca,
                "security.ssl.cert": str(jm.cert),
                "security.ssl.key": str(jm.key),
                "security.token.file": str(token_file),
            },
        )
    )
    process.server.start()
    try:
        assert process.server.health_port == health_port
        with grpc.insecure_channel(f"127.0.0.1:{health_port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            live = health.Check(health_pb2.HealthCheckRequest(service=rpc.LIVENESS_SERVICE), timeout=5)
            assert live.status == health_pb2.HealthCheckResponse.SERVING
            assert list_jobs(ch)[0] == grpc.StatusCode.UNIMPLEMENTED  # health and nothing else
        token_address = f"127.0.0.1:{process.server.token_port}"
        ca_only = type(jm)(jm.ca)
        with rpc.channel(token_address, ca_only, token="a-long-random-token-0123456789") as ch:
            code, details = list_jobs(ch)
            assert code == grpc.StatusCode.UNAVAILABLE and "standby" in details  # authorized: the servicer answered
            rm = jobmanager_pb2_grpc.ResourceManagerStub(ch)
            heartbeat = jobmanager_pb2.HeartbeatRequest(resource_id="x")
            assert code_and_details(lambda: rm.Heartbeat(heartbeat, timeout=5))[0] == grpc.StatusCode.PERMISSION_DENIED
        with rpc.channel(token_address, ca_only, token="guess") as ch:
            code, details = list_jobs(ch)
            assert code == grpc.StatusCode.UNAUTHENTICATED and "guess" not in details
    finally:
        process.server.stop(grace=0)
        process.dispatcher.close()


def test_a_process_without_tls_or_insecure_refuses_to_start():
    proc = subprocess.run(
        [sys.executable, "-m", "jobmanager", "--zookeeper", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert "--tls-ca" in proc.stderr and "--insecure" in proc.stderr


def test_insecure_cluster_starts_plaintext_and_warns(tmp_path):
    plain = LocalCluster(str(tmp_path / "plain"), taskmanagers=0, insecure=True)
    try:
        proc = sluice("cluster", "start", "--dir", plain.dir, "--taskmanagers", "0", "--insecure", timeout=300)
        plain.refresh()
        assert "PLAINTEXT" in proc.stderr and "--insecure" in proc.stderr
        assert "tls" not in plain.info
        with open(os.path.join(plain.dir, "log", "jobmanager-0.log")) as f:
            assert "SECURITY WARNING" in f.read()
        with grpc.insecure_channel(plain.addresses("jobmanager")[0]) as ch:
            assert list_jobs(ch) == (grpc.StatusCode.OK, "")
        assert sluice("list", "--cluster-dir", plain.dir).returncode == 0
    finally:
        if not plain.info and os.path.exists(ClusterFile.path(plain.dir)):
            plain.refresh()
        plain.stop()
