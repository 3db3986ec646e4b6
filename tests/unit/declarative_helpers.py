"""What the declarative-job tests (tests/unit/test_declarative_*.py) share: the page_views job as
a dict to change field by field, its schema, a Parquet source, the DeclarativeJob of a dict, and
the message the JobManager refuses one with."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from jobmanager.declarative.translate import to_job_graph
from jobmanager.errors import InvalidRequest
from sluice.v1 import declarative_pb2

SCHEMA = [{"name": "url", "type": "string"}, {"name": "user", "type": "bigint"}, {"name": "ts", "type": "bigint"}]
PARQUET = {"format": "parquet", "path": "/data/in", "schema": SCHEMA}


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
