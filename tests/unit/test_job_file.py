"""Job files run without a SparkSession (sluice/cli/job_file.py): DDL return types of
pandas_udf and udf read in Python, anything else a clear error. No SparkSession here; Spark's
own parser is compared on a cluster in tests/integration/jobs/pandas_udf_ddl.py."""

from __future__ import annotations

import sys

import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import types as t
from pyspark.sql.functions import pandas_udf, udf

from sluice.cli.job_file import NeedsSparkSession, ddl_types_without_session, explain, parse_type
from sluice.cli.main import main


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("long", t.LongType()),
        ("BIGINT ", t.LongType()),
        ("int", t.IntegerType()),
        ("tinyint", t.ByteType()),
        ("smallint", t.ShortType()),
        ("real", t.FloatType()),
        ("double", t.DoubleType()),
        ("boolean", t.BooleanType()),
        ("string", t.StringType()),
        ("binary", t.BinaryType()),
        ("date", t.DateType()),
        ("timestamp", t.TimestampType()),
        ("timestamp_ntz", t.TimestampNTZType()),
        ("void", t.NullType()),
        ("decimal", t.DecimalType(10, 0)),
        ("numeric(5)", t.DecimalType(5, 0)),
        ("decimal(  16 , 8   )", t.DecimalType(16, 8)),
        (" array< short>", t.ArrayType(t.ShortType(), True)),
        ("map<string, array<long>>", t.MapType(t.StringType(), t.ArrayType(t.LongType(), True), True)),
        (
            "struct<a: int, b double>",
            t.StructType([t.StructField("a", t.IntegerType()), t.StructField("b", t.DoubleType())]),
        ),
        ("struct<>", t.StructType([])),
        (
            "a: byte, b: decimal(16, 8)",
            t.StructType([t.StructField("a", t.ByteType()), t.StructField("b", t.DecimalType(16, 8))]),
        ),
        ("string string", t.StructType([t.StructField("string", t.StringType())])),
        ("`odd ``name`` ` long", t.StructType([t.StructField("odd `name` ", t.LongType())])),
    ],
)
def test_plain_type_strings_parse_as_spark_reads_them(ddl, expected):
    assert parse_type(ddl) == expected


@pytest.mark.parametrize(
    "ddl",
    ["varchar(3)", "char(2)", "long not null", "a long comment 'x'", "array<int", "a long,", "decimal(40, 2)", "blob"],
)
def test_other_forms_say_to_give_a_data_type(ddl):
    with pytest.raises(NeedsSparkSession, match=r"give the return type as a DataType .*without a SparkSession"):
        parse_type(ddl)


def test_udfs_with_ddl_strings_work_only_inside_the_context():
    with ddl_types_without_session():

        @pandas_udf("long")
        def plus_one(v):
            return v + 1

        assert plus_one.returnType == t.LongType()  # what the UDF carries to the TaskManagers
        assert udf(lambda x: x, "array<string>").returnType == t.ArrayType(t.StringType(), True)
        with pytest.raises(NeedsSparkSession, match=r'^pandas_udf\("long not null"\): give the return type'):
            pandas_udf("long not null")(lambda v: v)
        with pytest.raises(NeedsSparkSession, match=r'^udf\("char\(1\)"\): give the return type'):
            udf(lambda x: x, "char(1)")
    with pytest.raises(PySparkRuntimeError) as e:  # pyspark's own parser is back
        pandas_udf("long")(lambda v: v)
    assert "SESSION_OR_CONTEXT_NOT_EXISTS" in str(e.value)
    assert "runs on the client, where none exists" in (explain(e.value) or "")
    assert explain(ValueError("x")) is None


def test_sluice_run_explains_what_needs_a_session(tmp_path, capsys, monkeypatch):
    job = tmp_path / "job.py"
    job.write_text(
        "from pyspark.sql.functions import pandas_udf\n"
        "from sluice.api import StreamExecutionEnvironment\n"
        "\n"
        '@pandas_udf("long")\n'
        "def fine(v):\n"
        "    return v\n"
        "\n"
        '@pandas_udf("varchar(3)")\n'
        "def needs_spark(v):\n"
        "    return v\n"
    )
    monkeypatch.setattr(sys, "argv", ["sluice"])  # `run` sets sys.argv for the job file
    monkeypatch.setattr(sys, "path", list(sys.path))  # ... and puts its directory first
    with pytest.raises(SystemExit) as e:
        main(["run", str(job), "--jobmanager", "127.0.0.1:1"])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith(
        f'error: {job}:8: pandas_udf("varchar(3)"): give the return type as a DataType'
    )
