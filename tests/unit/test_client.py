"""sluice/client.py's retry through tenacity, sluice/cluster_file.py's cluster.json,
and the `status --json` contract of sluice/cli/main.py (no sockets, no cluster)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

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
    with pytest.raises(
        SluiceError,
        match=r"^cannot reach a JobManager within 0.5s \(jm:1: down\). Is the cluster running\? "
        r"\(--timeout SECONDS waits longer\)$",
    ) as e:
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
    with pytest.raises(
        SluiceError, match=r"^cannot reach a JobManager within 0.3s \(no JobManager at jm:1 is leading\)"
    ):
        client.get("j1")
    assert len(tries) >= 2


# -- connect timeout and failover --------------------------------------------------------------
def test_connect_timeout_bounds_the_search_until_a_jobmanager_answered(monkeypatch):
    stub = Stub([RpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")] * 100)
    client = client_with(stub, monkeypatch, timeout=30.0)
    client.connect_timeout = 0.4
    started = time.monotonic()
    with pytest.raises(SluiceError, match=r"^cannot reach a JobManager within 0.4s"):
        client.get("j1")
    assert time.monotonic() - started < 1.0


def test_once_a_jobmanager_answered_an_outage_is_a_failover_followed_for_timeout(monkeypatch):
    info = common_pb2.JobInfo(job_id="j1")
    stub = Stub([info, *[RpcError(grpc.StatusCode.UNAVAILABLE, "down")] * 100])
    client = client_with(stub, monkeypatch, timeout=1.5)
    client.connect_timeout = 0.05  # less than the first backoff: would not retry at all
    assert client.get("j1") == info
    started = time.monotonic()
    with pytest.raises(
        SluiceError, match=r"^the JobManager is unavailable \(jm:1: down\); no leader answered within 1.5s$"
    ):
        client.get("j1")
    assert 0.5 < time.monotonic() - started < 2.0  # the failover budget, not the connect timeout


def test_a_standby_answering_means_a_cluster_is_there(monkeypatch):
    info = common_pb2.JobInfo(job_id="j1")
    standby = RpcError(grpc.StatusCode.UNAVAILABLE, "this JobManager is a standby and no leader is known yet")
    stub = Stub([standby] * 2 + [info])
    client = client_with(stub, monkeypatch, timeout=10.0)
    client.connect_timeout = 0.05  # would give up at once, but a standby answered: an election is under way
    assert client.get("j1") == info


def test_the_client_tells_when_another_jobmanager_answers(monkeypatch):
    info = common_pb2.JobInfo(job_id="j1")
    client = JobManagerClient(jobmanagers=["jm:1", "jm:2"])
    stub = Stub([info, RpcError(grpc.StatusCode.UNAVAILABLE, "gone"), info, info])
    addresses = iter(["jm:1", "jm:2", "jm:2"])

    def connect():
        if client._stub is None:
            client._address = next(addresses)
            client._stub = stub  # type: ignore[assignment]  # a scripted fake stub
        return stub

    monkeypatch.setattr(client, "_connect", connect)
    changes: list[str] = []
    outages: list[str] = []
    client.on_leader_change, client.on_unavailable = changes.append, outages.append
    for _ in range(3):
        client.get("j1")
    assert changes == ["jm:2"] and outages == ["jm:1: gone"]


def test_wait_prints_history_entries_and_leader_changes(monkeypatch, capsys):
    running = common_pb2.JobInfo(job_id="j1", state=to_proto(JobStatus.RUNNING))
    restarting = common_pb2.JobInfo(
        job_id="j1", state=to_proto(JobStatus.RESTARTING), message="restarting after: ValueError: bad"
    )
    restarting.exceptions.add(time_ms=1, attempt=0, task="map (1/2)", cause="ValueError: bad", restarted=True)
    failed = common_pb2.JobInfo(job_id="j1", state=to_proto(JobStatus.FAILED))
    failed.exceptions.extend(restarting.exceptions)
    failed.exceptions.add(time_ms=2, attempt=1, cause="TaskManager tm-1 lost: no heartbeat", restarted=False)
    client = JobManagerClient(jobmanagers=["jm:1"])
    answers = iter([("jm:1", running), ("jm:1", restarting), ("jm:2", restarting), ("jm:2", failed)])

    def get(_job_id):
        client._address, info = next(answers)
        client._answered()
        return info

    monkeypatch.setattr(client, "get", get)
    assert client.wait("j1", progress=True, poll=0) == failed
    assert capsys.readouterr().err.splitlines() == [
        "  j1: RUNNING",
        "  j1: attempt 0 failed in task map (1/2): ValueError: bad (restarting)",
        "  j1: RESTARTING — restarting after: ValueError: bad",
        "  j1: leader changed: now jm:2",
        "  j1: attempt 1 failed: TaskManager tm-1 lost: no heartbeat (not restarted)",
        "  j1: FAILED",
    ]
    assert client.on_leader_change is None  # the hooks are the caller's again


@pytest.mark.parametrize(
    "where",
    [{"jobmanager": "127.0.0.1:1"}, {"zookeeper": "127.0.0.1:1"}],
    ids=["nothing-listening", "no-zookeeper"],
)
def test_an_unreachable_cluster_is_an_error_within_the_connect_timeout(where):
    client = JobManagerClient.from_context({**where, "timeout": 1})
    started = time.monotonic()
    with pytest.raises(SluiceError, match=r"^cannot reach a JobManager within 1s .*Is the cluster running\?"):
        client.list()
    assert time.monotonic() - started < 3.0


def test_bad_timeouts_are_refused():
    with pytest.raises(SluiceError, match="timeouts must be positive"):
        JobManagerClient(jobmanagers=["jm:1"], connect_timeout=0)


# -- cluster.json ------------------------------------------------------------------------------
CLUSTER_JSON: dict[str, Any] = {
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
# keys added after the first contract (sluice/cli/progress.py; tests/unit/test_cli_progress.py checks their values)
JOB_METRICS = [f.name for f in common_pb2.JobMetrics.DESCRIPTOR.fields]
NEW_TASK_KEYS = {
    "chain_id": "",
    "attempt": 0,
    "execution_attempt": 0,
    "speculative": False,
    "region": "",
    "io": {f.name: f.default_value for f in common_pb2.TaskIOMetrics.DESCRIPTOR.fields},
    "backpressure": "OK",
}


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
        counters=common_pb2.TaskCounters(
            records_in=7,
            records_out=12_345_678_901,
            records_sent=2_468,
            records_malformed=3,
            records_dropped=2,
            records_late_dropped=4,
        ),
        bad_record_samples=["a.jsonl: not json"],
        watermark=2**63 - 1,  # the final watermark: an int in JSON, not a quoted string
    )
    info.tasks.add(operator="sink", state=to_proto(ExecutionState.FAILED), error="Traceback")
    info.exceptions.add(
        time_ms=1_700_000_003_000,
        attempt=0,
        cause="TaskManager tm-1 lost: no heartbeat for 6s (timeout 6s)",
        traceback="TaskManager tm-1 lost: no heartbeat for 6s (timeout 6s)",
        restarted=True,
    )
    info.exceptions.add(
        time_ms=1_700_000_004_000,
        attempt=1,
        task="sink (1/1)",
        cause="ValueError: boom",
        traceback="Traceback ...\nValueError: boom",
    )
    expected = {
        "job_id": "j",
        "name": "n",
        "state": "FAILED",
        "restarts": 2,
        "last_completed_checkpoint": 0,
        "restored_checkpoint": None,
        "restored_savepoint": None,
        "savepoint": None,
        "reconfigurations": [],
        "savepoints": [],
        "leader": "l:1",
        "message": "m",
        "failure": "boom",
        "submitted": "2023-11-14T22:13:20+00:00",
        "ended": None,
        "slots_required": 3,
        "records_dropped": 0,
        "records_late_dropped": 0,
        "bad_record_samples": [],
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
                "records_sent": 2_468,
                "records_malformed": 3,
                "records_dropped": 2,
                "records_late_dropped": 4,
                "watermark": 2**63 - 1,
                **NEW_TASK_KEYS,
            },
            {
                "operator": "sink",
                "subtask": 0,
                "state": "FAILED",
                "taskmanager": "",
                "records_in": 0,
                "records_out": 0,
                "records_sent": 0,
                "records_malformed": 0,
                "records_dropped": 0,
                "records_late_dropped": 0,
                "watermark": None,
                "error": "Traceback",
                **NEW_TASK_KEYS,
            },
        ],
        "exceptions": [
            {
                "time": "2023-11-14T22:13:23+00:00",
                "attempt": 0,
                "task": "",
                "cause": "TaskManager tm-1 lost: no heartbeat for 6s (timeout 6s)",
                "traceback": "TaskManager tm-1 lost: no heartbeat for 6s (timeout 6s)",
                "restarted": True,
            },
            {
                "time": "2023-11-14T22:13:24+00:00",
                "attempt": 1,
                "task": "sink (1/1)",
                "cause": "ValueError: boom",
                "traceback": "Traceback ...\nValueError: boom",
                "restarted": False,
            },
        ],
        "metrics": {k: 0 for k in JOB_METRICS},
    }
    got = _job_dict(info)
    assert json.dumps(got, indent=2) == json.dumps(expected, indent=2)  # the same keys in the same order


def test_status_prints_the_last_exceptions_with_their_cause_lines(monkeypatch, capsys):
    from sluice.cli import main as cli

    info = common_pb2.JobInfo(job_id="j", name="n", state=to_proto(JobStatus.FINISHED), restarts=6)
    for attempt in range(7):
        info.exceptions.add(
            time_ms=1_700_000_000_000 + attempt,
            attempt=attempt,
            task="map [x] (1/2)",
            cause=f"ValueError: [bad] record {attempt}",
            traceback="long\ntraceback",
            restarted=True,
        )

    class Client:
        def __enter__(self):
            return self

        def __exit__(self, *_exc):
            pass

        def get(self, _job_id):
            return info

    monkeypatch.setattr(cli.JobManagerClient, "from_context", staticmethod(lambda _ctx: Client()))
    monkeypatch.setattr(cli, "console", cli.Console(width=200))
    with pytest.raises(SystemExit) as e:
        cli.main(["status", "j"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "exceptions (most recent last, 2 earlier in status --json)" in out
    assert "ValueError: [bad] record 6" in out and "ValueError: [bad] record 2" in out and "record 1" not in out
    assert "map [x] (1/2)" in out and "traceback" not in out


@pytest.mark.parametrize(
    "command",
    [["status", "j1"], ["list"], ["cancel", "j1"], ["run", "JOBFILE"]],
    ids=lambda c: c[0],
)
@pytest.mark.parametrize("where", ["nothing-listening", "dead-cluster"])
def test_client_commands_against_an_unreachable_cluster_fail_within_the_timeout(
    command, where, tmp_path, monkeypatch, capsys
):
    """A killed cluster (cluster.json left behind, nothing answers) or an address nothing listens on."""
    from sluice.cli.main import main

    job = tmp_path / "job.py"
    job.write_text(
        "from sluice.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection([{'k': 1}]).print()\n"
        "env.execute('tiny')\n"
    )
    monkeypatch.setattr(sys, "argv", ["sluice"])  # `run` sets sys.argv for the job file
    monkeypatch.setattr(sys, "path", list(sys.path))  # ... and puts its directory first
    dead = {**CLUSTER_JSON, "zookeeper": "127.0.0.1:1"}
    dead["processes"] = [{**p, "address": "127.0.0.1:1"} for p in CLUSTER_JSON["processes"]]
    ClusterFile.from_json(dead, "cluster.json").write(str(tmp_path))
    target = ["--jobmanager", "127.0.0.1:1"] if where == "nothing-listening" else ["--cluster-dir", str(tmp_path)]
    args = [str(job) if a == "JOBFILE" else a for a in command]
    started = time.monotonic()
    with pytest.raises(SystemExit) as e:
        main([*args, *target, "--timeout", "0.5"])
    assert e.value.code == 1 and time.monotonic() - started < 3.0
    assert "cannot reach a JobManager within 0.5s" in capsys.readouterr().err


def test_a_stopped_cluster_says_how_to_start_one(tmp_path, capsys):
    from sluice.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["status", "j1", "--cluster-dir", str(tmp_path)])
    assert e.value.code == 1 and "no cluster found" in capsys.readouterr().err
