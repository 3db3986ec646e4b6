"""TaskManagers on an external Spark: `sluice cluster start --spark standalone`
(a Spark standalone master and worker from pyspark's spark-class, one Spark
application per TaskManager, executors in separate JVMs) and `--spark connect`
(a Spark Connect server). The reference job's committed output is exact
through each; kill -9 of an executor JVM mid-job is absorbed by Spark (the
task runs again on a new executor) and the output stays exact; `cluster stop`
leaves no Spark process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import uuid

import psutil
import pytest
from harness import EXAMPLES, LocalCluster, assert_update_stream, read_counts, running_cluster, sluice
from helpers import wait_until

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory, zookeeper):
    """Its own cluster: TaskManagers on a Spark standalone master and worker that the cluster starts."""
    with running_cluster(
        tmp_path_factory.mktemp("standalone"),
        taskmanagers=1,
        slots=2,
        zookeeper=zookeeper.connect_string,
        cluster_id=f"spark-{uuid.uuid4().hex[:8]}",
        spark="standalone",
    ) as c:
        yield c


def processes(cluster: LocalCluster, role: str) -> list[dict]:
    return [p for p in cluster.info["processes"] if p["role"] == role]


def executors(worker_pid: int) -> list[psutil.Process]:
    """The executor JVMs a Spark worker runs (one per application on it)."""
    try:
        children = psutil.Process(worker_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in children:
        try:
            if EXECUTOR_CLASS in p.cmdline():
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def run_to_completion(cluster: LocalCluster, work, expected: dict[str, int]) -> dict:
    job_id = cluster.run_page_views(work, "--checkpoint-interval", "300")
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=240,
        message="page_views to end",
    )
    assert status["state"] == "FINISHED", status
    final, lines = read_counts(os.path.join(work, "out"))
    assert final == expected
    assert_update_stream(lines)
    return status


def test_standalone_cluster_runs_page_views_exactly_on_executors(standalone, tmp_path):
    master, worker = processes(standalone, "spark-master"), processes(standalone, "spark-worker")
    assert len(master) == 1 and len(worker) == 1
    url = master[0]["url"]
    assert url.startswith("spark://127.0.0.1:") and standalone.info["spark"] == {"mode": "standalone", "url": url}
    tm = processes(standalone, "taskmanager")[0]
    assert tm["command"][tm["command"].index("--spark-master") + 1] == url
    status = json.loads(sluice("cluster", "status", "--dir", standalone.dir, "--json").stdout)
    assert status["spark"]["url"] == url
    alive = {p["role"]: p["alive"] for p in status["processes"]}
    assert alive["spark-master"] and alive["spark-worker"]
    # the TaskManager's Spark application has its executor under the worker, not in its own JVM
    assert wait_until(lambda: executors(worker[0]["pid"]), timeout=60, message="an executor on the worker")

    expected = generate(str(tmp_path / "in"), events=200_000, files=60, urls=2_000, seed=11)
    status = run_to_completion(standalone, tmp_path, expected)
    assert status["restarts"] == 0
    # every JVM of it listens on the loopback only: master, worker, executor and the TaskManager's driver
    jvms = [psutil.Process(master[0]["pid"]), psutil.Process(worker[0]["pid"]), *executors(worker[0]["pid"])]
    jvms += [p for p in psutil.Process(tm["pid"]).children(recursive=True) if p.name() == "java"]
    assert len(jvms) >= 4
    listening = [(p.pid, c.laddr.ip) for p in jvms for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(ip in ("127.0.0.1", "::ffff:127.0.0.1") for _pid, ip in listening), listening
    # master, worker and executors keep their scratch files in the cluster's directory, not /tmp
    scratch = os.path.join(standalone.dir, "spark-scratch")
    spark_jvms = [psutil.Process(master[0]["pid"]), psutil.Process(worker[0]["pid"]), *executors(worker[0]["pid"])]
    for p in spark_jvms:  # the TaskManager's driver keeps its own in the TaskManager's working directory
        assert f"-Djava.io.tmpdir={scratch}" in p.environ().get("JAVA_TOOL_OPTIONS", ""), p.cmdline()[:3]
    assert os.listdir(scratch), "the executor's block manager directory"


def test_kill_9_of_an_executor_mid_job_is_retried_by_spark_and_output_stays_exact(standalone, tmp_path):
    worker_pid = processes(standalone, "spark-worker")[0]["pid"]
    [executor] = wait_until(lambda: executors(worker_pid), timeout=60, message="the TaskManager's executor")
    first = generate(str(tmp_path / "first"), events=400_000, files=160, urls=3_000, seed=12)
    later = generate(str(tmp_path / "later"), events=50_000, files=10, urls=3_000, seed=13)
    inputs = tmp_path / "in"
    os.rename(tmp_path / "first", inputs)
    # --monitor-interval: the job keeps reading files that appear later, so it is still running
    # (and needs an executor) after the kill
    job_id = standalone.run_page_views(tmp_path, "--checkpoint-interval", "300", "--monitor-interval", "200")
    wait_until(
        lambda: (s := standalone.status(job_id))["state"] == "RUNNING" and s["last_completed_checkpoint"],
        timeout=120,
        message="a completed checkpoint of the running job",
    )
    os.kill(executor.pid, signal.SIGKILL)
    executor.wait(30)
    # the master gives the application a new executor on the worker
    wait_until(
        lambda: [p for p in executors(worker_pid) if p.pid != executor.pid],
        timeout=120,
        message="a new executor after the kill",
    )
    for name in sorted(os.listdir(tmp_path / "later")):  # atomic renames: the source never sees half a file
        shutil.move(str(tmp_path / "later" / name), str(inputs / f"later-{name}"))
    expected = dict(first)
    for url, n in later.items():
        expected[url] = expected.get(url, 0) + n
    wait_until(
        lambda: read_counts(str(tmp_path / "out"))[0] == expected,
        timeout=240,
        message="the committed counts of both batches",
    )
    status = standalone.status(job_id)
    assert status["state"] == "RUNNING" and status["restarts"] == 0, status  # Spark absorbed the loss, not Sluice
    sluice("cancel", job_id, "--cluster-dir", standalone.dir)
    wait_until(lambda: standalone.status(job_id)["state"] == "CANCELED", timeout=60, message="the job to cancel")
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)
    with open(processes(standalone, "taskmanager")[0]["log"], errors="replace") as f:
        assert "Lost executor" in f.read()  # the TaskManager's Spark driver saw the executor go


def test_cluster_stop_ends_master_worker_and_executors(standalone):
    worker_pid = processes(standalone, "spark-worker")[0]["pid"]
    running = executors(worker_pid)
    assert running
    spark_pids = [p["pid"] for p in standalone.info["processes"] if p["role"].startswith("spark-")]
    standalone.stop()  # asserts that no process of cluster.json survives
    standalone.info = {}  # the fixture's stop has nothing left to do
    assert not [pid for pid in spark_pids if psutil.pid_exists(pid)]
    _gone, alive = psutil.wait_procs(running, timeout=10)
    assert not alive, f"executors left behind: {alive}"


def test_connect_server_runs_page_views_exactly_and_stops(tmp_path, zookeeper):
    """Its own cluster: TaskManagers on a Spark Connect server, whose executor is killed."""
    cluster = LocalCluster(
        tmp_path / "cluster",
        taskmanagers=1,
        slots=2,
        zookeeper=zookeeper.connect_string,
        cluster_id=f"connect-{uuid.uuid4().hex[:8]}",
        spark="connect",
    )
    try:
        cluster.start()
        [server] = processes(cluster, "spark-connect")
        assert server["url"].startswith("sc://127.0.0.1:") and cluster.info["spark"]["mode"] == "connect"
        tm = processes(cluster, "taskmanager")[0]
        assert tm["command"][tm["command"].index("--spark-remote") + 1] == server["url"]
        expected = generate(str(tmp_path / "in"), events=200_000, files=60, urls=2_000, seed=14)
        run_to_completion(cluster, tmp_path, expected)
        server_process = psutil.Process(server["pid"])
        children = server_process.children(recursive=True)  # its Python workers, if any
    finally:
        cluster.stop()  # asserts that no process of cluster.json survives
    _gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"Spark Connect children left behind: {alive}"
