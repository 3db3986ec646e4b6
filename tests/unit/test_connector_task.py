"""A Task heading its chain with a connector source and ending it with a connector sink
(taskmanager/connectors/), without Spark: the reader asks the JobManager's split
coordinator (the pure core, in-process) for splits, its positions and the sink's
committables go into the checkpoint, and a task restored from it after a failure reads
on from the positions, gets again the split assigned after the checkpoint, and the sink
commits every row exactly once."""

from __future__ import annotations

import json
import threading
from typing import Any

import pyarrow as pa
import pytest
from helpers import wait_until

from jobmanager.connectors.coordinator import SourceCoordinator
from sluice import graph
from sluice.api import StreamExecutionEnvironment
from sluice.connectors import (
    END,
    NOTHING_YET,
    Committer,
    Poll,
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
from sluice.states import ExecutionState
from sluice.v1 import taskmanager_pb2
from taskmanager.connectors.sink import ConnectorSink
from taskmanager.connectors.source import ConnectorSource
from taskmanager.network.partition import PartitionManager
from taskmanager.operators.base import OperatorContext
from taskmanager.spark_engine import Batch, SparkEngine
from taskmanager.task import Task

DEADLINE = 10.0
ROWS = {"s0": [f"a{i}" for i in range(5)], "s1": [f"b{i}" for i in range(3)]}
GATE = threading.Event()  # closed: the reader stops after the first two rows of s0
COMMITTED: dict[int, list[str]] = {}  # checkpoint id -> rows made visible (the committer is idempotent)


class ListSource(Source):
    def create_enumerator(self) -> SplitEnumerator:
        return StaticSplitEnumerator([SourceSplit(s, {"pos": 0}) for s in ROWS])

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return ListReader()


class ListReader(SourceReader):
    def __init__(self) -> None:
        self.splits: dict[str, int] = {}

    def add_splits(self, splits: list[SourceSplit]) -> None:
        self.splits.update({s.id: int(s.data["pos"]) for s in splits})

    def poll_next(self) -> pa.Table | Poll:
        for sid, pos in list(self.splits.items()):
            if pos >= len(ROWS[sid]):
                del self.splits[sid]
                continue
            if sid == "s0" and pos >= 2 and not GATE.is_set():
                return NOTHING_YET
            self.splits[sid] = pos + 1
            return pa.table({"v": [ROWS[sid][pos]]})
        return END if self.no_more_splits else NOTHING_YET

    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]:
        return [SourceSplit(sid, {"pos": pos}) for sid, pos in self.splits.items()]


class ListSink(Sink):
    def create_writer(self, ctx: SinkContext) -> SinkWriter:
        return ListWriter()

    def create_committer(self) -> Committer:
        return ListCommitter()


class ListWriter(SinkWriter):
    def __init__(self) -> None:
        self.rows: list[str] = []
        self.closed = 0

    def close(self) -> None:
        self.closed += 1

    def write(self, table: pa.Table) -> None:
        self.rows.extend(table.column("v").to_pylist())

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        rows, self.rows = self.rows, []
        return [{"checkpoint": checkpoint_id, "rows": rows}] if rows else []


class ListCommitter(Committer):
    closed = 0

    def close(self) -> None:
        self.closed += 1

    def commit(self, committables: list[Any]) -> None:
        for c in committables:
            COMMITTED.setdefault(c["checkpoint"], c["rows"])  # again after a restore: no effect


class Reports:
    """TaskReports and the split requests of a leader connection, in-process."""

    def __init__(self, coordinator: SourceCoordinator) -> None:
        self.coordinator = coordinator
        self.states: list[tuple[ExecutionState, bool]] = []
        self.acks: dict[int, bytes] = {}
        self.paused = False  # the JobManager does not answer (requests fail)
        self.pause_after_first = False
        self.lock = threading.Lock()

    def report(self, task: Task, state: ExecutionState, failure: Any = None, end_of_input: bool = False) -> None:
        with self.lock:
            self.states.append((state, end_of_input))

    def acknowledge(self, task: Task, checkpoint_id: int, handle: bytes, size: int) -> None:
        with self.lock:
            self.acks[checkpoint_id] = handle

    def decline(self, task: Task, checkpoint_id: int, reason: str) -> None:
        raise AssertionError(f"checkpoint {checkpoint_id} declined: {reason}")

    def request_splits(self, task: Task, op_id: str, received: int, last: int, idle: bool) -> Any:
        with self.lock:
            if self.paused:
                return None
            a = self.coordinator.request(task.tdd.subtask_index, received, last, idle)
            if a.splits and self.pause_after_first:
                self.paused = True
            return taskmanager_like(a)

    def ended(self) -> bool:
        with self.lock:
            return (ExecutionState.RUNNING, True) in self.states


def taskmanager_like(a: Any) -> Any:
    from sluice.v1 import jobmanager_pb2

    return jobmanager_pb2.RequestSplitsResponse(
        first=a.first, splits=[json.dumps(s) for s in a.splits], no_more_splits=a.no_more_splits
    )


def deployment(tmp_path, restore_from: int = 0, state: bytes = b"") -> taskmanager_pb2.TaskDeploymentDescriptor:
    env = StreamExecutionEnvironment()
    env.enable_checkpointing(60_000)
    env.from_source(ListSource(), name="lists").sink_to(ListSink(), name="sink")
    job = env.get_job_graph("connectors")
    (chain,) = graph.build_chains(job)
    return taskmanager_pb2.TaskDeploymentDescriptor(
        leader_session_id="s1",
        job_id="c" * 32,
        attempt=restore_from,
        execution_id=f"e{restore_from}",
        chain_id=chain.id,
        operator_ids=chain.operator_ids,
        subtask_index=0,
        parallelism=1,
        job=job,
        checkpoint_dir=str(tmp_path / "chk"),
        restore_checkpoint_id=restore_from,
        restore_state=state,
    )


def test_positions_and_committables_survive_a_failure_and_late_splits_are_sent_again(tmp_path):
    GATE.clear()
    COMMITTED.clear()
    tdd = deployment(tmp_path)
    source_id, sink_id = tdd.operator_ids
    spec = graph.operator_config(tdd.job.operators[0])["enumerator"]
    coordinator = SourceCoordinator.create(source_id, 1, spec)
    reports = Reports(coordinator)
    reports.pause_after_first = True  # s0 only before checkpoint 1
    task = Task(tdd, SparkEngine(1), PartitionManager(), "127.0.0.1:1", reports)
    task.start()
    wait_until(lambda: task.records_out == 2, DEADLINE, "two rows of s0 read")

    coordinator.checkpoint_triggered(1)  # as the JobMaster does before it sends the trigger
    task.trigger_checkpoint(1, final=False)
    wait_until(lambda: 1 in reports.acks, DEADLINE, "checkpoint 1 acknowledged")
    handle = json.loads(reports.acks[1])
    assert handle["operators"][source_id]["received"] == 1
    assert handle["operators"][source_id]["splits"] == [{"id": "s0", "data": {"pos": 2}}]
    assert handle["operators"][sink_id]["pending"] == [[1, [{"checkpoint": 1, "rows": ["a0", "a1"]}]]]

    reports.paused = reports.pause_after_first = False
    GATE.set()
    wait_until(reports.ended, DEADLINE, "end of input: s1 assigned after checkpoint 1 and read")
    assert task.records_out == 8
    task.cancel()  # the failure: checkpoint 1 is the latest completed one; nothing was notified
    task.join(DEADLINE)
    assert COMMITTED == {}

    state = coordinator.state_of(1)
    assert state is not None
    restored = SourceCoordinator.restore(source_id, 1, spec, state, 1)
    reports2 = Reports(restored)
    ck1 = {"operators": handle["operators"], "keyed": {}}
    task2 = Task(deployment(tmp_path, 1, json.dumps(ck1).encode()), SparkEngine(1), PartitionManager(), "x", reports2)
    task2.start()
    wait_until(reports2.ended, DEADLINE, "the restored task read the rest of s0 and s1 again")
    assert COMMITTED == {1: ["a0", "a1"]}  # the restored checkpoint's committables, committed on restore
    restored.checkpoint_triggered(2)
    task2.trigger_checkpoint(2, final=True)
    wait_until(lambda: 2 in reports2.acks, DEADLINE, "final checkpoint acknowledged")
    task2.notify_complete(2, final=True)
    task2.join(DEADLINE)
    assert task2.state == ExecutionState.FINISHED
    rows = [r for cid in sorted(COMMITTED) for r in COMMITTED[cid]]
    assert sorted(rows) == sorted(ROWS["s0"] + ROWS["s1"])  # each row once


def test_without_checkpoints_a_connector_sink_commits_once_at_the_end_of_its_input_then_closes():
    COMMITTED.clear()
    ctx = OperatorContext(
        name="sink", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=False
    )
    sink = ConnectorSink(ListSink(), ctx)
    sink.process(Batch(None, table=pa.table({"v": ["x", "y"]})))
    assert COMMITTED == {}
    sink.end_input()
    assert COMMITTED == {0: ["x", "y"]}
    sink.dispose()  # the task ended: the writer and committer are closed, once
    sink.dispose()
    assert isinstance(sink.writer, ListWriter) and isinstance(sink.committer, ListCommitter)
    assert sink.writer.closed == 1 and sink.committer.closed == 1


class BadReader(ListReader):
    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def poll_next(self) -> Any:
        return self.answer


class BadSource(ListSource):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return BadReader(self.answer)


def test_a_reader_that_ends_too_early_or_returns_something_else_fails_its_task_saying_so():
    ctx = ReaderContext(subtask=0, parallelism=1, job_id="j", operator_id="src")
    early = ConnectorSource({"source": BadSource(END)}, ctx, None, lambda *_: None)
    with pytest.raises(RuntimeError, match="returned END before it was told no more splits come"):
        early.next_batch()
    odd = ConnectorSource({"source": BadSource([1, 2])}, ctx, None, lambda *_: None)
    with pytest.raises(TypeError, match="must return a pyarrow.Table, NOTHING_YET or END, got list"):
        odd.next_batch()
