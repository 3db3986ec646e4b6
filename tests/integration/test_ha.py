"""JobManager high availability against a real ZooKeeper: leader kills,
a paused (SIGSTOP) leader, a ZooKeeper restart, and cancelled jobs staying
cancelled. Every job ends with exactly the independently computed counts.

The tests share the chaos tier's cluster of two JobManagers on its own embedded
ZooKeeper (conftest.py `ha_cluster`); its supervisor (sluice/cli/supervisor.py)
restarts every JobManager, TaskManager and the ZooKeeper a test kills, and the
next test starts once it did (heal())."""

from __future__ import annotations

import os
import re
import signal
import time

import psutil
import pytest
from harness import HA_SESSION_TIMEOUT, JOBS, kill9, pid_at, sluice, wait_for
from helpers import wait_until
from kazoo.exceptions import NoNodeError
from page_view_jobs import assert_exactly_once, start_page_views

from sluice.states import JobStatus, from_proto
from sluice.zk.paths import ZkPaths

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SESSION_TIMEOUT = HA_SESSION_TIMEOUT


def leader_of(cluster, job_id) -> str:
    return cluster.status(job_id)["leader"]


def test_kill_leader_mid_job(ha_cluster, tmp_path):
    cluster = ha_cluster
    job_id, expected = start_page_views(cluster, tmp_path, events=400_000, files=160)
    status = wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    old_leader = status["leader"]
    kill9(pid_at(cluster, old_leader))
    status = wait_for(
        cluster,
        job_id,
        lambda s: s["leader"] != old_leader and s["state"] in ("RUNNING", "FINISHED"),
        "the job running (or done) under a new leader",
        timeout=60,
    )
    assert status["restored_checkpoint"] is not None
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=240)
    assert status["state"] == "FINISHED", status
    assert status["leader"] != old_leader
    assert_exactly_once(tmp_path, expected)


def test_three_leader_kills_in_a_row(ha_cluster, tmp_path):
    """Two JobManagers, the leader killed three times: each time the standby leads, and the
    supervisor restarts the killed one as the next standby, so the cluster only loses time."""
    cluster = ha_cluster
    job_id, expected = start_page_views(cluster, tmp_path, events=600_000, files=240)
    killed = []
    for _ in range(3):
        status = wait_for(
            cluster,
            job_id,
            lambda s: (
                s["state"] in ("RUNNING", "FINISHED")
                and s["leader"] not in killed
                and (s["state"] == "FINISHED" or s["last_completed_checkpoint"])
            ),
            "a leading JobManager",
            timeout=90,
        )
        if status["state"] == "FINISHED":
            break
        killed.append(status["leader"])
        kill9(pid_at(cluster, status["leader"]))
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert status["state"] == "FINISHED", status
    assert len(killed) >= 2, "the job finished before two failovers could be injected"
    assert_exactly_once(tmp_path, expected)


def test_paused_leader_is_fenced(ha_cluster, tmp_path):
    """SIGSTOP the leader past its session timeout: a standby takes over; once resumed, the
    old leader neither completes a checkpoint nor writes a pointer, and TaskManagers reject it."""
    cluster = ha_cluster
    job_id, expected = start_page_views(cluster, tmp_path, events=400_000, files=160, interval=200)
    status = wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    old_leader = status["leader"]
    old_pid = pid_at(cluster, old_leader)
    old_log = next(p["log"] for p in cluster.info["processes"] if p["pid"] == old_pid)
    stopped_at = time.time()
    os.kill(old_pid, signal.SIGSTOP)
    try:
        wait_for(
            cluster,
            job_id,
            lambda s: s["leader"] != old_leader and s["state"] in ("RUNNING", "FINISHED"),
            "a new leader running the job",
            timeout=SESSION_TIMEOUT * 6,
        )
    finally:
        resumed_at = time.time()
        os.kill(old_pid, signal.SIGCONT)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=240)
    assert status["state"] == "FINISHED", status
    assert_exactly_once(tmp_path, expected)
    # The resumed leader noticed and stopped acting (its log holds earlier tests' lines too).
    with open(old_log) as f:
        lines = f.read().splitlines()
    assert [line for line in lines if "leadership revoked" in line and (_ts(line) or 0) >= stopped_at - 1]
    after = [line for line in lines if (t := _ts(line)) and t >= resumed_at]
    assert not [line for line in after if re.search(r"checkpoint \d+ completed|deploying", line)], after
    # Every checkpoint pointer in ZooKeeper belongs to the new leader's attempts: the
    # latest is the one the job's final status reports.
    zk = cluster.zk_client()
    try:
        paths = ZkPaths(cluster.info["cluster_id"])
        assert not zk.exists(paths.jobgraph(job_id)), "the job graph of a finished job is gone"
        assert zk.exists(f"{paths.root}/jobresults/{job_id}")
    finally:
        zk.stop()
        zk.close()


def _ts(line: str) -> float | None:
    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000  # local time, as logged


def test_zookeeper_restart_mid_job(ha_cluster, tmp_path):
    """kill -9 of the embedded ZooKeeper: the supervisor starts it again on its data and port
    (about its first backoff, 1 s, plus ZooKeeper's start), and the job ends exact."""
    cluster = ha_cluster
    job_id, expected = start_page_views(cluster, tmp_path, events=400_000, files=160)
    wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    zk_proc = next(p for p in cluster.info["processes"] if p["role"] == "zookeeper")
    kill9(zk_proc["pid"])

    def restarted() -> dict | None:
        cluster.refresh()
        zk = next(p for p in cluster.info["processes"] if p["role"] == "zookeeper")
        return zk if zk["pid"] != zk_proc["pid"] and psutil.pid_exists(zk["pid"]) else None

    again = wait_until(restarted, timeout=60, message="the supervisor's restart of ZooKeeper", interval=0.2)
    assert again["address"] == zk_proc["address"], "ZooKeeper came back on another port"
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert status["state"] == "FINISHED", status
    assert_exactly_once(tmp_path, expected)


def test_cancelled_job_stays_cancelled_after_failover(ha_cluster, tmp_path):
    cluster = ha_cluster
    job_id = cluster.run(os.path.join(JOBS, "endless_counts.py"), str(tmp_path / "out"), "500", parallelism=2)
    wait_for(cluster, job_id, lambda s: s["state"] == "RUNNING", "the job running")
    sluice("cancel", job_id, "--cluster-dir", cluster.dir)
    status = wait_for(cluster, job_id, lambda s: s["state"] == "CANCELED", "the job cancelled")
    old_leader = status["leader"]
    kill9(pid_at(cluster, old_leader))
    status = wait_until(
        lambda: (s := cluster.status(job_id))["leader"] != old_leader and s,
        timeout=60,
        message="a new leader answering",
    )
    assert status["state"] == "CANCELED"
    with cluster.client() as client:
        overview = wait_until(
            lambda: (o := client.cluster()).total_slots == 4 and o,
            timeout=30,
            message="TaskManagers registered with the new leader",
        )
        assert overview.free_slots == 4, "a cancelled job was resurrected"
        assert {j.job_id: from_proto(JobStatus, j.state) for j in client.list()}[job_id] == JobStatus.CANCELED


def test_sigterm_hands_leadership_over_before_the_session_timeout(ha_cluster, tmp_path):
    """Graceful shutdown releases leadership: a standby leads long before the
    ZooKeeper session of the old leader would have expired."""
    cluster = ha_cluster
    job_id, expected = start_page_views(cluster, tmp_path, events=300_000, files=120)
    status = wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    old_leader = status["leader"]
    pid = pid_at(cluster, old_leader)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    zk = cluster.zk_client()
    try:
        path = ZkPaths(cluster.info["cluster_id"]).leader_connection_info

        def new_leader():
            data = read_leader_info(zk, path)
            return data and old_leader.encode() not in data

        wait_until(new_leader, timeout=SESSION_TIMEOUT, message="a standby leading")
        took = time.monotonic() - t0
    finally:
        zk.stop()
        zk.close()
    assert took < SESSION_TIMEOUT / 2, f"handover took {took:.2f}s"
    psutil.Process(pid).wait(30)  # the old leader exits on its own
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=240)
    assert status["state"] == "FINISHED", status
    assert_exactly_once(tmp_path, expected)


def read_leader_info(zk, path) -> bytes | None:
    """The published leader info, or None between two leaders."""
    try:
        return zk.get(path)[0]
    except NoNodeError:
        return None
