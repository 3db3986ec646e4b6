"""Blocking result partitions (BATCH) within one process: files written by a producer,
read by any number of readers once it finished, deleted only on release; the tasks that
write and read them; the DataExchange servicer serving them; ReleasePartitions."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import grpc
import pyarrow as pa
import pytest
from helpers import wait_until

from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.eventtime import MAX_WATERMARK
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.graph import OperatorKind
from sluice.serialization import ipc_to_table
from sluice.states import ExecutionState
from sluice.v1 import common_pb2, dataexchange_pb2, taskmanager_pb2
from taskmanager import servicer as tm_servicer
from taskmanager.network import blocking_partition as bp
from taskmanager.network.exchange import DataExchangeServicer
from taskmanager.network.partition import (
    BARRIER,
    BATCH,
    END,
    STATUS,
    WATERMARK,
    Partition,
    PartitionManager,
    PartitionReleased,
    ResultPartition,
)
from taskmanager.operators import registry
from taskmanager.operators.base import Operator, OperatorContext, Payload
from taskmanager.spark_engine import Batch, SparkEngine
from taskmanager.task import Task
from taskmanager.task_messages import Failure

DEADLINE = 10.0
JOB = "b" * 32


def t(*values: int, column: str = "i") -> pa.Table:
    return pa.table({column: list(values)})


def new_partition(manager: PartitionManager, pid: str = "p0", n: int = 3, job: str = JOB) -> bp.BlockingResultPartition:
    partition = bp.BlockingResultPartition.create(manager, job, pid, n, tag="[test]")
    manager.register(partition)
    return partition


def read_all(reader: Any, timeout: float = DEADLINE) -> list[tuple[Any, Any]]:
    """Every item up to and including END."""
    items: list[tuple[Any, Any]] = []
    while True:
        item = reader.poll(timeout)
        assert item is not None, f"no item within {timeout}s after {items}"
        items.append(item)
        if item[0] == END:
            return items


def blocking(p: Partition | None) -> bp.BlockingResultPartition:
    """A partition the test knows to be a blocking one."""
    assert isinstance(p, bp.BlockingResultPartition), p
    return p


def rows(items: list[tuple[Any, Any]], column: str = "i") -> list[Any]:
    return [v for kind, table in items if kind == BATCH for v in table.column(column).to_pylist()]


# -- writing and reading ---------------------------------------------------------------------
def test_subpartitions_round_trip_through_their_files(tmp_path):
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager)
    p.subpartitions[0].add((BATCH, t(1, 2)))
    p.subpartitions[0].add((BARRIER, 7))  # no checkpoints in BATCH: not kept
    p.subpartitions[0].add((STATUS, True))
    p.subpartitions[0].add((WATERMARK, 10))
    p.subpartitions[0].add((BATCH, t(3)))
    p.subpartitions[0].add((BATCH, t(column="i")))  # an empty batch writes nothing
    p.subpartitions[0].add((BATCH, pa.table({"s": ["x", "y"]})))  # another schema: a new stream in the file
    p.subpartitions[0].add((BATCH, t(4)))
    p.subpartitions[1].add((BATCH, t(5)))
    for s in p.subpartitions:
        s.add((WATERMARK, MAX_WATERMARK))
        s.add((END, None))
    p.finish()

    directory = bp.partition_directory(str(tmp_path), JOB, "p0")
    assert directory.startswith(str(tmp_path / "partitions")) and p.directory == directory
    assert sorted(os.listdir(directory)) == ["0.arrow", "1.arrow"]  # subpartition 2 got no batch: no file
    assert p.rows_written == 7 and p.bytes_written == sum(os.path.getsize(f"{directory}/{i}.arrow") for i in (0, 1))

    first = read_all(p.reader(0))
    batches = [v for kind, v in first if kind == BATCH]
    assert [b.column_names for b in batches] == [["i"], ["s"], ["i"]]  # one item per run of one schema
    assert [b.to_pylist() for b in batches] == [
        [{"i": 1}, {"i": 2}, {"i": 3}],
        [{"s": "x"}, {"s": "y"}],
        [{"i": 4}],
    ]
    assert [kind for kind, _ in first[-2:]] == [WATERMARK, END] and first[-2][1] == MAX_WATERMARK
    assert rows(read_all(p.reader(1))) == [5]
    assert read_all(p.reader(2)) == [(WATERMARK, MAX_WATERMARK), (END, None)]


def test_readers_read_independently_and_again_from_the_start(tmp_path):
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager, n=1)
    for i in range(5):
        p.subpartitions[0].add((BATCH, t(i)))
    p.subpartitions[0].add((END, None))
    p.finish()

    a, b = p.reader(0), p.reader(0)
    first = a.poll(DEADLINE)
    assert first is not None and rows([first]) == [0, 1, 2, 3, 4]  # consecutive record batches joined into one item
    assert rows(read_all(b)) == [0, 1, 2, 3, 4]
    assert a.poll(DEADLINE) == (END, None) and a.poll(0) is None  # after END: nothing more
    p.consumed(0)  # a consumer's END does not release a blocking partition
    assert manager.get("p0", 0) is p and not p.released
    assert rows(read_all(p.reader(0))) == [0, 1, 2, 3, 4]  # a re-run consumer reads it all again


def test_a_reader_joins_record_batches_only_up_to_its_target(tmp_path, monkeypatch):
    monkeypatch.setattr(bp, "READ_TARGET_BYTES", 1)
    p = new_partition(PartitionManager(str(tmp_path)), n=1)
    for i in range(3):
        p.subpartitions[0].add((BATCH, t(i)))
    p.finish()  # closes the subpartition that got no END
    assert [len(v) for kind, v in read_all(p.reader(0)) if kind == BATCH] == [1, 1, 1]


def test_a_reader_of_an_unfinished_partition_waits_for_its_producer(tmp_path):
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager, n=1)
    p.subpartitions[0].add((BATCH, t(1)))
    p.subpartitions[0].add((END, None))
    reader = p.reader(0)
    assert reader.poll(0.01) is None and not reader.released  # written, but the producer has not finished

    got: list[Any] = []
    waiting = threading.Thread(target=lambda: got.append(reader.poll(DEADLINE)), daemon=True)
    waiting.start()
    p.finish()
    waiting.join(DEADLINE)
    assert rows(got) == [1]
    assert read_all(reader) == [(END, None)]


def test_release_deletes_the_files_and_stops_readers(tmp_path):
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager, n=2)
    p.subpartitions[0].add((BATCH, t(1)))
    p.finish()
    reader = p.reader(0)
    manager.release("p0")
    assert not os.path.exists(p.directory) and manager.get("p0", 0) is None
    assert reader.poll(DEADLINE) is None and reader.released  # a released partition is not read
    with pytest.raises(PartitionReleased):
        p.subpartitions[1].add((BATCH, t(2)))
    assert not os.path.exists(os.path.dirname(p.directory))  # the job's last partition: its directory too


def test_a_reader_waiting_for_an_unfinished_partition_stops_when_it_is_released(tmp_path):
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager, n=1)
    p.subpartitions[0].add((BATCH, t(1)))
    reader = p.reader(0)
    got: list[Any] = []
    waiting = threading.Thread(target=lambda: got.append(reader.poll(DEADLINE)), daemon=True)
    waiting.start()
    wait_until(lambda: os.path.exists(f"{p.directory}/0.arrow"), DEADLINE, "the file")
    manager.release("p0")
    waiting.join(DEADLINE)
    assert got == [None] and reader.released and not os.path.exists(p.directory)


def test_release_blocking_releases_named_or_all_partitions_of_one_job_only(tmp_path):
    manager = PartitionManager(str(tmp_path))
    ours = [new_partition(manager, f"{JOB}/a/c->t/{i}", n=1) for i in range(3)]
    theirs = new_partition(manager, "other/a/c->t/0", n=1, job="c" * 32)
    pipelined = ResultPartition(f"{JOB}/a/x->y/0", 1, 2, job_id=JOB)
    manager.register(pipelined)
    for p in [*ours, theirs]:
        p.subpartitions[0].add((BATCH, t(1)))
        p.finish()

    assert manager.release_blocking(JOB, [ours[0].partition_id, "unknown", theirs.partition_id]) == 1
    assert ours[0].released and not os.path.exists(ours[0].directory)
    assert not theirs.released and not ours[1].released
    assert manager.release_blocking(JOB, all_of_job=True) == 2
    assert all(p.released for p in ours) and not theirs.released
    assert manager.get(pipelined.partition_id, 0) is pipelined  # ReleasePartitions leaves pipelined ones alone
    assert os.listdir(tmp_path / "partitions") == [bp.safe_name("c" * 32)]

    manager.close()  # the TaskManager stops: everything goes
    assert theirs.released and not os.path.exists(theirs.directory)


def test_a_rerun_producer_replaces_the_partition_of_the_same_id(tmp_path):
    manager = PartitionManager(str(tmp_path))
    old = new_partition(manager, n=1)
    old.subpartitions[0].add((BATCH, t(1)))
    old.finish()
    new = new_partition(manager, n=1)
    assert old.released and manager.get("p0", 0) is new
    new.subpartitions[0].add((BATCH, t(2)))
    new.finish()
    manager.release("p0", old)  # the old producer's own release no longer touches the new partition
    assert rows(read_all(new.reader(0))) == [2]


def test_safe_names_stay_inside_their_directory_and_apart():
    for pid in ["../../etc", "/abs/path", "a/b->c/0", ".", "..", "x" * 5000, ""]:
        name = bp.safe_name(pid)
        assert "/" not in name and not name.startswith(".") and len(name) <= 81
    assert bp.safe_name("a/b") != bp.safe_name("a_b")


def test_a_manager_without_a_directory_makes_a_temporary_one_and_removes_it(tmp_path):
    manager = PartitionManager()
    p = new_partition(manager, n=1)
    p.subpartitions[0].add((BATCH, t(1)))
    p.finish()
    root = manager.local_dir
    assert os.path.isdir(root) and p.directory.startswith(root)
    manager.close()
    assert not os.path.exists(root)


# -- the DataExchange servicer -----------------------------------------------------------------
class _Aborted(Exception):
    pass


class _Context:
    def __init__(self) -> None:
        self.active = True

    def is_active(self) -> bool:
        return self.active

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


def _subscribe(service: DataExchangeServicer, pid: str, subpartition: int) -> list[dataexchange_pb2.DataMessage]:
    request = dataexchange_pb2.ConsumerMessage(
        request=dataexchange_pb2.PartitionRequest(partition_id=pid, subpartition=subpartition, initial_credit=1)
    )
    credits = threading.Event()

    def requests():
        yield request
        for _ in range(100):  # enough credit for every batch
            yield dataexchange_pb2.ConsumerMessage(credit=1)
        credits.wait(DEADLINE)  # the consumer keeps its stream open until the end

    try:
        return list(service.Subscribe(requests(), _Context()))
    finally:
        credits.set()


def test_remote_consumers_read_a_blocking_partition_with_credit_any_number_of_times(tmp_path, monkeypatch):
    monkeypatch.setattr(bp, "READ_TARGET_BYTES", 1)  # one item per record batch: credit is taken per batch
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager, n=2)
    for i in range(4):
        p.subpartitions[1].add((BATCH, t(i)))
    p.subpartitions[1].add((WATERMARK, MAX_WATERMARK))
    p.finish()
    service = DataExchangeServicer(manager)
    for _ in range(2):
        messages = _subscribe(service, "p0", 1)
        kinds = [m.WhichOneof("kind") for m in messages]
        assert kinds == ["batch"] * 4 + ["watermark", "end"]
        assert [ipc_to_table(m.batch).column("i")[0].as_py() for m in messages[:4]] == [0, 1, 2, 3]
        assert messages[4].watermark.timestamp_ms == MAX_WATERMARK
    assert not p.released and os.path.exists(f"{p.directory}/1.arrow")


def test_a_remote_consumer_of_a_released_blocking_partition_is_aborted(tmp_path):
    manager = PartitionManager(str(tmp_path))
    p = new_partition(manager, n=1)
    service = DataExchangeServicer(manager)
    result: list[Any] = []

    def consume():
        try:
            _subscribe(service, "p0", 0)
        except _Aborted as exc:
            result.append(exc.args[0])

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    manager.release("p0", p)  # the producer failed before it finished
    consumer.join(DEADLINE)
    assert result == [grpc.StatusCode.ABORTED]


# -- tasks writing and reading blocking partitions ----------------------------------------------
class Reports:
    def __init__(self) -> None:
        self.states: list[tuple[ExecutionState, Failure | None]] = []
        self.lock = threading.Lock()

    def report(self, task: Task, state: ExecutionState, failure: Failure | None = None, end_of_input: bool = False):
        with self.lock:
            self.states.append((state, failure))

    def acknowledge(self, task, checkpoint_id, handle, size):
        raise AssertionError("no checkpoints in BATCH")

    def decline(self, task, checkpoint_id, reason):
        raise AssertionError("no checkpoints in BATCH")

    def final(self) -> ExecutionState | None:
        with self.lock:
            last = self.states[-1][0] if self.states else None
        return last if last is not None and last.terminal else None


OWN = "127.0.0.1:1"


class Stage:
    """A BATCH job `collection -> [assigner] -> rebalance -> file sink`, two subtasks each
    side, deployed as the JobManager would: the producers' outputs blocking."""

    def __init__(self, tmp_path, rows: list[dict[str, Any]], event_time: bool = False) -> None:
        env = StreamExecutionEnvironment()
        env.set_runtime_mode("BATCH")
        stream = env.from_collection(rows).set_parallelism(2)
        if event_time:
            strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
            stream = stream.assign_timestamps_and_watermarks(strategy).set_parallelism(2)
        stream.rebalance().sink_to(FileSink(str(tmp_path / "out"))).set_parallelism(2)
        self.job = env.get_job_graph("batch")
        assert graph.is_batch(self.job)
        self.producer, self.consumer = graph.build_chains(self.job)
        self.partitions = PartitionManager(str(tmp_path / "tm"))
        self.pids = [f"{JOB}/a/{self.producer.id}->{self.consumer.id}/{i}" for i in range(2)]
        self.out = tmp_path / "out"

    def _tdd(self, chain: graph.Chain, subtask: int, execution: str) -> taskmanager_pb2.TaskDeploymentDescriptor:
        return taskmanager_pb2.TaskDeploymentDescriptor(
            leader_session_id="s1",
            job_id=JOB,
            execution_id=execution,
            chain_id=chain.id,
            operator_ids=chain.operator_ids,
            subtask_index=subtask,
            parallelism=2,
            job=self.job,
            checkpoint_dir="",  # BATCH: checkpointing off
        )

    def produce(self, subtask: int) -> tuple[Task, Reports]:
        tdd = self._tdd(self.producer, subtask, f"p{subtask}")
        tdd.outputs.add(
            partition_id=self.pids[subtask],
            target_chain=self.consumer.id,
            partitioning=common_pb2.PARTITIONING_REBALANCE,
            num_subpartitions=2,
            blocking=True,
        )
        return self._run(tdd)

    def consume(self, subtask: int, execution: str = "") -> tuple[Task, Reports]:
        tdd = self._tdd(self.consumer, subtask, execution or f"c{subtask}")
        gate = tdd.inputs.add(upstream_chain=self.producer.id)
        for pid in self.pids:
            gate.channels.add(partition_id=pid, address=OWN)
        return self._run(tdd)

    def _run(self, tdd: taskmanager_pb2.TaskDeploymentDescriptor) -> tuple[Task, Reports]:
        reports = Reports()
        task = Task(tdd, SparkEngine(1), self.partitions, OWN, reports)
        task.start()
        return task, reports

    def lines(self) -> list[str]:
        return sorted(line for f in self.out.glob("part-*.csv") for line in f.read_text().splitlines())


def finished(reports: Reports) -> None:
    wait_until(reports.final, DEADLINE, "the task's final state")
    assert reports.final() == ExecutionState.FINISHED, reports.states


def test_a_batch_stage_reads_its_producers_files_after_they_finished_and_again_on_a_rerun(tmp_path):
    rows = [{"n": i, "ts": 1_000 * i} for i in range(10)]
    stage = Stage(tmp_path, rows, event_time=True)
    producers = [stage.produce(i) for i in range(2)]
    for task, reports in producers:
        finished(reports)
        task.join(DEADLINE)
        assert not task.alive
    partitions = [blocking(stage.partitions.get(pid, 0)) for pid in stage.pids]
    assert all(p.blocking and p.finished for p in partitions)  # kept after the task ended

    consumers = [stage.consume(i) for i in range(2)]
    for task, reports in consumers:
        finished(reports)
        assert task.watermark == MAX_WATERMARK  # the final watermark came before END
        assert [s for s, _ in reports.states] == [ExecutionState.RUNNING, ExecutionState.FINISHED]
    expected = sorted(f"{i},{1_000 * i}" for i in range(10))
    assert stage.lines() == expected
    # each producer's one batch went to subpartition 0 (rebalance starts there): consumer 1 got
    # nothing and commits nothing
    assert [t.records_in for t, _ in consumers] == [10, 0]
    names = sorted(f.name for f in stage.out.iterdir())
    assert names == [f"part-000000000000-00000-{JOB[:8]}-batch.csv"]

    rerun, reports = stage.consume(0, execution="c0-rerun")  # reads its input again; loses the commit
    finished(reports)
    assert rerun.records_in == consumers[0][0].records_in
    assert stage.lines() == expected and sorted(f.name for f in stage.out.iterdir()) == names
    assert all(not p.released for p in partitions)


def test_a_failed_producer_deletes_its_blocking_partition(tmp_path, monkeypatch):
    class FailAtEnd(Operator):
        """Passes batches on, then fails at the end of its input (after they were written)."""

        @classmethod
        def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> FailAtEnd:
            return cls()

        def process(self, batch: Batch) -> Batch:
            return batch

        def end_input(self) -> None:
            raise RuntimeError("broken at the end")

    monkeypatch.setitem(registry.OPERATORS, OperatorKind.MAP, FailAtEnd)
    env = StreamExecutionEnvironment()
    env.set_runtime_mode("BATCH")
    env.from_collection([{"n": i} for i in range(4)]).map(lambda df: df).rebalance().sink_to(
        FileSink(str(tmp_path / "out"))
    )
    job = env.get_job_graph("failing")
    producer, consumer = graph.build_chains(job)
    partitions = PartitionManager(str(tmp_path / "tm"))
    seen: list[bool] = []

    class Watch(Reports):
        def report(self, task, state, failure=None, end_of_input=False):
            if state == ExecutionState.FAILED:  # reported before the partitions are released
                p = partitions.get("out0", 0)
                seen.append(isinstance(p, bp.BlockingResultPartition) and os.path.exists(f"{p.directory}/0.arrow"))
            super().report(task, state, failure, end_of_input)

    tdd = taskmanager_pb2.TaskDeploymentDescriptor(
        leader_session_id="s1",
        job_id=JOB,
        execution_id="p0",
        chain_id=producer.id,
        operator_ids=producer.operator_ids,
        parallelism=1,
        job=job,
    )
    tdd.outputs.add(
        partition_id="out0",
        target_chain=consumer.id,
        partitioning=common_pb2.PARTITIONING_REBALANCE,
        num_subpartitions=1,
        blocking=True,
    )
    reports = Watch()
    task = Task(tdd, SparkEngine(1), partitions, OWN, reports)
    task.start()
    task.join(DEADLINE)
    failure = reports.states[-1][1]
    assert reports.final() == ExecutionState.FAILED and failure is not None and "broken at the end" in failure.error
    assert seen == [True]  # its batches had reached the file
    assert partitions.get("out0", 0) is None
    assert os.listdir(tmp_path / "tm" / "partitions") == []  # the file, its directory and the job's are gone


# -- ReleasePartitions -------------------------------------------------------------------------
class _Registry:
    session = "session-1"


def _release(service, **fields) -> taskmanager_pb2.ReleasePartitionsResponse:
    fields.setdefault("leader_session_id", "session-1")
    fields.setdefault("job_id", JOB)
    return service.ReleasePartitions(taskmanager_pb2.ReleasePartitionsRequest(**fields), _Context())


def test_release_partitions_is_fenced_bounded_and_counts_what_it_released(tmp_path):
    manager = PartitionManager(str(tmp_path))
    held = [new_partition(manager, f"p{i}", n=1) for i in range(3)]
    for p in held:
        p.subpartitions[0].add((BATCH, t(1)))
        p.finish()
    service = tm_servicer.TaskExecutorServicer(_Registry(), lambda tdd: None, manager)  # type: ignore[arg-type, return-value]  # a fake registry; no task deployed

    for session in [{"leader_session_id": "another"}, {"leader_session_id": ""}]:
        with pytest.raises(_Aborted) as refused:
            _release(service, partition_ids=["p0"], **session)
        assert refused.value.args[0] == grpc.StatusCode.FAILED_PRECONDITION
    too_many = [f"x{i}" for i in range(tm_servicer.MAX_RELEASE_IDS + 1)]
    invalid: list[dict[str, Any]] = [
        {"partition_ids": too_many},
        {"partition_ids": ["p0", "x" * (tm_servicer.MAX_ID_LENGTH + 1)]},
        {"job_id": ""},
        {"job_id": "j" * (tm_servicer.MAX_ID_LENGTH + 1)},
    ]
    for fields in invalid:
        with pytest.raises(_Aborted) as refused:
            _release(service, **fields)
        assert refused.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert not any(p.released for p in held)  # nothing refused touched a partition

    assert _release(service, partition_ids=["p0", "unknown"]).released == 1
    assert held[0].released and not os.path.exists(held[0].directory)
    assert _release(service, partition_ids=["p0"]).released == 0  # again: not an error
    assert _release(service, job_id="c" * 32, all_of_job=True).released == 0  # another job's: none here
    assert _release(service, all_of_job=True).released == 2
    assert all(p.released for p in held)


def test_finishing_a_released_partition_fails():
    manager = PartitionManager()
    p = new_partition(manager, n=1)
    manager.release("p0")
    with pytest.raises(PartitionReleased):
        p.finish()
    manager.close()


# -- the TaskManager's working directory ---------------------------------------------------------
def test_the_working_directory_is_fresh_and_replaces_those_dead_processes_left(tmp_path):
    import socket
    import subprocess
    import sys

    from taskmanager import local_dir

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead_pid = int(done.stdout)
    stale, live = tmp_path / "sluice-tm-tm_1-stale", tmp_path / "sluice-tm-tm_1-live"
    for d, pid in [(stale, dead_pid), (live, os.getppid())]:
        (d / "partitions").mkdir(parents=True)
        (d / local_dir.PID_FILE).write_text(str(pid))
    other = tmp_path / "sluice-tm-tm_2-stale"  # another resource id's, dead too
    other.mkdir()
    (other / local_dir.PID_FILE).write_text(str(dead_pid))
    starting = tmp_path / "sluice-tm-tm_3-starting"  # no pid written yet
    starting.mkdir()
    # no pid file for longer than a start takes: re-created by a killed TaskManager's Spark JVM
    recreated = tmp_path / "sluice-tm-tm_5-recreated"
    (recreated / local_dir.SPARK_DIR).mkdir(parents=True)
    old = time.time() - local_dir.NO_PID_GRACE - 5
    os.utime(recreated, (old, old))
    unrelated = tmp_path / "something-else"
    unrelated.mkdir()
    (unrelated / local_dir.PID_FILE).write_text(str(dead_pid))
    elsewhere = tmp_path / "sluice-tm-tm_4-other-host"  # a shared temp dir: another host's pid
    elsewhere.mkdir()
    (elsewhere / local_dir.PID_FILE).write_text(f"{dead_pid}\nnot-{socket.gethostname()}\n")

    path = local_dir.create("tm/1", base=str(tmp_path))
    assert not stale.exists() and not other.exists() and not recreated.exists()
    assert live.exists() and starting.exists() and unrelated.exists() and elsewhere.exists()
    assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith("sluice-tm-tm_1-")
    pid_file = (tmp_path / os.path.basename(path) / local_dir.PID_FILE).read_text()
    assert pid_file.split() == [str(os.getpid()), socket.gethostname()]
    local_dir.remove(path)
    assert not os.path.exists(path)
