"""The JobManager never unpickles what a client sends (docs/protocols.md#job-graphs).

The shared cluster (1 JobManager, 2 TaskManagers) gets jobs whose `code` entries are pickles that,
when unpickled, append the unpickling process's pid to a marker file. Validation reads only
plain proto fields and the JSON configs, so the JobManager's pid never appears; the TaskManager
task that runs the operator is the one place code is unpickled (job bodies are code: whoever
may submit jobs may run code on the TaskManagers)."""

from __future__ import annotations

import json
import pickle

import grpc
import psutil
import pytest
from helpers import wait_until

from sluice import states
from sluice.client import SluiceError
from sluice.v1 import common_pb2

pytestmark = pytest.mark.integration

FORWARD = common_pb2.PARTITIONING_FORWARD


class WritesPid:
    """Unpickling this runs `exec` on a line that appends the process's pid to `marker`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        line = f"import os; open({self.marker!r}, 'a').write(str(os.getpid()) + '\\n')"
        return (exec, (line,))


def evil(marker: str) -> bytes:
    return pickle.dumps(WritesPid(marker))  # refers to builtins.exec only: loads anywhere


def jobmanager_pids(cluster) -> set[int]:
    """The JobManager process and any process it started (none are expected)."""
    jm = psutil.Process(cluster.pid_of("jobmanager"))
    return {jm.pid, *(p.pid for p in jm.children(recursive=True))}


def marked(marker) -> list[int]:
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def job_with_map_code(tmp_path, code: bytes, sink_code: bytes | None = None) -> common_pb2.JobGraph:
    """files -> map (its body: `code`) -> print; a valid job but for what `code` holds."""
    source = tmp_path / "in"
    source.mkdir(exist_ok=True)
    (source / "a.jsonl").write_text('{"url": "/a"}\n')
    job = common_pb2.JobGraph(name="unpickling", max_parallelism=128)
    job.operators.add(
        id="src",
        name="src",
        kind=common_pb2.OPERATOR_KIND_SOURCE_FILES,
        parallelism=1,
        config=json.dumps({"path": str(source), "format": "json", "schema": "url string", "suffix": ".jsonl"}),
    )
    job.operators.add(id="map", name="body", kind=common_pb2.OPERATOR_KIND_MAP, parallelism=1, code={"body": code})
    job.operators.add(id="out", name="out", kind=common_pb2.OPERATOR_KIND_SINK_PRINT, parallelism=1)
    if sink_code is not None:
        job.operators[2].code["columns"] = sink_code
    job.edges.add(source="src", target="map", partitioning=FORWARD)
    job.edges.add(source="map", target="out", partitioning=FORWARD)
    return job


def failed_job(cluster, job) -> common_pb2.JobInfo:
    with cluster.client() as client:
        job_id = client.submit(job)
        info = client.wait(job_id, timeout=120)
    assert states.from_proto(states.JobStatus, info.state) == states.JobStatus.FAILED
    return info


def test_rejected_jobs_are_never_unpickled(cluster, tmp_path):
    """Code that validation rejects by name, and code next to a malformed config: INVALID_ARGUMENT
    naming the field, and nothing unpickled anywhere."""
    marker = tmp_path / "pids"
    rejected = {
        "operators[2].code.columns": job_with_map_code(tmp_path, evil(str(marker)), sink_code=evil(str(marker))),
    }
    bad_config = job_with_map_code(tmp_path, evil(str(marker)))
    bad_config.operators[0].config = '{"path": 7, "format": "json"}'
    rejected["operators[0].config.path"] = bad_config
    not_json = job_with_map_code(tmp_path, evil(str(marker)))
    not_json.operators[2].config = "{'single': 'quotes'}"
    rejected["operators[2].config"] = not_json
    with cluster.client() as client:
        for field, job in rejected.items():
            with pytest.raises(SluiceError) as err:
                client.submit(job)
            assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, err.value
            assert f"{field}: " in str(err.value)
    assert marked(marker) == []
    assert psutil.pid_exists(cluster.pid_of("jobmanager"))


def test_an_accepted_job_is_unpickled_only_by_the_taskmanager_running_it(cluster, tmp_path):
    marker = tmp_path / "pids"
    info = failed_job(cluster, job_with_map_code(tmp_path, evil(str(marker))))
    pids = marked(marker)
    assert pids, "the task never unpickled its body"
    assert not set(pids) & jobmanager_pids(cluster), "the JobManager unpickled a job's code"
    taskmanager = psutil.Process(cluster.pid_of("taskmanager"))
    assert set(pids) <= {taskmanager.pid, *(p.pid for p in taskmanager.children(recursive=True))}
    # exec returned None: not a body; the job fails at once (no retry fixes it), saying why
    assert "operator 'body' (map): code.body is not callable: NoneType" in info.failure
    assert info.restarts == 0


def test_garbage_code_passes_validation_and_fails_the_task_for_good(cluster, tmp_path):
    info = failed_job(cluster, job_with_map_code(tmp_path, b"\x80\x05garbage"))
    assert "operator 'body' (map): code.body cannot be unpickled here: UnpicklingError" in info.failure
    assert info.restarts == 0
    with cluster.client() as client:  # the cluster is fine: its slots are free again
        wait_until(
            lambda: (o := client.cluster()).free_slots == o.total_slots,
            timeout=30,
            message="slots freed after the failed jobs",
        )
