"""RequestSplits at the JobManager's wire edge (jobmanager/servicers.py over the dispatcher
and the JobMaster), without sockets: a reader gets its subtask's splits (again from what it
says it holds), the enumerators' state lands in `_metadata`, and bad, foreign or stale
requests are refused; plus the job API's and job graph's checks of connector operators."""

from __future__ import annotations

import json

import grpc
import pytest
from helpers import wait_until
from servicer_calls import SESSION, call, register, report, rm, where

from jobmanager.dispatcher import Dispatcher
from sluice import graph
from sluice.api import StreamExecutionEnvironment
from sluice.connectors import (
    ReaderContext,
    Sink,
    SinkContext,
    SinkWriter,
    Source,
    SourceReader,
    SourceSplit,
    SplitEnumerator,
    StaticSplitEnumerator,
)
from sluice.graph import JobValidationError
from sluice.states import ExecutionState, to_proto
from sluice.v1 import common_pb2, jobmanager_pb2


class Splits(Source):
    def __init__(self, n: int) -> None:
        self.n = n

    def create_enumerator(self) -> SplitEnumerator:
        return StaticSplitEnumerator([SourceSplit(f"s{i}", {"i": i}) for i in range(self.n)], assignment="hash")

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        raise NotImplementedError


class Nowhere(Sink):
    def create_writer(self, ctx: SinkContext) -> SinkWriter:
        raise NotImplementedError


@pytest.fixture
def job(tmp_path, monkeypatch):
    now = [0.0]
    d = Dispatcher("127.0.0.1:1", heartbeat_timeout=60.0, heartbeat_interval=1.0, clock=lambda: now[0])
    d.grant_leadership(SESSION)
    monkeypatch.setattr(d, "call_task", lambda *_: None)
    register(d, "tm-a", "127.0.0.1:7001", 1, "taskmanager/tm-a")
    env = StreamExecutionEnvironment()
    env.set_config("execution.checkpointing.interval", "1s")
    env.set_config("state.checkpoints.dir", str(tmp_path / "checkpoints"))
    env.from_source(Splits(3), name="splits").sink_to(Nowhere())
    job_id = d.submit(env.get_job_graph("connectors"))
    (eid,) = d._jobs[job_id].graph.executions
    running = report(d, job_id, eid, to_proto(ExecutionState.RUNNING))
    assert call(rm(d).UpdateTaskExecutionState, running, "taskmanager/tm-a")[0].accepted
    yield d, job_id, eid, now
    d.close()


def ask(d, job_id, eid, received=0, last=0, who="taskmanager/tm-a", session=SESSION, op=None):
    op = op or d._jobs[job_id].chain_by_id[d._jobs[job_id].graph.executions[eid].chain_id].operator_ids[0]
    request = jobmanager_pb2.RequestSplitsRequest(
        leader_session_id=session,
        job_id=job_id,
        execution_id=eid,
        operator_id=op,
        received=received,
        last_checkpoint=last,
        idle=True,
    )
    return call(rm(d).RequestSplits, request, who)


def test_a_reader_gets_its_splits_and_the_enumerators_state_lands_in_the_checkpoint(job):
    d, job_id, eid, now = job
    resp, _ = ask(d, job_id, eid)
    assert resp.first == 0 and [json.loads(s)["id"] for s in resp.splits] == ["s0", "s1", "s2"]
    assert resp.no_more_splits  # the static list is exhausted and the answer reaches the end of the log
    resp, _ = ask(d, job_id, eid, received=1)  # the reader holds one: the rest is sent again
    assert resp.first == 1 and [json.loads(s)["id"] for s in resp.splits] == ["s1", "s2"]
    now[0] = 5.0
    d.tick()  # triggers checkpoint 1: the enumerator and the log are snapshotted first
    assert d._jobs[job_id].coordinator.pending_id == 1
    ack = jobmanager_pb2.AcknowledgeCheckpointRequest(
        leader_session_id=SESSION, job_id=job_id, execution_id=eid, checkpoint_id=1, state_handle=b"{}"
    )
    assert call(rm(d).AcknowledgeCheckpoint, ack, "taskmanager/tm-a")[0] is not None
    storage = d._jobs[job_id].storage
    metadata = wait_until(lambda: storage.read_metadata(1) if d._jobs[job_id].latest else None, 10, "checkpoint 1")
    ((op_id, state),) = metadata["coordinators"].items()
    assert [s["id"] for s in state["assigned"][0]] == ["s0", "s1", "s2"] and state["enumerator"] == {"pending": []}


def test_bad_foreign_and_stale_split_requests_are_refused(job):
    d, job_id, eid, _ = job
    resp, context = ask(d, job_id, eid, received=7)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and "holds 7" in context.details
    resp, context = ask(d, job_id, eid, who="taskmanager/rogue")
    assert resp is None and context.code() == grpc.StatusCode.PERMISSION_DENIED
    resp, context = ask(d, job_id, eid, session="another")
    assert resp is None and context.code() == grpc.StatusCode.FAILED_PRECONDITION
    resp, _ = ask(d, job_id, "no-such-execution", op="1-source_connector")
    assert resp is not None and list(resp.splits) == []  # a late request gets nothing
    resp, context = ask(d, job_id, eid, op="x" * 2000)
    assert resp is None and context.code() == grpc.StatusCode.INVALID_ARGUMENT and "operator_id" in context.details
    assert where(d, job_id, eid) == "tm-a"


def test_the_api_takes_only_connector_objects_and_the_graph_checks_their_settings():
    env = StreamExecutionEnvironment()
    with pytest.raises(TypeError, match="sluice.connectors.Source"):
        env.from_source(object())  # type: ignore[arg-type]  # the point of the test
    with pytest.raises(TypeError, match="or a sluice.connectors.Sink"):
        env.from_source(Splits(1)).sink_to(object())  # type: ignore[arg-type]  # the point of the test
    env = StreamExecutionEnvironment()
    env.from_source(Splits(2), name="splits").sink_to(Nowhere())
    job = env.get_job_graph("ok")
    assert graph.unbounded_reason(graph.OperatorKind.SOURCE_CONNECTOR, {"bounded": False}) is not None
    source = job.operators[0]
    assert set(source.code) == {"source"} and json.loads(source.config)["enumerator"]["name"] == "static"

    broken = common_pb2.JobGraph()
    broken.CopyFrom(job)
    config = json.loads(broken.operators[0].config)
    config["enumerator"]["name"] = "kafka"
    broken.operators[0].config = json.dumps(config)
    with pytest.raises(JobValidationError, match=r"operators\[0\]\.config\.enumerator\.name.*unknown enumerator"):
        graph.validate(broken)
    config["enumerator"] = {"name": "static", "config": {"splits": [{"id": ""}]}}
    broken.operators[0].config = json.dumps(config)
    with pytest.raises(JobValidationError, match=r"enumerator\.config\.splits\[0\]\.id"):
        graph.validate(broken)
    del broken.operators[1].code["sink"]
    broken.operators[0].config = job.operators[0].config
    with pytest.raises(JobValidationError, match="code.sink"):
        graph.validate(broken)


def test_savepoints_and_live_reconfiguration_are_refused_saying_why(job):
    d, job_id, _eid, now = job
    master = d._jobs[job_id]
    with pytest.raises(ValueError, match="savepoints do not carry their split enumerators' state"):
        master.trigger_savepoint(str(master.storage.checkpoint_dir(0)), stop=False, now=now[0])
    with pytest.raises(ValueError, match="cannot be reconfigured live"):
        master.reconfigure(master.job.operators[0].id, 2, None, now[0])
    assert master.checkpointing.savepoints.current is None and master.reconfiguration is None
