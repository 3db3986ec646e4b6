"""Operators in BATCH mode (OperatorContext.batch), fed Arrow batches without Spark: a keyed
aggregate emits every key's final value once at the end of its input; a file sink commits
its part first-wins under one name per subtask, so two attempts of a subtask never leave
two visible parts."""

from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.graph import OperatorKind
from sluice.output import committed_parts, read_output
from taskmanager.operators.base import OperatorContext
from taskmanager.operators.keyed_aggregate import KEY_GROUP, KeyedAggregate, combine
from taskmanager.operators.registry import make_operator
from taskmanager.operators.sinks import BATCH_TOKEN, FileSinkWriter
from taskmanager.spark_engine import Batch

JOB = "f" * 32
STREAMING = OperatorContext(
    name="agg", subtask=0, parallelism=1, job_id=JOB, restore_checkpoint_id=0, checkpointing=False
)
BATCH = dataclasses.replace(STREAMING, batch=True)
AGGS = {"n": ("count", "*"), "total": ("sum", "bytes"), "mean": ("avg", "bytes")}


def partials(rows: list[tuple[str, int | None]], keys=("url",), aggs=AGGS) -> Batch:
    """What a producer's combiner sends for raw rows (url, bytes)."""
    raw = pa.table(
        {
            "url": pa.array([r[0] for r in rows], pa.string()),
            "bytes": pa.array([r[1] for r in rows], pa.int64()),
            KEY_GROUP: pa.array([sum(map(ord, r[0])) % 128 for r in rows], pa.int32()),
        }
    )
    return Batch(engine=None, table=combine(raw, list(keys), aggs))


INPUT: list[list[tuple[str, int | None]]] = [
    [("/a", 10), ("/b", 1), ("/a", 20)],
    [("/c", 5), ("/a", None)],  # a null value: counted by count(*), not by sum or avg
    [("/b", 3), ("/a", 30)],
]


def by_key(table: pa.Table) -> dict[str, tuple]:
    keys = table.column("url").to_pylist()
    assert len(keys) == len(set(keys)), f"a key emitted twice: {keys}"
    cols = [table.column(c).to_pylist() for c in table.column_names[1:]]
    return {k: tuple(c[i] for c in cols) for i, k in enumerate(keys)}


def test_operators_run_streaming_unless_told_batch():
    assert STREAMING.batch is False
    op = make_operator(OperatorKind.AGGREGATE, {"key": "url", "aggs": AGGS}, BATCH)
    assert isinstance(op, KeyedAggregate) and op.batch is True


def test_a_batch_keyed_aggregate_emits_each_keys_final_value_once_at_the_end():
    op = make_operator(OperatorKind.AGGREGATE, {"key": "url", "aggs": AGGS}, BATCH)
    assert isinstance(op, KeyedAggregate)
    assert [op.process(partials(rows)) for rows in INPUT] == [None, None, None]  # nothing per batch
    out = op.end_input()
    assert out is not None
    table = out.table()
    assert by_key(table) == {"/a": (4, 60, 20.0), "/b": (2, 4, 2.0), "/c": (1, 5, 5.0)}

    streaming = make_operator(OperatorKind.AGGREGATE, {"key": "url", "aggs": AGGS}, STREAMING)
    last: dict[str, tuple] = {}
    for rows in INPUT:
        update = streaming.process(partials(rows))
        assert update is not None
        last |= by_key(update.table())
        schema = update.table().schema
    assert streaming.end_input() is None  # streaming: the updates went out already
    assert last == by_key(table) and table.schema == schema  # the same rows and columns as the update stream


def test_a_batch_keyed_aggregate_with_a_composite_key_and_no_input():
    aggs = {"n": ("count", "*"), "total": ("sum", "bytes")}
    op = make_operator(OperatorKind.AGGREGATE, {"keys": ["url", "bytes"], "aggs": aggs}, BATCH)
    assert op.end_input() is None  # no input: no rows
    op.process(partials([("/a", 1), ("/a", 1), ("/a", 2)], keys=("url", "bytes"), aggs=aggs))
    op.process(partials([("/a", 2)], keys=("url", "bytes"), aggs=aggs))
    out = op.end_input()
    assert out is not None
    table = out.table()
    assert table.column_names == ["url", "bytes", "n", "total"]
    assert sorted(table.to_pylist(), key=lambda r: r["bytes"]) == [
        {"url": "/a", "bytes": 1, "n": 2, "total": 2},
        {"url": "/a", "bytes": 2, "n": 2, "total": 4},
    ]


# -- the file sink -----------------------------------------------------------------------------
def rows_batch(*values: int) -> Batch:
    return Batch(engine=None, table=pa.table({"k": [f"k{v}" for v in values], "v": list(values)}))


def sink(out, subtask: int = 0, ctx: OperatorContext = BATCH) -> FileSinkWriter:
    op = make_operator(OperatorKind.SINK_FILE, {"path": str(out)}, dataclasses.replace(ctx, subtask=subtask))
    assert isinstance(op, FileSinkWriter)
    return op


def test_two_attempts_of_a_subtask_leave_one_part_the_first_committed(tmp_path):
    out = tmp_path / "out"
    first, backup = sink(out), sink(out)  # e.g. a slow attempt and its speculative backup
    assert first.token != backup.token  # staged apart
    backup.process(rows_batch(1, 2))
    first.process(rows_batch(3))
    first.end_input()  # commits first
    backup.end_input()  # finds the part there: deletes its own
    final = f"part-000000000000-00000-{JOB[:8]}-{BATCH_TOKEN}.csv"
    assert sorted(os.listdir(out)) == [final]  # no second part, no staged file left
    assert (out / final).read_text() == "k3,3\n"
    assert [os.path.basename(p) for p in committed_parts(str(out))] == [final]
    assert read_output(str(out), columns=["k", "v"])["v"].tolist() == [3]


def test_a_rerun_subtask_keeps_the_committed_part_and_other_subtasks_commit_their_own(tmp_path):
    out = tmp_path / "out"
    sub0 = sink(out)
    sub0.process(rows_batch(1))
    sub0.end_input()
    sub1 = sink(out, subtask=1)
    sub1.process(rows_batch(2))
    sub1.end_input()
    empty = sink(out, subtask=2)
    empty.end_input()  # no rows: nothing committed
    rerun = sink(out)  # subtask 0 again, after a failure elsewhere
    rerun.process(rows_batch(1))
    rerun.end_input()
    assert sorted(os.listdir(out)) == [f"part-000000000000-0000{i}-{JOB[:8]}-batch.csv" for i in (0, 1)]
    assert read_output(str(out), columns=["k", "v"])["v"].tolist() == [1, 2]


def test_on_another_file_system_the_sink_commits_by_check_then_move(tmp_path):
    (tmp_path / "out").mkdir()
    remote = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())  # not a LocalFileSystem
    writers = []
    for values in [(1,), (2,)]:
        w = sink(tmp_path / "out")
        w.fs, w.dir = remote, "out"
        w.process(rows_batch(*values))
        writers.append(w)
    for w in writers:
        w.end_input()
    assert sorted(os.listdir(tmp_path / "out")) == [f"part-000000000000-00000-{JOB[:8]}-batch.csv"]
    assert read_output(str(tmp_path / "out"), columns=["k", "v"])["v"].tolist() == [1]


def test_a_streaming_sink_without_checkpoints_still_commits_under_its_own_token(tmp_path):
    out = tmp_path / "out"
    w = sink(out, ctx=STREAMING)
    w.process(rows_batch(1))
    w.end_input()
    assert os.listdir(out) == [os.path.basename(w.committed_name(0))]
    assert BATCH_TOKEN not in os.listdir(out)[0]


def test_without_hard_links_the_local_sink_falls_back_to_check_then_move(tmp_path, monkeypatch):
    import errno

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    out = tmp_path / "out"
    first, second = sink(out), sink(out)
    first.process(rows_batch(1))
    second.process(rows_batch(2))
    first.end_input()
    second.end_input()
    assert sorted(os.listdir(out)) == [f"part-000000000000-00000-{JOB[:8]}-batch.csv"]
    assert read_output(str(out), columns=["k", "v"])["v"].tolist() == [1]


def test_a_batch_file_source_reads_as_many_files_per_call_as_fit_its_byte_budget(tmp_path):
    from sluice.job_options import SourceReads
    from taskmanager.operators.sources import FileSource

    for name, size in (("a", 100), ("b", 200), ("c", 300), ("d", 50), ("e", 900), ("f", 10)):
        (tmp_path / f"{name}.txt").write_bytes(b"x" * size)
    source = FileSource({"format": "text", "path": str(tmp_path)}, 0, 1, engine=None, byte_budget=350)
    groups = []
    while source.offset < len(source.files):
        n = source.budget.take(source.files[source.offset :], source._sizes)
        groups.append([os.path.basename(p) for p in source.files[source.offset : source.offset + n]])
        source.offset += n
    # a, b fit (300); c, d fill the budget exactly; e alone is over it but is read; f after it
    assert groups == [["a.txt", "b.txt"], ["c.txt", "d.txt"], ["e.txt"], ["f.txt"]]
    streaming = FileSource({"format": "text", "path": str(tmp_path)}, 0, 1, engine=None)
    assert streaming.budget.take(streaming.files, streaming._sizes) == 6  # streaming: the first budget is 32 MiB
    # execution.source.max-files-per-read caps a call in both modes, whatever the bytes
    capped = FileSource({"format": "text", "path": str(tmp_path)}, 0, 1, engine=None, reads=SourceReads(max_files=2))
    assert capped.budget.take(capped.files, capped._sizes) == 2
    capped = FileSource(
        {"format": "text", "path": str(tmp_path)}, 0, 1, engine=None, reads=SourceReads(max_files=1), byte_budget=350
    )
    assert capped.budget.take(capped.files, capped._sizes) == 1
