"""A local cluster whose processes all died without `cluster stop` (kill -9, a machine restart) is
resumed by `sluice cluster start` on the same directory: the same cluster id, the ZooKeeper that
still runs (or the embedded one started again on its data), the same CA, so clients keep working;
the new leader recovers the job from ZooKeeper and restores it from its latest completed
checkpoint, and its committed output stays exactly once."""

from __future__ import annotations

import os
import sys

import pytest
from harness import EXAMPLES, LocalCluster, read_counts, sluice, wait_for
from helpers import wait_until
from page_view_jobs import assert_exactly_once

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_cluster_start_resumes_a_crashed_cluster_and_its_job(tmp_path):
    """Its own cluster: every process of it is killed, and `cluster start` brings it and its job back."""
    staged, watched = tmp_path / "staged", tmp_path / "in"
    expected = generate(str(staged), events=120_000, files=30, urls=2_000, seed=13)
    watched.mkdir()
    names = sorted(os.listdir(staged))

    def arrive(batch):
        for name in batch:
            os.replace(staged / name, watched / name)

    cluster = LocalCluster(tmp_path / "cluster", taskmanagers=2, slots=2)
    try:
        cluster.start()
        first_id, ca = cluster.info["cluster_id"], open(cluster.info["tls"]["ca"], "rb").read()
        arrive(names[:10])
        job_id = cluster.run_page_views(tmp_path, "--checkpoint-interval", "300", "--monitor-interval", "100")
        for round_, keep_zookeeper in enumerate((True, False)):
            before = wait_for(
                cluster,
                job_id,
                lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"],
                "a completed checkpoint",
                timeout=180,
            )["last_completed_checkpoint"]
            cluster.crash(keep_zookeeper)  # kill -9 of every process, as a machine crash
            arrive(names[10 + 10 * round_ : 20 + 10 * round_])
            started = sluice("cluster", "start", "--dir", cluster.dir, "--taskmanagers", "2", "--slots", "2")
            assert "resuming cluster" in started.stderr, started.stderr
            cluster.refresh()  # the new processes, for the teardown too
            assert cluster.info["cluster_id"] == first_id
            assert open(cluster.info["tls"]["ca"], "rb").read() == ca  # clients that trust it keep working
            status = wait_for(
                cluster,
                job_id,
                lambda s: s["state"] == "RUNNING" and s.get("restored_checkpoint") is not None,
                "the job recovered by the new leader",
                timeout=180,
            )
            assert status["restored_checkpoint"] >= before, status
        wait_until(
            lambda: _final(tmp_path) == expected,
            timeout=240,
            message="the counts of every file to be committed",
        )
        assert cluster.client().cancel(job_id)
        wait_for(cluster, job_id, lambda s: s["state"] == "CANCELED", "the cancel")
        assert_exactly_once(tmp_path, expected)
    finally:
        cluster.stop()


def _final(tmp_path) -> dict:
    return read_counts(str(tmp_path / "out"))[0]
