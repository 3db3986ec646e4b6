"""Job graphs built through the job API (never executed): chaining, slot needs,
and validation errors that name the offending field."""

import _pickle
import datetime
import json
import pickle
import sys
from typing import cast

import cloudpickle
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


# -- validation ---------------------------------------------------------------------
def valid_env():
    env = StreamExecutionEnvironment()
    env.from_generator(gen, count=5).map(upper).print()
    return env


def test_a_valid_job_returns_its_configs_and_keeps_code_apart():
    job = valid_env().get_job_graph()
    configs = graph.validate(job)
    assert set(configs) == {"1-source_generator", "2-map", "3-sink_print"}
    assert configs["1-source_generator"] == {"count": 5, "batch_size": 100_000}
    assert configs["2-map"] == {} and configs["3-sink_print"] == {}
    assert [dict(op.code).keys() for op in job.operators] == [{"body"}, {"body"}, set()]
    assert graph.operator_settings(job.operators[1])["body"] is upper  # on a TaskManager
    assert graph.operator_settings(job.operators[0]) == {"count": 5, "batch_size": 100_000, "body": gen}


def test_settings_split_into_json_config_and_pickled_code():
    config, code = graph.encode_operator(
        {
            "path": "/out",
            "columns": ("a", "b"),
            "n": 1.5,
            "flag": True,
            "none": None,
            "body": upper,
            "nan": float("nan"),
        }
    )
    assert json.loads(config) == {"path": "/out", "columns": ["a", "b"], "n": 1.5, "flag": True, "none": None}
    assert set(code) == {"body", "nan"}  # not plain JSON: pickled, each on its own
    config, code = graph.encode_operator({"rows": [{"d": datetime.date(2024, 1, 1)}], "filter": "x > 1"})
    assert json.loads(config) == {"filter": "x > 1"} and set(code) == {"rows"}


def test_cycle_is_rejected_on_edges():
    body = {"body": cloudpickle.dumps(upper)}
    job = common_pb2.JobGraph(name="cycle")
    job.operators.add(
        id="s",
        kind=states.to_proto(OperatorKind.SOURCE_GENERATOR),
        parallelism=1,
        code={"body": cloudpickle.dumps(gen)},
    )
    job.operators.add(id="a", kind=states.to_proto(OperatorKind.MAP), parallelism=1, code=body)
    job.operators.add(id="b", kind=states.to_proto(OperatorKind.MAP), parallelism=1, code=body)
    job.operators.add(id="out", kind=states.to_proto(OperatorKind.SINK_PRINT), parallelism=1, config="{}")
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
    assert field_of(env.get_job_graph()) == "operators[1].config.body"  # plain data, not code


def test_a_body_kind_without_a_body_names_the_code_entry():
    job = valid_env().get_job_graph()
    del job.operators[1].code["body"]
    with pytest.raises(JobValidationError, match=r"^operators\[1\]\.code\.body: map operator 'map' has no body"):
        graph.validate(job)


def test_filter_accepts_a_sql_string_but_not_a_number():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).filter("x > 1").print()
    job = env.get_job_graph()
    graph.validate(job)
    assert json.loads(job.operators[1].config) == {"body": "x > 1"} and not job.operators[1].code
    env = StreamExecutionEnvironment()
    env.from_generator(gen).filter(3).print()  # type: ignore[arg-type]  # not a body: the point of the test
    assert field_of(env.get_job_graph()) == "operators[1].config.body"


def test_generator_body_not_callable():
    env = StreamExecutionEnvironment()
    env.from_generator("nope").print()  # type: ignore[arg-type]  # not callable: the point of the test
    assert field_of(env.get_job_graph()) == "operators[0].config.body"


def test_code_the_kind_does_not_take_is_rejected_by_name():
    job = valid_env().get_job_graph()
    job.operators[2].code["path"] = b"anything"  # a print sink takes no code
    with pytest.raises(JobValidationError, match=r"^operators\[2\]\.code\.path: a sink_print operator takes no code"):
        graph.validate(job)
    job = valid_env().get_job_graph()
    job.operators[1].code["columns"] = b"anything"
    assert field_of(job) == "operators[1].code.columns"
    job = valid_env().get_job_graph()
    job.operators[1].config = '{"body": "x"}'  # in both
    assert field_of(job) == "operators[1].code.body"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must be a JSON object of the operator's settings, got a list"),
        ('"text"', "got a str"),
        ('{"count": NaN}', "is not valid JSON: NaN is not a JSON number"),
        ("[" * 100_000 + "]" * 100_000, "is nested too deeply"),
    ],
)
def test_a_config_that_is_not_a_json_object_is_rejected(config, message):
    job = valid_env().get_job_graph()
    job.operators[0].config = config
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[0].config"
    assert message in info.value.message


def test_validation_reads_code_names_only_never_their_bytes(monkeypatch):
    """Garbage code passes validation: the JobManager never unpickles (nor loads pickle for it);
    the TaskManager that runs the operator fails on it, as a failure no retry fixes."""
    unpickled: list[str] = []
    sys.addaudithook(lambda event, args: unpickled.append(event) if event == "pickle.find_class" else None)

    def refuse(*args, **kwargs):
        raise AssertionError("validation unpickled something")

    for module in (pickle, _pickle):
        monkeypatch.setattr(module, "loads", refuse)
        monkeypatch.setattr(module, "load", refuse)
        monkeypatch.setattr(module, "Unpickler", refuse)
    monkeypatch.setattr(cloudpickle, "loads", refuse)
    job = valid_env().get_job_graph()  # real pickles of functions: unpickling them looks up globals
    job.operators.add().CopyFrom(job.operators[1])
    job.operators[-1].id = "garbage"
    job.operators[-1].code["body"] = b"\x80\x05garbage"
    job.edges.add(source="1-source_generator", target="garbage", partitioning=states.to_proto(Partitioning.FORWARD))
    job.operators.add(id="out", kind=states.to_proto(OperatorKind.SINK_PRINT), parallelism=1)
    job.edges.add(source="garbage", target="out", partitioning=states.to_proto(Partitioning.FORWARD))
    graph.validate(job)
    assert unpickled == []
    monkeypatch.undo()

    graph.operator_settings(job.operators[1])  # the TaskManager side does unpickle
    assert "pickle.find_class" in unpickled
    with pytest.raises(graph.OperatorCodeError, match=r"operator 'map' \(garbage\): code.body cannot be unpickled"):
        graph.operator_settings(next(op for op in job.operators if op.id == "garbage"))


def test_bounds_on_a_job_graph_name_the_limit(monkeypatch):
    job = valid_env().get_job_graph()
    job.operators[0].id = "x" * (graph.MAX_ID_LENGTH + 1)
    with pytest.raises(JobValidationError, match=r"^operators\[0\]\.id: 257 characters; the limit is 256$"):
        graph.validate(job)
    job = valid_env().get_job_graph()
    job.operators[1].name = "n" * (graph.MAX_NAME_LENGTH + 1)
    assert field_of(job) == "operators[1].name"
    job = valid_env().get_job_graph()
    job.operators[2].config = json.dumps({"pad": "x" * graph.MAX_CONFIG_BYTES})
    with pytest.raises(JobValidationError, match=rf"the limit is {graph.MAX_CONFIG_BYTES}$"):
        graph.validate(job)
    job = valid_env().get_job_graph()
    job.operators[1].code["body"] = b"x" * (graph.MAX_CODE_BYTES + 1)
    assert field_of(job) == "operators[1].code"
    job = valid_env().get_job_graph()
    monkeypatch.setattr(graph, "MAX_TOTAL_CODE_BYTES", 1000)
    for i in (0, 1):
        job.operators[i].code["body"] = b"x" * 600
    with pytest.raises(JobValidationError, match=r"^operators: \d+ bytes of pickled code in all; the limit is"):
        graph.validate(job)
    job = valid_env().get_job_graph()
    job.edges[0].keys[:] = [f"k{i}" for i in range(graph.MAX_KEYS + 1)]
    assert field_of(job) == "edges[0].keys"
    job = valid_env().get_job_graph()
    for i in range(graph.MAX_OPERATORS):
        job.operators.add(id=f"extra-{i}", kind=states.to_proto(OperatorKind.SINK_PRINT), parallelism=1)
    with pytest.raises(JobValidationError, match=rf"^operators: 1027 operators; the limit is {graph.MAX_OPERATORS}$"):
        graph.validate(job)
    job = valid_env().get_job_graph()
    for _ in range(graph.MAX_EDGES):
        job.edges.add().CopyFrom(job.edges[0])
    assert field_of(job) == "edges"


def test_a_validation_message_quoting_huge_input_is_clipped():
    job = valid_env().get_job_graph()
    job.operators[0].config = json.dumps({"count": "x" * 100_000})
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[0].config.count"
    assert len(str(info.value)) < graph.MAX_ERROR_LENGTH + 100 and "characters)" in str(info.value)


def test_missing_input_directory_for_from_files(tmp_path):
    missing = tmp_path / "does-not-exist"
    env = StreamExecutionEnvironment()
    env.from_files(str(missing), format="json").print()
    job = env.get_job_graph()
    with pytest.raises(JobValidationError) as info:
        graph.validate(job)
    assert info.value.field == "operators[0].config.path"
    assert str(missing) in info.value.message
    graph.validate(job, check_paths=False)  # the TaskManager side does not look at paths


def test_from_files_directory_without_matching_files(tmp_path):
    (tmp_path / "a.csv").write_text("x\n")
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path), format="json").print()
    assert field_of(env.get_job_graph()) == "operators[0].config.path"
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
    job.edges[0].partitioning = cast(common_pb2.Partitioning, states.to_proto(Partitioning.FORWARD))
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
    job.edges[0].partitioning = cast(common_pb2.Partitioning, states.to_proto(Partitioning.REBALANCE))
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
    with pytest.raises(
        ValueError, match=r"aggregate\(p50=...\): unknown function 'median'; known: count, sum, min, max, avg"
    ):
        env.from_generator(gen).key_by("url").aggregate(p50=("median", "ts"))
    env = StreamExecutionEnvironment()  # the JobManager checks a graph built otherwise too
    env.from_generator(gen).key_by("url").aggregate(p50=("max", "ts")).print()
    job = env.get_job_graph()
    job.operators[1].config = json.dumps({"keys": ["url"], "aggs": {"p50": ["median", "ts"]}})
    assert field_of(job) == "operators[1].config.aggs.p50"


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


# -- composite keys ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "args", [("country", "device"), (["country", "device"],), (("country", "device"),)], ids=["args", "list", "tuple"]
)
def test_a_composite_key_hashes_by_every_column_and_keeps_them_in_the_output(args):
    env = StreamExecutionEnvironment()
    env.from_collection([{"country": "DE", "device": "phone", "v": 1}]).key_by(*args).sum("v").print()
    job = env.get_job_graph()
    configs = graph.validate(job)
    assert edges_of(job)[0] == ("1-source_collection", "2-aggregate", "hash", "country,device")
    assert configs["2-aggregate"] == {"keys": ["country", "device"], "aggs": {"v": ["sum", "v"]}}
    assert job.operators[1].name == "aggregate by country, device"
    assert job.operators[1].output_schema == "country string, device string, v bigint"


def test_an_aggregate_must_follow_a_key_by_of_the_same_columns_in_the_same_order():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).key_by("country", "device").count().print()
    job = env.get_job_graph()
    job.edges[0].keys[:] = ["device", "country"]
    with pytest.raises(JobValidationError, match=r"operators\[1\]: aggregate '2-aggregate' must follow key_by\("):
        graph.validate(job)


class Column:
    """Stands in for a pyspark Column (building a real one needs a SparkContext)."""

    def __repr__(self) -> str:
        return "Column<'country'>"


USAGE = 'key_by() takes column names: key_by("a") or key_by("a", "b") or key_by(["a", "b"])'


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((), TypeError, "key_by() got no column; "),
        (([],), TypeError, "key_by() got no column; "),
        ((5,), TypeError, "key_by(): argument 1 is a int (5), not a column name; "),
        (("a", None), TypeError, "key_by(): argument 2 is a NoneType (None), not a column name; "),
        ((["a", 5],), TypeError, "key_by([...]): item 2 is a int (5), not a column name; "),
        ((["a"], "b"), TypeError, "key_by(): argument 1 is a list (['a']; pass one list, or names as separate"),
        (("",), ValueError, "key_by(): argument 1 is an empty string, not a column name; "),
        ((["a", " "],), ValueError, "key_by([...]): item 2 is an empty string, not a column name; "),
        (("a", "a"), ValueError, "key_by(): argument 2: column 'a' is given twice; "),
        ((Column(),), TypeError, "key_by(): argument 1 is a pyspark Column (Column<'country'>; select() it into"),
        ((upper,), TypeError, "key_by(): argument 1 is a function (upper; key selectors are column names)"),
    ],
)
def test_bad_key_by_arguments_are_refused_in_the_client(args, error, message):
    stream = StreamExecutionEnvironment().from_generator(gen)
    with pytest.raises(error) as info:
        stream.key_by(*args)
    assert str(info.value).startswith(message)
    assert str(info.value).endswith(USAGE)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda k: k.sum("k"), "aggregate(k=...): 'k' is also a key column"),
        (lambda k: k.aggregate(__n=("count", "*")), "aggregate(__n=...): names starting with '__' are reserved"),
        (lambda k: k.aggregate(t="sum"), "aggregate(t=...): expected a (function, column) pair"),
        (lambda k: k.aggregate(), "aggregate() needs at least one output"),
        (lambda k: k.sum(None), "sum() takes a column name"),
        (lambda k: k.avg(""), "avg() takes a column name"),
    ],
)
def test_bad_aggregates_are_refused_in_the_client(call, message):
    keyed = StreamExecutionEnvironment().from_generator(gen).key_by("k")
    with pytest.raises((TypeError, ValueError)) as info:
        call(keyed)
    assert message in str(info.value)


def test_the_jobmanager_refuses_bad_aggregate_configs():
    env = StreamExecutionEnvironment()
    env.from_generator(gen).key_by("k").count().print()
    job = env.get_job_graph()
    for config, field in [
        ({"keys": [], "aggs": {"n": ["count", "*"]}}, "operators[1].config.keys"),
        ({"keys": ["k", "k"], "aggs": {"n": ["count", "*"]}}, "operators[1].config.keys"),
        ({"keys": "k", "aggs": {"n": ["count", "*"]}}, "operators[1].config.keys"),
        ({"keys": [["k"]], "aggs": {"n": ["count", "*"]}}, "operators[1].config.keys"),
        ({"keys": ["k"], "aggs": {"k": ["count", "*"]}}, "operators[1].config.aggs.k"),
        ({"keys": ["k"], "aggs": {"n": "count"}}, "operators[1].config.aggs.n"),
        ({"keys": ["k"], "aggs": [["count", "*"]]}, "operators[1].config.aggs"),
    ]:
        job.operators[1].config = json.dumps(config)
        assert field_of(job) == field, config
    job.operators[1].config = json.dumps({"key": "k", "aggs": {"n": ["count", "*"]}})
    graph.validate(job)  # the single key of a job graph built before composite keys
    job.edges[0].keys[:] = ["k", "k"]
    assert field_of(job) == "edges[0].keys"


# -- schemas known at submit ------------------------------------------------------------
def schemas_of(job) -> dict[str, str]:
    return {op.id: op.output_schema for op in job.operators}


def test_schemas_are_derived_through_a_pipeline(tmp_path):
    env = StreamExecutionEnvironment()
    events = env.from_files(str(tmp_path), format="csv", schema="country string, device string, v long, ts bigint")
    picked = events.filter("v > 0").select("country", "device", "v", "ts AS t", "v * 2 AS v2")
    keyed = picked.key_by("country", "device")
    keyed.aggregate(n=("count", "*"), total=("sum", "v"), mean=("avg", "v"), last=("max", "t")).sink_to(
        FileSink(str(tmp_path / "out"), columns=("country", "device", "total", "mean"))
    )
    assert keyed._stream.schema is not None and keyed._stream.schema.names == ["country", "device", "v", "t", "v2"]
    assert schemas_of(env.get_job_graph()) == {
        "1-source_files": "country string, device string, v bigint, ts bigint",
        "2-filter": "country string, device string, v bigint, ts bigint",
        "3-select": "country string, device string, v bigint, t bigint, v2 unknown",
        "4-aggregate": "country string, device string, n bigint, total bigint, mean double, last bigint",
        "5-sink_file": "",
    }


def test_sources_and_bodies_without_a_known_schema():
    env = StreamExecutionEnvironment()
    rows = env.from_collection([{"url": "/a", "n": 1, "x": 0.5}])
    unknown = env.from_generator(gen)
    declared = env.from_generator(gen, schema="url string, n long")
    rows.map(upper).print()
    rows.map(upper, output_schema="url string, len int").flat_map(upper).print()
    declared.union(rows.select("url", "n")).print()
    declared.union(unknown).print()
    unknown.key_by("k").sum("v").print()
    assert schemas_of(env.get_job_graph()) == {
        "1-source_collection": "url string, n bigint, x double",
        "2-source_generator": "",
        "3-source_generator": "url string, n bigint",
        "4-map": "",
        "5-sink_print": "",
        "6-map": "url string, len int",
        "7-flat_map": "",
        "8-sink_print": "",
        "9-select": "url string, n bigint",
        "10-map": "url string, n bigint",  # the union
        "11-sink_print": "",
        "12-map": "",  # union with an unknown input
        "13-sink_print": "",
        "14-aggregate": "k unknown, v unknown",  # the names are known after all
        "15-sink_print": "",
    }
    graph.validate(env.get_job_graph())


def test_text_files_have_one_value_column(tmp_path):
    env = StreamExecutionEnvironment()
    env.from_files(str(tmp_path), format="text").print()
    assert env.get_job_graph().operators[0].output_schema == "value string"


def test_bad_declared_schemas_are_refused_in_the_client():
    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match=r"map\(output_schema=...\): column 'n': unknown type 'lng'"):
        env.from_generator(gen).map(upper, output_schema="n lng")
    with pytest.raises(TypeError, match=r"from_generator\(schema=...\): a schema is a DDL string"):
        env.from_generator(gen, schema=["n long"])
    assert env.stream_graph.operator_ids() == ["1-source_generator"]  # nothing half-added


def rejected(env) -> str:
    """The message of the JobValidationError for env's job, as `invalid job: ...` shows it."""
    with pytest.raises(JobValidationError) as info:
        graph.validate(env.get_job_graph(), check_paths=False)
    return str(info.value)


def test_a_wrong_sink_column_is_rejected_with_the_columns_there_are():
    env = StreamExecutionEnvironment()
    src = env.from_collection([{"k": "a", "v": 1}])
    src.filter("v > 0").key_by("k").sum("v").sink_to(FileSink("/tmp/out", columns=("k", "sum")))
    assert rejected(env) == "operators[3].config.columns: no column 'sum'; columns are: k, v"


def test_a_wrong_key_column_is_rejected_on_its_edge():
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a", "v": 1}]).map(upper, output_schema="k string, v bigint").key_by(
        "k", "dev"
    ).count().print()
    assert rejected(env) == "edges[1].keys: no column 'dev'; columns are: k, v"


def test_a_wrong_aggregate_input_is_rejected_on_its_output():
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a", "v": 1}]).key_by("k").aggregate(n=("count", "*"), total=("sum", "w")).print()
    assert rejected(env) == "operators[1].config.aggs.total: no column 'w'; columns are: k, v"


@pytest.mark.parametrize("fn", ["sum", "avg"])
def test_sum_and_avg_of_a_non_numeric_column_are_rejected(fn):
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a", "url": "/a"}]).key_by("k").aggregate(m=(fn, "url")).print()
    assert rejected(env) == f"operators[1].config.aggs.m: {fn} needs a numeric column; 'url' is string"


def test_min_max_count_take_any_column():
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a", "url": "/a"}]).key_by("k").aggregate(
        lo=("min", "url"), hi=("max", "url"), n=("count", "url")
    ).print()
    graph.validate(env.get_job_graph())


def test_unknown_schemas_skip_the_checks():
    env = StreamExecutionEnvironment()
    src = env.from_collection([{"k": "a", "v": 1}]).map(upper)  # the body may add any column
    src.key_by("dev").aggregate(total=("sum", "w"), m=("avg", "x")).sink_to(FileSink("/tmp/out", columns=("dev", "m")))
    graph.validate(env.get_job_graph())


def test_the_jobmanager_checks_the_carried_schemas_not_the_configs():
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a", "v": 1}]).key_by("k").sum("v").sink_to(FileSink("/tmp/out", columns=("k", "v")))
    job = env.get_job_graph()
    graph.validate(job)
    job.operators[1].output_schema = "k string, total bigint"
    with pytest.raises(
        JobValidationError, match=r"^operators\[2\]\.config\.columns: no column 'v'; columns are: k, total$"
    ):
        graph.validate(job)
    job.operators[1].output_schema = ""  # unknown: no check
    graph.validate(job)
    job.operators[1].output_schema = "k strng"
    assert field_of(job) == "operators[1].output_schema"
