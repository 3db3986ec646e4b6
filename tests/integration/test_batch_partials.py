"""BATCH writers pre-aggregate inside Spark (a real SparkSession): the partials, the rows
counted and the null keys dropped are those of the Arrow combiner a streaming writer uses."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice.graph import Partitioning
from taskmanager.network.partition import ResultPartition
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.keyed_aggregate import PartialAggregates
from taskmanager.spark_engine import Batch, SparkEngine

pytestmark = pytest.mark.integration


def test_partials_computed_in_spark_equal_the_arrow_combiner_with_null_keys_counted():
    aggs = {"n": ("count", "v"), "total": ("sum", "v"), "low": ("min", "v"), "mean": ("avg", "v")}
    rows = [("/a", 1), ("/b", 2), ("/a", 3), (None, 4), ("/b", None), (None, 5), ("/c", 7)]
    engine = SparkEngine(1)
    engine.start()
    try:
        df = engine.spark.createDataFrame(rows, "url string, v long")
        got = {}
        for in_spark in (False, True):
            partition = ResultPartition("p", 2, 8)
            writer = RecordWriter(partition, Partitioning.HASH, ["url"], 0, 128, PartialAggregates(aggs), lambda: False)
            writer.combine_in_spark = in_spark
            tables = dict(writer._split_by_key(Batch(engine, df=df)))
            merged = pa.concat_tables(tables.values()).sort_by("url")
            got[in_spark] = (merged.to_pylist(), writer.records_produced, writer.null_keys_dropped)
        assert got[True] == got[False]
        assert got[True][1:] == (7, 2)  # every row counted, the two of a null url dropped
        assert {r["url"]: r["n"] for r in got[True][0]} == {"/a": 2, "/b": 2, "/c": 1}
    finally:
        engine.stop()
