"""File formats of the file sink and source (docs/file-formats.md): each format's part writer
commits exactly like csv (pre-commit at the snapshot, rename at completion, abort on restore,
first-wins in BATCH) and `read_output` reads every format back; Parquet schemas are taken
from and checked against the files' footers; options and policies that make no sense for a
format are refused with errors that say what to do."""

from __future__ import annotations

import dataclasses
import datetime
import json
import re

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from sluice import graph
from sluice import parquet_schema as parquet
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.cli.main import main
from sluice.graph import OperatorKind
from sluice.output import committed_parts, read_output
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.registry import make_operator
from taskmanager.operators.sinks import BATCH_TOKEN, PARQUET_ROW_GROUP_ROWS, FileSinkWriter
from taskmanager.spark_engine import Batch

JOB = "f0f0f0f0" + "0" * 24
CTX = OperatorContext("sink", 0, 1, JOB, 0, True)


def writer(out, format: str, columns=None, ctx: OperatorContext = CTX) -> FileSinkWriter:
    payload = {"path": str(out), "columns": columns}
    if format != "csv":
        payload["format"] = format
    op = make_operator(OperatorKind.SINK_FILE, payload, ctx)
    assert isinstance(op, FileSinkWriter)
    return op


def rows(*kv: tuple[str | None, int | None]) -> Batch:
    table = pa.table({"k": [k for k, _ in kv], "v": pa.array([v for _, v in kv], pa.int64())})
    return Batch(engine=None, table=table)


def names(out) -> list[str]:
    return [p.rsplit("/", 1)[-1] for p in committed_parts(str(out))]


# -- sink: every format commits the same way ----------------------------------------------------
@pytest.mark.parametrize(("format", "ext"), [("csv", ".csv"), ("json", ".jsonl"), ("parquet", ".parquet")])
def test_each_format_commits_at_completion_and_restore_aborts_what_came_after(tmp_path, format, ext):
    out = tmp_path / "out"
    a = writer(out, format)
    a.process(rows(("x", 1), ("y", 10)))
    a.snapshot(1)
    assert names(out) == []  # pre-committed only: hidden until checkpoint 1 completes
    a.notify_checkpoint_complete(1)
    a.process(rows(("x", 2), ("z", None)))
    state = a.snapshot(2)  # 2 completes; the TaskManager dies before the rename
    a.process(rows(("x", 999)))  # after checkpoint 2: must never show
    b = writer(out, format, ctx=dataclasses.replace(CTX, restore_checkpoint_id=2))
    b.restore(OperatorSnapshot(inline=state.inline))
    b.process(rows(("y", 11)))
    b.snapshot(3)
    b.notify_checkpoint_complete(3)

    parts = names(out)
    assert len(parts) == 3 and all(re.fullmatch(rf"part-\d{{12}}-00000-f0f0f0f0-[0-9a-f]{{6}}\{ext}", n) for n in parts)
    assert [n for n in (tmp_path / "out").iterdir() if n.name.startswith(".")] == []  # aborted part deleted
    frame = read_output(str(out), columns=["k", "v"])
    assert list(frame.k) == ["x", "y", "x", "z", "y"]
    assert [None if v is None or v != v else int(v) for v in frame.v.astype(object).where(frame.v.notna(), None)] == [
        1,
        10,
        2,
        None,
        11,
    ]
    final = read_output(str(out), columns=["k", "v"], final=True, key="k")
    assert dict(zip(final.k, final.v.astype(object).where(final.v.notna(), None), strict=True)) == {
        "x": 2,
        "y": 11,
        "z": None,
    }


def test_csv_stays_byte_for_byte_what_it_was(tmp_path):
    out = tmp_path / "out"
    a = writer(out, "csv")
    a.process(rows(("x", 1), ("a,b", None)))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    (part,) = committed_parts(str(out))
    assert open(part, "rb").read() == b'"x",1\n"a,b",\n'  # a batch holding a comma is quoted, as before
    assert FileSink("o").payload() == {"path": "o", "columns": None}  # no format key: the old config


def test_json_parts_are_one_object_per_line_with_typed_values(tmp_path):
    out = tmp_path / "out"
    a = writer(out, "json")
    when = datetime.datetime(2024, 5, 1, 12, 30)
    table = pa.table({"k": ["é", None], "n": [1.5, None], "t": [when, when], "ok": [True, False]})
    a.process(Batch(engine=None, table=table))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    (part,) = committed_parts(str(out))
    lines = open(part, encoding="utf-8").read().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"k": "é", "n": 1.5, "t": "2024-05-01T12:30:00", "ok": True},
        {"k": None, "n": None, "t": "2024-05-01T12:30:00", "ok": False},
    ]
    frame = read_output(str(out))
    assert list(frame.columns) == ["k", "n", "t", "ok"] and list(frame.ok) == [True, False]


def test_parquet_parts_bound_their_row_groups_and_keep_types(tmp_path):
    out = tmp_path / "out"
    a = writer(out, "parquet")
    n = PARQUET_ROW_GROUP_ROWS + 10
    for start in range(0, n, 1000):  # many small batches gather into bounded row groups
        ids = list(range(start, min(start + 1000, n)))
        a.process(Batch(engine=None, table=pa.table({"k": [str(i) for i in ids], "v": pa.array(ids, pa.int32())})))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    (part,) = committed_parts(str(out))
    meta = pq.ParquetFile(part).metadata
    assert meta.num_rows == n
    assert meta.num_row_groups == 2 and max(meta.row_group(i).num_rows for i in range(2)) <= PARQUET_ROW_GROUP_ROWS
    frame = read_output(str(out), final=True, key="k")
    assert len(frame) == n and str(frame.v.dtype) == "Int32"


def test_parquet_batches_of_another_schema_are_cast_or_named(tmp_path):
    a = writer(tmp_path / "out", "parquet")
    a.process(rows(("x", 1)))
    a.process(Batch(engine=None, table=pa.table({"k": ["y"], "v": pa.array([2], pa.int32())})))  # cast to int64
    with pytest.raises(ValueError, match="one schema per part"):
        a.process(Batch(engine=None, table=pa.table({"k": ["y"], "v": ["not a number"]})))


def test_text_parts_write_the_one_column_and_name_the_columns_otherwise(tmp_path):
    out = tmp_path / "out"
    a = writer(out, "text", columns=["k"])
    a.process(rows(("line one", 1), (None, 2), ("line, three", 3)))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    (part,) = committed_parts(str(out))
    assert part.endswith(".txt") and open(part).read() == "line one\n\nline, three\n"
    assert list(read_output(str(out)).value) == ["line one", "", "line, three"]
    b = writer(tmp_path / "o2", "text")
    with pytest.raises(ValueError, match="exactly one column.*the rows have 2: k, v"):
        b.process(rows(("x", 1)))
    with pytest.raises(ValueError, match="exactly one column"):
        FileSink("o", columns=("a", "b"), format="text")


def test_a_batch_parquet_sink_commits_first_wins_under_one_name(tmp_path):
    out = tmp_path / "out"
    batch = dataclasses.replace(CTX, batch=True, checkpointing=False)
    first, second = writer(out, "parquet", ctx=batch), writer(out, "parquet", ctx=batch)
    first.process(rows(("x", 1)))
    second.process(rows(("x", 2)))
    first.end_input()
    second.end_input()  # a speculative twin: loses, deletes its own part
    assert names(out) == [f"part-{0:012d}-00000-f0f0f0f0-{BATCH_TOKEN}.parquet"]
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    assert list(read_output(str(out)).v) == [1]


def test_a_restored_pending_part_must_be_a_part_of_a_known_format(tmp_path):
    a = writer(tmp_path / "out", "json")
    staged = f"{tmp_path}/out/.part-0-f0f0f0f0-abcdef-000000.inprogress"
    with pytest.raises(ValueError, match="outside its own output"):
        a.restore(OperatorSnapshot(inline={"pending": [[staged, f"{tmp_path}/out/part-1.sh"]]}))


def test_unknown_sink_formats_are_refused_in_the_api_the_graph_and_the_writer(tmp_path):
    with pytest.raises(ValueError, match="FileSink format: one of csv, json, parquet, text, got 'xml'"):
        FileSink("o", format="xml")
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        writer(tmp_path, "xml")
    env = StreamExecutionEnvironment()
    env.from_collection([{"a": 1, "b": 2}]).sink_to(FileSink(str(tmp_path / "o"), format="json"))
    job = env.get_job_graph()
    payload = graph.operator_config(job.operators[1])
    assert payload["format"] == "json"
    payload["format"] = "xml"
    job.operators[1].config = json.dumps(payload)
    with pytest.raises(graph.JobValidationError) as info:
        graph.validate(job, check_paths=False)
    assert info.value.field == "operators[1].config.format"


def test_a_text_sink_of_a_stream_with_several_columns_fails_at_submit(tmp_path):
    env = StreamExecutionEnvironment()
    env.from_collection([{"a": 1, "b": 2}]).sink_to(FileSink(str(tmp_path / "o"), format="text"))
    with pytest.raises(graph.JobValidationError, match="exactly one column; the stream has 2: a, b"):
        graph.validate(env.get_job_graph(), check_paths=False)


# -- reading output ----------------------------------------------------------------------------
def test_read_output_refuses_a_directory_of_mixed_formats_and_selects_named_columns(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-000000000001-00000-j-t.jsonl").write_text('{"k":"x","v":1,"w":true}\n')
    frame = read_output(str(out), columns=["v", "k"])
    assert list(frame.columns) == ["v", "k"] and list(frame.v) == [1]
    with pytest.raises(ValueError, match="no column nope"):
        read_output(str(out), columns=["nope"])
    (out / "part-000000000002-00000-j-t.csv").write_text("x,2\n")
    with pytest.raises(ValueError, match=r"several formats \(csv: 1, json: 1\)"):
        read_output(str(out))


def test_sluice_output_prints_parquet_parts(tmp_path, capsys):
    out = tmp_path / "out"
    a = writer(out, "parquet")
    a.process(rows(("x", 1), ("y", None), ("x", 3)))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    for argv in (["output", str(out), "--final"], ["output", str(out), "--format", "json"]):
        with pytest.raises(SystemExit) as code:
            main(argv)
        assert code.value.code == 0
        if "--final" in argv:
            assert capsys.readouterr().out == "x,3\ny,\n"
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"k": "x", "v": 1},
        {"k": "y", "v": None},
        {"k": "x", "v": 3},
    ]


# -- Parquet source: schema from footers -------------------------------------------------------
def write_parquet(path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def test_a_parquet_source_takes_the_first_files_footer_as_its_schema(tmp_path):
    when = pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us"))
    utc = pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("ms", tz="UTC"))
    write_parquet(
        tmp_path / "in" / "a.parquet",
        pa.table({"url": ["/a"], "n": pa.array([1], pa.int32()), "t": when, "u": utc, "tags": [["x"]]}),
    )
    write_parquet(tmp_path / "in" / "b.parquet", pa.table({"other": [1.0]}))  # not the first by name
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path / "in"), format="parquet").print()
    payload = graph.operator_config(env.get_job_graph().operators[0])
    assert payload["schema"] == "url string, n int, t timestamp_ntz, u timestamp, tags array<string>"
    assert payload["suffix"] == ".parquet" and payload["on_error"] == "fail"


def test_a_given_parquet_schema_is_checked_against_the_footer(tmp_path):
    write_parquet(tmp_path / "in" / "a.parquet", pa.table({"url": ["/a"], "n": pa.array([1], pa.int64())}))
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path / "in"), format="parquet", schema="n bigint").print()  # a subset is fine
    with pytest.raises(
        ValueError, match=r"column 'n' is bigint in the file, the schema says int; declare it as bigint"
    ):
        env.from_files(str(tmp_path / "in"), format="parquet", schema="url string, n int")
    with pytest.raises(ValueError, match=r"has no column 'URL' \(it has 'url'"):
        env.from_files(str(tmp_path / "in"), format="parquet", schema="URL string")


def test_a_parquet_source_names_a_file_it_cannot_read(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.parquet").write_bytes(b"not parquet at all")
    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match=r"a\.parquet is not a readable Parquet file"):
        env.from_files(str(tmp_path / "in"), format="parquet")
    write_parquet(tmp_path / "in2" / "a.parquet", pa.table({"t": pa.array([0], pa.timestamp("ns"))}))
    with pytest.raises(ValueError, match="column 't': a nanosecond timestamp.*coerce_timestamps='us'"):
        env.from_files(str(tmp_path / "in2"), format="parquet")


def test_parquet_refuses_malformed_row_policies_and_csv_json_options(tmp_path):
    write_parquet(tmp_path / "in" / "a.parquet", pa.table({"a": [1]}))
    env = StreamExecutionEnvironment()
    for on_error in ("drop", "dead_letter:/tmp/bad"):
        with pytest.raises(ValueError, match=r"on_error: parquet files take only on_error='fail'"):
            env.from_files(str(tmp_path / "in"), format="parquet", on_error=on_error)
    env.from_files(str(tmp_path / "in"), format="parquet", on_error="fail")
    for key in ("header", "mode", "mergeSchema", "columnNameOfCorruptRecord"):
        with pytest.raises(ValueError, match=rf"options\.{key}: not an option of parquet files"):
            env.from_files(str(tmp_path / "in"), format="parquet", options={key: "true"})
    env.from_files(str(tmp_path / "in"), format="parquet", options={"datetimeRebaseMode": "CORRECTED"})
    with pytest.raises(ValueError, match=r"options\.path: not supported"):
        env.from_files(str(tmp_path / "in"), format="parquet", options={"path": "/x"})


@pytest.mark.parametrize(
    ("arrow", "ddl"),
    [
        (pa.int8(), "tinyint"),
        (pa.int16(), "smallint"),
        (pa.uint32(), "bigint"),
        (pa.uint64(), "decimal(20,0)"),
        (pa.float32(), "float"),
        (pa.large_string(), "string"),
        (pa.binary(), "binary"),
        (pa.date32(), "date"),
        (pa.decimal128(12, 3), "decimal(12,3)"),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.map_(pa.string(), pa.int64()), "map<string,bigint>"),
        (pa.struct([("a b", pa.int64())]), "struct<`a b`:bigint>"),
    ],
)
def test_parquet_column_types_map_to_what_spark_reads(arrow, ddl):
    assert parquet.parquet_ddl(arrow) == ddl


def test_the_footer_check_names_the_file_and_skips_ddl_it_does_not_model(tmp_path):
    write_parquet(tmp_path / "a.parquet", pa.table({"a": [1]}))
    found = parquet.parquet_schema(pafs.LocalFileSystem(), str(tmp_path / "a.parquet"))
    parquet.check_parquet_schema("a bigint", found, "f.parquet")
    with pytest.raises(parquet.ParquetSchemaError, match=r"f\.parquet has no column 'b'"):
        parquet.check_parquet_schema("b string", found, "f.parquet")
    parquet.check_parquet_schema("a BIGINT NOT NULL COMMENT 'x' DEFAULT", found, "f.parquet")  # unparsed: Spark checks


def test_json_lines_built_by_column_read_back_as_the_rows_were(tmp_path):
    t = pa.table(
        {
            "s": ["a", 'q"uote', "back\\slash", "é 😀", None, "tab\there\nnewline"],
            "f": [1.0, 0.1, None, float("nan"), -0.0, 1e300],
            "i": pa.array([1, None, -3, 2**62, 0, 5], pa.int64()),
            "b": [True, False, None, True, True, False],
            "n": pa.array([None] * 6, pa.null()),
            "l": [[1, 2], None, [], [3], [4], [5]],
            "d": pa.array([1.25, None, 3, 4, 5, 6], pa.float64()).cast(pa.decimal128(10, 2)),
        }
    ).slice(1)  # an array offset into the buffers, as a batch sliced by the chain may have
    out = tmp_path / "out"
    a = writer(out, "json")
    a.process(Batch(engine=None, table=t))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    (part,) = committed_parts(str(out))
    written = [json.loads(line) for line in open(part, encoding="utf-8").read().splitlines()]
    expected = t.to_pylist()
    for row in expected:
        row["f"] = row["f"] if row["f"] is None or row["f"] == row["f"] else None  # NaN: null in JSON
        row["d"] = None if row["d"] is None else float(row["d"])
    assert written == expected
    assert [type(r["f"]) for r in written if r["f"] is not None] == [float] * 3  # -0.0 and 1e300 stay floats


def test_a_parquet_source_failure_is_not_restarted(tmp_path):
    from sluice.states import FailureCause
    from taskmanager.operators.sources import FileSource
    from taskmanager.task_messages import Failure

    write_parquet(tmp_path / "in" / "a.parquet", pa.table({"a": [1]}))
    (tmp_path / "in" / "b.parquet").write_bytes(b"garbage")
    source = FileSource({"path": str(tmp_path / "in"), "format": "parquet", "suffix": ".parquet"}, 0, 1, engine=None)
    assert source.reader.schema == "a bigint"  # no schema in the payload: the first footer's, once per deployment
    source.reader.check_parquet([str(tmp_path / "in" / "a.parquet")])
    with pytest.raises(RuntimeError, match=r"unreadable Parquet input: .*b\.parquet is not a readable") as info:
        source.reader.check_parquet([str(tmp_path / "in" / "b.parquet")])
    assert Failure.of(info.value, "traceback").cause == FailureCause.NON_RECOVERABLE


def test_wide_parquet_rows_are_written_out_before_their_row_count_is_reached(tmp_path, monkeypatch):
    from taskmanager.operators import sinks

    monkeypatch.setattr(sinks, "PARQUET_BUFFER_BYTES", 100_000)
    a = writer(tmp_path / "out", "parquet")
    for _ in range(5):  # 5 batches of ~60 KB each: written every 2 batches, not held until the barrier
        a.process(Batch(engine=None, table=pa.table({"k": ["x" * 60_000]})))
    a.snapshot(1)
    a.notify_checkpoint_complete(1)
    (part,) = committed_parts(str(tmp_path / "out"))
    meta = pq.ParquetFile(part).metadata
    assert meta.num_rows == 5 and [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [2, 2, 1]
