"""A hostile or careless expression nested thousands of levels deep (within the 4,096-character
limit) is refused as a bad field that says what to fix, never a RecursionError that reached a
client as INTERNAL: by the JobManager's expression check and by `sluice sql` alike."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from jobmanager.declarative import expressions
from jobmanager.declarative.translate import to_job_graph
from jobmanager.errors import InvalidRequest
from sluice.cli import sql
from sluice.v1 import declarative_pb2

SCHEMA = [{"name": "url", "type": "string"}, {"name": "user", "type": "bigint"}]
DEEP = {
    "parentheses": "(" * 2040 + "url" + ")" * 2040,
    "calls": "lower(" * 600 + "url" + ")" * 600,
    "case": "CASE WHEN user > 0 THEN " * 300 + "1" + " END" * 300,
    "arrays": "array(" * 500 + "1" + ")" * 500,
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_nesting_is_refused_with_the_limit(name):
    with pytest.raises(expressions.ExpressionError, match=f"at most {expressions.MAX_NESTING}"):
        expressions.check(DEEP[name], ["url", "user"])


def test_nesting_at_the_limit_passes_and_a_run_of_not_past_the_stack_is_refused():
    n = expressions.MAX_NESTING
    expressions.check("(" * n + "url" + ")" * n, ["url"])
    with pytest.raises(expressions.ExpressionError, match="nests too deeply"):
        expressions.check("NOT " * 1000 + "true", ["url"])


def test_a_declarative_job_with_a_deep_filter_is_refused_naming_the_field():
    job = {
        "name": "deep",
        "source": {"format": "json", "path": "/data/in", "schema": SCHEMA},
        "steps": [{"filter": {"condition": "(" * 1000 + "user > 0" + ")" * 1000}}],
        "sink": {"format": "print"},
    }
    with pytest.raises(InvalidRequest) as info:
        to_job_graph(json_format.ParseDict(job, declarative_pb2.DeclarativeJob()))
    assert str(info.value).startswith("declarative.steps[0].filter.condition: "), str(info.value)
    assert f"at most {expressions.MAX_NESTING}" in str(info.value)


def test_sluice_sql_refuses_a_query_too_deep_to_parse():
    source = declarative_pb2.DeclarativeSource(format="json", path="/data/in")
    sink = declarative_pb2.DeclarativeSink(format="print")
    query = "SELECT url FROM events WHERE " + "NOT " * 1500 + "true"
    with pytest.raises(sql.SqlError, match="nests too deeply"):
        sql.sql_to_job(query, source, sink)
