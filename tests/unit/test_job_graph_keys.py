"""key_by and aggregates in job graphs (never executed): a composite key hashes by every column,
the key_by and aggregate arguments the client refuses, and the aggregate configs the JobManager does."""

import json

import pytest
from job_graph_helpers import edges_of, field_of, gen, no_run_context, upper

from sluice import graph
from sluice.api import StreamExecutionEnvironment
from sluice.graph import JobValidationError

__all__ = ["no_run_context"]  # the fixture, used by every test here


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
