"""`sluice sql` (sluice/cli/sql.py) without a cluster: queries into DeclarativeJobs, the SQL it
refuses, and the command's paths, schemas and Parquet sources read from a file's footer."""

from __future__ import annotations

import argparse

import pytest
from declarative_helpers import PARQUET, SCHEMA, declarative, page_views
from google.protobuf import json_format

from jobmanager.declarative.translate import to_job_graph
from jobmanager.errors import InvalidRequest
from sluice.cli import sql
from sluice.v1 import declarative_pb2


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
