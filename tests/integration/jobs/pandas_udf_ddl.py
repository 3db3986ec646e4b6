"""A pandas_udf whose return type is a DDL string ("long"), defined in the job file, where no
SparkSession exists (sluice/cli/job_file.py); its body also checks, on the TaskManager where
Spark parses DDL, that the job file's parser reads the same types as Spark's."""

import pandas as pd
from pyspark.sql.functions import pandas_udf

from sluice.api import StreamExecutionEnvironment

CASES = [
    "long",
    "INT ",
    "bigint",
    "tinyint",
    "smallint",
    "float",
    "real",
    "double",
    "boolean",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "decimal",
    "decimal(16, 8)",
    "numeric(5)",
    "array<string>",
    "map<string, array<long>>",
    "struct<a: int, b double>",
    "a: byte, b: decimal(  16 , 8   ) ",
    "a DOUBLE, b STRING",
    "k string, `odd name` array<struct<x: long>>",
]


@pandas_udf("long")  # type: ignore[call-overload]  # pyspark's stubs lack pandas_udf(returnType)
def plus_one(v: pd.Series) -> pd.Series:
    return v + 1


def check(df):
    from pyspark.sql.types import _parse_datatype_string

    from sluice.cli.job_file import parse_type

    for ddl in CASES:
        ours, spark = parse_type(ddl), _parse_datatype_string(ddl)
        if ours != spark:
            raise ValueError(f"DDL {ddl!r}: the job file's parser reads {ours}, Spark reads {spark}")
    out = df.select("v", plus_one("v").alias("w"))
    wrong = out.filter("w != v + 1").collect()
    if wrong:
        raise ValueError(f"plus_one gave {wrong}")
    return out


env = StreamExecutionEnvironment.get_execution_environment()
env.set_config("restart-strategy", "none")
env.from_collection([{"v": i} for i in range(10)]).map(check, name="check").print()
env.execute("pandas_udf_ddl")
