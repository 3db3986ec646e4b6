"""The TaskManager process: a gRPC server (TaskExecutor + DataExchange), one
long-lived SparkSession, the tasks and their slots, the ZooKeeper client,
and the connection to the leader.

It follows the leader address published in ZooKeeper, registers with each
new leader, heartbeats, and runs the tasks deployed to it. The parts:
taskmanager/servicer.py (the TaskExecutor RPCs and their fencing),
taskmanager/leader_connection.py (registration, heartbeats, the ordered
report queue), taskmanager/task_registry.py (tasks, slots and the leader
session they belong to); this module starts and stops them. The process's
local files (the blocking result partitions of BATCH jobs) live in its working
directory (taskmanager/local_dir.py), removed when it stops.

    python -m taskmanager --zookeeper 127.0.0.1:2181 --slots 2 [--address-file F]
    sluice taskmanager --config sluice.yaml     # file < SLUICE_* environment < flags

Both build a sluice.config.Settings (the OPTIONS table holds every default)
and call run(settings).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
from collections.abc import Sequence

from kazoo.retry import KazooRetry

from sluice import config, logs, rpc
from sluice.http_server import HttpServer
from sluice.metrics import prometheus
from sluice.retries import RetryCallState, retrying
from sluice.v1 import dataexchange_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc
from sluice.zk import auth as zk_auth
from sluice.zk.leader_retrieval import LeaderRetriever
from sluice.zk.paths import ZkPaths
from taskmanager import local_dir, spark_cds
from taskmanager.leader_connection import LeaderConnection
from taskmanager.memory_reclaim import MemoryReclaimer
from taskmanager.metrics import TaskManagerMetrics
from taskmanager.network.exchange import DataExchangeServicer
from taskmanager.network.partition import PartitionManager
from taskmanager.servicer import TaskExecutorServicer
from taskmanager.spark_engine import SparkEngine
from taskmanager.task import Task
from taskmanager.task_registry import EXIT_SPARK_JVM_DIED, EXIT_TASK_DID_NOT_STOP, TaskRegistry, exit_process

log = logging.getLogger("sluice.taskmanager")

ZK_CONNECT_DEADLINE = 600.0  # seconds a starting TaskManager keeps trying to reach ZooKeeper
ZK_CONNECT_TIMEOUT = 10.0  # seconds per attempt
FATAL_FLUSH_TIMEOUT = 5.0  # seconds a TaskManager that gives up waits for its last reports to reach the leader
JVM_WATCH_INTERVAL = 0.5  # seconds between checks that the Spark JVM still runs
SERVER_WORKERS = 1024  # gRPC server threads at most: control RPCs and one per remote input channel served


class TaskManagerProcess:
    def __init__(self, settings: config.Settings):
        """A TaskManager configured by `settings` (role taskmanager; build them with
        sluice.config.resolve or load). rpc.advertised-host 'auto' is resolved here."""
        if settings.role != "taskmanager":
            raise ValueError(f"TaskManagerProcess needs taskmanager settings, got {settings.role} settings")
        self._advertised_host = settings.advertised_host()
        self.resource_id = settings.get(config.TASKMANAGER_RESOURCE_ID) or f"tm-{uuid.uuid4().hex[:8]}"
        self.slots = slots = settings.get(config.TASKMANAGER_SLOTS)
        # until the leader says otherwise in its registration answer
        heartbeat_interval = settings.get(config.HEARTBEAT_INTERVAL)
        self._host, self._port = settings.get(config.RPC_HOST), settings.get(config.RPC_PORT)
        # TLS files or an explicit --insecure (ConfigError otherwise); calls to the leader and peers use them too
        self._security = rpc.Security.from_settings(settings)
        rpc.use_tls(self._security.tls)
        self._health_port = settings.get(config.RPC_HEALTH_PORT)
        self._metrics_port = settings.get(config.METRICS_PORT)
        self.metrics_server: HttpServer | None = None
        self.endpoints: dict[str, str] = {}  # written to the address file after the address (cluster.json)
        self.server: rpc.Server | None = None
        self.address = ""
        self.work_dir: str | None = None  # the process's local files (made at start: taskmanager/local_dir.py)
        self.partitions = PartitionManager()  # given the working directory at start
        spark_host = config.reachable_host(self._advertised_host, self._host)
        try:
            cds_archive = spark_cds.resolve(settings.get(config.SPARK_CDS_ARCHIVE))
        except ValueError as exc:
            raise config.ConfigError(str(exc), config.SPARK_CDS_ARCHIVE.key) from None
        self._spark_warm_up = settings.get(config.SPARK_WARM_UP)
        self.engine = SparkEngine(
            slots,
            master=settings.get(config.SPARK_MASTER),
            remote=settings.get(config.SPARK_REMOTE),
            host=spark_host,
            cds_archive=cds_archive,
        )
        self.tasks = TaskRegistry(
            slots,
            cancellation_interval=settings.get(config.TASK_CANCELLATION_INTERVAL),
            cancellation_timeout=settings.get(config.TASK_CANCELLATION_TIMEOUT),
            on_fatal=self._fatal,
            reclaimer=MemoryReclaimer(reports_sent=lambda timeout: self.leader.flush(timeout)),
        )
        self.paths = ZkPaths(settings.get(config.CLUSTER_ID))
        # The connection is retried forever once established (a ZooKeeper restart must not end
        # the TaskManager); the first connect has its deadline in _connect_zookeeper.
        self.zk = zk_auth.make_client(
            settings.get(config.ZOOKEEPER_QUORUM),
            zk_auth.ZkAuth.resolve(settings.get(config.ZOOKEEPER_AUTH_FILE), settings.get(config.ZOOKEEPER_CLIENT_ACL)),
            timeout=settings.get(config.ZOOKEEPER_SESSION_TIMEOUT),
            connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2),
        )
        self._stopped = threading.Event()
        self.leader = LeaderConnection(self.resource_id, slots, self.tasks, heartbeat_interval, self._stopped)
        self.retriever: LeaderRetriever | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        # Spark first: launching its JVM forks this process, which must not happen
        # while gRPC's threads are running.
        log.info("TaskManager %s with %d slots: starting Spark", self.resource_id, self.slots)
        self.work_dir = local_dir.create(self.resource_id)  # Spark's scratch space is in it
        self.engine.start(
            warm_up="background" if self._spark_warm_up else "off",
            local_dir=os.path.join(self.work_dir, local_dir.SPARK_DIR),
        )
        threading.Thread(target=self._watch_spark_jvm, name="spark-jvm-watch", daemon=True).start()
        self.partitions = PartitionManager(self.work_dir)
        log.info("TaskManager %s: working directory %s", self.resource_id, self.work_dir)
        server = self.server = rpc.Server(
            self._host,
            self._port,
            ["sluice.v1.TaskExecutor", "sluice.v1.DataExchange"],
            # every remote input channel holds one worker for as long as its Subscribe stream lasts
            # (a consumer subscribes to each producer subtask of each edge, forward ones too): with
            # gRPC's 32 a job of ~30 edges across two TaskManagers left no worker for SubmitTask,
            # TriggerCheckpoint or CancelTask. Threads are started only as calls need them.
            max_workers=SERVER_WORKERS,
            security=self._security,
            health_port=self._health_port,
        )
        # registered with the leader and dialled by other TaskManagers: the bind host may be 0.0.0.0
        self.address = f"{self._advertised_host}:{server.port}" if self._advertised_host else server.address
        taskmanager_pb2_grpc.add_TaskExecutorServicer_to_server(
            TaskExecutorServicer(self.tasks, self._new_task, self.partitions), server.server
        )
        dataexchange_pb2_grpc.add_DataExchangeServicer_to_server(DataExchangeServicer(self.partitions), server.server)
        server.start()
        if self._metrics_port is not None:
            collector = TaskManagerMetrics(self.resource_id, self.slots, self.tasks, self.engine)
            self.metrics_server = prometheus.serve(collector.collect, self._host, self._metrics_port)
            host = config.reachable_host(self._advertised_host, self._host)
            self.endpoints["metrics"] = f"{host}:{self.metrics_server.port}"
            log.info(
                "TaskManager %s: Prometheus metrics at http://%s/metrics", self.resource_id, self.endpoints["metrics"]
            )
        log.info(
            "TaskManager %s listening at %s (%s)%s",
            self.resource_id,
            self.address,
            "mutual TLS" if server.secure else "PLAINTEXT, no authentication",
            f", health only on plaintext port {server.health_port}" if server.health_port else "",
        )
        if not self._connect_zookeeper():
            return  # stopped meanwhile
        self.retriever = LeaderRetriever(self.zk, self.paths, self.leader.on_leader)
        self.leader.start(self.address)
        server.set_serving(True)

    def _fatal(self, reason: str, status: int = EXIT_TASK_DID_NOT_STOP) -> None:
        """A task will not stop, or Spark is gone: tell the leader what happened (bounded), then
        exit for the supervisor (or the container's restart policy) to start a fresh TaskManager
        (taskmanager/task_registry.py, the watchdog)."""
        log.critical("TaskManager %s gives up: %s", self.resource_id, reason)
        if self.server is not None:
            self.server.set_serving(False)  # unhealthy from now on: probes and peers see it
        if not self.leader.flush(FATAL_FLUSH_TIMEOUT):
            log.error("TaskManager %s: reports not delivered within %.0fs", self.resource_id, FATAL_FLUSH_TIMEOUT)
        exit_process(reason, status)

    def _watch_spark_jvm(self) -> None:
        """A TaskManager whose Spark JVM died (killed, the OOM killer, a job's body calling
        System.exit) can run no task: every task on it would fail with py4j connection errors
        and its free slots would draw the restarts. Within JVM_WATCH_INTERVAL it says why,
        stops serving and exits (status EXIT_SPARK_JVM_DIED), so that its slots are gone and a
        fresh TaskManager replaces it; the leader restarts the tasks it ran elsewhere."""
        while not self._stopped.wait(JVM_WATCH_INTERVAL):
            status = self.engine.jvm_exit_status()
            if status is None or self._stopped.is_set():
                continue
            self._fatal(
                f"its Spark JVM (pid {self.engine.jvm_pid()}) exited with status {status}; "
                f"{len(self.tasks.all())} task(s) ran on it",
                EXIT_SPARK_JVM_DIED,
            )
            return

    def _new_task(self, tdd: taskmanager_pb2.TaskDeploymentDescriptor) -> Task:
        return Task(tdd, self.engine, self.partitions, self.address, self.leader)

    def _connect_zookeeper(self) -> bool:
        """Connect, retrying with backoff until ZK_CONNECT_DEADLINE; False when stopped meanwhile."""
        retry = retrying(
            deadline=ZK_CONNECT_DEADLINE,
            stopped=self._stopped,
            retry_on=Exception,
            first_wait=0.5,
            max_wait=5.0,
            before_sleep=self._log_zookeeper_retry,
        )
        try:
            retry(self.zk.start, timeout=ZK_CONNECT_TIMEOUT)
        except Exception:
            if self._stopped.is_set():
                return False
            log.error(
                "TaskManager %s: ZooKeeper at %s unreachable for %.0fs; giving up",
                self.resource_id,
                self.zk.hosts,
                ZK_CONNECT_DEADLINE,
            )
            raise
        return True

    def _log_zookeeper_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "TaskManager %s: cannot reach ZooKeeper at %s (%s); retrying in %.1fs",
            self.resource_id,
            self.zk.hosts,
            exc,
            state.upcoming_sleep,
        )

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
        self.partitions.close()  # blocking partitions: their files go
        if self.metrics_server is not None:
            self.metrics_server.stop()
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 — shutting down: nothing left to tell
            pass
        self.engine.stop()
        if self.work_dir is not None:  # after Spark, whose scratch files are in it
            local_dir.remove(self.work_dir)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m taskmanager`: flags from sluice/process_options.py's OPTIONS and --address-file."""
    settings, address_file = config.parse_process_argv("taskmanager", argv)
    try:
        run(settings, address_file)
    except config.ConfigError as exc:
        sys.exit(f"taskmanager: configuration error: {exc}")


def run(settings: config.Settings, address_file: str | None = None) -> None:
    """Run a TaskManager with `settings` until SIGTERM or SIGINT has stopped it gracefully;
    write its host:port to `address_file` once it listens."""
    os.umask(int(settings.get(config.PROCESS_UMASK), 8))  # before any file: its log, state, checkpoints
    logs.setup("taskmanager", log_file=settings.get(config.LOG_FILE))
    rpc.run_until_signalled(TaskManagerProcess(settings), "TaskManager", address_file)
