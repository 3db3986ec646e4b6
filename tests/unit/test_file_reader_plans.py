"""taskmanager/operators/file_reader.py: a source's read plan is built once per SparkSession and
reading rule (format, schema, options, error policy, columns checked), shared by the readers of
later tasks, and a session keeps at most PLANS_KEPT of them."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from taskmanager.operators import file_reader
from taskmanager.operators.file_reader import FileFormatReader


class Session:
    """Stands for a SparkSession: only its identity matters here."""


@pytest.fixture
def built(monkeypatch):
    """Each plan built is a new number; the list of those built."""
    made: list[int] = []
    counter = itertools.count()

    def build(self):
        made.append(next(counter))
        return made[-1]

    monkeypatch.setattr(FileFormatReader, "_build_plan", build)
    return made


def reader(session, **payload) -> FileFormatReader:
    base = {"format": "json", "path": "/in", "schema": "k string, v bigint", "options": {}}
    columns = payload.pop("columns", "all")
    return FileFormatReader(base | payload, SimpleNamespace(spark=session), columns)  # type: ignore[arg-type]  # a stand-in engine


def test_readers_of_one_session_and_rule_share_one_plan(built):
    one, other = Session(), Session()
    first = reader(one)._plan()
    assert reader(one)._plan() == first and built == [first]  # a later task's reader: no new plan
    assert reader(one, on_error="fail")._plan() != first
    assert reader(one, columns="read")._plan() != first
    assert reader(one, schema="k string")._plan() != first
    assert reader(one, options={"multiLine": True})._plan() != first
    assert reader(other)._plan() != first  # another session's expressions are its own
    assert len(built) == 6


def test_a_session_keeps_its_newest_plans_only(built, monkeypatch):
    monkeypatch.setattr(file_reader, "PLANS_KEPT", 3)
    session = Session()
    for n in range(5):
        reader(session, schema=f"c{n} string")._plan()
    assert len(file_reader._PLANS[session]) == 3
    reader(session, schema="c4 string")._plan()  # kept: not built again
    reader(session, schema="c0 string")._plan()  # dropped: built again
    assert len(built) == 6
