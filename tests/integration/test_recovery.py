"""Exactly-once recovery: kill -9 TaskManagers while page_views runs; the job
restores every task from the latest completed checkpoint and the committed
output equals the independently computed counts, with no line twice."""

from __future__ import annotations

import collections
import glob
import os
import sys
import uuid

import pytest
from harness import (
    EXAMPLES,
    JOBS,
    LocalCluster,
    assert_update_stream,
    kill_process_tree,
    read_counts,
    sluice,
    taskmanager_log_lines,
)
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster_factory(tmp_path, zookeeper):
    made = []

    def make(taskmanagers: int = 2, slots: int = 2) -> LocalCluster:
        c = LocalCluster(
            tmp_path / f"cluster{len(made)}",
            taskmanagers=taskmanagers,
            slots=slots,
            zookeeper=zookeeper.connect_string,
            cluster_id=f"rec-{uuid.uuid4().hex[:8]}",
        )
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


def start_page_views(cluster, tmp_path, events=300_000, files=120, interval=300):
    expected = generate(str(tmp_path / "in"), events=events, files=files, urls=3_000, seed=5)
    job_id = cluster.run(
        os.path.join(EXAMPLES, "page_views.py"),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint-interval",
        str(interval),
        parallelism=2,
    )
    return job_id, expected


def kill_taskmanager_running(cluster, job_id, exclude=()) -> str:
    """kill -9 a TaskManager hosting tasks of the job; returns its address."""
    status = cluster.status(job_id)
    address = next(t["taskmanager"] for t in status["tasks"] if t["taskmanager"] not in exclude)
    kill_process_tree(next(p["pid"] for p in cluster.info["processes"] if p["address"] == address))
    return address


def wait_for(cluster, job_id, predicate, message, timeout=120):
    return wait_until(lambda: (s := cluster.status(job_id)) and predicate(s) and s, timeout=timeout, message=message)


def assert_exactly_once(tmp_path, expected):
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)
    # per url, counts only grow in commit order (files sort by subtask, attempt, part)
    last: dict[str, int] = collections.defaultdict(int)
    for url, count in lines:
        assert count > last[url], f"{url}: {count} after {last[url]}"
        last[url] = count
    assert not [f for f in glob.glob(str(tmp_path / "out" / ".*"))], "staging files left behind"


def restored_offsets(cluster) -> list[str]:
    return taskmanager_log_lines(cluster.dir, "restored from checkpoint", "source offset")


def test_kill_taskmanager_after_a_checkpoint(cluster_factory, tmp_path):
    cluster = cluster_factory()
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
    offsets = restored_offsets(cluster)
    assert offsets and all("source offset 0)" not in line for line in offsets), offsets


def test_two_taskmanager_kills_in_a_row(cluster_factory, tmp_path):
    cluster = cluster_factory(taskmanagers=3)
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


def test_kill_during_a_checkpoint(cluster_factory, tmp_path):
    cluster = cluster_factory()
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


def test_corrupted_metadata_fails_recovery_loudly(cluster_factory, tmp_path):
    cluster = cluster_factory()
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


def test_monitored_directory_files_arriving_across_a_kill(cluster_factory, tmp_path):
    """An unbounded job: files keep arriving in the input directory (renamed in,
    as writers must) before and after a TaskManager is killed; once all are in,
    the committed counts are exact, with no line twice, and a cancel ends it."""
    cluster = cluster_factory()
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
