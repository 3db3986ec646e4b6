"""Python UDFs in task bodies on a live cluster — F.udf, pandas_udf, mapInPandas and
applyInPandas, their functions in a helper module next to the job file — and what a TaskManager's
Spark exposes on the network: its JVM listens on the TaskManager's host only."""

from __future__ import annotations

import glob
import os

import psutil
import pytest
from harness import JOBS
from helpers import wait_until

pytestmark = pytest.mark.integration

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def test_udf_pandas_udf_map_in_pandas_and_apply_in_pandas_run_in_bodies(cluster, tmp_path):
    out = tmp_path / "out"
    job_id = cluster.run(os.path.join(JOBS, "python_udfs.py"), str(out))
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=180,
        message=f"job {job_id} ended",
    )
    assert status["state"] == "FINISHED", status.get("failure")
    lines = []
    for path in sorted(glob.glob(str(out / "part-*"))):
        with open(path) as f:
            lines += f.read().splitlines()
    assert sorted(lines) == [
        "apple,APPLE!,2,5,4,a",
        "banana,BANANA!,3,6,3,a",
        "cherry,CHERRY!,1,6,5,c",
        "fig,FIG!,1,3,3,f",
        "kiwi,KIWI!,2,4,3,i",
    ]


def test_the_taskmanagers_spark_listens_on_no_external_interface(cluster):
    taskmanagers = [psutil.Process(p["pid"]) for p in cluster.info["processes"] if p["role"] == "taskmanager"]
    assert taskmanagers
    jvms = [c for tm in taskmanagers for c in tm.children(recursive=True) if c.name() == "java"]
    assert jvms, "each TaskManager runs Spark's JVM as its child"
    listening = {
        (jvm.pid, c.laddr.ip, c.laddr.port)
        for jvm in jvms
        for c in jvm.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening, "Spark's driver and block manager listen"
    outside = {entry for entry in listening if entry[1] not in LOOPBACK}
    assert not outside, f"Spark listens beyond the TaskManager's host (127.0.0.1): {sorted(outside)}"
