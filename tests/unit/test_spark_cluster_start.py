"""How `cluster start --spark` fails when a Spark process does not come up
(sluice/cli/spark_cluster.py): the error names the process's log file and shows
its end, and nothing it started keeps running. Tiny shell processes stand in
for Spark's JVMs."""

from __future__ import annotations

import time

import psutil
import pytest

from sluice.cli import spark_cluster, spark_plan


def launch(tmp_path, script: str) -> spark_plan.Launch:
    return spark_plan.Launch("spark-master", ["sh", "-c", script], {}, "spark-master.log")


def test_a_process_that_exits_before_ready_is_an_error_naming_its_log(tmp_path):
    entry = spark_cluster._launch(launch(tmp_path, "echo 'Error: no JAVA_HOME'; exit 3"), str(tmp_path))
    with pytest.raises(spark_cluster.SparkStartError) as info:
        spark_cluster._wait_for(entry, spark_plan.master_url, time.monotonic() + 30, "the Spark master to serve")
    message = str(info.value)
    assert "exited with 3" in message and str(tmp_path / "spark-master.log") in message
    assert "no JAVA_HOME" in message  # the log's end
    spark_cluster.stop([entry])


def test_a_process_that_never_gets_ready_times_out_and_is_stopped(tmp_path):
    entry = spark_cluster._launch(launch(tmp_path, "echo starting; exec sleep 60"), str(tmp_path))
    with pytest.raises(spark_cluster.SparkStartError, match="timed out waiting for the Spark master to serve"):
        spark_cluster._wait_for(entry, spark_plan.master_url, time.monotonic() + 0.5, "the Spark master to serve")
    spark_cluster.stop([entry], timeout=5)
    assert not psutil.pid_exists(entry.pid) or psutil.Process(entry.pid).status() == psutil.STATUS_ZOMBIE


def test_ready_once_the_log_says_so(tmp_path):
    line = (
        "INFO Master: Starting Spark master at spark://127.0.0.1:4242\\n"
        "INFO Master: I have been elected leader! New state: ALIVE"
    )
    entry = spark_cluster._launch(launch(tmp_path, f"printf '{line}\\n'; exec sleep 60"), str(tmp_path))
    try:
        url = spark_cluster._wait_for(entry, spark_plan.master_url, time.monotonic() + 30, "the Spark master to serve")
        assert url == "spark://127.0.0.1:4242"
        assert "_popen" not in spark_cluster.public([entry])[0].extra  # cluster.json gets no handle
    finally:
        spark_cluster.stop([entry], timeout=5)


def test_local_mode_starts_nothing(tmp_path):
    started = spark_cluster.start("local", str(tmp_path), str(tmp_path), 2, 1, 10)
    assert started.url is None and started.processes == []
    with pytest.raises(spark_plan.SparkPlanError):
        spark_cluster.start("yarn", str(tmp_path), str(tmp_path), 2, 1, 10)
