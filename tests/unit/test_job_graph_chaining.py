"""Job graphs built through the job API (never executed): which operators chain, the edges
between the chains, their order, and the slots a job needs."""

from job_graph_helpers import chains_of, edges_of, gen, no_run_context, upper

from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.graph import Partitioning

__all__ = ["no_run_context"]  # the fixture, used by every test here


def test_source_map_map_sink_form_one_chain():
    env = StreamExecutionEnvironment()
    env.set_parallelism(3)
    env.from_generator(gen, count=10).map(upper).map(upper, name="second").print()
    job = env.get_job_graph("j")
    graph.validate(job)
    assert edges_of(job) == [
        ("1-source_generator", "2-map", "forward", ""),
        ("2-map", "3-map", "forward", ""),
        ("3-map", "4-sink_print", "forward", ""),
    ]
    [chain] = graph.build_chains(job)
    assert chain.operator_ids == ("1-source_generator", "2-map", "3-map", "4-sink_print")
    assert chain.id == "1-source_generator"
    assert chain.parallelism == 3
    assert chain.name == "generator -> map -> second -> print"
    assert chain.inputs == () and chain.outputs == ()
    assert graph.slots_required(job) == 3


def test_key_by_breaks_the_chain_with_a_hash_edge():
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_generator(gen).map(upper).key_by("url").count().print()
    job = env.get_job_graph()
    configs = graph.validate(job)
    assert configs["3-aggregate"] == {"keys": ["url"], "aggs": {"count": ["count", "*"]}}
    assert chains_of(job) == [
        (("1-source_generator", "2-map"), 2),
        (("3-aggregate", "4-sink_print"), 2),
    ]
    first, second = graph.build_chains(job)
    [out] = first.outputs
    assert (out.source, out.target, graph.partitioning_of(out), ",".join(out.keys)) == (
        "2-map",
        "3-aggregate",
        "hash",
        "url",
    )
    assert list(second.inputs) == [out]
    owners = graph.chain_of(graph.build_chains(job))
    assert owners["2-map"].id == "1-source_generator" and owners["4-sink_print"].id == "3-aggregate"


def test_different_parallelism_breaks_the_chain_with_a_rebalance_edge():
    env = StreamExecutionEnvironment()
    env.set_parallelism(4)
    # a collection source runs with parallelism 1 unless told otherwise
    env.from_collection([{"a": 1}]).map(upper).print()
    job = env.get_job_graph()
    graph.validate(job)
    assert edges_of(job) == [
        ("1-source_collection", "2-map", "rebalance", ""),
        ("2-map", "3-sink_print", "forward", ""),
    ]
    assert chains_of(job) == [(("1-source_collection",), 1), (("2-map", "3-sink_print"), 4)]
    assert graph.slots_required(job) == 4


def test_explicit_set_parallelism_also_breaks_the_chain():
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_generator(gen).map(upper).set_parallelism(5).print().set_parallelism(1)
    job = env.get_job_graph()
    graph.validate(job)
    assert [graph.partitioning_of(e) for e in job.edges] == [Partitioning.REBALANCE, Partitioning.REBALANCE]
    assert chains_of(job) == [(("1-source_generator",), 2), (("2-map",), 5), (("3-sink_print",), 1)]
    assert graph.slots_required(job) == 5


def test_fan_out_ends_a_chain():
    env = StreamExecutionEnvironment()
    mapped = env.from_generator(gen).map(upper)
    mapped.map(upper).print()
    mapped.filter("x > 1").sink_to(FileSink("/tmp/out"))
    job = env.get_job_graph()
    graph.validate(job)
    assert chains_of(job) == [
        (("1-source_generator", "2-map"), 1),
        (("3-map", "4-sink_print"), 1),
        (("5-filter", "6-sink_file"), 1),
    ]
    assert [e.target for e in graph.build_chains(job)[0].outputs] == ["3-map", "5-filter"]


def test_fan_in_starts_a_chain():
    env = StreamExecutionEnvironment()
    a = env.from_generator(gen, name="a")
    b = env.from_generator(gen, name="b")
    a.union(b).print()
    job = env.get_job_graph()
    graph.validate(job)
    assert chains_of(job) == [
        (("1-source_generator",), 1),
        (("2-source_generator",), 1),
        (("3-map", "4-sink_print"), 1),
    ]
    assert [e.source for e in graph.build_chains(job)[2].inputs] == ["1-source_generator", "2-source_generator"]


def test_rebalance_forces_a_non_forward_edge_at_equal_parallelism():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).rebalance().map(upper).print()
    job = env.get_job_graph()
    assert edges_of(job)[0] == ("1-source_generator", "2-map", "rebalance", "")
    assert chains_of(job) == [(("1-source_generator",), 1), (("2-map", "3-sink_print"), 1)]


def test_chains_come_in_topological_order():
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_collection([{"k": 1, "v": 2}]).key_by("k").sum("v").map(upper).print()
    job = env.get_job_graph()
    graph.validate(job)
    order = graph.topological_order(job)
    pos = {op: i for i, op in enumerate(order)}
    assert all(pos[e.source] < pos[e.target] for e in job.edges)
    heads = [c.id for c in graph.build_chains(job)]
    assert heads == ["1-source_collection", "2-aggregate"]
