"""Job files run by `sluice run` on the shared cluster: a pandas_udf
with a DDL return type, a deterministic error that fails the job without restarting, and a
recovered job whose status still says why it restarted; and an attached run that follows its
job through a JobManager failover (2 JobManagers)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from harness import JOBS, REPO, SLUICE, LocalCluster, pid_at, sluice
from helpers import wait_until

from sluice.states import JobStatus, from_proto

pytestmark = pytest.mark.integration


def run(cluster: LocalCluster, job: str, *job_args: str):
    """`sluice run` attached; the job's status afterwards (the newest job of that name)."""
    proc = sluice("run", os.path.join(JOBS, job), "--cluster-dir", cluster.dir, "--", *job_args, check=False)
    name = job.removesuffix(".py")
    with cluster.client() as client:
        job_id = max((j for j in client.list() if j.name == name), key=lambda j: j.submitted_ms).job_id
    return proc, cluster.status(job_id)


def test_pandas_udf_with_a_ddl_return_type_runs(cluster):
    proc, status = run(cluster, "pandas_udf_ddl.py")
    assert proc.returncode == 0, proc.stderr
    assert status["state"] == "FINISHED" and status["exceptions"] == [], status


def test_a_missing_column_fails_the_job_at_once(cluster):
    proc, status = run(cluster, "missing_column.py")
    assert proc.returncode == 1 and "FAILED" in proc.stderr
    assert status["state"] == "FAILED" and status["restarts"] == 0, status
    task = "collection -> pick -> print (1/1)"
    assert status["failure"].endswith(f"(not restarted: non-recoverable error (AnalysisException) in task {task})")
    [entry] = status["exceptions"]
    assert entry["task"] == task and not entry["restarted"]
    assert "AnalysisException: [UNRESOLVED_COLUMN" in entry["cause"] and "no_such_column" in entry["cause"]
    assert "Traceback" in entry["traceback"]
    assert f"attempt 0 failed in task {task}: " in proc.stderr  # the attached run printed it


def test_a_recovered_job_keeps_why_it_restarted(cluster, tmp_path):
    proc, status = run(cluster, "fails_once.py", str(tmp_path / "marker"))
    assert proc.returncode == 0, proc.stderr
    assert status["state"] == "FINISHED" and status["restarts"] == 1 and status["failure"] is None, status
    [entry] = status["exceptions"]
    assert (entry["attempt"], entry["task"], entry["cause"], entry["restarted"]) == (
        0,
        "collection -> flaky -> print (1/1)",
        "ValueError: first attempt fails",
        True,
    )
    assert entry["time"] >= status["submitted"]
    human = sluice("status", status["job_id"], "--cluster-dir", cluster.dir).stdout
    assert "exceptions (most recent last)" in human and "ValueError: first attempt fails" in human


@pytest.mark.chaos
def test_an_attached_run_follows_the_job_through_a_jobmanager_failover(ha_cluster, tmp_path):
    """On the cluster of two JobManagers (conftest.py), the leader killed under an attached run."""
    stderr = tmp_path / "run.stderr"
    with open(stderr, "w") as err:
        run_proc = subprocess.Popen(
            [*SLUICE, "run", os.path.join(JOBS, "endless_counts.py"), "--cluster-dir", ha_cluster.dir]
            + ["--", str(tmp_path / "out"), "500"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
        )
    try:
        wait_until(lambda: ": RUNNING" in stderr.read_text(), timeout=120, message="the attached run RUNNING")
        with ha_cluster.client() as client:  # the one job running (earlier tests' have ended)
            (job,) = [j for j in client.list() if from_proto(JobStatus, j.state) == JobStatus.RUNNING]
        leader = job.leader
        os.kill(pid_at(ha_cluster, leader), signal.SIGKILL)
        text = wait_until(
            lambda: "leader changed: now" in (t := stderr.read_text()) and t,
            timeout=90,
            message="`leader changed` in the attached run's output",
        )
        new_leader = text.split("leader changed: now ", 1)[1].split()[0]
        assert new_leader != leader
        pid_at(ha_cluster, new_leader)  # one of the cluster's JobManagers (perhaps one its supervisor restarted)
        sluice("cancel", job.job_id, "--cluster-dir", ha_cluster.dir)
        assert run_proc.wait(120) == 1  # the attached run followed the job to its end: CANCELED
        assert f"{job.job_id}: CANCELED" in stderr.read_text()
    finally:
        if run_proc.poll() is None:
            run_proc.kill()
            run_proc.wait()
