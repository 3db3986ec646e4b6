"""A TaskManager's Spark JVM: at start it maps the class-data sharing archive `make install`
built (taskmanager/spark_cds.py), a broken archive costing time, never the TaskManager; it warms
up in the background unless the process option spark.warm-up is false; and
when it dies the TaskManager exits for a fresh one (taskmanager/server.py)."""

from __future__ import annotations

import json
import os

import psutil
import pytest
from harness import pid_at, taskmanager_log_lines, wait_end, wait_for
from helpers import wait_until
from page_view_jobs import assert_exactly_once, start_page_views

from taskmanager import spark_cds

pytestmark = pytest.mark.integration


def test_every_taskmanager_maps_the_archive_make_install_built(cluster):
    archive = spark_cds.default_archive()
    assert os.path.isfile(archive), f"{archive} is missing: `make install` builds it (make spark-cds)"
    logs = sorted(os.listdir(os.path.join(cluster.dir, "log")))
    for i in range(cluster.taskmanagers):
        name = next(n for n in logs if n.startswith(f"taskmanager-{i}"))
        with open(os.path.join(cluster.dir, "log", name), errors="replace") as f:
            text = f.read()
        assert f"Spark JVM maps the class-data sharing archive {archive}" in text, name
        assert "not used" not in text, name
        # the tests' clusters run with spark.warm-up false (TEST_PROCESS_OPTIONS of harness.py)
        assert "Spark warmed up" not in text, f"{name}: warmed up although spark.warm-up is false"


def test_a_corrupt_archive_costs_time_not_the_taskmanager(cluster, tmp_path):
    archive = tmp_path / "corrupt.jsa"
    archive.write_bytes(os.urandom(1 << 16))
    (tmp_path / "corrupt.jsa.json").write_text(json.dumps(spark_cds.java_stamp().__dict__))
    before = cluster.overview().total_slots
    cluster.start_taskmanager(
        1, "taskmanager-corrupt-cds.log", "--spark-cds-archive", str(archive), "--spark-warm-up", "true"
    )
    wait_until(
        lambda: cluster.overview().total_slots == before + 1,
        timeout=120,
        message="the TaskManager with a corrupt archive registered with its slot",
        interval=0.5,
    )
    lines = taskmanager_log_lines(cluster.dir, f"class-data sharing archive {archive} not used")
    assert lines and "rebuild it with `make install`" in lines[0], lines
    assert taskmanager_log_lines(cluster.dir, "SparkSession ready")
    # --spark-warm-up true (after the harness's false: the last flag wins): it warms up, without the archive
    wait_until(
        lambda: "Spark warmed up" in (cluster_log(cluster, "taskmanager-corrupt-cds.log")),
        timeout=120,
        message="the TaskManager started with --spark-warm-up true warmed up",
        interval=0.5,
    )


def cluster_log(cluster, name: str) -> str:
    with open(os.path.join(cluster.dir, "log", name), errors="replace") as f:
        return f.read()


@pytest.mark.chaos
def test_a_taskmanager_whose_spark_jvm_dies_exits_and_the_job_ends_exact(cluster, tmp_path):
    """kill -9 of a TaskManager's Spark JVM mid-job (as the OOM killer would): the TaskManager
    says why and exits within a heartbeat instead of offering slots no task can use, its
    supervisor starts a fresh one, and the job restarts from its checkpoint and ends exact."""
    job_id, expected = start_page_views(cluster, tmp_path, events=200_000, files=80)
    wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    cluster.refresh()
    address = next(t["taskmanager"] for t in cluster.status(job_id)["tasks"])
    taskmanager = psutil.Process(pid_at(cluster, address))
    (jvm,) = [p for p in taskmanager.children(recursive=True) if p.name() == "java"]
    jvm.kill()
    gone, _alive = psutil.wait_procs([taskmanager], timeout=10)
    assert gone, "the TaskManager outlived its Spark JVM by 10 s"
    assert taskmanager_log_lines(cluster.dir, f"its Spark JVM (pid {jvm.pid}) exited with status")
    status = wait_end(cluster, job_id, timeout=300)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None
    assert_exactly_once(tmp_path, expected)
