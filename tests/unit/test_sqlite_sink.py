"""The SQLite upsert sink without Spark: built through the registry, fed Arrow batches,
driven through its two-phase protocol (stage at the snapshot, apply at the completed
checkpoint, finish or abort on restore), several subtasks on one database, a Task
committing it with the final checkpoint, and the job graph's validation of its payload."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
from typing import Any

import pyarrow as pa
import pytest
from helpers import wait_until

from sluice import graph
from sluice.api import SqliteSink, StreamExecutionEnvironment
from sluice.graph import JobValidationError, OperatorKind
from sluice.states import ExecutionState
from sluice.v1 import taskmanager_pb2
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.registry import make_operator
from taskmanager.operators.sqlite_sink import COMMITS, STAGING, SqliteSinkWriter, last_per_key, sqlite_type
from taskmanager.spark_engine import Batch

JOB = "b" * 32
DEADLINE = 10.0


def ctx(subtask: int = 0, restored: int = 0, checkpointing: bool = True) -> OperatorContext:
    return OperatorContext(
        name="counts to sqlite",
        subtask=subtask,
        parallelism=2,
        job_id=JOB,
        restore_checkpoint_id=restored,
        checkpointing=checkpointing,
        tag=f"[test {subtask}]",
    )


def payload(db, **extra: Any) -> dict[str, Any]:
    return {"db_path": str(db), "table": "counts", "key": ["url"], "columns": None, "sink_id": "3-sink_sqlite", **extra}


def sink(db, subtask: int = 0, restored: int = 0, checkpointing: bool = True, **extra: Any) -> SqliteSinkWriter:
    op = make_operator(OperatorKind.SINK_SQLITE, payload(db, **extra), ctx(subtask, restored, checkpointing))
    assert isinstance(op, SqliteSinkWriter) and op.is_sink
    return op


def batch(*rows: tuple[str, int], **more: list[Any]) -> Batch:
    data: dict[str, Any] = {"url": [r[0] for r in rows], "count": pa.array([r[1] for r in rows], pa.int64())}
    data |= more
    data["__kg"] = pa.array([0] * len(rows), pa.int32())  # internal columns are not written
    return Batch(engine=None, table=pa.table(data))


def inline(state: dict[str, Any] | None) -> dict[str, Any]:
    """An inline state, which the sink always snapshots."""
    assert state is not None
    return state


def query(db, sql: str, *args: Any) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:  # committed, then closed
        return conn.execute(sql, args).fetchall()


def table(db, name: str = "counts") -> dict[str, Any]:
    return dict(query(db, f"SELECT url, count FROM {name}"))


def exists(db, name: str = "counts") -> bool:
    return bool(query(db, "SELECT 1 FROM sqlite_master WHERE name = ?", name))


def commits(db) -> dict[int, int]:
    return dict(query(db, f"SELECT subtask, checkpoint_id FROM {COMMITS}"))


def staged(db) -> list[tuple[int, int | None]]:
    return query(db, f"SELECT subtask, checkpoint_id FROM {STAGING} ORDER BY subtask, seq")


# -- the protocol ----------------------------------------------------------------------------------
def test_rows_become_visible_only_when_their_checkpoint_completes(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1), ("/b", 1)))
    op.process(batch(("/a", 2)))
    state = op.snapshot(1)
    assert inline(state.inline)["pending"] == [1] and staged(db) == [(0, 1)]  # pre-committed: staged durably
    assert not exists(db)  # nothing visible yet
    op.process(batch(("/c", 1)))  # the next epoch
    op.notify_checkpoint_complete(1)
    assert table(db) == {"/a": 2, "/b": 1}  # the last row of each key
    assert commits(db) == {0: 1} and staged(db) == []
    assert query(db, "PRAGMA journal_mode") == [("wal",)]
    columns = query(db, "SELECT name, type, pk FROM pragma_table_info('counts')")
    assert columns == [("url", "TEXT", 1), ("count", "INTEGER", 0)]
    op.snapshot(2)
    op.notify_checkpoint_complete(2)
    assert table(db) == {"/a": 2, "/b": 1, "/c": 1} and commits(db) == {0: 2}


def test_an_aborted_checkpoint_commits_with_the_next_completed_one_in_order(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1)))
    op.snapshot(1)  # checkpoint 1 never completes
    op.process(batch(("/a", 2), ("/b", 7)))
    assert inline(op.snapshot(2).inline)["pending"] == [1, 2]
    op.notify_checkpoint_complete(2)
    assert table(db) == {"/a": 2, "/b": 7} and commits(db) == {0: 2} and op.pending == []


def test_a_replayed_checkpoint_is_skipped(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1)))
    state = op.snapshot(1)
    op.notify_checkpoint_complete(1)
    op.notify_checkpoint_complete(1)  # a duplicate notification changes nothing
    assert table(db) == {"/a": 1} and commits(db) == {0: 1}
    # Checkpoint 1's rows staged again (a zombie of the old deployment, say) and replayed by a
    # restore from checkpoint 1: its id is not above the recorded one, so nothing is applied.
    ghost = sink(db)
    ghost.process(batch(("/a", 99)))
    ghost.snapshot(1)
    assert staged(db) == [(0, 1)]
    restored = sink(db, restored=1)
    restored.restore(OperatorSnapshot(inline=state.inline))
    assert table(db) == {"/a": 1} and commits(db) == {0: 1} and staged(db) == []


def test_a_commit_cut_short_by_a_crash_is_finished_on_restore(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1), ("/b", 2)))
    state = op.snapshot(4)  # checkpoint 4 completes, the TaskManager dies before the commit
    op.abort()
    assert not exists(db) and commits(db) == {}
    restored = sink(db, restored=4)
    restored.restore(OperatorSnapshot(inline=json.loads(json.dumps(state.inline))))  # as it travels
    assert table(db) == {"/a": 1, "/b": 2} and commits(db) == {0: 4} and staged(db) == []
    again = sink(db, restored=4)  # and a second failure right after: applied once only
    again.restore(OperatorSnapshot(inline=state.inline))
    assert table(db) == {"/a": 1, "/b": 2} and commits(db) == {0: 4}


def test_restore_aborts_the_epochs_staged_after_the_restored_checkpoint(tmp_path, monkeypatch):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1)))
    state = op.snapshot(1)
    op.notify_checkpoint_complete(1)
    op.process(batch(("/a", 2), ("/b", 2)))
    op.snapshot(2)  # never completes
    monkeypatch.setattr(SqliteSinkWriter, "spill_bytes", 1)
    op.process(batch(("/a", 3)))  # spilled: staged without a checkpoint id
    assert staged(db) == [(0, 2), (0, None)]
    restored = sink(db, restored=1)
    restored.restore(OperatorSnapshot(inline=state.inline))
    assert staged(db) == [] and table(db) == {"/a": 1} and commits(db) == {0: 1}
    restored.process(batch(("/a", 5)))
    restored.snapshot(3)
    restored.notify_checkpoint_complete(3)
    assert table(db) == {"/a": 5} and commits(db) == {0: 3}


def test_a_pending_checkpoint_whose_rows_vanished_fails_the_restore(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1)))
    state = op.snapshot(1)
    query(db, f"DELETE FROM {STAGING}")
    with pytest.raises(RuntimeError, match="staged rows of checkpoint 1 .* vanished"):
        sink(db, restored=1).restore(OperatorSnapshot(inline=state.inline))


def _in_job(db, job: str, subtask: int = 0, restored: int = 0) -> SqliteSinkWriter:
    op = make_operator(OperatorKind.SINK_SQLITE, payload(db), dataclasses.replace(ctx(subtask, restored), job_id=job))
    assert isinstance(op, SqliteSinkWriter)
    return op


def test_a_resumed_job_commits_the_pending_epochs_under_the_identity_that_staged_them(tmp_path):
    # A retained checkpoint (or a savepoint) whose commit never happened: the job that resumes
    # from it has another job id, so another sink identity; the staged rows are found by the
    # identity the checkpoint recorded, committed once, and the old job's record says so.
    db = tmp_path / "out.db"
    old = _in_job(db, "a" * 32)
    old.process(batch(("/a", 1), ("/b", 2)))
    state = old.snapshot(4)  # checkpoint 4 completes; the job fails before its commit
    assert inline(state.inline)["sink"] == f"{'a' * 32}/3-sink_sqlite" and inline(state.inline)["subtask"] == 0
    resumed = _in_job(db, "c" * 32, restored=4)
    resumed.restore(OperatorSnapshot(inline=state.inline))
    assert table(db) == {"/a": 1, "/b": 2} and staged(db) == []
    assert dict(query(db, f"SELECT sink, checkpoint_id FROM {COMMITS}")) == {f"{'a' * 32}/3-sink_sqlite": 4}
    again = _in_job(db, "d" * 32, restored=4)  # a second resume from the same checkpoint
    again.restore(OperatorSnapshot(inline=state.inline))
    assert table(db) == {"/a": 1, "/b": 2}


def test_a_resume_leaves_the_later_epochs_of_the_job_it_resumes_from(tmp_path):
    # A savepoint taken while the job runs on: the job resumed from it must not delete the
    # running job's staged epochs after the savepoint (that job commits them itself).
    db = tmp_path / "out.db"
    running = _in_job(db, "a" * 32)
    running.process(batch(("/a", 1)))
    savepoint = running.snapshot(4)
    running.notify_checkpoint_complete(4)
    running.process(batch(("/a", 5)))
    running.snapshot(5)
    copy = _in_job(db, "c" * 32, restored=4)
    copy.restore(OperatorSnapshot(inline=savepoint.inline))
    assert staged(db) == [(0, 5)]
    running.notify_checkpoint_complete(5)
    assert table(db) == {"/a": 5}


def test_rescaled_states_commit_every_old_subtasks_pending_epochs(tmp_path):
    from sluice.checkpoints.rescale import redistribute

    db = tmp_path / "out.db"
    old = [_in_job(db, "a" * 32, subtask=s) for s in range(3)]
    states = []
    for s, op in enumerate(old):
        op.process(batch((f"/{s}", s + 10)))
        states.append(op.snapshot(7).inline)
    new = redistribute(OperatorKind.SINK_SQLITE, "3-sink_sqlite", states, 2)
    assert [len(inline(n)["owners"]) for n in new] == [2, 1]  # old subtasks 0 and 2 to new 0, 1 to new 1
    for s, state in enumerate(new):
        _in_job(db, "c" * 32, subtask=s, restored=7).restore(OperatorSnapshot(inline=state))
    assert table(db) == {"/0": 10, "/1": 11, "/2": 12} and staged(db) == []


def test_a_database_directory_missing_on_the_taskmanager_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="directory of .*missing/out.db does not exist on this TaskManager"):
        sink(tmp_path / "missing" / "out.db")


def test_a_fresh_start_voids_what_a_failed_attempt_staged(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db)
    op.process(batch(("/a", 1)))
    op.snapshot(1)  # never completes; the job restarts from the beginning
    fresh = sink(db)
    assert staged(db) == []
    fresh.process(batch(("/b", 1)))
    fresh.snapshot(2)
    fresh.notify_checkpoint_complete(2)
    assert table(db) == {"/b": 1}


def test_spills_keep_memory_bounded_and_rows_in_order(tmp_path, monkeypatch):
    db = tmp_path / "out.db"
    monkeypatch.setattr(SqliteSinkWriter, "spill_bytes", 1)
    op = sink(db)
    for i in range(5):
        op.process(batch(("/a", i), (f"/k{i}", i)))
        assert op._buffer == []  # every batch went to the staging table
    assert [cid for _, cid in staged(db)] == [None] * 5
    op.snapshot(1)
    assert [cid for _, cid in staged(db)] == [1] * 5
    op.notify_checkpoint_complete(1)
    assert table(db) == {"/a": 4, **{f"/k{i}": i for i in range(5)}}


def test_without_checkpointing_rows_are_applied_at_the_end_of_the_input(tmp_path, monkeypatch):
    db = tmp_path / "out.db"
    op = sink(db, checkpointing=False)
    op.process(batch(("/a", 1)))
    monkeypatch.setattr(SqliteSinkWriter, "spill_bytes", 1)
    op.process(batch(("/a", 2), ("/b", 1)))  # spilled with the first
    monkeypatch.setattr(SqliteSinkWriter, "spill_bytes", 1 << 30)
    op.process(batch(("/b", 3)))
    assert not exists(db)
    assert op.end_input() is None
    assert table(db) == {"/a": 2, "/b": 3} and staged(db) == [] and commits(db) == {}


def test_a_snapshot_that_cannot_get_the_lock_is_declined_and_keeps_its_rows(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db, timeout_s=0.05)
    op.process(batch(("/a", 1)))
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        op.snapshot(1)
    blocker.execute("ROLLBACK")
    blocker.close()
    op.process(batch(("/b", 1)))
    assert inline(op.snapshot(2).inline)["pending"] == [2]
    op.notify_checkpoint_complete(2)
    assert table(db) == {"/a": 1, "/b": 1}


def test_two_subtasks_write_one_database_and_readers_see_whole_checkpoints(tmp_path):
    """Each checkpoint of a subtask sets its 20 keys to the checkpoint id: a reader must
    never see two values among one subtask's keys (a half-applied checkpoint)."""
    db = tmp_path / "out.db"
    ops = [sink(db, subtask=s) for s in (0, 1)]
    errors: list[BaseException] = []
    done = threading.Event()

    def write(s: int) -> None:
        try:
            for cid in range(1, 31):
                ops[s].process(batch(*[(f"/{s}/{k}", cid) for k in range(20)]))
                ops[s].snapshot(cid)
                ops[s].notify_checkpoint_complete(cid)
        except BaseException as exc:  # noqa: BLE001 — reported by the test below
            errors.append(exc)

    def read() -> None:
        conn = sqlite3.connect(db, timeout=DEADLINE)
        try:
            while not done.is_set():
                if exists(db):
                    for s in (0, 1):
                        values = conn.execute("SELECT DISTINCT count FROM counts WHERE url LIKE ?", (f"/{s}/%",))
                        assert len(values.fetchall()) <= 1
        except BaseException as exc:  # noqa: BLE001 — reported by the test below
            errors.append(exc)
        finally:
            conn.close()

    writers = [threading.Thread(target=write, args=(s,)) for s in (0, 1)]
    reader = threading.Thread(target=read)
    for t in (*writers, reader):
        t.start()
    for t in writers:
        t.join(60)
    done.set()
    reader.join(DEADLINE)
    assert not errors, errors
    assert table(db) == {f"/{s}/{k}": 30 for s in (0, 1) for k in range(20)}
    assert commits(db) == {0: 30, 1: 30} and staged(db) == []


def test_each_sink_of_a_job_has_its_own_commit_row(tmp_path):
    db = tmp_path / "out.db"
    a = sink(db, table="a", sink_id="3-sink_sqlite")
    b = sink(db, table="b", sink_id="5-sink_sqlite")
    for op in (a, b):
        op.process(batch(("/a", 1)))
        op.snapshot(1)
        op.notify_checkpoint_complete(1)
    assert table(db, "a") == table(db, "b") == {"/a": 1}
    assert sorted(query(db, f"SELECT sink FROM {COMMITS}")) == [(f"{JOB}/3-sink_sqlite",), (f"{JOB}/5-sink_sqlite",)]


# -- tables, types, keys ---------------------------------------------------------------------------
def test_composite_keys_types_and_chosen_columns(tmp_path):
    db = tmp_path / "out.db"
    op = sink(db, table="by_device", key=["country", "device"], columns=["country", "device", "total", "avg"])
    rows = {
        "country": ["fr", "fr", "de", "fr"],
        "device": ["ios", "web", "ios", "ios"],
        "total": pa.array([1, 2, 3, 10], pa.int32()),
        "avg": [0.5, 1.0, 1.5, 2.5],
        "ignored": ["x"] * 4,
        "when": pa.array([0, 0, 0, 0], pa.timestamp("s")),
    }
    op.process(Batch(engine=None, table=pa.table(rows)))
    op.snapshot(1)
    op.notify_checkpoint_complete(1)
    got = sorted(query(db, "SELECT * FROM by_device"))
    schema = query(db, "SELECT name, type, pk FROM pragma_table_info('by_device')")
    assert got == [("de", "ios", 3, 1.5), ("fr", "ios", 10, 2.5), ("fr", "web", 2, 1.0)]
    assert schema == [("country", "TEXT", 1), ("device", "TEXT", 2), ("total", "INTEGER", 0), ("avg", "REAL", 0)]


def test_arrow_types_map_to_sqlite_affinities():
    assert [
        sqlite_type(t)
        for t in (pa.int8(), pa.bool_(), pa.float32(), pa.string(), pa.binary(), pa.decimal128(10, 2), pa.date32())
    ] == ["INTEGER", "INTEGER", "REAL", "TEXT", "BLOB", "NUMERIC", "TEXT"]
    assert sqlite_type(pa.dictionary(pa.int32(), pa.string())) == "TEXT"
    assert sqlite_type(pa.list_(pa.int64())) == "TEXT"  # JSON


def test_the_last_row_per_key_keeps_the_order_of_last_rows():
    t = pa.table({"k": ["a", "b", "a", "c", "b"], "v": [1, 2, 3, 4, 5]})
    assert last_per_key(t, ["k"]).to_pylist() == [{"k": "a", "v": 3}, {"k": "c", "v": 4}, {"k": "b", "v": 5}]


def test_an_existing_table_needs_the_columns_and_a_unique_key(tmp_path):
    db = tmp_path / "out.db"
    query(db, "CREATE TABLE counts (url TEXT, count INTEGER, note TEXT)")
    op = sink(db)
    op.process(batch(("/a", 1)))
    op.snapshot(1)
    with pytest.raises(ValueError, match=r"no primary key or unique index on exactly \(url\)"):
        op.notify_checkpoint_complete(1)
    assert staged(db) == [(0, 1)]  # rolled back: still pending
    query(db, "CREATE UNIQUE INDEX counts_url ON counts (url)")
    op.notify_checkpoint_complete(1)
    assert table(db) == {"/a": 1}

    other = sink(db, table="narrow", sink_id="4-sink_sqlite")
    query(db, "CREATE TABLE narrow (url TEXT PRIMARY KEY)")
    other.process(batch(("/a", 1)))
    other.snapshot(1)
    with pytest.raises(ValueError, match="has no column 'count'"):
        other.notify_checkpoint_complete(1)


def test_a_row_without_a_key_fails_with_the_column_named(tmp_path):
    op = sink(tmp_path / "out.db")
    with pytest.raises(ValueError, match="1 rows without a value in key column 'url'"):
        op.process(Batch(engine=None, table=pa.table({"url": ["/a", None], "count": [1, 2]})))
    with pytest.raises(KeyError, match="no column 'url'"):
        op.process(Batch(engine=None, table=pa.table({"path": ["/a"], "count": [1]})))


# -- the job API and the job graph -----------------------------------------------------------------
def sqlite_job(db, **kwargs: Any):
    env = StreamExecutionEnvironment()
    env.from_collection([{"url": "/a", "n": 1}]).sink_to(SqliteSink(str(db), "counts", **kwargs))
    return env.get_job_graph("sqlite")


def test_sink_to_records_the_config_with_the_operator_as_sink_id(tmp_path):
    job = sqlite_job(tmp_path / "out.db", key="url", columns=("url", "n"))
    configs = graph.validate(job)
    (op,) = [o for o in job.operators if graph.kind_of(o) == OperatorKind.SINK_SQLITE]
    assert not op.code  # plain data only
    assert configs[op.id] == {
        "db_path": str(tmp_path / "out.db"),
        "table": "counts",
        "key": ["url"],
        "columns": ["url", "n"],
        "timeout_s": 60.0,
        "sink_id": op.id,
    }


def test_the_api_refuses_bad_arguments_at_once():
    with pytest.raises(ValueError, match="SqliteSink key"):
        SqliteSink("x.db", "t", key=())
    with pytest.raises(ValueError, match="SqliteSink key: b not among the columns a"):
        SqliteSink("x.db", "t", key=("a", "b"), columns=("a",))
    with pytest.raises(ValueError, match="SqliteSink table"):
        SqliteSink("x.db", "drop table", key="a")
    with pytest.raises(
        TypeError, match=r"a FileSink, a SqliteSink or a sluice.connectors.Sink, got str; .*FileSink\('out/'\)"
    ):
        StreamExecutionEnvironment().from_collection([{"a": 1}]).sink_to("out/")  # type: ignore[arg-type]  # the point of the test


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"db_path": ""}, "db_path", "database file path"),
        ({"db_path": ":memory:"}, "db_path", "database file path"),
        ({"table": "1st"}, "table", "table name"),
        ({"table": "_sluice_commits"}, "table", "_sluice_"),
        ({"key": []}, "key", "distinct column names"),
        ({"key": ["a", "a"]}, "key", "distinct column names"),
        ({"columns": ["url"], "key": ["url", "n"]}, "key", "key column n not among the columns url"),
        ({"columns": "url"}, "columns", "distinct column names"),
        ({"timeout_s": 0}, "timeout_s", "positive number"),
        ({"sink_id": 7}, "sink_id", "non-empty string"),
    ],
)
def test_the_job_graph_validates_the_config_naming_the_field(tmp_path, change, field, message):
    job = sqlite_job(tmp_path / "out.db", key="url")
    (op,) = [o for o in job.operators if graph.kind_of(o) == OperatorKind.SINK_SQLITE]
    op.config = json.dumps({**graph.operator_config(op), **change})
    with pytest.raises(JobValidationError, match=message) as info:
        graph.validate(job)
    assert info.value.field == f"operators[1].config.{field}"


def test_the_database_directory_must_exist_at_submit(tmp_path):
    job = sqlite_job(tmp_path / "missing" / "out.db", key="url")
    with pytest.raises(JobValidationError, match="directory .*missing does not exist"):
        graph.validate(job)
    graph.validate(job, check_paths=False)


# -- in a task -------------------------------------------------------------------------------------
class Reports:
    def __init__(self) -> None:
        self.states: list[tuple[ExecutionState, bool]] = []
        self.acks: dict[int, bytes] = {}

    def report(self, task, state, failure=None, end_of_input=False) -> None:
        self.states.append((state, end_of_input))

    def acknowledge(self, task, checkpoint_id, handle, size) -> None:
        self.acks[checkpoint_id] = handle

    def decline(self, task, checkpoint_id, reason) -> None:
        raise AssertionError(reason)


def test_a_task_commits_the_sink_with_the_final_checkpoint(tmp_path):
    from taskmanager.network.partition import PartitionManager
    from taskmanager.spark_engine import SparkEngine
    from taskmanager.task import Task

    db = tmp_path / "out.db"
    rows = [{"url": f"/{i % 3}", "count": i} for i in range(7)]
    env = StreamExecutionEnvironment()
    env.from_collection(rows).sink_to(SqliteSink(str(db), "counts", key="url"))
    job = env.get_job_graph("collect")
    (chain,) = graph.build_chains(job)
    tdd = taskmanager_pb2.TaskDeploymentDescriptor(
        leader_session_id="s1",
        job_id=JOB,
        execution_id="e0",
        chain_id=chain.id,
        operator_ids=chain.operator_ids,
        subtask_index=0,
        parallelism=1,
        job=job,
        checkpoint_dir=str(tmp_path / "chk"),
    )
    reports = Reports()
    task = Task(tdd, SparkEngine(1), PartitionManager(), "127.0.0.1:1", reports)
    task.start()
    wait_until(lambda: (ExecutionState.RUNNING, True) in reports.states, DEADLINE, "end of input")
    assert not exists(db)
    task.trigger_checkpoint(1, final=True)
    wait_until(lambda: 1 in reports.acks, DEADLINE, "checkpoint 1 acknowledged")
    assert json.loads(reports.acks[1])["operators"][chain.operator_ids[-1]]["pending"] == [1]
    task.notify_complete(1, final=True)
    task.join(DEADLINE)
    assert task.state == ExecutionState.FINISHED
    assert table(db) == {"/0": 6, "/1": 4, "/2": 5} and commits(db) == {0: 1}


def test_the_context_names_the_sink_when_the_payload_has_no_id(tmp_path):
    op = SqliteSinkWriter.create(
        OperatorKind.SINK_SQLITE,
        {k: v for k, v in payload(tmp_path / "out.db").items() if k != "sink_id"},
        dataclasses.replace(ctx(), name="my sink"),
    )
    assert op.sink == f"{JOB}/my sink"
