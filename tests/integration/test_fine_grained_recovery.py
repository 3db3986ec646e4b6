"""Fine-grained recovery on a real cluster (docs/batch.md): region failover of a streaming
job after kill -9 of a TaskManager, and BATCH jobs — lazy scheduling on fewer slots than
their parallelism, region re-runs after a kill, speculative attempts for a straggler."""

from __future__ import annotations

import collections
import glob
import json
import os
import signal
import sys

import psutil
import pytest
from harness import EXAMPLES, JOBS, running_cluster, sluice
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with running_cluster(
        tmp_path_factory.mktemp("fine-grained"),
        taskmanagers=2,
        slots=2,
        zookeeper=zookeeper.connect_string,
        cluster_id="fine-grained",
    ) as c:
        yield c


def kill_taskmanager(cluster, address: str) -> None:
    """kill -9 the TaskManager at `address`, and its Spark JVM after it."""
    pid = next(p["pid"] for p in cluster.info["processes"] if p["address"] == address)
    proc = psutil.Process(pid)
    children = proc.children(recursive=True)
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([proc], timeout=10)
    for child in children:
        try:
            child.wait(30)
        except psutil.TimeoutExpired:
            child.kill()


def input_rows(directory) -> collections.Counter:
    rows: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        with open(path) as f:
            for line in f:
                e = json.loads(line)
                rows[f"{e['url']},{e['user']},{e['ts']}"] += 1
    return rows


def output_rows(directory) -> collections.Counter:
    rows: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(directory, "part-*")):
        with open(path) as f:
            rows.update(line.rstrip("\n") for line in f if line.strip())
    return rows


def wait_for(cluster, job_id, predicate, message, timeout=180):
    return wait_until(lambda: (s := cluster.status(job_id)) and predicate(s) and s, timeout=timeout, message=message)


def test_kill_of_a_taskmanager_restarts_only_the_lost_subtasks_region(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=40_000, files=160, urls=500, seed=11)
    job_id = cluster.run(
        os.path.join(JOBS, "parallel_copy.py"),
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        "300",
        "0.15",
        parallelism=2,
    )
    status = wait_for(
        cluster,
        job_id,
        lambda s: (
            s["state"] == "RUNNING"
            and (s.get("last_completed_checkpoint") or 0) >= 1
            and all(t["state"] == "RUNNING" for t in s["tasks"])
        ),
        "a completed checkpoint with both subtasks running",
    )
    tasks = {t["subtask"]: t for t in status["tasks"]}
    assert tasks[0]["region"] != tasks[1]["region"]
    assert tasks[0]["taskmanager"] != tasks[1]["taskmanager"]  # the slot pool spreads them
    kill_taskmanager(cluster, tasks[1]["taskmanager"])
    final = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert final["state"] == "FINISHED", final.get("failure")
    after = {t["subtask"]: t for t in final["tasks"]}
    # only the lost subtask's region ran again; the job attempt is the same
    assert (after[0]["execution_attempt"], after[1]["execution_attempt"]) == (0, 1)
    assert {t["attempt"] for t in final["tasks"]} == {0}
    assert final["restarts"] == 1
    assert output_rows(tmp_path / "out") == input_rows(tmp_path / "in")  # every row exactly once
    assert not glob.glob(str(tmp_path / "out" / ".*")), "staging files left behind"
    history = sluice("status", job_id, "--cluster-dir", cluster.dir).stdout
    assert "exited while running task" in history
