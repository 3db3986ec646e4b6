"""sluice/client.py's retry through tenacity, sluice/cluster_file.py's cluster.json,
and the `status --json` contract of sluice/cli/main.py (no sockets, no cluster)."""

from __future__ import annotations

import json
import logging

import grpc
import pytest

from sluice.cli.main import _job_dict
from sluice.client import JobManagerClient, SluiceError, read_cluster_json
from sluice.cluster_file import ClusterFile, ProcessEntry
from sluice.states import CheckpointStatus, ExecutionState, JobStatus, to_proto
from sluice.v1 import common_pb2


class RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str):
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class Stub:
    """Answers GetJob from a script: an exception to raise or a JobInfo to return."""

    def __init__(self, script: list[object]):
        self.script = script
        self.calls = 0

    def GetJob(self, *_args: object, **_kwargs: object) -> object:
        self.calls += 1
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def client_with(stub: Stub, monkeypatch, timeout: float = 5.0, resolves: list[int] | None = None) -> JobManagerClient:
    """A client whose leader is always `stub`; each resolution appends to `resolves`."""
    client = JobManagerClient(jobmanagers=["jm:1"], timeout=timeout)
    resolves = [] if resolves is None else resolves

    def connect():
        resolves.append(1)
        client._address = "jm:1"
        return stub

    monkeypatch.setattr(client, "_connect", connect)
    return client


def test_unavailable_and_deadline_are_retried_with_a_new_leader(monkeypatch, caplog):
    info = common_pb2.JobInfo(job_id="j1")
    stub = Stub(
        [
            RpcError(grpc.StatusCode.UNAVAILABLE, "leader=jm:2"),
            RpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "slow"),
            info,
        ]
    )
    resolves: list[int] = []
    client = client_with(stub, monkeypatch, resolves=resolves)
    with caplog.at_level(logging.DEBUG, logger="sluice.client"):
        assert client.get("j1") == info
    assert stub.calls == 3 and len(resolves) == 3
    waits = [r.getMessage() for r in caplog.records if r.name == "sluice.client"]
    assert len(waits) == 2 and all(w.startswith("GetJob j1: no serving JobManager") for w in waits)
    assert "jm:1: leader=jm:2" in waits[0] and "attempt 2" in waits[0]


def test_other_errors_are_not_retried(monkeypatch):
    stub = Stub([RpcError(grpc.StatusCode.NOT_FOUND, "no job j9")])
    with pytest.raises(SluiceError, match="^no job j9$") as e:
        client_with(stub, monkeypatch).get("j9")
    assert e.value.code == grpc.StatusCode.NOT_FOUND and stub.calls == 1


def test_gives_up_within_the_timeout(monkeypatch):
    stub = Stub([RpcError(grpc.StatusCode.UNAVAILABLE, "down")] * 100)
    with pytest.raises(SluiceError, match=r"^the JobManager is unavailable \(jm:1: down\)$") as e:
        client_with(stub, monkeypatch, timeout=0.5).get("j1")
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert 2 <= stub.calls <= 6  # 0.1-0.2 s, then 0.2-0.3 s, ...: no sleep past the timeout


def test_no_leader_found_is_retried_then_reported(monkeypatch):
    client = JobManagerClient(jobmanagers=["jm:1"], timeout=0.3)
    tries = []

    def connect():
        tries.append(1)
        raise SluiceError("no JobManager at jm:1 is leading", grpc.StatusCode.UNAVAILABLE)

    monkeypatch.setattr(client, "_connect", connect)
    with pytest.raises(SluiceError, match=r"^the JobManager is unavailable \(no JobManager at jm:1 is leading\)$"):
        client.get("j1")
    assert len(tries) >= 2


# -- cluster.json ------------------------------------------------------------------------------
CLUSTER_JSON = {
    "cluster_id": "cluster-1a2b3c4d",
    "zookeeper": "127.0.0.1:2181",
    "dir": "/x/.sluice",
    "processes": [
        {"role": "zookeeper", "pid": 10, "address": "127.0.0.1:2181", "log": "/x/.sluice/zookeeper/zookeeper.log"},
        {"role": "jobmanager", "pid": 11, "address": "127.0.0.1:6123", "log": "/x/.sluice/log/jobmanager-0.log"},
        {"role": "taskmanager", "pid": 12, "address": "127.0.0.1:6124", "log": "/x/.sluice/log/taskmanager-0.log"},
    ],
}


def test_cluster_file_writes_the_format_cluster_start_always_wrote(tmp_path):
    info = ClusterFile.from_json(CLUSTER_JSON, "cluster.json")
    assert [p.role for p in info.processes] == ["zookeeper", "jobmanager", "taskmanager"]
    assert info.of_role("jobmanager") == [
        ProcessEntry("jobmanager", 11, "127.0.0.1:6123", "/x/.sluice/log/jobmanager-0.log")
    ]
    info.write(str(tmp_path))
    assert (tmp_path / "cluster.json").read_text() == json.dumps(CLUSTER_JSON, indent=2) + "\n"
    assert ClusterFile.read(str(tmp_path)) == info


def test_cluster_file_keeps_keys_it_does_not_know(tmp_path):
    data = {
        "cluster_id": "c",
        "zookeeper": "z:1",
        "owner": "ci",
        "processes": [{"role": "jobmanager", "pid": 1, "address": "h:1", "restarted": True}],
    }
    (tmp_path / "cluster.json").write_text(json.dumps(data))
    info = read_cluster_json(str(tmp_path))
    assert info.dir is None and info.processes[0].log is None
    assert info.to_json() == data


def test_missing_cluster_file_says_how_to_get_one(tmp_path):
    with pytest.raises(
        SluiceError,
        match=r"no cluster found: .*cluster.json does not exist. Start one with "
        r"`sluice cluster start --dir ",
    ):
        read_cluster_json(str(tmp_path))


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"cluster_id": "c", "zookeeper": "z", "processes": [{"role": "x"}]}',
        '{"cluster_id": "c", "processes": []}',
    ],
)
def test_malformed_cluster_file_is_an_error_naming_it(tmp_path, text):
    (tmp_path / "cluster.json").write_text(text)
    with pytest.raises(SluiceError, match="cluster.json"):
        read_cluster_json(str(tmp_path))


def test_client_from_cluster_dir(tmp_path):
    ClusterFile.from_json(CLUSTER_JSON, "cluster.json").write(str(tmp_path))
    c = JobManagerClient.from_context({"cluster_dir": str(tmp_path)})
    assert (c.zookeeper, c.cluster_id, c.jobmanagers) == ("127.0.0.1:2181", "cluster-1a2b3c4d", ["127.0.0.1:6123"])
    assert JobManagerClient.from_context({"zookeeper": "z:1"}).cluster_id == "default"


# -- status --json --------------------------------------------------------------------------------
def test_status_json_contract():
    info = common_pb2.JobInfo(
        job_id="j",
        name="n",
        state=to_proto(JobStatus.FAILED),
        restarts=2,
        last_completed_checkpoint=0,
        leader="l:1",
        message="m",
        failure="boom",
        submitted_ms=1_700_000_000_000,
        ended_ms=0,
        slots_required=3,
        slots_available=1,
    )
    info.checkpoints.add(
        checkpoint_id=4,
        status=to_proto(CheckpointStatus.COMPLETED),
        trigger_ms=1_700_000_001_000,
        duration_ms=12,
        size_bytes=2**40,
        acks=3,
        expected=3,
    )
    info.checkpoints.add(
        checkpoint_id=5, status=to_proto(CheckpointStatus.FAILED), trigger_ms=1_700_000_002_000, failure="declined"
    )
    info.tasks.add(
        operator="src -> map",
        subtask=1,
        state=to_proto(ExecutionState.RUNNING),
        taskmanager="t:1",
        records_in=7,
        records_out=12_345_678_901,
    )
    info.tasks.add(operator="sink", state=to_proto(ExecutionState.FAILED), error="Traceback")
    expected = {
        "job_id": "j",
        "name": "n",
        "state": "FAILED",
        "restarts": 2,
        "last_completed_checkpoint": 0,
        "restored_checkpoint": None,
        "leader": "l:1",
        "message": "m",
        "failure": "boom",
        "submitted": "2023-11-14T22:13:20+00:00",
        "ended": None,
        "slots_required": 3,
        "checkpoints": [
            {
                "id": 4,
                "status": "COMPLETED",
                "trigger": "2023-11-14T22:13:21+00:00",
                "duration_ms": 12,
                "size_bytes": 2**40,
                "acks": 3,
                "expected": 3,
            },
            {
                "id": 5,
                "status": "FAILED",
                "trigger": "2023-11-14T22:13:22+00:00",
                "duration_ms": 0,
                "size_bytes": 0,
                "acks": 0,
                "expected": 0,
                "failure": "declined",
            },
        ],
        "tasks": [
            {
                "operator": "src -> map",
                "subtask": 1,
                "state": "RUNNING",
                "taskmanager": "t:1",
                "records_in": 7,
                "records_out": 12_345_678_901,
            },
            {
                "operator": "sink",
                "subtask": 0,
                "state": "FAILED",
                "taskmanager": "",
                "records_in": 0,
                "records_out": 0,
                "error": "Traceback",
            },
        ],
    }
    got = _job_dict(info)
    assert json.dumps(got, indent=2) == json.dumps(expected, indent=2)  # the same keys in the same order
