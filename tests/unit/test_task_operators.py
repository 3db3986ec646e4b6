"""The TaskManager's operator interface without Spark: the registry, a Task driving
a collection source and a file sink through a checkpoint, its restore and its
failure report, and what the leader connection sends for them."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest
from helpers import wait_until

from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.graph import OperatorKind
from sluice.states import ExecutionState, FailureCause, from_proto
from sluice.v1 import common_pb2, jobmanager_pb2, taskmanager_pb2
from taskmanager.leader_connection import LeaderConnection
from taskmanager.network.input_gate import ChannelError
from taskmanager.network.partition import PartitionManager
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot
from taskmanager.operators.keyed_aggregate import KeyedAggregate
from taskmanager.operators.registry import OPERATORS, combiner_for, make_operator
from taskmanager.spark_engine import SparkEngine
from taskmanager.task import Task
from taskmanager.task_messages import Failure
from taskmanager.task_registry import TaskRegistry

DEADLINE = 10.0
CTX = OperatorContext(
    name="op", subtask=0, parallelism=1, job_id="j" * 32, restore_checkpoint_id=0, checkpointing=False
)


# -- registry ---------------------------------------------------------------------------------
def test_every_kind_a_chain_may_hold_has_an_operator_and_sources_do_not():
    assert set(OPERATORS) == set(OperatorKind) - set(graph.SOURCE_KINDS)
    assert all(issubclass(cls, Operator) for cls in OPERATORS.values())
    with pytest.raises(ValueError, match="cannot be chained"):
        make_operator(OperatorKind.SOURCE_FILES, {}, CTX)


def test_make_operator_builds_from_kind_payload_and_context(tmp_path):
    agg = make_operator(OperatorKind.AGGREGATE, {"key": "url", "aggs": {"n": ("count", "*")}}, CTX)
    assert isinstance(agg, KeyedAggregate) and agg.name == "op" and not agg.is_sink
    sink = make_operator(OperatorKind.SINK_FILE, {"path": str(tmp_path)}, CTX)
    assert sink.is_sink
    assert make_operator(OperatorKind.SINK_PRINT, {}, dataclasses.replace(CTX, parallelism=2)).is_sink


def test_only_a_keyed_aggregate_offers_producers_a_combiner():
    combiner = combiner_for(OperatorKind.AGGREGATE, {"key": "url", "aggs": {"n": ("count", "*"), "t": ("sum", "b")}})
    assert combiner is not None and combiner.columns() == ["b"]
    assert combiner_for(OperatorKind.MAP, {"body": lambda df: df}) is None
    assert combiner_for(OperatorKind.SINK_PRINT, {}) is None


@pytest.mark.parametrize(
    "pending",
    [
        ["{out}/.part-0-jjjjjjjj-abc-000000.inprogress", "{elsewhere}/part-1.csv"],  # renamed out of the sink
        ["{elsewhere}/victim.txt", "{out}/part-000000000001-00000-jjjjjjjj-abc.csv"],  # someone else's file
        ["{out}/.part-1-jjjjjjjj-abc-000000.inprogress", "{out}/part-1.csv"],  # another subtask's part
        ["{out}/../x/.part-0-jjjjjjjj-a.inprogress", "{out}/part-1.csv"],
    ],
)
def test_a_file_sink_restores_only_parts_of_its_own(tmp_path, pending):
    """Sink state comes back from acks: a restore renames only this subtask's hidden parts
    inside its output directory, and touches nothing when the state names anything else."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.txt").write_text("keep me")
    sink = make_operator(OperatorKind.SINK_FILE, {"path": str(out)}, CTX)
    staged, final = (p.format(out=out, elsewhere=elsewhere) for p in pending)
    with pytest.raises(ValueError, match="outside its own output"):
        sink.restore(OperatorSnapshot(inline={"pending": [[staged, final]]}))
    assert (elsewhere / "victim.txt").read_text() == "keep me"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim.txt"]


# -- a task ------------------------------------------------------------------------------------
class Reports:
    """A TaskReports that records what the leader would be told."""

    def __init__(self) -> None:
        self.states: list[tuple[ExecutionState, Failure | None, bool]] = []
        self.acks: dict[int, bytes] = {}
        self.sizes: dict[int, int] = {}
        self.declines: list[tuple[int, str]] = []
        self.executions: set[str] = set()  # the tasks reported about
        self.lock = threading.Lock()

    def report(
        self, task: Task, state: ExecutionState, failure: Failure | None = None, end_of_input: bool = False
    ) -> None:
        with self.lock:
            self.executions.add(task.execution_id)
            self.states.append((state, failure, end_of_input))

    def acknowledge(self, task: Task, checkpoint_id: int, handle: bytes, size: int) -> None:
        with self.lock:
            self.executions.add(task.execution_id)
            self.acks[checkpoint_id], self.sizes[checkpoint_id] = handle, size

    def decline(self, task: Task, checkpoint_id: int, reason: str) -> None:
        with self.lock:
            self.executions.add(task.execution_id)
            self.declines.append((checkpoint_id, reason))

    def last(self) -> tuple[ExecutionState, Failure | None, bool] | None:
        with self.lock:
            return self.states[-1] if self.states else None


def deployment(
    tmp_path, rows: list[dict[str, Any]], restore_from: int = 0, restore_state: bytes = b""
) -> taskmanager_pb2.TaskDeploymentDescriptor:
    env = StreamExecutionEnvironment()
    env.from_collection(rows).sink_to(FileSink(str(tmp_path / "out")))
    job = env.get_job_graph("collect")
    (chain,) = graph.build_chains(job)
    return taskmanager_pb2.TaskDeploymentDescriptor(
        leader_session_id="s1",
        job_id="a" * 32,
        attempt=restore_from,
        execution_id=f"e{restore_from}",
        chain_id=chain.id,
        operator_ids=chain.operator_ids,
        subtask_index=0,
        parallelism=1,
        job=job,
        checkpoint_dir=str(tmp_path / "chk"),
        restore_checkpoint_id=restore_from,
        restore_state=restore_state,
    )


def run_task(tdd: taskmanager_pb2.TaskDeploymentDescriptor) -> tuple[Task, Reports]:
    reports = Reports()
    task = Task(tdd, SparkEngine(1), PartitionManager(), "127.0.0.1:1", reports)
    task.start()
    return task, reports


def output_lines(tmp_path) -> list[str]:
    out = tmp_path / "out"
    return sorted(line for f in out.glob("part-*.csv") for line in f.read_text().splitlines())


def test_a_sink_chain_commits_with_the_final_checkpoint_and_restores_from_it(tmp_path):
    rows = [{"url": f"/{i}", "n": i} for i in range(5)]
    task, reports = run_task(deployment(tmp_path, rows))
    wait_until(lambda: reports.last() == (ExecutionState.RUNNING, None, True), DEADLINE, "end of input reported")
    assert task.records_out == 5
    assert output_lines(tmp_path) == []  # with checkpoints, nothing is visible before one completes

    task.trigger_checkpoint(1, final=True)
    wait_until(lambda: 1 in reports.acks, DEADLINE, "checkpoint 1 acknowledged")
    handle = json.loads(reports.acks[1])
    assert set(handle) == {"operators", "keyed"} and handle["keyed"] == {}
    source_id, sink_id = task.tdd.operator_ids
    assert handle["operators"][source_id] == {"offset": 5}
    assert len(handle["operators"][sink_id]["pending"]) == 1
    assert reports.sizes[1] == len(json.dumps(handle["operators"])) and reports.executions == {"e0"}

    task.notify_complete(1, final=True)
    wait_until(
        lambda: (last := reports.last()) is not None and last[0] == ExecutionState.FINISHED, DEADLINE, "FINISHED"
    )
    task.join(DEADLINE)
    assert task.state == ExecutionState.FINISHED
    assert output_lines(tmp_path) == [f"/{i},{i}" for i in range(5)]

    restored, reports = run_task(deployment(tmp_path, rows, restore_from=1, restore_state=reports.acks[1]))
    wait_until(lambda: reports.last() == (ExecutionState.RUNNING, None, True), DEADLINE, "restored end of input")
    assert restored.records_out == 0  # the source resumed at its offset: nothing read twice
    restored.cancel()
    restored.join(DEADLINE)
    assert reports.last() == (ExecutionState.CANCELED, None, False)
    assert output_lines(tmp_path) == [f"/{i},{i}" for i in range(5)]


def test_a_failing_task_reports_a_task_error_with_its_traceback(tmp_path):
    tdd = deployment(tmp_path, [{"url": "/a"}])
    tdd.operator_ids.append("no-such-operator")
    task, reports = run_task(tdd)
    task.join(DEADLINE)
    last = reports.last()
    assert last is not None
    state, failure, _ = last
    assert state == ExecutionState.FAILED and task.state == ExecutionState.FAILED
    assert failure is not None and failure.cause == FailureCause.TASK_ERROR and not failure.unreachable_peer
    assert "KeyError" in failure.error


def test_a_broken_stream_from_another_taskmanager_names_the_peer():
    error = ChannelError("input from p[0] broke: 10.0.0.7:6122: UNAVAILABLE: gone", peer="10.0.0.7:6122")
    assert Failure.of(error, "tb") == Failure("tb", FailureCause.PEER_UNREACHABLE, "10.0.0.7:6122")
    assert Failure.of(ChannelError("local partition not found"), "tb").cause == FailureCause.TASK_ERROR
    assert Failure.of(ValueError("x"), "tb").cause == FailureCause.TASK_ERROR


# -- the leader connection ---------------------------------------------------------------------
class FakeTask:
    def __init__(self) -> None:
        self.tdd = taskmanager_pb2.TaskDeploymentDescriptor(leader_session_id="s1", attempt=2)
        self.job_id, self.execution_id, self.tag = "j1", "j1/s1.2/c/0", "[job j1]"
        self.bad_record_samples, self.watermark = ["part-0.jsonl: oops"], 1_700_000_000_000

    def counters(self) -> common_pb2.TaskCounters:
        return common_pb2.TaskCounters(
            records_in=3, records_out=4, records_sent=2, records_malformed=1, records_dropped=1, records_late_dropped=5
        )


def connection(interval: float = 1.0) -> LeaderConnection:
    return LeaderConnection("tm-1", 2, TaskRegistry(2), interval, threading.Event())


def test_reports_carry_proto_states_and_the_failure_cause():
    conn, task = connection(), FakeTask()
    conn.report(task, ExecutionState.RUNNING, end_of_input=True)  # type: ignore[arg-type]  # a fake task
    failure = Failure("tb", FailureCause.PEER_UNREACHABLE, "10.0.0.7:6122")
    conn.report(task, ExecutionState.FAILED, failure)  # type: ignore[arg-type]  # a fake task
    sent = [conn._reports.get_nowait() for _ in range(2)]
    assert [method for method, _ in sent] == ["UpdateTaskExecutionState"] * 2
    running, failed = (msg for _, msg in sent)
    assert isinstance(running, jobmanager_pb2.TaskExecutionState)
    assert isinstance(failed, jobmanager_pb2.TaskExecutionState)
    assert from_proto(ExecutionState, running.state) == ExecutionState.RUNNING and running.end_of_input
    assert running.failure_cause == jobmanager_pb2.FAILURE_CAUSE_UNSPECIFIED and not running.error
    assert from_proto(ExecutionState, failed.state) == ExecutionState.FAILED
    assert from_proto(FailureCause, failed.failure_cause) == FailureCause.PEER_UNREACHABLE
    assert (failed.unreachable_peer, failed.error, failed.counters.records_out) == ("10.0.0.7:6122", "tb", 4)
    assert (failed.counters.records_sent, failed.counters.records_malformed) == (2, 1)
    assert (failed.counters.records_dropped, list(failed.bad_record_samples)) == (1, ["part-0.jsonl: oops"])
    assert (failed.counters.records_late_dropped, failed.watermark) == (5, 1_700_000_000_000)


class FakeStub:
    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms

    def RegisterTaskManager(self, request, timeout):
        return jobmanager_pb2.RegisterTaskManagerResponse(
            leader_session_id="s2", heartbeat_interval_ms=self.interval_ms
        )


@pytest.mark.parametrize(("interval_ms", "expected"), [(250, 0.25), (0, 1.5)])
def test_heartbeats_follow_the_interval_the_leader_asks_for(interval_ms, expected):
    conn = connection(interval=1.5)
    conn._register(FakeStub(interval_ms), "jm:6123")  # type: ignore[arg-type]  # a fake stub: RegisterTaskManager only
    assert conn._interval == expected
    assert conn.tasks.session == "s2"


# -- record counters ---------------------------------------------------------------------------
@pytest.mark.parametrize(("partitioning", "sent"), [("broadcast", 30), ("rebalance", 10), ("forward", 10)])
def test_an_output_counts_rows_given_once_and_rows_sent_per_target(partitioning, sent):
    import pyarrow as pa

    from taskmanager.network.partition import ResultPartition
    from taskmanager.network.record_writer import RecordWriter
    from taskmanager.spark_engine import Batch

    writer = RecordWriter(ResultPartition("p", 3, 4), graph.Partitioning(partitioning), [], 0, 128, None, lambda: False)
    for _ in range(2):
        writer.emit(Batch(None, table=pa.table({"v": [1, 2, 3, 4, 5]})))  # a table needs no engine
    writer.emit(Batch(None, table=pa.table({"v": pa.array([], pa.int64())})))
    assert (writer.records_produced, writer.records_sent) == (10, sent)
