"""The Prometheus endpoints of a real cluster (docs/monitoring.md): scraped while a job
with a deliberately slow consumer runs — rates, busy and backpressured time, checkpoint
counters — and through a kill -9 of the leading JobManager, after which the new leader's
counters go on from the old ones instead of starting at 0."""

from __future__ import annotations

import os
import signal
import urllib.request

import psutil
import pytest
from harness import JOBS, sluice
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.integration, pytest.mark.chaos]  # on the cluster of two JobManagers, the leader killed


@pytest.fixture
def cluster(ha_cluster):
    """The chaos tier's cluster of two JobManagers (conftest.py): the leader is killed while the
    metrics are read."""
    return ha_cluster


def scrape(address: str) -> dict[tuple[str, frozenset], float]:
    """{(name, labels): value} of an endpoint's samples."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


def values(samples, name: str, **labels: str) -> list[float]:
    want = set(labels.items())
    return [v for (n, ls), v in samples.items() if n == name and want <= ls]


def endpoint(cluster, role: str, key: str) -> list[str]:
    return [p[key] for p in cluster.info["processes"] if p["role"] == role]


def test_cluster_json_lists_metrics_and_rest_ports(cluster):
    for p in cluster.info["processes"]:
        if p["role"] in ("jobmanager", "taskmanager"):
            host, port = p["metrics"].rsplit(":", 1)
            assert host and int(port) > 0
        if p["role"] == "jobmanager":
            assert p["rest"] != p["metrics"] and int(p["rest"].rsplit(":", 1)[1]) > 0


def test_rates_backpressure_and_counters_survive_a_leader_kill(cluster, tmp_path):
    job_id = cluster.run(os.path.join(JOBS, "slow_sink.py"), str(tmp_path / "out"), "1.0", "1000", parallelism=1)
    try:

        def task_view():  # the TaskManager running the job's one subtask of each task
            s = {k: v for tm in endpoint(cluster, "taskmanager", "metrics") for k, v in scrape(tm).items()}
            return {
                "source_rate": values(
                    s, "sluice_taskmanager_job_task_numRecordsOutPerSecond", job_id=job_id, task="numbers"
                ),
                "source_bp": values(
                    s, "sluice_taskmanager_job_task_backPressuredTimeMsPerSecond", job_id=job_id, task="numbers"
                ),
                "slow_busy": values(
                    s, "sluice_taskmanager_job_task_busyTimeMsPerSecond", job_id=job_id, task="slow -> sink"
                ),
                "slow_in": values(s, "sluice_taskmanager_job_task_numRecordsIn", job_id=job_id, task="slow -> sink"),
            }

        # The generator outruns a consumer sleeping 1 s per 1000 rows: it spends most of its time
        # waiting for room downstream, while the consumer is busy.
        view = wait_until(
            lambda: (
                (v := task_view())["source_bp"]
                and v["source_bp"][0] > 300
                and v["slow_busy"][0] > 300
                and v["source_rate"][0] > 0
                and v["slow_in"][0] > 0
                and v
            ),
            timeout=120,
            message="the source backpressured and the slow task busy",
        )
        assert view["source_bp"][0] <= 1000 and view["slow_busy"][0] <= 1000

        leader_address = cluster.status(job_id)["leader"]
        leader = next(p for p in cluster.info["processes"] if p["address"] == leader_address)
        standby = next(p for p in cluster.info["processes"] if p["role"] == "jobmanager" and p is not leader)
        assert values(scrape(standby["metrics"]), "sluice_jobmanager_isLeader") == [0.0]

        def completed(address: str) -> float:
            found = values(scrape(address), "sluice_jobmanager_job_numberOfCompletedCheckpoints", job_id=job_id)
            return found[0] if found else 0.0

        before = wait_until(
            lambda: completed(leader["metrics"]) >= 2 and completed(leader["metrics"]),
            timeout=90,
            message="two completed checkpoints",
        )
        s = scrape(leader["metrics"])
        assert values(s, "sluice_jobmanager_job_lastCheckpointDuration", job_id=job_id)[0] >= 0
        assert values(s, "sluice_jobmanager_job_numRestarts", job_id=job_id) == [0.0]
        assert values(s, "sluice_jobmanager_numRegisteredTaskManagers") == [float(cluster.taskmanagers)]

        proc = psutil.Process(leader["pid"])
        os.kill(leader["pid"], signal.SIGKILL)
        psutil.wait_procs([proc], timeout=10)

        def taken_over():
            s = scrape(standby["metrics"])
            done = values(s, "sluice_jobmanager_job_numberOfCompletedCheckpoints", job_id=job_id)
            return values(s, "sluice_jobmanager_isLeader") == [1.0] and done and done[0] > before and s

        s = wait_until(taken_over, timeout=120, message="the standby leading, with more checkpoints than before")
        # the takeover restarted the job's tasks once: counted on top of the old leader's count
        assert values(s, "sluice_jobmanager_job_numRestarts", job_id=job_id) == [1.0]
    finally:
        sluice("cancel", job_id, "--cluster-dir", cluster.dir, check=False)
