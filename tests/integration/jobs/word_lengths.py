"""Chained stateless bodies after a collection source, keyed sum, file sink.

sluice run word_lengths.py -- OUTPUT_DIR
"""

import sys

from pyspark.sql import functions as F

from sluice.api import FileSink, StreamExecutionEnvironment

words = ["flink", "spark", "sluice", "flink", "kafka", "spark", "flink", "beam"] * 25
env = StreamExecutionEnvironment.get_execution_environment()
stream = env.from_collection([{"word": w} for w in words])
lengths = (
    stream.rebalance().map(lambda df: df.withColumn("len", F.length("word"))).filter("len > 4").select("word", "len")
)
lengths.key_by("word").sum("len", name="total").sink_to(FileSink(sys.argv[1], columns=("word", "total")))
env.execute("word_lengths")
