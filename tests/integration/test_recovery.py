"""Exactly-once recovery: kill -9 TaskManagers while page_views runs; the job
restores every task from the latest completed checkpoint and the committed
output equals the independently computed counts, with no line twice."""

from __future__ import annotations

import os
import sys

import pytest
from harness import (
    EXAMPLES,
    JOBS,
    kill_taskmanager_running,
    read_counts,
    sluice,
    taskmanager_log_lines,
    wait_for,
)
from helpers import wait_until
from page_view_jobs import assert_exactly_once, start_page_views

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def restored_offsets(cluster, job_id) -> list[str]:
    return taskmanager_log_lines(cluster.dir, f"[job {job_id} ", "restored from checkpoint", "source offset")


def test_kill_taskmanager_after_a_checkpoint(cluster, tmp_path):
    job_id, expected = start_page_views(cluster, tmp_path)
    wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    kill_taskmanager_running(cluster, job_id)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=240)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1
    assert status["restored_checkpoint"] is not None
    assert_exactly_once(tmp_path, expected)
    # the sources resumed from their checkpointed offsets, not from the beginning
    offsets = restored_offsets(cluster, job_id)
    assert offsets and all("source offset 0)" not in line for line in offsets), offsets


def test_two_taskmanager_kills_in_a_row(cluster, tmp_path):
    job_id, expected = start_page_views(cluster, tmp_path, events=400_000, files=160)
    wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    first = kill_taskmanager_running(cluster, job_id)
    status = wait_for(
        cluster,
        job_id,
        lambda s: (
            s["restarts"] >= 1
            and s["state"] == "RUNNING"
            and s["last_completed_checkpoint"]
            and s["last_completed_checkpoint"] > (s["restored_checkpoint"] or 0)
        ),
        "a checkpoint completed after the first restore",
    )
    if status["state"] == "RUNNING":
        kill_taskmanager_running(cluster, job_id, exclude=(first,))
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=240)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 2
    assert_exactly_once(tmp_path, expected)


def test_kill_during_a_checkpoint(cluster, tmp_path):
    job_id, expected = start_page_views(cluster, tmp_path, interval=100)
    wait_for(
        cluster,
        job_id,
        lambda s: (
            s["last_completed_checkpoint"]
            and s["state"] == "RUNNING"
            and any(c["status"] == "IN_PROGRESS" for c in s["checkpoints"])
        ),
        "a checkpoint in progress",
    )
    kill_taskmanager_running(cluster, job_id)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=240)
    assert status["state"] == "FINISHED", status
    assert_exactly_once(tmp_path, expected)


def test_corrupted_metadata_fails_recovery_loudly(cluster, tmp_path):
    # Checkpoints every 5 s: the metadata is corrupted and the TaskManager killed between two of them.
    job_id = cluster.run(os.path.join(JOBS, "endless_counts.py"), str(tmp_path / "out"), "5000", parallelism=2)
    status = wait_for(cluster, job_id, lambda s: s["last_completed_checkpoint"], "a completed checkpoint", timeout=90)
    cid = status["last_completed_checkpoint"]
    metadata = os.path.join(cluster.dir, "checkpoints", job_id, f"chk-{cid}", "_metadata")
    with open(metadata, "w") as f:
        f.write("{not json")
    kill_taskmanager_running(cluster, job_id)
    status = wait_for(
        cluster, job_id, lambda s: s["state"] in ("FAILED", "FINISHED", "CANCELED"), "the job to fail", timeout=120
    )
    assert status["state"] == "FAILED"
    assert metadata in status["failure"] and "unreadable" in status["failure"], status["failure"]
    human = sluice("status", job_id, "--cluster-dir", cluster.dir).stdout
    assert "_metadata" in human


def test_monitored_directory_files_arriving_across_a_kill(cluster, tmp_path):
    """An unbounded job: files keep arriving in the input directory (renamed in,
    as writers must) before and after a TaskManager is killed; once all are in,
    the committed counts are exact, with no line twice, and a cancel ends it."""
    staged, monitored = tmp_path / "staged", tmp_path / "in"
    expected = generate(str(staged), events=200_000, files=90, urls=3_000, seed=9)
    monitored.mkdir()
    names = sorted(os.listdir(staged))

    def arrive(batch):
        for name in batch:
            os.replace(staged / name, monitored / name)

    arrive(names[:10])
    job_id = cluster.run(
        os.path.join(EXAMPLES, "page_views.py"),
        "--input",
        str(monitored),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint-interval",
        "300",
        "--monitor-interval",
        "100",
        parallelism=2,
    )
    wait_for(
        cluster, job_id, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a completed checkpoint"
    )
    arrive(names[10:50])
    kill_taskmanager_running(cluster, job_id)
    arrive(names[50:])
    wait_until(
        lambda: read_counts(str(tmp_path / "out"))[0] == expected,
        timeout=240,
        message="the counts of every file that arrived to be committed",
    )
    status = cluster.status(job_id)
    assert status["state"] == "RUNNING" and status["restarts"] >= 1, status
    assert cluster.client().cancel(job_id)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("CANCELED", "FAILED"), "the cancel")
    assert status["state"] == "CANCELED", status
    assert_exactly_once(tmp_path, expected)
