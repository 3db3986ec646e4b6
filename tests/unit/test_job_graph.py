"""Job graphs built through the job API (never executed): chaining, slot needs,
and validation errors that name the offending field."""

import pytest

from sluice import graph, states
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.api import environment as env_module
from sluice.graph import JobValidationError, OperatorKind, Partitioning
from sluice.v1 import common_pb2


@pytest.fixture(autouse=True)
def no_run_context():
    """`sluice run` settings live in a module global; keep the tests independent of it."""
    saved = dict(env_module._context)
    env_module._context.clear()
    yield
    env_module._context.clear()
    env_module._context.update(saved)


def upper(df):
    return df


def gen(df):
    return df


def chains_of(job):
    return [(c.operator_ids, c.parallelism) for c in graph.build_chains(job)]


def edges_of(job):
    return [(e.source, e.target, graph.partitioning_of(e), ",".join(e.keys)) for e in job.edges]


def field_of(job, **kwargs) -> str:
    with pytest.raises(JobValidationError) as info:
        graph.validate(job, **kwargs)
    assert str(info.value).startswith(info.value.field + ": ")
    return info.value.field


# -- chaining -----------------------------------------------------------------------
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
    payloads = graph.validate(job)
    assert payloads["3-aggregate"] == {"key": "url", "aggs": {"count": ("count", "*")}}
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
    env.from_collection([{"k": 1}]).key_by("k").sum("v").map(upper).print()
    job = env.get_job_graph()
    graph.validate(job)
    order = graph.topological_order(job)
    pos = {op: i for i, op in enumerate(order)}
    assert all(pos[e.source] < pos[e.target] for e in job.edges)
    heads = [c.id for c in graph.build_chains(job)]
    assert heads == ["1-source_collection", "2-aggregate"]


# -- validation ---------------------------------------------------------------------
def valid_env():
    env = StreamExecutionEnvironment()
    env.from_generator(gen, count=5).map(upper).print()
    return env


def test_a_valid_job_returns_its_payloads():
    payloads = graph.validate(valid_env().get_job_graph())
    assert set(payloads) == {"1-source_generator", "2-map", "3-sink_print"}
    assert payloads["2-map"]["body"] is upper
    assert payloads["1-source_generator"]["count"] == 5


def test_cycle_is_rejected_on_edges():
    body = graph.dumps_payload({"body": upper})
    job = common_pb2.JobGraph(name="cycle")
    job.operators.add(
        id="s",
        kind=states.to_proto(OperatorKind.SOURCE_GENERATOR),
        parallelism=1,
        payload=graph.dumps_payload({"body": gen}),
    )
    job.operators.add(id="a", kind=states.to_proto(OperatorKind.MAP), parallelism=1, payload=body)
    job.operators.add(id="b", kind=states.to_proto(OperatorKind.MAP), parallelism=1, payload=body)
    job.operators.add(
        id="out", kind=states.to_proto(OperatorKind.SINK_PRINT), parallelism=1, payload=graph.dumps_payload({})
    )
    for src, dst in (("s", "a"), ("a", "b"), ("b", "a"), ("b", "out")):
        job.edges.add(source=src, target=dst, partitioning=states.to_proto(Partitioning.FORWARD))
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "edges"
    assert "cycle" in info.value.message and "'a'" in info.value.message and "'b'" in info.value.message


@pytest.mark.parametrize("kind", [0, 999])  # unset, or a value this version does not know
def test_unknown_operator_kind(kind):
    job = valid_env().get_job_graph()
    job.operators[1].kind = kind
    assert field_of(job) == "operators[1].kind"


@pytest.mark.parametrize("partitioning", [0, 999])
def test_unknown_partitioning(partitioning):
    env = StreamExecutionEnvironment()
    env.from_generator(gen).map(upper).print()
    job = env.get_job_graph()
    job.edges[0].partitioning = partitioning
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "edges[0].partitioning"


@pytest.mark.parametrize("parallelism", [0, -1])
def test_parallelism_below_one(parallelism):
    job = valid_env().get_job_graph()
    job.operators[2].parallelism = parallelism
    assert field_of(job) == "operators[2].parallelism"


def test_parallelism_above_max_parallelism():
    env = StreamExecutionEnvironment()
    env.set_max_parallelism(4)
    env.from_generator(gen).map(upper).set_parallelism(5).print()
    job = env.get_job_graph()
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[1].parallelism"
    assert "5" in info.value.message and "1..4" in info.value.message
    # the same parallelism is fine under the default max parallelism
    job.max_parallelism = 0
    graph.validate(job)


def test_parallelism_equal_to_max_parallelism_is_fine():
    env = StreamExecutionEnvironment()
    env.set_max_parallelism(4).set_parallelism(4)
    env.from_generator(gen).print()
    graph.validate(env.get_job_graph())


@pytest.mark.parametrize("bad", [42, "not a function", None])
def test_map_body_not_callable(bad):
    env = StreamExecutionEnvironment()
    env.from_generator(gen).map(bad).print()
    assert field_of(env.get_job_graph()) == "operators[1].body"


def test_filter_accepts_a_sql_string_but_not_a_number():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).filter("x > 1").print()
    graph.validate(env.get_job_graph())
    env = StreamExecutionEnvironment()
    env.from_generator(gen).filter(3).print()
    assert field_of(env.get_job_graph()) == "operators[1].body"


def test_generator_body_not_callable():
    env = StreamExecutionEnvironment()
    env.from_generator("nope").print()
    assert field_of(env.get_job_graph()) == "operators[0].body"


def test_payload_that_fails_to_unpickle():
    job = valid_env().get_job_graph()
    job.operators[1].payload = b"garbage"
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[1].payload"
    assert "unpickle" in info.value.message


def test_payload_that_is_not_a_dict():
    job = valid_env().get_job_graph()
    job.operators[1].payload = graph.dumps_payload([upper])
    assert field_of(job) == "operators[1].payload"


def test_missing_input_directory_for_from_files(tmp_path):
    missing = tmp_path / "does-not-exist"
    env = StreamExecutionEnvironment()
    env.from_files(str(missing), format="json").print()
    job = env.get_job_graph()
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[0].path"
    assert str(missing) in info.value.message
    graph.validate(job, check_paths=False)  # the TaskManager side does not look at paths


def test_from_files_directory_without_matching_files(tmp_path):
    (tmp_path / "a.csv").write_text("x\n")
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path), format="json").print()
    assert field_of(env.get_job_graph()) == "operators[0].path"
    (tmp_path / "a.jsonl").write_text("{}\n")
    graph.validate(env.get_job_graph())


def test_no_sink():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).map(upper)
    with pytest.raises(JobValidationError) as info:
        graph.validate(env.get_job_graph())
    assert info.value.field == "operators"
    assert "sink" in info.value.message


def test_forward_edge_between_different_parallelism():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).map(upper).set_parallelism(2).print().set_parallelism(2)
    job = env.get_job_graph()
    assert graph.partitioning_of(job.edges[0]) == Partitioning.REBALANCE
    job.edges[0].partitioning = states.to_proto(Partitioning.FORWARD)
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "edges[0].partitioning"
    assert "1 to 2" in info.value.message


def test_aggregate_not_after_key_by():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).key_by("url").count().print()
    job = env.get_job_graph()
    graph.validate(job)
    assert graph.partitioning_of(job.edges[0]) == Partitioning.HASH
    job.edges[0].partitioning = states.to_proto(Partitioning.REBALANCE)
    del job.edges[0].keys[:]
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[1]"
    assert "key_by('url')" in info.value.message


def test_aggregate_keyed_by_another_column():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).key_by("url").count().print()
    job = env.get_job_graph()
    job.edges[0].keys[:] = ["user"]
    assert field_of(job) == "operators[1]"


def test_hash_edge_without_key():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).key_by("url").count().print()
    job = env.get_job_graph()
    del job.edges[0].keys[:]
    assert field_of(job) == "edges[0].keys"


def test_unknown_aggregation_function():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).key_by("url").aggregate(p50=("median", "ts")).print()
    assert field_of(env.get_job_graph()) == "operators[1].aggs.p50"


def test_edge_to_unknown_operator():
    job = valid_env().get_job_graph()
    job.edges[1].target = "9-nope"
    assert field_of(job) == "edges[1].target"


def test_duplicate_operator_id():
    job = valid_env().get_job_graph()
    job.operators[2].id = "2-map"
    assert field_of(job) == "operators[2].id"


def test_operator_without_input():
    job = valid_env().get_job_graph()
    del job.edges[0]
    assert field_of(job) == "operators[1]"


def test_max_parallelism_out_of_range():
    job = valid_env().get_job_graph()
    job.max_parallelism = graph.MAX_MAX_PARALLELISM + 1
    assert field_of(job) == "max_parallelism"
