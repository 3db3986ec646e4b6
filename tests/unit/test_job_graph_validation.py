"""Job graphs rejected by validation (never executed): each error names the offending field
(kinds, parallelism, bodies and code, configs, bounds, paths, edges, aggregates after key_by), and
validation never unpickles the code it carries."""

import _pickle
import datetime
import json
import pickle
import sys
from typing import cast

import cloudpickle
import pytest
from job_graph_helpers import field_of, gen, no_run_context, upper

from sluice import graph, states
from sluice.api import StreamExecutionEnvironment
from sluice.graph import JobValidationError, OperatorKind, Partitioning
from sluice.v1 import common_pb2

__all__ = ["no_run_context"]  # the fixture, used by every test here


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
