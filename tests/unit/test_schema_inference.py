"""Reader options and submit-time schema inference of file sources
(sluice/schema_inference.py, `env.from_files`): pyarrow only, no Spark."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pyarrow as pa
import pytest

from sluice import graph
from sluice import schema as schemas
from sluice import schema_inference as inference
from sluice.api import StreamExecutionEnvironment


def infer(tmp_path, files: dict[str, str], format: str = "csv", suffix: str | None = None, **options) -> str:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return inference.infer_schema(str(tmp_path), format, options, suffix if suffix is not None else f".{format}")


# -- CSV ------------------------------------------------------------------------------------------
def test_headerless_csv_gets_spark_names_and_typed_columns(tmp_path):
    text = "1,2.5,true,2024-01-01,2024-01-01 10:00:00,x,\n2,3,False,2024-01-02,2024-01-02T11:00:00,y,\n"
    assert infer(tmp_path, {"a.csv": text}) == (
        "_c0 bigint, _c1 double, _c2 boolean, _c3 date, _c4 timestamp, _c5 string, _c6 string"
    )


def test_csv_header_names_the_columns_and_the_first_line_is_not_data(tmp_path):
    files = {"a.csv": "country,n\nde,1\n", "b.csv": "country,n\nfr,2\n"}  # every file has its header line
    assert infer(tmp_path, files, header=True) == "country string, n bigint"
    assert infer(tmp_path, files, header="true") == "country string, n bigint"
    assert infer(tmp_path, files) == "_c0 string, _c1 string"  # Spark's default: no header, so "n" is data


def test_csv_header_names_are_made_safe_as_spark_does(tmp_path):
    ddl = infer(tmp_path, {"a.csv": "a,A,,b c,b\n1,2,3,4,5\n"}, header=True)
    assert ddl == "a0 bigint, A1 bigint, _c2 bigint, `b c` bigint, b bigint"
    assert schemas.parse(ddl).names == ["a0", "A1", "_c2", "b c", "b"]


@pytest.mark.parametrize(
    ("sep", "text"),
    [(";", "k;v\nx;1\n"), ("\t", "k\tv\nx\t1\n"), ("\\t", "k\tv\nx\t1\n"), ("||", "k||v\nx||1\n")],
)
def test_csv_separator(tmp_path, sep, text):
    assert infer(tmp_path, {"a.csv": text}, header=True, sep=sep) == "k string, v bigint"


def test_csv_delimiter_is_sep_by_another_name(tmp_path):
    assert infer(tmp_path, {"a.csv": "1;2\n"}, delimiter=";") == "_c0 bigint, _c1 bigint"


def test_csv_comment_null_value_and_infer_schema_off(tmp_path):
    text = "# a comment\nx,NA\ny,3\n"
    assert infer(tmp_path, {"a.csv": text}, comment="#", nullValue="NA") == "_c0 string, _c1 bigint"
    assert infer(tmp_path, {"a.csv": "1,2\n"}, inferSchema=False) == "_c0 string, _c1 string"


def test_csv_rows_of_the_wrong_width_in_the_sample_do_not_decide_types(tmp_path):
    assert infer(tmp_path, {"a.csv": "1,2\n3,4,5\n6,7\n"}) == "_c0 bigint, _c1 bigint"


def test_the_sample_is_cut_after_its_last_whole_line(tmp_path, monkeypatch):
    monkeypatch.setattr(inference, "SAMPLE_BYTES", 20)
    # "1,2\n" x 5 is 20 bytes; a 21st byte says the file goes on: "x" and what follows are not sampled
    assert infer(tmp_path, {"a.csv": "1,2\n" * 5 + "x,y\n"}) == "_c0 bigint, _c1 bigint"


def test_only_the_first_files_are_sampled(tmp_path, monkeypatch):
    monkeypatch.setattr(inference, "SAMPLE_FILES", 2)
    files = {"a.csv": "1\n", "b.csv": "2\n", "c.csv": "not a number\n"}
    assert infer(tmp_path, files) == "_c0 bigint"


def test_compressed_files_are_sampled_decompressed(tmp_path):
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(b"k,v\nx,1.5\n"))
    assert inference.infer_schema(str(tmp_path), "csv", {"header": True}, ".csv.gz") == "k string, v double"


def test_csv_encoding(tmp_path):
    (tmp_path / "a.csv").write_bytes("stadt,n\nköln,1\n".encode("latin-1"))
    assert inference.infer_schema(str(tmp_path), "csv", {"header": True, "encoding": "ISO-8859-1"}, ".csv") == (
        "stadt string, n bigint"
    )


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_name(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfk,v\nx,1\n")
    assert inference.infer_schema(str(tmp_path), "csv", {"header": True}, ".csv") == "k string, v bigint"


# -- JSON -----------------------------------------------------------------------------------------
def test_json_fields_are_sorted_and_typed_as_spark_infers_them(tmp_path):
    lines = [
        '{"v": 1, "url": "/a", "when": "2024-01-01T00:00:00", "ok": true, "none": null}',
        '{"v": 2.5, "tags": ["a"], "geo": {"lon": 1.5, "city": "x"}}',
    ]
    assert infer(tmp_path, {"a.jsonl": "\n".join(lines) + "\n"}, "json", ".jsonl") == (
        "geo struct<city:string,lon:double>, none string, ok boolean, tags array<string>, "
        "url string, v double, when string"  # strings stay strings, as in Spark's JSON inference
    )


def test_json_lines_that_are_not_objects_are_left_out_of_the_sample(tmp_path):
    text = '{"k": "a", "n": 1}\nnot json\n[1, 2]\n\n{"k": "b", "n": 2}\n'
    assert infer(tmp_path, {"a.jsonl": text}, "json", ".jsonl") == "k string, n bigint"


def test_json_primitives_as_string(tmp_path):
    text = '{"n": 1, "o": {"x": true}}\n'
    assert infer(tmp_path, {"a.jsonl": text}, "json", ".jsonl", primitivesAsString=True) == (
        "n string, o struct<x:string>"
    )


def test_json_fields_whose_values_disagree_need_a_schema(tmp_path):
    with pytest.raises(inference.SchemaInferenceError, match="give the schema"):
        infer(tmp_path, {"a.jsonl": '{"v": 1}\n{"v": "x"}\n'}, "json", ".jsonl")


def test_multiline_json_needs_a_schema(tmp_path):
    with pytest.raises(inference.SchemaInferenceError, match="multiLine"):
        infer(tmp_path, {"a.jsonl": '[{"v": 1}]\n'}, "json", ".jsonl", multiLine=True)


# -- types ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arrow", "csv", "json"),
    [
        (pa.int64(), "bigint", "bigint"),
        (pa.int32(), "bigint", "bigint"),
        (pa.float64(), "double", "double"),
        (pa.bool_(), "boolean", "boolean"),
        (pa.string(), "string", "string"),
        (pa.null(), "string", "string"),
        (pa.date32(), "date", "string"),
        (pa.timestamp("s"), "timestamp", "string"),
        (pa.timestamp("s", tz="UTC"), "timestamp", "string"),
        (pa.time32("s"), "string", "string"),
        (pa.decimal128(10, 2), "decimal(10,2)", "decimal(10,2)"),
        (pa.list_(pa.int64()), "array<bigint>", "array<bigint>"),
        (pa.struct([("b", pa.int64()), ("a b", pa.string())]), "struct<`a b`:string,b:bigint>", None),
    ],
)
def test_arrow_types_map_to_spark_ddl(arrow, csv, json):
    assert inference._ddl_type(arrow, strings=False) == csv
    if json is not None:
        assert inference._ddl_type(arrow, strings=True) == json
    schemas.parse(f"c {csv}")  # the DDL reads back


# -- nothing to infer from -------------------------------------------------------------------------
def test_an_empty_directory_has_nothing_to_infer_from(tmp_path):
    with pytest.raises(inference.SchemaInferenceError, match="give the schema"):
        inference.infer_schema(str(tmp_path), "json", {}, ".jsonl")
    (tmp_path / "a.csv").write_text("\n\n")
    with pytest.raises(inference.SchemaInferenceError, match="empty"):
        inference.infer_schema(str(tmp_path), "csv", {}, ".csv")


def test_text_files_have_one_value_column_without_looking(tmp_path):
    assert inference.infer_schema(str(tmp_path / "missing"), "text", {}) == "value string"


# -- from_files -------------------------------------------------------------------------------------
def source_payload(env: StreamExecutionEnvironment) -> dict:
    return graph.operator_config(env.get_job_graph().operators[0])


def test_from_files_infers_once_and_the_job_graph_carries_the_schema(tmp_path):
    (tmp_path / "a.csv").write_text("de,phone,3\nfr,tablet,4\n")
    env = StreamExecutionEnvironment()
    stream = env.from_files(str(tmp_path), format="csv", options={"mode": "dropmalformed"})
    stream.print()
    assert stream.schema is not None and stream.schema.names == ["_c0", "_c1", "_c2"]
    (tmp_path / "a.csv").write_text("other,columns,now,4\n")  # the schema was fixed when the source was made
    payload = source_payload(env)
    assert payload["schema"] == "_c0 string, _c1 string, _c2 bigint"
    assert payload["options"] == {"mode": "dropmalformed"}
    assert env.get_job_graph().operators[0].output_schema == "_c0 string, _c1 string, _c2 bigint"
    graph.validate(env.get_job_graph())


def test_from_files_keeps_a_given_schema_and_adds_a_corrupt_record_column_to_an_inferred_one(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"k": "a"}\n')
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path), schema="k string, n bigint").print()
    assert source_payload(env)["schema"] == "k string, n bigint"
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path), options={"columnNameOfCorruptRecord": "_bad"}).print()
    assert source_payload(env)["schema"] == "k string, _bad string"


def test_a_corrupt_record_column_must_be_a_string_column_of_the_schema(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"k": "a"}\n')
    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match=r"options.columnNameOfCorruptRecord: column '_bad' is not in the schema"):
        env.from_files(str(tmp_path), schema="k string", options={"columnNameOfCorruptRecord": "_bad"})
    with pytest.raises(ValueError, match="must be a string, not bigint"):
        env.from_files(str(tmp_path), schema="k string, _bad long", options={"columnNameOfCorruptRecord": "_bad"})


def test_from_files_with_a_missing_directory_leaves_the_error_to_validation(tmp_path):
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path / "missing"), format="csv").print()
    with pytest.raises(graph.JobValidationError) as info:
        graph.validate(env.get_job_graph())
    assert info.value.field == "operators[0].config.path"


def test_inference_errors_name_the_source(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"v": 1}\n{"v": "x"}\n')
    with pytest.raises(ValueError, match=rf"from_files: {tmp_path}: cannot infer one type"):
        StreamExecutionEnvironment().from_files(str(tmp_path))


def test_the_client_infers_without_spark(tmp_path):
    (tmp_path / "a.csv").write_text("1,x\n")
    code = (
        "import sys\n"
        "from sluice.api import StreamExecutionEnvironment\n"
        f"s = StreamExecutionEnvironment().from_files({str(tmp_path)!r}, format='csv')\n"
        "assert s.schema.ddl() == '_c0 bigint, _c1 string', s.schema\n"
        "assert 'pyspark' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- options ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("recursiveFileLookup", "a split is one file directly under path"),
        ("pathGlobFilter", "use suffix="),
        ("modifiedBefore", "exactly-once"),
        ("modifiedafter", "exactly-once"),
        ("ignoreCorruptFiles", "skips a whole file"),
        ("ignoreMissingFiles", "skips a listed file"),
        ("basePath", "partition discovery"),
        ("path", "give the directory as path"),
    ],
)
def test_options_that_break_splitting_or_replay_are_rejected(tmp_path, key, why):
    with pytest.raises(inference.ReaderOptionError, match=why) as info:
        inference.check_options("csv", {key: "x"})
    assert info.value.field == f"options.{key}"
    with pytest.raises(ValueError, match=rf"from_files: options.{key}: not supported"):
        StreamExecutionEnvironment().from_files(str(tmp_path), format="csv", schema="a string", options={key: "x"})


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"sep": None}, "options.sep", "a value is a str, bool, int or float, got NoneType"),
        ({"sep": [";"]}, "options.sep", "got list"),
        ({1: "x"}, "options", "option names are non-empty strings"),
        ({"mode": "LENIENT"}, "options.mode", "must be one of PERMISSIVE, DROPMALFORMED, FAILFAST"),
        ({"header": "yes"}, "options.header", "must be true or false"),
        ({"Header": 1}, "options.Header", "must be true or false"),
        ({"header": True, "HEADER": False}, "options.HEADER", "given twice"),
        ({"columnNameOfCorruptRecord": ""}, "options.columnNameOfCorruptRecord", "must be a column name"),
        ({"columnNameOfCorruptRecord": "__sluice_x"}, "options.columnNameOfCorruptRecord", "must be a column name"),
    ],
)
def test_bad_option_values_name_the_option(options, field, message):
    with pytest.raises(inference.ReaderOptionError, match=message) as info:
        inference.check_options("csv", options)
    assert info.value.field == field


def test_options_must_be_a_dict():
    with pytest.raises(inference.ReaderOptionError, match="expected a dict") as info:
        inference.check_options("csv", [("header", True)])
    assert info.value.field == "options"


def test_text_files_have_no_malformed_rows_to_handle():
    with pytest.raises(inference.ReaderOptionError, match="never malformed"):
        inference.check_options("text", {"mode": "DROPMALFORMED"})
    assert inference.check_options("text", {"wholetext": True, "lineSep": ";"}) == {"wholetext": True, "lineSep": ";"}


def test_options_are_read_without_regard_to_case_and_given_to_spark_as_strings():
    options = inference.check_options("csv", {"Header": True, "SEP": ";", "Mode": "dropMalformed", "maxColumns": 9})
    assert inference.flag(options, "header") and inference.option(options, "sep") == ";"
    assert inference.mode_of(options) == "DROPMALFORMED" and inference.mode_of({}) == "PERMISSIVE"
    assert inference.spark_options(options) == {
        "Header": "true",
        "SEP": ";",
        "Mode": "dropMalformed",
        "maxColumns": "9",
    }
    assert inference.check_options("csv", None) == {}


def test_validation_checks_the_options_a_job_graph_carries(tmp_path):
    (tmp_path / "a.csv").write_text("1\n")
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path), format="csv", options={"header": False}).print()
    job = env.get_job_graph()
    payload = graph.operator_config(job.operators[0])
    payload["options"] = {"recursiveFileLookup": True}
    job.operators[0].config = json.dumps(payload)
    with pytest.raises(graph.JobValidationError) as info:
        graph.validate(job, check_paths=False)
    assert info.value.field == "operators[0].config.options.recursiveFileLookup"
    payload["options"], payload["format"] = {}, "avro"
    job.operators[0].config = json.dumps(payload)
    with pytest.raises(graph.JobValidationError) as info:
        graph.validate(job, check_paths=False)
    assert info.value.field == "operators[0].config.format"
    payload["format"], payload["options"] = "csv", {"columnNameOfCorruptRecord": "_bad"}
    job.operators[0].config = json.dumps(payload)
    with pytest.raises(graph.JobValidationError) as info:
        graph.validate(job, check_paths=False)
    assert info.value.field == "operators[0].config.options.columnNameOfCorruptRecord"
