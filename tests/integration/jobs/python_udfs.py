"""Python UDFs inside task bodies, run by Spark's Python workers on the TaskManager: F.udf,
pandas_udf, mapInPandas and applyInPandas, with their functions in a helper module next to this
file (udf_helpers.py). Output: `word,loud,vowels,letters,distinct,first` lines.

    sluice run python_udfs.py -- OUTPUT
"""

import sys

import udf_helpers
from pyspark.sql import functions as F

from sluice.api import FileSink, StreamExecutionEnvironment

WORDS = ["apple", "kiwi", "fig", "banana", "cherry"]


def with_udf(df):
    return df.withColumn("loud", F.udf(udf_helpers.shout, "string")("word"))  # DDL parsed on the TaskManager


def with_pandas_udf(df):
    return df.withColumn("vowels", udf_helpers.vowels("word"))


def one_row_per_letter(df):
    return df.mapInPandas(udf_helpers.letters, "word string, loud string, vowels bigint, letter string")


def per_word(df):
    schema = "word string, loud string, vowels bigint, letters bigint, distinct bigint, first string"
    return df.groupBy("word").applyInPandas(udf_helpers.summary, schema)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.set_config("restart-strategy", "none")
(
    env.from_collection([{"word": w} for w in WORDS])
    .map(with_udf, name="udf")
    .map(with_pandas_udf, name="pandas_udf")
    .flat_map(one_row_per_letter, name="mapInPandas")
    .map(per_word, name="applyInPandas")
    .sink_to(FileSink(sys.argv[1], columns=("word", "loud", "vowels", "letters", "distinct", "first")))
)
env.execute("python_udfs")
