"""Declarative jobs (docs/declarative-jobs.md) without a cluster: field checks and their
messages, SQL expressions checked against the stream's columns, the job graph equal to the one
the Python API builds, the servicer's either-or rule, and `sluice sql` queries into
DeclarativeJobs (and the SQL it refuses)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from jobmanager.declarative import expressions, spark_functions, validate
from jobmanager.declarative.translate import to_job_graph
from jobmanager.errors import InvalidRequest
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.api.windowing import WindowedStream
from sluice.cli import sql
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import TumblingEventTimeWindows
from sluice.v1 import declarative_pb2

SCHEMA = [{"name": "url", "type": "string"}, {"name": "user", "type": "bigint"}, {"name": "ts", "type": "bigint"}]


def page_views(**changes) -> dict:
    job = {
        "name": "page_views",
        "parallelism": 2,
        "config": {"execution.checkpointing.interval": "1000"},
        "source": {"format": "json", "path": "/data/in", "schema": SCHEMA},
        "steps": [{"key_by": {"keys": ["url"], "aggregates": [{"function": "count", "column": "*", "name": "count"}]}}],
        "sink": {"format": "csv", "path": "/data/out", "columns": ["url", "count"]},
    }
    job.update(changes)
    return job


def declarative(d: dict) -> declarative_pb2.DeclarativeJob:
    return json_format.ParseDict(d, declarative_pb2.DeclarativeJob())


def refused(d: dict) -> str:
    with pytest.raises(InvalidRequest) as info:
        to_job_graph(declarative(d))
    return str(info.value)


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
PARQUET = {"format": "parquet", "path": "/data/in", "schema": SCHEMA}


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


# -- field checks ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"name": ""}, "declarative.name", "is empty"),
        ({"name": "x" * 257}, "declarative.name", "more than 256"),
        ({"parallelism": -1}, "declarative.parallelism", "not in 1..1024"),
        (
            {"source": {"format": "orc", "path": "/d", "schema": SCHEMA}},
            "declarative.source.format",
            "json, csv, text, parquet",
        ),
        (
            {"source": {"format": "json", "path": "data/in", "schema": SCHEMA}},
            "declarative.source.path",
            "not an absolute",
        ),
        ({"source": {"format": "json", "path": "/d"}}, "declarative.source.schema", "needs its columns"),
        (
            {"source": {"format": "json", "path": "/d", "schema": [*SCHEMA, {"name": "URL", "type": "string"}]}},
            "declarative.source.schema[3].name",
            "declared twice",
        ),
        (
            {"source": {"format": "json", "path": "/d", "schema": [{"name": "a", "type": "strnig"}]}},
            "declarative.source.schema[0].type",
            "strnig",
        ),
        ({"sink": {"format": "orc", "path": "/o"}}, "declarative.sink.format", "csv, json, parquet, text, print"),
        ({"sink": {"format": "csv", "path": "./out"}}, "declarative.sink.path", "not an absolute"),
        ({"sink": {"format": "print", "path": "/o"}}, "declarative.sink", "no path"),
        ({"steps": [{}]}, "declarative.steps[0]", "one of select, filter, key_by"),
        ({"steps": [{"filter": {"condition": "x" * 4097}}]}, "declarative.steps[0].filter.condition", "more than 4096"),
        ({"steps": [{"select": {"items": []}}]}, "declarative.steps[0].select.items", "is empty"),
        (
            {"steps": [{"key_by": {"keys": ["url"], "aggregates": [{"function": "median", "column": "ts"}]}}]},
            "declarative.steps[0].key_by.aggregates[0].function",
            "count, sum, min, max, avg",
        ),
        (
            {"steps": [{"key_by": {"keys": ["url"], "aggregates": [{"function": "count", "column": "user"}]}}]},
            "declarative.steps[0].key_by.aggregates[0].column",
            "count counts rows",
        ),
        (
            {"steps": [{"key_by": {"keys": ["url"], "aggregates": [{"function": "count", "name": "url"}]}}]},
            "declarative.steps[0].key_by.aggregates[0].name",
            "also a key column",
        ),
        (
            {
                "steps": [
                    {
                        "key_by": {
                            "keys": ["url"],
                            "aggregates": [{"function": "count"}],
                            "window": {"kind": "hopping", "size_ms": 1, "timestamp_column": "ts"},
                        }
                    }
                ]
            },
            "declarative.steps[0].key_by.window.kind",
            "tumbling, sliding, session",
        ),
        (
            {"config": {"execution.checkpointing.interval": "soon"}},
            "declarative.config['execution.checkpointing.interval']",
            "soon",
        ),
    ],
)
def test_a_bad_field_is_named_with_what_to_fix(change, field, says):
    message = refused(page_views(**change))
    assert message.startswith(f"{field}: ") and says in message, message


def test_lists_are_bounded():
    steps = [{"filter": {"condition": "user > 0"}}] * (validate.MAX_STEPS + 1)
    assert "257 steps, more than 256" in refused(page_views(steps=steps))
    schema = [{"name": f"c{i}", "type": "int"} for i in range(validate.MAX_FIELDS + 1)]
    assert "1025 fields, more than 1024" in refused(
        page_views(source={"format": "json", "path": "/d", "schema": schema})
    )


# -- columns and SQL expressions ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("step", "field", "says"),
    [
        ({"filter": {"condition": "urll = '/a'"}}, "steps[0].filter.condition", "unknown column 'urll'"),
        ({"filter": {"condition": "lowr(url) = '/a'"}}, "steps[0].filter.condition", "unknown function 'lowr'"),
        ({"filter": {"condition": "count(*) > 1"}}, "steps[0].filter.condition", "aggregate function"),
        ({"filter": {"condition": "url IN (SELECT url FROM t)"}}, "steps[0].filter.condition", "subquery"),
        ({"filter": {"condition": "url = '/a' -- and more"}}, "steps[0].filter.condition", "comment"),
        ({"filter": {"condition": "url = "}}, "steps[0].filter.condition", "does not parse"),
        ({"filter": {"condition": "DROP TABLE t"}}, "steps[0].filter.condition", "statement"),
        ({"select": {"items": [{"expr": "upper(url)"}]}}, "steps[0].select.items[0].alias", "name the computed column"),
        ({"select": {"items": [{"expr": "url AS u"}]}}, "steps[0].select.items[0].expr", "alias"),
        (
            {"select": {"items": [{"expr": "row_number() OVER (ORDER BY ts)", "alias": "n"}]}},
            "steps[0].select",
            "window",
        ),
        (
            {"key_by": {"keys": ["URL"], "aggregates": [{"function": "count"}]}},
            "steps[0].key_by.keys[0]",
            "did you mean 'url'",
        ),
        (
            {"key_by": {"keys": ["url"], "aggregates": [{"function": "sum", "column": "byts"}]}},
            "aggregates[0].column",
            "'byts'",
        ),
        (
            {"key_by": {"keys": ["user"], "aggregates": [{"function": "avg", "column": "url"}]}},
            "aggregates[0].column",
            "numeric",
        ),
        (
            {
                "key_by": {
                    "keys": ["url"],
                    "aggregates": [{"function": "count"}],
                    "window": {"kind": "session", "gap_ms": 1000, "timestamp_column": "time"},
                }
            },
            "steps[0].key_by.window.timestamp_column",
            "unknown column 'time'",
        ),
    ],
)
def test_a_step_naming_what_the_stream_lacks_is_refused(step, field, says):
    message = refused(page_views(steps=[step], sink={"format": "print"}))
    assert field in message and says in message, message


def test_columns_follow_the_steps_and_sink_columns_are_checked():
    steps = [{"select": {"items": [{"expr": "url", "alias": "page"}]}}]
    message = refused(page_views(steps=steps, sink={"format": "csv", "path": "/o", "columns": ["url"]}))
    assert message.startswith("declarative.sink.columns[0]: unknown column 'url'") and "page" in message
    message = refused(page_views(steps=[*steps, {"filter": {"condition": "url = '/a'"}}]))
    assert "steps[1].filter.condition" in message and "unknown column 'url'" in message


@pytest.mark.parametrize(
    "text",
    [
        "lower(url) LIKE '/page/%' AND user IS NOT NULL",
        "URL = '/a'",  # Spark resolves names ignoring case
        "date_format(timestamp_millis(ts), 'yyyy-MM-dd')",
        "CASE WHEN user > 10 THEN 'many' ELSE 'few' END",
        "try_cast(ts AS timestamp)",
        "transform(array(user, ts), x -> x + 1)",
        "coalesce(url, '') || '!'",
    ],
)
def test_spark_expressions_pass(text):
    expressions.check(text, ["url", "user", "ts"])


def test_the_function_list_is_the_installed_sparks():
    # regenerate with `python -m jobmanager.declarative.spark_functions` after a Spark upgrade
    assert spark_functions.SPARK_VERSION == importlib.metadata.version("pyspark")
    assert {"lower", "date_format", "count"} <= spark_functions.FUNCTIONS
    assert spark_functions.AGGREGATES <= spark_functions.FUNCTIONS


@pytest.mark.parametrize("name", ["FUNCTIONS", "AGGREGATES", "WINDOW_FUNCTIONS"])
def test_the_function_lists_are_as_the_generator_writes_them(name):
    # the generator rewrites each list in place: sorted names, wrapped, nothing else in the block
    text = Path(spark_functions.__file__).read_text(encoding="utf-8")
    assert spark_functions._with_names(text, name, sorted(getattr(spark_functions, name))) == text


# -- the servicer: exactly one of job and declarative -------------------------------------------
class _Dispatcher:
    def __init__(self) -> None:
        self.submitted: list = []

    def submit(self, job, restore_path, allow_non_restored_state):
        self.submitted.append(job)
        return "job-1"


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self) -> None:
        self.status: tuple[object, str] | None = None  # (code, message) of abort()

    def abort(self, code, message):
        self.status = (code, message)
        raise _Aborted(message)

    def code(self):
        return self.status[0] if self.status else None


def test_the_servicer_takes_exactly_one_of_job_and_declarative():
    import grpc

    from jobmanager.servicers import JobManagerServicer
    from sluice.v1 import jobmanager_pb2

    dispatcher = _Dispatcher()
    servicer = JobManagerServicer(dispatcher, lambda: None)  # type: ignore[arg-type]  # a fake dispatcher: submit only
    reply = servicer.SubmitJob(jobmanager_pb2.SubmitJobRequest(declarative=declarative(page_views())), _Context())
    assert reply.job_id == "job-1" and dispatcher.submitted[0].name == "page_views"
    graph = dispatcher.submitted[0]
    for request in (
        jobmanager_pb2.SubmitJobRequest(),
        jobmanager_pb2.SubmitJobRequest(job=graph, declarative=declarative(page_views())),
    ):
        context = _Context()
        with pytest.raises(_Aborted):
            servicer.SubmitJob(request, context)
        assert context.status is not None
        assert context.status[0] == grpc.StatusCode.INVALID_ARGUMENT and "exactly one of job" in context.status[1]
    context = _Context()
    with pytest.raises(_Aborted):
        servicer.SubmitJob(
            jobmanager_pb2.SubmitJobRequest(
                declarative=declarative(page_views(steps=[{"filter": {"condition": "x"}}]))
            ),
            context,
        )
    assert context.status is not None
    assert context.status[0] == grpc.StatusCode.INVALID_ARGUMENT and "unknown column 'x'" in context.status[1]
    assert len(dispatcher.submitted) == 1


# -- sluice sql -------------------------------------------------------------------------------------
def source() -> declarative_pb2.DeclarativeSource:
    return json_format.ParseDict(
        {"format": "json", "path": "/data/in", "schema": SCHEMA}, declarative_pb2.DeclarativeSource()
    )


def sql_job(query: str, sink: str = "csv") -> declarative_pb2.DeclarativeJob:
    out = (
        declarative_pb2.DeclarativeSink(format="csv", path="/data/out")
        if sink == "csv"
        else declarative_pb2.DeclarativeSink(format="print")
    )
    return sql.sql_to_job(
        query, source(), out, name="page_views", parallelism=2, config={"execution.checkpointing.interval": "1000"}
    )


def test_the_page_views_query_is_the_page_views_job():
    job = sql_job("SELECT url, COUNT(*) AS count FROM events GROUP BY url")
    assert job == declarative(page_views())


def test_where_renames_and_reorders_become_steps():
    job = sql_job("SELECT COUNT(*) AS n, e.url AS page, SUM(user) FROM events AS e WHERE ts > 10 GROUP BY url")
    steps = json_format.MessageToDict(job, preserving_proto_field_name=True)["steps"]
    assert steps == [
        {"filter": {"condition": "ts > 10"}},
        {
            "key_by": {
                "keys": ["url"],
                "aggregates": [
                    {"function": "count", "column": "*", "name": "n"},
                    {"function": "sum", "column": "user", "name": "sum_user"},
                ],
            }
        },
        {"select": {"items": [{"expr": "n"}, {"expr": "url", "alias": "page"}, {"expr": "sum_user"}]}},
    ]
    assert list(job.sink.columns) == ["n", "page", "sum_user"]
    to_job_graph(job)  # and the JobManager takes it


def test_a_query_without_group_by_is_a_filter_and_a_select():
    job = sql_job("SELECT lower(url) AS page, ts FROM events WHERE url LIKE '/a%'", sink="print")
    steps = json_format.MessageToDict(job, preserving_proto_field_name=True)["steps"]
    assert steps == [
        {"filter": {"condition": "url LIKE '/a%'"}},
        {"select": {"items": [{"expr": "LOWER(url)", "alias": "page"}, {"expr": "ts"}]}},
    ]
    assert not sql_job("SELECT * FROM events", sink="print").steps


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("SELECT a.url FROM events a JOIN users u ON a.user = u.id", "JOIN"),
        ("SELECT url FROM (SELECT url FROM events)", "subqueries"),
        ("SELECT url FROM events WHERE user IN (SELECT id FROM admins)", "subqueries"),
        ("SELECT url FROM events ORDER BY url", "ORDER BY"),
        ("SELECT url FROM events LIMIT 10", "LIMIT"),
        ("SELECT url, COUNT(*) FROM events GROUP BY url HAVING COUNT(*) > 1", "HAVING"),
        ("SELECT DISTINCT url FROM events", "DISTINCT"),
        ("SELECT url FROM events UNION SELECT url FROM more", "UNION"),
        ("WITH t AS (SELECT url FROM events) SELECT url FROM t", "WITH"),
        ("SELECT url, row_number() OVER (ORDER BY ts) AS n FROM events", "window functions"),
        ("SELECT COUNT(*) FROM events", "needs GROUP BY"),
        ("SELECT url, COUNT(user) FROM events GROUP BY url", "COUNT(*)"),
        ("SELECT url, COUNT(DISTINCT user) FROM events GROUP BY url", "DISTINCT"),
        ("SELECT url, stddev(ts) FROM events GROUP BY url", "STDDEV"),
        ("SELECT url, COUNT(*) + 1 FROM events GROUP BY url", "inside an expression"),
        ("SELECT user, COUNT(*) FROM events GROUP BY url", "neither in GROUP BY"),
        ("SELECT url, COUNT(*) FROM events GROUP BY lower(url)", "group by column names"),
        ("SELECT upper(url) FROM events", "with AS"),
        ("SELECT other.url FROM events", "unknown table 'other'"),
        ("SELECT url FROM", "does not parse"),
        ("DELETE FROM events", "DELETE is not supported"),
        ("SELECT 1; SELECT 2", "one query"),
    ],
)
def test_unsupported_sql_is_named(query, says):
    with pytest.raises(sql.SqlError) as info:
        sql_job(query)
    assert says in str(info.value), str(info.value)


def sql_args(source: str, schema: str | None, sink: str) -> argparse.Namespace:
    """`sluice sql`'s arguments for the page-views query (the command's defaults otherwise)."""
    return argparse.Namespace(
        query="SELECT url, COUNT(*) AS count FROM events GROUP BY url",
        source=source,
        schema=schema,
        source_option=None,
        suffix=None,
        monitor_interval=0,
        sink=sink,
        name="page_views",
        parallelism=2,
        checkpoint_interval=1000,
        config=None,
    )


def test_the_command_resolves_paths_and_parses_the_schema(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = sql_args(source="json:in", schema="url string, user bigint, ts bigint", sink="csv:out")
    job = sql.build_job(args)
    assert job == declarative(
        page_views(
            source={**page_views()["source"], "path": str(tmp_path / "in")},
            sink={**page_views()["sink"], "path": str(tmp_path / "out")},
        )
    )
    with pytest.raises(sql.SluiceError, match="FORMAT:PATH"):
        sql.build_job(argparse.Namespace(**{**vars(args), "source": "orc:/x"}))


def test_sql_reads_parquet_with_the_footers_schema_and_fills_a_file_sinks_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"url": ["/a"], "user": [1], "ts": [10]}), tmp_path / "in" / "a.parquet")
    # no schema: from the first file's footer, on the client
    args = sql_args(source=f"parquet:{tmp_path / 'in'}", schema=None, sink=f"json:{tmp_path / 'out'}")
    job = sql.build_job(args)
    assert job == declarative(
        page_views(
            source={**PARQUET, "path": str(tmp_path / "in")},
            sink={"format": "json", "path": str(tmp_path / "out"), "columns": ["url", "count"]},
        )
    )
    for fmt in ("parquet", "text"):
        assert sql.build_job(argparse.Namespace(**{**vars(args), "sink": f"{fmt}:/o"})).sink.format == fmt
    text = sql.build_job(argparse.Namespace(**{**vars(args), "sink": "text:/o"}))
    with pytest.raises(InvalidRequest, match=r"declarative\.sink\.columns: .*got 2: url, count"):
        to_job_graph(text)
    with pytest.raises(sql.SluiceError, match="cannot infer the schema"):
        sql.build_job(argparse.Namespace(**{**vars(args), "source": f"parquet:{tmp_path / 'none'}"}))
    with pytest.raises(sql.SluiceError, match="--source-option header: not an option of parquet files"):
        sql.build_job(argparse.Namespace(**{**vars(args), "source_option": ["header=true"]}))
    with pytest.raises(sql.SluiceError, match="csv, json, parquet, text"):
        sql.build_job(argparse.Namespace(**{**vars(args), "sink": "orc:/o"}))
