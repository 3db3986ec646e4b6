"""A TaskManager's Spark keeps its scratch files (block manager, pyspark's and the artifact
directories) inside the TaskManager's working directory: one killed with its JVM leaves
nothing loose in the temp dir, and the next TaskManager on the host removes what it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from taskmanager import local_dir

pytestmark = pytest.mark.integration

# a TaskManager's start, as taskmanager/server.py does it: the working directory, then Spark in it;
# then a shuffle, whose blocks the block manager writes
_SCRIPT = """
import os, sys
from taskmanager import local_dir
from taskmanager.spark_engine import SparkEngine
work = local_dir.create("tm-scratch")
engine = SparkEngine(1)
engine.start(warm_up="now", local_dir=os.path.join(work, local_dir.SPARK_DIR))
spark = engine.spark
rows = spark.range(2000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
assert len(rows) == 7
tmp = spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir")
print("READY", work, tmp, spark.sparkContext._temp_dir, flush=True)
sys.stdin.read()
"""


def _entries(base) -> set[str]:
    return set(os.listdir(base))


def test_a_killed_taskmanagers_spark_files_stay_in_its_working_directory_which_the_next_one_removes(tmp_path):
    base = tmp_path / "tmp"
    base.mkdir()
    env = {**os.environ, "TMPDIR": str(base)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "stderr.log", "w"),
        text=True,
        start_new_session=True,
    )
    watchdog = threading.Timer(240, os.killpg, (proc.pid, signal.SIGKILL))  # a hung start ends the read below
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), (
            f"no READY line ({line!r}); stderr: {(tmp_path / 'stderr.log').read_text()[-2000:]}"
        )
        _, work, jvm_tmp, pyspark_tmp = line.split()
        spark_dir = os.path.join(work, local_dir.SPARK_DIR)
        assert jvm_tmp == spark_dir  # the JVM's own temp dir is /tmp whatever TMPDIR says, unless set
        assert pyspark_tmp.startswith(spark_dir + os.sep)
        assert any(n.startswith("blockmgr-") for n in os.listdir(spark_dir)), os.listdir(spark_dir)
        family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(family) > 1  # the Spark JVM
    finally:
        watchdog.cancel()
        os.killpg(proc.pid, signal.SIGKILL)  # the TaskManager and its JVM, as a host crash or kill -9 of the group
        proc.wait(30)
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in family):
        assert time.monotonic() < deadline, "the killed TaskManager's JVM is still running"
        time.sleep(0.1)
    loose = {n for n in _entries(base) if not n.startswith((local_dir.PREFIX, "sluice-warm-up-"))}
    assert loose == set(), f"Spark files outside the working directory: {sorted(loose)}"
    assert os.path.isdir(work)  # left behind by the kill ...
    fresh = local_dir.create("tm-next", base=str(base))  # ... until the next TaskManager starts
    assert not os.path.exists(work)
    assert {n for n in _entries(base) if n.startswith(local_dir.PREFIX)} == {os.path.basename(fresh)}
    local_dir.remove(fresh)
