"""A flood of client calls cannot starve the control plane (sluice/rpc_admission.py): 400
GetJob/ListJobs calls, 200 at a time, from one client with a valid certificate, while a job
runs. Every call is answered at once (served, or refused with RESOURCE_EXHAUSTED and a retry
hint), no heartbeat is missed, no TaskManager is declared lost and the job never restarts;
sluice's own client retries the refused calls until they are served."""

from __future__ import annotations

import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from harness import JOBS, wait_for

from sluice import rpc
from sluice.client import JobManagerClient
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc

pytestmark = pytest.mark.integration

CALLS, AT_ONCE = 400, 200


def test_a_flood_of_client_calls_leaves_heartbeats_and_the_job_alone(cluster, tmp_path):
    job_id = cluster.run(os.path.join(JOBS, "endless_counts.py"), str(tmp_path / "out"), "500", parallelism=2)
    status = wait_for(cluster, job_id, lambda s: s["state"] == "RUNNING", "the job running")
    channel = rpc.channel(status["leader"], cluster.tls())
    stub = jobmanager_pb2_grpc.JobManagerStub(channel)

    def call(i: int) -> tuple[str, float, bool]:
        t0 = time.monotonic()
        try:
            if i % 2:
                stub.GetJob(jobmanager_pb2.GetJobRequest(job_id=job_id), timeout=60)
            else:
                stub.ListJobs(jobmanager_pb2.ListJobsRequest(), timeout=60)
            return "OK", time.monotonic() - t0, False
        except grpc.RpcError as err:
            hint = any(k == "grpc-retry-pushback-ms" for k, _ in (err.trailing_metadata() or ()))
            return err.code().name, time.monotonic() - t0, hint

    try:
        with ThreadPoolExecutor(AT_ONCE) as pool:
            results = list(pool.map(call, range(CALLS)))
    finally:
        channel.close()
    codes = Counter(code for code, _, _ in results)
    # answered: none timed out or failed. How many the limits refuse depends on how fast the
    # leader serves (none when it keeps up); a refusal comes at once and carries the retry hint.
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes
    assert codes["OK"] >= 16, codes
    assert all(hint for code, _, hint in results if code == "RESOURCE_EXHAUSTED"), "a refusal without a retry hint"
    assert max((seconds for code, seconds, _ in results if code == "RESOURCE_EXHAUSTED"), default=0) < 10

    # sluice's client retries what the limits refuse: every one of its calls is served
    def with_client(_: int) -> int:
        with JobManagerClient.from_context({"cluster_dir": cluster.dir}) as client:
            return sum(client.get(job_id).job_id == job_id for _ in range(4))

    with ThreadPoolExecutor(50) as pool:
        assert sum(pool.map(with_client, range(50))) == 200

    status = cluster.status(job_id)
    assert status["state"] == "RUNNING" and status["restarts"] == 0, status
    overview = cluster.overview()
    assert len(overview.taskmanagers) == cluster.taskmanagers, "a TaskManager was declared lost"
