"""Per-key routing as an invariant of the job graph (sluice/key_partitioning.py): whatever
changes a parallelism — the job API, `sluice rescale --operator`, a live reconfiguration's
plan — an edge out of an operator partitioned by key stays keyed where a SQLite or file
sink relies on it, or its consumer follows, or the change is refused naming the edge."""

from __future__ import annotations

import pytest

from jobmanager.reconfiguration.plan import ReconfigurationError, make_plan
from sluice import graph, key_partitioning
from sluice.api import FileSink, SqliteSink, StreamExecutionEnvironment
from sluice.graph import JobValidationError, Partitioning


def page_views(tmp_path, sqlite: bool = True, parallelism: int = 3):
    """examples/page_views.py --sqlite: a keyed count feeding two un-chained sinks."""
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism)
    events = env.from_collection([{"url": "/a", "user": 1}]).uid("page-views")
    counts = events.key_by("url").count().uid("counts")
    counts.sink_to(FileSink(str(tmp_path / "out"), columns=("url", "count")), name="counts sink").uid("counts-sink")
    if sqlite:
        db = SqliteSink(str(tmp_path / "t.db"), "page_views", key="url", columns=("url", "count"))
        counts.sink_to(db, name="sqlite sink").uid("sqlite-sink")
    return env.get_job_graph("pv")


def edge(job, source: str, target: str):
    return next(e for e in job.edges if e.source == source and e.target == target)


def routing(job, source: str, target: str) -> tuple[Partitioning, list[str]]:
    e = edge(job, source, target)
    return graph.partitioning_of(e), list(e.keys)


def test_an_operator_level_rescale_of_a_keyed_count_keeps_both_sinks_keyed(tmp_path):
    job = page_views(tmp_path)
    new = graph.rescaled(job, 2, operator="counts")
    assert routing(new, "counts", "sqlite-sink") == (Partitioning.HASH, ["url"])
    assert routing(new, "counts", "counts-sink") == (Partitioning.HASH, ["url"])
    assert {op.id: op.parallelism for op in new.operators}["sqlite-sink"] == 3  # the sinks keep theirs
    graph.validate(new, check_paths=False)
    back = graph.rescaled(new, 3, operator="counts")  # and any sequence of changes
    assert routing(back, "counts", "sqlite-sink") == (Partitioning.HASH, ["url"])
    graph.validate(back, check_paths=False)


def test_a_sink_rescaled_alone_is_keyed_by_its_own_key(tmp_path):
    job = page_views(tmp_path)
    new = graph.rescaled(job, 1, operator="sqlite-sink")
    assert routing(new, "counts", "sqlite-sink") == (Partitioning.HASH, ["url"])
    assert routing(new, "counts", "counts-sink") == (Partitioning.FORWARD, [])  # untouched


def test_a_stateless_stream_still_becomes_a_rebalance(tmp_path):
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_collection([{"url": "/a"}]).uid("src").select("url").uid("pick").sink_to(
        FileSink(str(tmp_path / "o"))
    ).uid("sink")
    new = graph.rescaled(env.get_job_graph("j"), 3, operator="sink")
    assert routing(new, "pick", "sink") == (Partitioning.REBALANCE, [])


def test_a_map_after_a_keyed_count_is_re_keyed_when_its_schema_has_the_key(tmp_path):
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    counts = env.from_collection([{"url": "/a"}]).key_by("url").count().uid("counts")
    counts.select("url", "count").uid("pick").sink_to(FileSink(str(tmp_path / "o"))).uid("sink")
    job = env.get_job_graph("j")
    assert key_partitioning.partitioning(job)["pick"] == ("url",)  # forward from a keyed count
    new = graph.rescaled(job, 3, operator="sink")
    assert routing(new, "pick", "sink") == (Partitioning.HASH, ["url"])


def test_a_consumer_that_cannot_be_re_keyed_follows_its_producer(tmp_path):
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    counts = env.from_collection([{"url": "/a"}]).key_by("url").count().uid("counts")
    body = counts.map(lambda df: df.withColumnRenamed("url", "page")).uid("rename")  # schema unknown
    body.sink_to(FileSink(str(tmp_path / "o"))).uid("sink")
    job = env.get_job_graph("j")
    new = graph.rescaled(job, 3, operator="rename")
    par = {op.id: op.parallelism for op in new.operators}
    # into the body: re-keyed by the count's key; out of it the columns are unknown, so the
    # sink takes the body's new parallelism and the edge stays forward
    assert routing(new, "counts", "rename") == (Partitioning.HASH, ["url"])
    assert routing(new, "rename", "sink") == (Partitioning.FORWARD, [])
    assert par == {**par, "counts": 2, "rename": 3, "sink": 3}
    graph.validate(new, check_paths=False)
    # the sink alone cannot move away from the body it depends on: refused, naming the edge
    with pytest.raises(
        ValueError, match=r"edge rename -> sink: 'rename' is partitioned by key \(url\) and sink 'sink'"
    ):
        graph.rescaled(job, 3, operator="sink")


def test_the_validator_refuses_a_rebalance_of_keyed_output_into_a_keyed_sink(tmp_path):
    env = StreamExecutionEnvironment()
    counts = env.from_collection([{"url": "/a"}]).key_by("url").count().uid("counts")
    counts.rebalance().sink_to(SqliteSink(str(tmp_path / "t.db"), "t", key="url")).uid("db")
    with pytest.raises(JobValidationError, match=r"edge counts -> db rebalances the output of 'counts'"):
        graph.validate(env.get_job_graph("j"), check_paths=False)


def test_the_job_api_keys_a_default_edge_between_parallelisms_out_of_a_keyed_count(tmp_path):
    env = StreamExecutionEnvironment()
    env.set_parallelism(3)
    counts = env.from_collection([{"url": "/a"}]).key_by("url").count().uid("counts")
    counts.sink_to(SqliteSink(str(tmp_path / "t.db"), "t", key="url")).uid("db").set_parallelism(1)
    counts.print().uid("show").set_parallelism(2)
    job = env.get_job_graph("j")
    assert routing(job, "counts", "db") == (Partitioning.HASH, ["url"])
    assert routing(job, "counts", "show") == (Partitioning.HASH, ["url"])
    graph.validate(job, check_paths=False)


def test_a_live_reconfiguration_of_the_count_keeps_the_sinks_keyed(tmp_path):
    job = page_views(tmp_path)
    plan = make_plan(job, "counts", parallelism=2)
    assert routing(plan.new_job, "counts", "sqlite-sink") == (Partitioning.HASH, ["url"])
    assert set(plan.redeployed) >= {"counts", "sqlite-sink", "counts-sink"}
    with pytest.raises(ReconfigurationError, match="already runs at parallelism 2"):
        make_plan(plan.new_job, "counts", parallelism=2)


def test_an_operator_reading_the_same_operator_twice_is_refused(tmp_path):
    """Two edges between one pair of operators would share a result partition id (a keyed
    stream connected to a broadcast of itself got the broadcast rows on its keyed side)."""

    class Rules:
        def process(self, key, rows, ctx):
            return rows

        def process_broadcast(self, rows, ctx):
            return None

    env = StreamExecutionEnvironment()
    timed = env.from_collection([{"url": "/a"}]).uid("src")
    timed.key_by("url").connect(timed.broadcast()).process(Rules()).uid("p").print()
    with pytest.raises(JobValidationError, match=r"a second edge src -> p: an operator reads another one once"):
        graph.validate(env.get_job_graph("j"), check_paths=False)
    env = StreamExecutionEnvironment()
    a = env.from_collection([{"url": "/a"}]).uid("a")
    a.union(a).uid("u").print()
    with pytest.raises(JobValidationError, match=r"a second edge a -> u"):
        graph.validate(env.get_job_graph("j"), check_paths=False)
