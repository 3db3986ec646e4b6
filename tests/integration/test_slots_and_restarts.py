"""Slot waiting and TaskManager start-up against ZooKeeper: each test runs
its own small cluster on the session's ZooKeeper under a fresh cluster id."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from harness import EXAMPLES, LocalCluster, assert_update_stream, read_counts
from helpers import wait_until

from sluice.zk.server import free_port

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture
def small_cluster(tmp_path, zookeeper):
    c = LocalCluster(
        tmp_path / "cluster",
        taskmanagers=1,
        slots=1,
        zookeeper=zookeeper.connect_string,
        cluster_id=f"slots-{uuid.uuid4().hex[:8]}",
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_job_waits_for_slots_then_runs_when_a_taskmanager_joins(small_cluster, tmp_path):
    expected = generate(str(tmp_path / "in"), events=20_000, files=4, urls=500, seed=3)
    job_id = small_cluster.run(
        os.path.join(EXAMPLES, "page_views.py"),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        parallelism=2,
    )
    status = wait_until(
        lambda: (s := small_cluster.status(job_id))["message"] and s, timeout=30, message="a waiting message"
    )
    assert status["state"] == "CREATED"
    assert "needs 2" in status["message"] and "1 free" in status["message"], status["message"]
    assert status["slots_required"] == 2
    small_cluster.start_taskmanager(slots=1, log_name="taskmanager-extra.log")
    status = wait_until(
        lambda: (s := small_cluster.status(job_id))["state"] in ("FINISHED", "FAILED") and s,
        timeout=180,
        message="the job to finish after a TaskManager joined",
    )
    assert status["state"] == "FINISHED", status
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)


def test_taskmanager_retries_an_unreachable_zookeeper(tmp_path):
    """It keeps running, says so in its log, and leaves when told to."""
    log = tmp_path / "tm.log"
    port = free_port()
    with open(log, "ab") as out:
        tm = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "taskmanager",
                "--zookeeper",
                f"127.0.0.1:{port}",
                "--slots",
                "1",
                "--insecure",  # no cluster to take certificates from: only ZooKeeper is under test
                "--log-file",
                str(log),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: (
                "cannot reach ZooKeeper" in log.read_text(errors="replace") and log.read_text().count("retrying") >= 2
            ),
            timeout=90,
            message="the TaskManager logging its ZooKeeper retries",
        )
        assert tm.poll() is None, "the TaskManager gave up instead of retrying"
    finally:
        tm.terminate()
        try:
            tm.wait(30)
        except subprocess.TimeoutExpired:
            tm.kill()
            tm.wait()
