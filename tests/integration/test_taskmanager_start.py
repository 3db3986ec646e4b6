"""A TaskManager's start: its Spark JVM maps the class-data sharing archive `make install`
built (taskmanager/spark_cds.py), and a broken archive costs time, never the TaskManager."""

from __future__ import annotations

import json
import os

import pytest
from harness import taskmanager_log_lines
from helpers import wait_until

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


def test_a_corrupt_archive_costs_time_not_the_taskmanager(cluster, tmp_path):
    archive = tmp_path / "corrupt.jsa"
    archive.write_bytes(os.urandom(1 << 16))
    (tmp_path / "corrupt.jsa.json").write_text(json.dumps(spark_cds.java_stamp().__dict__))
    before = cluster.overview().total_slots
    cluster.start_taskmanager(1, "taskmanager-corrupt-cds.log", "--spark-cds-archive", str(archive))
    wait_until(
        lambda: cluster.overview().total_slots == before + 1,
        timeout=120,
        message="the TaskManager with a corrupt archive registered with its slot",
        interval=0.5,
    )
    lines = taskmanager_log_lines(cluster.dir, f"class-data sharing archive {archive} not used")
    assert lines and "rebuild it with `make install`" in lines[0], lines
    assert taskmanager_log_lines(cluster.dir, "SparkSession ready")
