"""The output schemas a job graph carries, known at submit (never executed): derived through a
pipeline or declared, unknown where a body decides, and the wrong columns they let validation name."""

import pytest
from job_graph_helpers import field_of, gen, no_run_context, upper

from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.graph import JobValidationError

__all__ = ["no_run_context"]  # the fixture, used by every test here


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
