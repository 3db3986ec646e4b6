"""Job files run without a SparkSession (sluice/cli/job_file.py): DDL return types of
pandas_udf and udf read in Python, anything else a clear error. No SparkSession here; Spark's
own parser is compared on a cluster in tests/integration/jobs/pandas_udf_ddl.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import types as t
from pyspark.sql.functions import pandas_udf, udf

import sluice
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

        @pandas_udf("long")  # type: ignore[call-overload]  # pyspark's stubs lack pandas_udf(returnType)
        def plus_one(v):
            return v + 1

        assert plus_one.returnType == t.LongType()  # what the UDF carries to the TaskManagers
        assert udf(lambda x: x, "array<string>").returnType == t.ArrayType(t.StringType(), True)
        with pytest.raises(NeedsSparkSession, match=r'^pandas_udf\("long not null"\): give the return type'):
            pandas_udf("long not null")(lambda v: v)  # type: ignore[call-overload]  # as above: pyspark's stubs
        with pytest.raises(NeedsSparkSession, match=r'^udf\("char\(1\)"\): give the return type'):
            udf(lambda x: x, "char(1)")
    with pytest.raises(PySparkRuntimeError) as e:  # pyspark's own parser is back
        pandas_udf("long")(lambda v: v)  # type: ignore[call-overload]  # as above: pyspark's stubs
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


def test_a_job_file_that_never_calls_execute_is_an_error(tmp_path, capsys, monkeypatch):
    job = tmp_path / "no_execute.py"
    job.write_text(
        "from sluice.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection([{'k': 'a'}]).print()\n"
    )
    monkeypatch.setattr(sys, "argv", ["sluice"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as e:
        main(["run", str(job), "--jobmanager", "127.0.0.1:1"])
    assert e.value.code == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert f"error: {job} ran to its end without calling env.execute(): no job was submitted" in err


def test_helper_modules_next_to_the_job_file_are_pickled_by_value(tmp_path, monkeypatch):
    import pickle

    import cloudpickle

    from sluice.cli.job_file import pickle_by_value_under

    (tmp_path / "my_job_helper.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    import my_job_helper  # type: ignore[import-not-found]  # written by the test above

    try:
        assert pickle_by_value_under(str(tmp_path)) == ["my_job_helper"]  # not sluice, pyspark, ...
        data = cloudpickle.dumps(my_job_helper.double)
        del sys.modules["my_job_helper"]  # a TaskManager cannot import it
        monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
        assert pickle.loads(data)(21) == 42
    finally:
        cloudpickle.unregister_pickle_by_value(my_job_helper)
        sys.modules.pop("my_job_helper", None)


def test_installed_packages_are_listed_only_when_a_module_lives_beside_the_job_file(tmp_path, monkeypatch):
    import importlib.metadata

    import cloudpickle

    from sluice.cli.job_file import pickle_by_value_under

    def listed():
        raise AssertionError("the installed packages were listed")

    monkeypatch.setattr(importlib.metadata, "packages_distributions", listed)
    assert pickle_by_value_under(str(tmp_path)) == []  # nothing imported from there: nothing listed
    monkeypatch.undo()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(sluice.__file__)))
    registered = pickle_by_value_under(repo)  # the test modules imported from there are, for a moment
    try:
        assert registered and "sluice" not in registered  # at a checkout's root: the installed package stays
    finally:
        for name in registered:
            cloudpickle.unregister_pickle_by_value(sys.modules[name])


def test_every_command_takes_its_cluster_directory_from_sluice_cluster_dir(monkeypatch, tmp_path):
    from sluice.cli.main import _context, build_parser

    monkeypatch.setenv("SLUICE_CLUSTER_DIR", str(tmp_path))
    parser = build_parser()
    for argv in (["list"], ["status", "j"], ["cancel", "j"], ["run", "job.py"]):
        assert _context(parser.parse_args(argv))["cluster_dir"] == str(tmp_path), argv
    for action in ("start", "stop", "status"):
        assert parser.parse_args(["cluster", action]).dir == str(tmp_path), action
    assert _context(parser.parse_args(["list", "--cluster-dir", "other"]))["cluster_dir"] == "other"  # a flag wins
    monkeypatch.delenv("SLUICE_CLUSTER_DIR")
    assert build_parser().parse_args(["cluster", "stop"]).dir == ".sluice"


def test_run_options_are_key_value_pairs_each_checked_as_a_job_option():
    """`sluice run -D KEY=VALUE`: the pairs split as `cluster start -D` splits its own, then each is
    checked as the job API checks set_config (the last of a key repeated wins)."""
    from sluice.cli.job_file import parse_options
    from sluice.client import SluiceError

    assert parse_options(["execution.source.max-files-per-read=2", " state.backend = rocksdb", "x.y=1"]) == {
        "execution.source.max-files-per-read": "2",
        "state.backend": "rocksdb",
        "x.y": "1",
    }
    assert parse_options(["state.backend=memory", "state.backend=rocksdb"]) == {"state.backend": "rocksdb"}
    with pytest.raises(SluiceError, match=r"^-D 'nokey': expected KEY=VALUE, e\.g\. -D execution\.checkpointing"):
        parse_options(["nokey"])
    with pytest.raises(SluiceError, match=r"^-D '=3': expected KEY=VALUE"):
        parse_options(["=3"])
    with pytest.raises(SluiceError, match=r"^-D 'execution.source.max-files-per-read=0': .*an integer >= 1"):
        parse_options(["execution.source.max-files-per-read=0"])
    with pytest.raises(SluiceError, match="did you mean 'execution.source.max-files-per-read'"):
        parse_options(["execution.source.max-files=2"])


def test_pyspark_imported_by_the_job_file_is_patched_then_and_not_loaded_otherwise():
    """In a fresh interpreter (pyspark not loaded yet): entering the context loads no pyspark; a
    job file importing it inside gets the DDL parser all the same, and leaving restores pyspark's."""
    script = (
        "import sys\n"
        "from sluice.cli.job_file import ddl_types_without_session\n"
        "with ddl_types_without_session():\n"
        "    assert 'pyspark' not in sys.modules, 'loaded before the job file asked'\n"
        "    from pyspark.sql.functions import pandas_udf\n"
        "    from pyspark.sql import types as t\n"
        "    assert pandas_udf('long')(lambda v: v).returnType == t.LongType()\n"
        "import pyspark.sql.udf as u\n"
        "assert u._parse_datatype_string.__name__ == '_parse_datatype_string', 'not restored'\n"
        "assert not any(type(f).__name__ == '_AfterImport' for f in sys.meta_path)\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
