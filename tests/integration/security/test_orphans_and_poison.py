"""No orphaned tasks, no busy loops, poison bodies contained, local TaskManagers supervised.

* A DataExchange subscription whose partition is released ends (ABORTED) instead of
  spinning; a local input channel fails the same way (in-process, real gRPC).
* Against a local cluster (`sluice cluster start`, its supervisor, a short
  task.cancellation.timeout): a CancelTask that overtakes its SubmitTask makes the TaskManager
  refuse the late deployment; a job whose body hangs where no cancel reaches is CANCELED, its
  slot is offered to no one while the task's thread lives, its TaskManager gives up and is
  restarted, and the next job takes every slot and writes its exact output; a body that kills
  its TaskManager fails its own job with the root cause in `sluice status --json`, while
  another job finishes with its exact output and the supervisor brings the TaskManagers back.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import psutil
import pytest
from harness import EXAMPLES, LocalCluster, assert_update_stream, read_counts, sluice, wait_ended
from helpers import wait_until

from sluice import graph, rpc
from sluice.api import StreamExecutionEnvironment
from sluice.v1 import dataexchange_pb2, dataexchange_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc
from sluice.zk.leader_retrieval import find_leader
from taskmanager.network.exchange import DataExchangeServicer
from taskmanager.network.input_gate import ChannelError, InputGate, LocalInputChannel
from taskmanager.network.partition import PartitionManager, ResultPartition

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")

pytestmark = pytest.mark.chaos  # bodies that hang, exit or kill their TaskManager
PAGE_VIEWS = os.path.join(EXAMPLES, "page_views.py")
CANCELLATION_TIMEOUT = 5  # seconds: task.cancellation.timeout of the cluster's TaskManagers
SLOTS = 4  # 2 TaskManagers x 2 slots
IDLE_CPU = 0.3  # seconds of CPU this process may use in 1 s without work (a spinning thread uses ~1)


# -- the DataExchange: released partitions end their readers ------------------------------------
@pytest.fixture
def exchange() -> Iterator[tuple[PartitionManager, str]]:
    partitions = PartitionManager()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    dataexchange_pb2_grpc.add_DataExchangeServicer_to_server(DataExchangeServicer(partitions), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield partitions, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def subscribe(address: str, partition_id: str) -> tuple[grpc.Channel, Any]:
    requests: queue.Queue[dataexchange_pb2.ConsumerMessage | None] = queue.Queue()
    requests.put(
        dataexchange_pb2.ConsumerMessage(
            request=dataexchange_pb2.PartitionRequest(partition_id=partition_id, subpartition=0, initial_credit=2)
        )
    )

    def messages() -> Iterator[dataexchange_pb2.ConsumerMessage]:
        while (message := requests.get()) is not None:
            yield message

    channel = grpc.insecure_channel(address)
    return channel, dataexchange_pb2_grpc.DataExchangeStub(channel).Subscribe(messages(), timeout=15)


def cpu_over(seconds: float) -> float:
    """CPU seconds this process (every thread, the gRPC server's included) used in `seconds`."""
    start = time.process_time()
    time.sleep(seconds)  # the measurement window itself
    return time.process_time() - start


def test_a_subscription_to_a_released_partition_ends_instead_of_spinning(exchange):
    partitions, address = exchange
    partitions.register(ResultPartition("job/a.0/src->map/0", 1, 2))
    channel, call = subscribe(address, "job/a.0/src->map/0")
    with channel:
        idle = cpu_over(1.0)  # subscribed, nothing produced: the stream waits
        partitions.release("job/a.0/src->map/0")  # the producer failed or was cancelled
        released_at, cpu_at = time.monotonic(), time.process_time()
        with pytest.raises(grpc.RpcError) as err:
            list(call)
        ended_after = time.monotonic() - released_at
        after = cpu_over(1.0) + (time.process_time() - cpu_at)
    assert err.value.code() == grpc.StatusCode.ABORTED, err.value
    assert "was released before its end" in err.value.details()
    assert ended_after < 2.0, f"the stream took {ended_after:.1f}s to end"
    assert idle < IDLE_CPU and after < IDLE_CPU, f"CPU: {idle:.2f}s idle, {after:.2f}s after the release"


def test_a_subscription_to_an_unknown_partition_ends_not_found(exchange):
    _, address = exchange
    started = time.monotonic()
    channel, call = subscribe(address, "job/a.0/nothing/0")
    with channel, pytest.raises(grpc.RpcError) as err:
        list(call)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "not (yet) produced here" in err.value.details()
    assert time.monotonic() - started < 5.0


def test_a_local_channel_of_a_released_partition_fails_its_gate():
    partitions = PartitionManager()
    partitions.register(ResultPartition("job/a.0/src->map/0", 1, 2))
    gate = InputGate("[job j attempt 0 task map#0]")
    gate.add(LocalInputChannel(gate, 0, "job/a.0/src->map/0", 0, 2, partitions))
    gate.start()
    try:
        cpu_at = time.process_time()
        partitions.release("job/a.0/src->map/0")
        deadline = time.monotonic() + 5.0
        with pytest.raises(ChannelError, match="was released before its end"):
            while time.monotonic() < deadline:
                gate.poll_all(0.2)
        assert time.process_time() - cpu_at < IDLE_CPU
    finally:
        gate.close()


# -- against a cluster ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("orphans") / "cluster",
        taskmanagers=2,
        slots=2,
        options={"task.cancellation.interval": "1s", "task.cancellation.timeout": f"{CANCELLATION_TIMEOUT}s"},
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()
        # the supervisor, and the TaskManagers it started, are gone too (cluster.json as `stop` read it)
        path = os.path.join(c.dir, "cluster.json.stopped")
        if os.path.exists(path):
            with open(path) as f:
                left = [p for p in json.load(f)["processes"] if alive(p["pid"])]
            assert not left, f"left behind by cluster stop: {left}"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes(cluster: LocalCluster, role: str) -> list[dict]:
    """cluster.json now (the supervisor rewrites it when it restarts a TaskManager)."""
    cluster.refresh()
    return [p for p in cluster.info["processes"] if p["role"] == role]


def overview(cluster: LocalCluster):
    with cluster.client() as client:
        return client.cluster()


def every_slot_free(cluster: LocalCluster) -> bool:
    ov = overview(cluster)
    return len(ov.taskmanagers) == 2 and ov.total_slots == SLOTS and ov.free_slots == SLOTS


def wait_every_slot_free(cluster: LocalCluster, timeout: float = 240) -> None:
    wait_until(lambda: every_slot_free(cluster), timeout, "both TaskManagers with every slot free", interval=1)


@pytest.mark.integration
def test_a_cancel_that_overtook_its_deployment_refuses_the_late_submit(cluster):
    wait_every_slot_free(cluster)
    info = cluster.info
    _, session = find_leader(info["zookeeper"], info["cluster_id"], 10, info.get("zookeeper_auth_file"))
    address = processes(cluster, "taskmanager")[0]["address"]
    env = StreamExecutionEnvironment()
    env.from_collection([{"k": "a"}]).print()
    job = env.get_job_graph("late")
    (chain,) = graph.build_chains(job)
    job_id = "f" * 32
    eid = f"{job_id}/{session[:8]}.0/{chain.id}/0"
    with rpc.channel(address, cluster.tls("jobmanager-0")) as channel:  # as the leading JobManager calls
        stub = taskmanager_pb2_grpc.TaskExecutorStub(channel)
        cancel = taskmanager_pb2.CancelTaskRequest(leader_session_id=session, job_id=job_id, execution_id=eid)
        assert stub.CancelTask(cancel, timeout=10).found is False
        tdd = taskmanager_pb2.TaskDeploymentDescriptor(
            leader_session_id=session,
            job_id=job_id,
            execution_id=eid,
            chain_id=chain.id,
            operator_ids=chain.operator_ids,
            parallelism=1,
            slot_index=0,
            job=job,
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.SubmitTask(tdd, timeout=30)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cancelled before it was deployed" in err.value.details()
    assert every_slot_free(cluster)  # the refused task took no slot


@pytest.mark.integration
def test_a_hung_body_is_cancelled_and_its_slot_is_free_only_once_the_task_is_gone(cluster, tmp_path):
    wait_every_slot_free(cluster)
    marker = tmp_path / "marker"
    marker.mkdir()
    hung = cluster.run(os.path.join(JOBS, "hung_body.py"), str(marker))
    wait_until(lambda: (marker / "entered").exists(), 180, "the body to hang", interval=0.5)
    address = cluster.status(hung)["tasks"][0]["taskmanager"]
    (entry,) = [p for p in processes(cluster, "taskmanager") if p["address"] == address]
    sluice("cancel", hung, "--cluster-dir", cluster.dir)

    deadline = time.monotonic() + CANCELLATION_TIMEOUT + 60
    while alive(entry["pid"]):  # the task's thread lives: its slot is offered to no one
        assert time.monotonic() < deadline, "the TaskManager of the hung task did not give up"
        held = [tm for tm in overview(cluster).taskmanagers if tm.address == address]
        assert not held or held[0].free_slots <= 1, held
        time.sleep(0.2)
    status = wait_ended(cluster, hung, 60)
    assert status["state"] == "CANCELED", status
    with open(entry["log"]) as f:
        log = f.read()
    assert f"did not stop within {CANCELLATION_TIMEOUT}s of being cancelled" in log
    assert "time.sleep(3600)" in log  # the log says where the task's thread hung

    wait_every_slot_free(cluster)  # the supervisor started that TaskManager again
    with open(os.path.join(cluster.dir, "log", "supervisor.log")) as f:
        assert "restarted TaskManager" in f.read()
    expected = generate(str(tmp_path / "in"), events=20_000, files=4, urls=300, seed=7)
    job = cluster.run(PAGE_VIEWS, "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), parallelism=4)
    status = wait_ended(cluster, job, 300)
    assert status["state"] == "FINISHED", status
    assert not status["exceptions"] and status["restarts"] == 0, status  # no "slot is held" on the way
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)


@pytest.mark.integration
def test_a_body_that_kills_its_taskmanager_fails_its_job_not_the_cluster(cluster, tmp_path):
    wait_every_slot_free(cluster)
    expected = generate(str(tmp_path / "in"), events=20_000, files=4, urls=300, seed=5)
    poison = cluster.run(os.path.join(JOBS, "poison_body.py"))
    other = cluster.run(PAGE_VIEWS, "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), parallelism=1)

    waiting: list[str] = []

    def poison_ended() -> dict | None:
        other_status = cluster.status(other)
        if other_status["message"].startswith("waiting for slots"):
            waiting.append(other_status["message"])
        s = cluster.status(poison)
        return s if s["state"] in ("FINISHED", "FAILED", "CANCELED") else None

    status = wait_until(poison_ended, 300, "the poison job to end", interval=1)
    assert status["state"] == "FAILED", status
    causes = [e["cause"] for e in status["exceptions"]]
    assert causes and all("was lost while running task" in c and "poison" in c for c in causes), causes
    assert "jobmanager.taskmanager-loss.max-per-job: 2" in status["failure"], status["failure"]
    assert status["restarts"] == 1  # the second TaskManager it took down was the last

    other_status = wait_ended(cluster, other, 400)
    assert other_status["state"] == "FINISHED", other_status
    final, lines = read_counts(str(tmp_path / "out"))
    assert final == expected
    assert_update_stream(lines)
    assert all("last TaskManager loss: TaskManager" in m for m in waiting), waiting
    wait_every_slot_free(cluster, 300)  # the supervisor brought both TaskManagers back
