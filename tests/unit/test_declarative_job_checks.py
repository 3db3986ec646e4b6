"""Declarative jobs' checks (docs/declarative-jobs.md) without a cluster: field checks and their
messages, SQL expressions checked against the stream's columns and the installed Spark's functions,
and the servicer's either-or rule of job and declarative."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from declarative_helpers import SCHEMA, declarative, page_views, refused

from jobmanager.declarative import expressions, spark_functions, validate


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
