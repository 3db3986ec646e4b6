"""Which class-data sharing archive a TaskManager's Spark JVM maps, and with which options
(taskmanager/spark_cds.py). The JVM side runs in tests/integration/test_taskmanager_start.py."""

import json
import os

import pytest

from taskmanager import spark_cds
from taskmanager.spark_cds import Stamp


def test_auto_is_the_interpreters_archive_when_it_exists(tmp_path):
    path = spark_cds.default_archive(str(tmp_path), "9.9.9")
    assert path == str(tmp_path / "share" / "sluice" / "spark-9.9.9.jsa")
    assert spark_cds.resolve("auto", str(tmp_path), "9.9.9") is None  # not built: the JVM starts without
    os.makedirs(os.path.dirname(path))
    open(path, "wb").close()
    assert spark_cds.resolve("auto", str(tmp_path), "9.9.9") == path
    assert spark_cds.resolve(None, str(tmp_path), "9.9.9") == path
    assert spark_cds.resolve("OFF", str(tmp_path), "9.9.9") is None


def test_an_explicit_path_must_exist_and_the_error_says_how_to_make_it(tmp_path):
    with pytest.raises(ValueError, match=r"spark.cds-archive: no file .*spark_cds build --path"):
        spark_cds.resolve(str(tmp_path / "missing.jsa"))
    archive = tmp_path / "mine.jsa"
    archive.write_bytes(b"x")
    assert spark_cds.resolve(str(archive)) == str(archive)


def test_options_go_to_the_default_java_options_and_keep_the_users():
    conf = spark_cds.with_java_options({"spark.driver.extraJavaOptions": "-Dmine=1"}, "-Xshare:auto")
    assert conf == {"spark.driver.extraJavaOptions": "-Dmine=1", "spark.driver.defaultJavaOptions": "-Xshare:auto"}
    again = spark_cds.with_java_options(conf, spark_cds.java_options("/a.jsa"))
    assert again["spark.driver.defaultJavaOptions"] == "-Xshare:auto -Xshare:auto -XX:SharedArchiveFile=/a.jsa"
    assert "ArchiveClassesAtExit=/b.jsa" in spark_cds.dump_options("/b.jsa")


def test_a_stamp_names_what_differs(tmp_path):
    built = Stamp("4.3.0", "17.0.15+6", "/usr/lib/jvm/17")
    assert built.mismatch(Stamp("4.3.0", "17.0.15+6", "/usr/lib/jvm/17")) is None
    assert built.mismatch(Stamp("4.3.0", "21.0.1", "/usr/lib/jvm/17")) == (
        "built for java_vm_version 17.0.15+6, this JVM has 21.0.1"
    )
    archive = tmp_path / "a.jsa"
    assert spark_cds.read_stamp(str(archive)) is None
    (tmp_path / "a.jsa.json").write_text("{not json")
    assert spark_cds.read_stamp(str(archive)) is None
    (tmp_path / "a.jsa.json").write_text(json.dumps(built.__dict__))
    assert spark_cds.read_stamp(str(archive)) == built


def test_the_java_stamp_is_read_from_the_jvm_spark_would_start():
    stamp = spark_cds.java_stamp()
    assert stamp.pyspark == spark_cds.pyspark_version()
    assert stamp.java_vm_version[0].isdigit() and os.path.isdir(stamp.java_home)
