"""The TaskManager process: a gRPC server (TaskExecutor + DataExchange), one
long-lived SparkSession, the tasks and their slots, the ZooKeeper client,
and the connection to the leader.

It follows the leader address published in ZooKeeper, registers with each
new leader, heartbeats, and runs the tasks deployed to it. The parts:
taskmanager/servicer.py (the TaskExecutor RPCs and their fencing),
taskmanager/leader_connection.py (registration, heartbeats, the ordered
report queue), taskmanager/task_registry.py (tasks, slots and the leader
session they belong to); this module starts and stops them.

    python -m taskmanager --zookeeper 127.0.0.1:2181 --slots 2
"""

from __future__ import annotations

import argparse
import logging
import threading
import uuid

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    stop_when_event_set,
    wait_exponential_jitter,
)

from sluice import logs, rpc
from sluice.v1 import dataexchange_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc
from sluice.zk.leader_retrieval import LeaderRetriever
from sluice.zk.paths import ZkPaths
from taskmanager.leader_connection import LeaderConnection
from taskmanager.network.exchange import DataExchangeServicer
from taskmanager.network.partition import PartitionManager
from taskmanager.servicer import TaskExecutorServicer
from taskmanager.spark_engine import SparkEngine
from taskmanager.task import Task
from taskmanager.task_registry import TaskRegistry

log = logging.getLogger("sluice.taskmanager")

ZK_CONNECT_DEADLINE = 600.0  # seconds a starting TaskManager keeps trying to reach ZooKeeper
ZK_CONNECT_TIMEOUT = 10.0    # seconds per attempt


class TaskManagerProcess:
    def __init__(self, zookeeper: str, cluster_id: str, slots: int, host: str = "127.0.0.1", port: int = 0,
                 resource_id: str | None = None, spark_master: str | None = None, spark_remote: str | None = None,
                 heartbeat_interval: float = 1.0, zk_session_timeout: float = 6.0,
                 advertised_host: str | None = None):
        self._advertised_host = advertised_host
        self.resource_id = resource_id or f"tm-{uuid.uuid4().hex[:8]}"
        self.slots = slots
        self.heartbeat_interval = heartbeat_interval
        self._host, self._port = host, port
        self.server: rpc.Server | None = None
        self.address = ""
        self.partitions = PartitionManager()
        self.engine = SparkEngine(slots, master=spark_master, remote=spark_remote)
        self.tasks = TaskRegistry(slots)
        self.paths = ZkPaths(cluster_id)
        self.zk = KazooClient(hosts=zookeeper, timeout=zk_session_timeout,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2))
        self._stopped = threading.Event()
        self.leader = LeaderConnection(self.resource_id, slots, self.tasks, heartbeat_interval, self._stopped)
        self.retriever: LeaderRetriever | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        # Spark first: launching its JVM forks this process, which must not happen
        # while gRPC's threads are running.
        log.info("TaskManager %s with %d slots: starting Spark", self.resource_id, self.slots)
        self.engine.start()
        server = self.server = rpc.Server(self._host, self._port, ["sluice.v1.TaskExecutor", "sluice.v1.DataExchange"])
        # registered with the leader and dialled by other TaskManagers: the bind host may be 0.0.0.0
        self.address = f"{self._advertised_host}:{server.port}" if self._advertised_host else server.address
        taskmanager_pb2_grpc.add_TaskExecutorServicer_to_server(TaskExecutorServicer(self.tasks, self._new_task),
                                                                server.server)
        dataexchange_pb2_grpc.add_DataExchangeServicer_to_server(DataExchangeServicer(self.partitions), server.server)
        server.start()
        log.info("TaskManager %s listening at %s", self.resource_id, self.address)
        if not self._connect_zookeeper():
            return  # stopped meanwhile
        self.retriever = LeaderRetriever(self.zk, self.paths, self.leader.on_leader)
        self.leader.start(self.address)
        server.set_serving(True)

    def _new_task(self, tdd: taskmanager_pb2.TaskDeploymentDescriptor) -> Task:
        return Task(tdd, self.engine, self.partitions, self.address, self.leader)

    def _connect_zookeeper(self) -> bool:
        """Connect, retrying with backoff until ZK_CONNECT_DEADLINE; False when stopped meanwhile."""
        retrying = Retrying(stop=stop_after_delay(ZK_CONNECT_DEADLINE) | stop_when_event_set(self._stopped),
                            wait=wait_exponential_jitter(multiplier=0.5, max=5.0, jitter=0.5),
                            retry=retry_if_exception_type(Exception), sleep=self._sleep,
                            before_sleep=self._log_zookeeper_retry, reraise=True)
        try:
            retrying(self.zk.start, timeout=ZK_CONNECT_TIMEOUT)
        except Exception:
            if self._stopped.is_set():
                return False
            log.error("TaskManager %s: ZooKeeper at %s unreachable for %.0fs; giving up", self.resource_id,
                      self.zk.hosts, ZK_CONNECT_DEADLINE)
            raise
        return True

    def _sleep(self, seconds: float) -> None:
        self._stopped.wait(seconds)  # stopping the process ends the wait

    def _log_zookeeper_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning("TaskManager %s: cannot reach ZooKeeper at %s (%s); retrying in %.1fs", self.resource_id,
                    self.zk.hosts, exc, state.upcoming_sleep)

    def stop(self) -> None:
        self._stopped.set()
        if self.server is not None:
            self.server.set_serving(False)
        tasks = self.tasks.all()
        for t in tasks:
            t.cancel()
        for t in tasks:
            t.join(5)
        if self.server is not None:
            self.server.stop(grace=2)
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 — shutting down: nothing left to tell
            pass
        self.engine.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="taskmanager", description="Run a Sluice TaskManager")
    ap.add_argument("--zookeeper", required=True)
    ap.add_argument("--cluster-id", default="default")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--advertised-host", help="host registered with the leader and used by other TaskManagers "
                                               "to reach this one (default: --host)")
    ap.add_argument("--resource-id")
    ap.add_argument("--spark-master", help="e.g. spark://host:7077 (default local[slots])")
    ap.add_argument("--spark-remote", help="a Spark Connect URL, e.g. sc://host:15002")
    ap.add_argument("--heartbeat-interval", type=float, default=1.0)
    ap.add_argument("--zk-session-timeout", type=float, default=6.0)
    ap.add_argument("--log-file")
    ap.add_argument("--address-file")
    args = ap.parse_args(argv)
    if args.slots < 1:
        ap.error(f"--slots must be at least 1, got {args.slots}")
    logs.setup("taskmanager", log_file=args.log_file)
    proc = TaskManagerProcess(args.zookeeper, args.cluster_id, args.slots, args.host, args.port, args.resource_id,
                              args.spark_master, args.spark_remote, args.heartbeat_interval, args.zk_session_timeout,
                              advertised_host=args.advertised_host)
    rpc.run_until_signalled(proc, "TaskManager", args.address_file)
