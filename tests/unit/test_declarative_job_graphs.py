"""Declarative jobs (docs/declarative-jobs.md) translated without a cluster: the job graph equal
to the one the Python API builds, Parquet sources into every file sink format (and what they
refuse), and a Parquet source built without the JobManager opening any file."""

from __future__ import annotations

import json

import pytest
from declarative_helpers import PARQUET, SCHEMA, declarative, page_views, refused

from jobmanager.declarative import validate
from jobmanager.declarative.translate import to_job_graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.api.windowing import WindowedStream
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import TumblingEventTimeWindows


# -- the graph is the Python API's ---------------------------------------------------------------
def test_page_views_is_the_graph_the_python_api_builds():
    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    events = env.from_files("/data/in", format="json", schema="url string, user bigint, ts bigint")
    events.key_by("url").count().sink_to(FileSink("/data/out", columns=("url", "count")))
    assert to_job_graph(declarative(page_views())) == env.get_job_graph("page_views")


def test_select_filter_and_a_window_are_the_python_apis_too():
    steps = [
        {"filter": {"condition": "url LIKE '/page/%'"}},
        {"select": {"items": [{"expr": "url"}, {"expr": "lower(url)", "alias": "page"}, {"expr": "ts"}]}},
        {
            "key_by": {
                "keys": ["page"],
                "aggregates": [{"function": "count"}, {"function": "max", "column": "ts", "name": "last"}],
                "window": {
                    "kind": "tumbling",
                    "size_ms": 60000,
                    "timestamp_column": "ts",
                    "max_out_of_orderness_ms": 2000,
                },
            }
        },
    ]
    graph = to_job_graph(declarative(page_views(steps=steps, sink={"format": "print"})))

    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    s = env.from_files("/data/in", format="json", schema="url string, user bigint, ts bigint")
    s = s.filter("url LIKE '/page/%'").select("url", "(lower(url)) AS page", "ts")
    s = s.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(2000).with_timestamp_column("ts")
    )
    windowed: WindowedStream = s.key_by("page").window(TumblingEventTimeWindows.of(60000))
    windowed.aggregate(count=("count", "*"), last=("max", "ts")).print()
    assert graph == env.get_job_graph("page_views")
    assert (
        graph.operators[-2].output_schema
        == "page unknown, window_start bigint, window_end bigint, count bigint, last bigint"
    )
    assert all(not op.code for op in graph.operators)  # nothing pickled: plain settings only


def test_a_text_source_has_its_value_column_and_the_plan_keeps_defaults():
    plan = validate.check(
        declarative(
            page_views(
                parallelism=0,
                source={"format": "text", "path": "s3://bucket/logs"},
                steps=[{"key_by": {"keys": ["value"], "aggregates": [{"function": "count"}]}}],
            )
        )
    )
    assert plan.parallelism == 1 and plan.source.schema is None
    assert plan.steps[0] == validate.KeyBy("steps[0].key_by", ("value",), (("count", "count", "*"),), None)


# -- Parquet sources and every file sink format ----------------------------------------------------
DDL = "url string, user bigint, ts bigint"


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_a_parquet_source_into_each_file_format_is_the_python_apis_graph(fmt):
    graph = to_job_graph(
        declarative(page_views(source=PARQUET, sink={"format": fmt, "path": "/data/out", "columns": ["url", "count"]}))
    )
    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    events = env.from_files("/data/in", format="parquet", schema=DDL)
    events.key_by("url").count().sink_to(FileSink("/data/out", columns=("url", "count"), format=fmt))
    assert graph == env.get_job_graph("page_views")
    source = json.loads(graph.operators[0].config)
    assert source["format"] == "parquet" and source["suffix"] == ".parquet" and source["on_error"] == "fail"
    assert json.loads(graph.operators[-1].config).get("format", "csv") == fmt


def test_a_text_sink_writes_the_one_column_of_the_stream_or_the_one_named():
    one = [{"select": {"items": [{"expr": "url"}]}}]
    graph = to_job_graph(declarative(page_views(source=PARQUET, steps=one, sink={"format": "text", "path": "/o"})))
    named = to_job_graph(
        declarative(page_views(source=PARQUET, steps=[], sink={"format": "text", "path": "/o", "columns": ["url"]}))
    )

    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    env.from_files("/data/in", format="parquet", schema=DDL).select("url").sink_to(FileSink("/o", format="text"))
    assert graph == env.get_job_graph("page_views")
    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    env.from_files("/data/in", format="parquet", schema=DDL).sink_to(FileSink("/o", ("url",), format="text"))
    assert named == env.get_job_graph("page_views")


def test_on_error_fail_is_a_parquet_sources_default_spelled_out():
    spelled = to_job_graph(declarative(page_views(source={**PARQUET, "on_error": "fail", "suffix": ".pq"})))
    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    events = env.from_files("/data/in", format="parquet", schema=DDL, suffix=".pq", on_error="fail")
    events.key_by("url").count().sink_to(FileSink("/data/out", columns=("url", "count")))
    assert spelled == env.get_job_graph("page_views")


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"source": {**PARQUET, "schema": []}}, "declarative.source.schema", "reads no file"),
        ({"source": {**PARQUET, "options": {"header": "true"}}}, "declarative.source.options['header']", "parquet"),
        ({"source": {**PARQUET, "options": {"mode": "FAILFAST"}}}, "declarative.source.options['mode']", "parquet"),
        ({"source": {**PARQUET, "on_error": "drop"}}, "declarative.source.on_error", "only on_error='fail'"),
        ({"source": {**PARQUET, "on_error": "dead_letter:/bad"}}, "declarative.source.on_error", "only"),
        (
            {
                "source": {
                    "format": "json",
                    "path": "/d",
                    "schema": SCHEMA,
                    "options": {"mode": "FAILFAST"},
                    "on_error": "drop",
                }
            },
            "declarative.source.on_error",
            "contradicts",
        ),
        ({"source": {"format": "text", "path": "/d", "on_error": "fail"}}, "declarative.source.on_error", "text"),
        (
            {"sink": {"format": "text", "path": "/o", "columns": ["url", "count"]}},
            "declarative.sink.columns",
            "one column per line, got 2: url, count",
        ),
        (
            {"sink": {"format": "text", "path": "/o"}},
            "declarative.sink.columns",
            "the stream has 2 columns (url, count)",
        ),
        ({"sink": {"format": "json", "path": "out"}}, "declarative.sink.path", "not an absolute"),
        ({"sink": {"format": "parquet", "path": "/o", "columns": ["url", "n"]}}, "declarative.sink.columns[1]", "'n'"),
    ],
)
def test_parquet_sources_and_file_sinks_refuse_with_the_field(change, field, says):
    message = refused(page_views(**change))
    assert message.startswith(f"{field}: ") and says in message, message


def test_a_parquet_source_is_built_without_the_jobmanager_opening_any_file(tmp_path):
    """The JobManager reads no file a client names: neither a mismatched footer, nor a file that
    is not Parquet, nor a FIFO (which would block a reader) stops or slows the build; the tasks
    check every file's footer as they read it (tests/integration/test_declarative_submit.py)."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = tmp_path / "in"
    directory.mkdir()
    table = pa.table({"url": ["/a", "/b"], "user": pa.array([1, 2], pa.int32()), "ts": [10, 20]})
    pq.write_table(table, directory / "part-0.parquet")  # user is int here, bigint in SCHEMA
    (directory / "part-1.parquet").write_bytes(b"not parquet at all")
    os.mkfifo(directory / "part-2.parquet")
    source = {"format": "parquet", "path": str(directory)}

    subset = [{"name": "url", "type": "string"}, {"name": "ts", "type": "bigint"}]
    graph = to_job_graph(declarative(page_views(source={**source, "schema": subset})))
    env = StreamExecutionEnvironment()
    env.set_parallelism(2).enable_checkpointing(1000)
    env.read_inputs_at_build = False
    events = env.from_files(str(directory), format="parquet", schema="url string, ts bigint")
    events.key_by("url").count().sink_to(FileSink("/data/out", columns=("url", "count")))
    assert graph == env.get_job_graph("page_views")
    to_job_graph(declarative(page_views(source={**source, "schema": SCHEMA})))  # checked by the tasks
    with pytest.raises(ValueError, match="built without reading its files needs a schema"):
        env.from_files(str(directory), format="parquet")  # inference would read a footer
