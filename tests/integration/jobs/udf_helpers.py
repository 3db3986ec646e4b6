"""Helpers of python_udfs.py that sit next to it: `sluice run` ships this module with the job's
code (pickled by value, sluice/cli/job_file.py), since the TaskManagers cannot import it."""

import pandas as pd
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import LongType


def shout(word: str | None) -> str | None:
    """A plain Python function, for F.udf."""
    return None if word is None else word.upper() + "!"


@pandas_udf(LongType())  # type: ignore[call-overload]  # pyspark's stubs lack pandas_udf(returnType)
def vowels(words: pd.Series) -> pd.Series:
    """A pandas_udf defined at import, where no SparkSession exists (a DataType return type)."""
    return words.str.count("[aeiou]").astype("int64")


def letters(batches):
    """mapInPandas: one row per letter of each word."""
    for pdf in batches:
        out = pdf.assign(letter=pdf["word"].map(list)).explode("letter")
        yield out[["word", "loud", "vowels", "letter"]]


def summary(pdf: pd.DataFrame) -> pd.DataFrame:
    """applyInPandas, per word: its letters, how many differ, and the first of them in order."""
    return pd.DataFrame(
        {
            "word": [pdf["word"].iloc[0]],
            "loud": [pdf["loud"].iloc[0]],
            "vowels": [int(pdf["vowels"].iloc[0])],
            "letters": [len(pdf)],
            "distinct": [pdf["letter"].nunique()],
            "first": [sorted(pdf["letter"])[0]],
        }
    )
