"""The TaskManager process: a gRPC server (TaskExecutor + DataExchange), one
long-lived SparkSession, the slot table, and the connection to the leader.

It follows the leader address published in ZooKeeper, registers with each
new leader, heartbeats, and runs the tasks deployed to it. Calls carrying
another leader session id are rejected with FAILED_PRECONDITION; when the
leader changes, the old leader's tasks are cancelled.

    python -m taskmanager --zookeeper 127.0.0.1:2181 --slots 2
"""

from __future__ import annotations

import argparse
import logging
import queue
import threading
import time
import uuid

import grpc
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from sluice import logs, rpc
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc, taskmanager_pb2, taskmanager_pb2_grpc
from sluice.v1 import dataexchange_pb2_grpc
from sluice.zk.leader_retrieval import LeaderRetriever
from sluice.zk.paths import ZkPaths
from taskmanager import slot_table as st
from taskmanager.network.exchange import DataExchangeServicer
from taskmanager.network.partition import PartitionManager
from taskmanager.spark_engine import SparkEngine
from taskmanager.task import Task

log = logging.getLogger("sluice.taskmanager")


class TaskManagerProcess(taskmanager_pb2_grpc.TaskExecutorServicer):
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
        self.table = st.TaskSlotTable(slots)
        self.tasks: dict[str, Task] = {}
        self._lock = threading.RLock()
        self.paths = ZkPaths(cluster_id)
        self.zk = KazooClient(hosts=zookeeper, timeout=zk_session_timeout,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2))
        self._leader: tuple[str | None, str | None] = (None, None)  # address, session id published in ZooKeeper
        self._registered_session: str | None = None
        self._leader_changed = threading.Event()
        self._stopped = threading.Event()
        self._reports: queue.Queue = queue.Queue()

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        # Spark first: launching its JVM forks this process, which must not happen
        # while gRPC's threads are running.
        log.info("TaskManager %s with %d slots: starting Spark", self.resource_id, self.slots)
        self.engine.start()
        self.server = rpc.Server(self._host, self._port, ["sluice.v1.TaskExecutor", "sluice.v1.DataExchange"])
        # registered with the leader and dialled by other TaskManagers: the bind host may be 0.0.0.0
        self.address = f"{self._advertised_host}:{self.server.port}" if self._advertised_host else self.server.address
        taskmanager_pb2_grpc.add_TaskExecutorServicer_to_server(self, self.server.server)
        dataexchange_pb2_grpc.add_DataExchangeServicer_to_server(DataExchangeServicer(self.partitions), self.server.server)
        self.server.start()
        log.info("TaskManager %s listening at %s", self.resource_id, self.address)
        self._connect_zookeeper()
        self.retriever = LeaderRetriever(self.zk, self.paths, self._on_leader)
        threading.Thread(target=self._registration_loop, name="tm-registration", daemon=True).start()
        threading.Thread(target=self._report_loop, name="tm-reports", daemon=True).start()
        self.server.set_serving(True)

    def _connect_zookeeper(self) -> None:
        delay = 0.5
        while not self._stopped.is_set():
            try:
                self.zk.start(timeout=10)
                return
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot reach ZooKeeper at %s (%s); retrying in %.1fs", self.zk.hosts, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def stop(self) -> None:
        self._stopped.set()
        if self.server is not None:
            self.server.set_serving(False)
        with self._lock:
            tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            t.join(5)
        if self.server is not None:
            self.server.stop(grace=2)
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001
            pass
        self.engine.stop()

    # -- leader ------------------------------------------------------------------------
    def _on_leader(self, address, session_id) -> None:
        if (address, session_id) != self._leader:
            log.info("leader is now %s (session %s)", address, session_id)
            self._leader = (address, session_id)
            self._leader_changed.set()

    def _registration_loop(self) -> None:
        stub, channel, registered_with, delay = None, None, None, 0.2
        while not self._stopped.is_set():
            address, session = self._leader
            if address is None:
                self._leader_changed.wait(1.0)
                self._leader_changed.clear()
                continue
            try:
                if registered_with != (address, session):
                    # Follow the session published in ZooKeeper before registering: the leader
                    # may deploy to us before its answer to RegisterTaskManager arrives.
                    if session:
                        self._switch_leader(session)
                    if channel is not None:
                        channel.close()
                    channel = grpc.insecure_channel(address)
                    stub = jobmanager_pb2_grpc.ResourceManagerStub(channel)
                    resp = stub.RegisterTaskManager(jobmanager_pb2.RegisterTaskManagerRequest(
                        resource_id=self.resource_id, address=self.address, slots=self.slots), timeout=5)
                    self._switch_leader(resp.leader_session_id)
                    registered_with = (address, session)
                    log.info("registered with leader %s (session %s)", address, resp.leader_session_id)
                    delay = 0.2
                with self._lock:
                    metrics = [jobmanager_pb2.TaskMetrics(execution_id=t.execution_id, records_in=t.records_in,
                                                          records_out=t.records_out) for t in self.tasks.values()]
                resp = stub.Heartbeat(jobmanager_pb2.HeartbeatRequest(
                    resource_id=self.resource_id, leader_session_id=self._registered_session or "", tasks=metrics),
                    timeout=5)
                if not resp.known:
                    log.warning("leader %s does not know this TaskManager; registering again", address)
                    registered_with = None
                    continue
            except grpc.RpcError as err:
                log.warning("leader %s unreachable (%s: %s); retrying in %.1fs", address, err.code().name,
                            err.details(), delay)
                registered_with = None if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED else registered_with
                self._leader_changed.wait(delay)
                self._leader_changed.clear()
                delay = min(delay * 2, 2.0)
                continue
            except Exception:  # noqa: BLE001 — this thread must outlive any failure
                log.exception("registration with leader %s failed; retrying", address)
                registered_with = None
                time.sleep(delay)
                continue
            self._leader_changed.wait(self.heartbeat_interval)
            self._leader_changed.clear()

    def _switch_leader(self, session_id: str) -> None:
        with self._lock:
            if self._registered_session == session_id:
                return
            if self._registered_session is not None:
                actions = self.table.handle(st.LeaderChanged())
                for a in actions:
                    if isinstance(a, st.CancelTasks):
                        log.warning("new leader session %s: cancelling %d tasks of the old leader",
                                    session_id, len(a.execution_ids))
                        for eid in a.execution_ids:
                            task = self.tasks.pop(eid, None)
                            if task is not None:
                                task.cancel()
            self._registered_session = session_id

    # -- reports to the leader (one ordered queue: acks before FINISHED) ---------------------------
    def _report(self, task: Task, state: str, error: str, end_of_input: bool = False) -> None:
        if state in ("FINISHED", "CANCELED", "FAILED"):
            with self._lock:
                if self.tasks.get(task.execution_id) is task:  # not a newer deployment of the same id
                    self.table.handle(st.TaskEnded(task.execution_id))
                    del self.tasks[task.execution_id]
        self._reports.put(("UpdateTaskExecutionState", jobmanager_pb2.TaskExecutionState(
            resource_id=self.resource_id, leader_session_id=task.tdd.leader_session_id, job_id=task.job_id,
            attempt=task.tdd.attempt, execution_id=task.execution_id, state=state, error=error,
            records_in=task.records_in, records_out=task.records_out, end_of_input=end_of_input)))

    def _acknowledge(self, task: Task, checkpoint_id: int, handle: bytes, size: int) -> None:
        self._reports.put(("AcknowledgeCheckpoint", jobmanager_pb2.AcknowledgeCheckpointRequest(
            leader_session_id=task.tdd.leader_session_id, job_id=task.job_id, execution_id=task.execution_id,
            checkpoint_id=checkpoint_id, state_handle=handle, size_bytes=size)))

    def _decline(self, task: Task, checkpoint_id: int, reason: str) -> None:
        self._reports.put(("DeclineCheckpoint", jobmanager_pb2.DeclineCheckpointRequest(
            leader_session_id=task.tdd.leader_session_id, job_id=task.job_id, execution_id=task.execution_id,
            checkpoint_id=checkpoint_id, reason=reason)))

    def _report_loop(self) -> None:
        channel, channel_address = None, None
        while not self._stopped.is_set():
            try:
                method, msg = self._reports.get(timeout=0.5)
            except queue.Empty:
                continue
            deadline = time.monotonic() + 30
            while not self._stopped.is_set() and time.monotonic() < deadline:
                if msg.leader_session_id != self._registered_session:
                    break  # that leader is gone; the new one redeploys
                address = self._leader[0]
                if address is None:  # between two leaders
                    time.sleep(0.2)
                    continue
                try:
                    if address != channel_address:
                        if channel is not None:
                            channel.close()
                        channel, channel_address = grpc.insecure_channel(address), address
                    getattr(jobmanager_pb2_grpc.ResourceManagerStub(channel), method)(msg, timeout=5)
                    break
                except Exception as err:  # noqa: BLE001 — this thread must outlive any failure
                    detail = f"{err.code().name}: {err.details()}" if isinstance(err, grpc.RpcError) else repr(err)
                    log.warning("[job %s] %s for %s failed: %s; retrying", msg.job_id, method, msg.execution_id, detail)
                    time.sleep(0.5)

    # -- TaskExecutor service ---------------------------------------------------------------
    def _check_fencing(self, session_id: str, context) -> None:
        if not session_id or session_id != self._registered_session:
            log.warning("rejected a call from leader session %r: this TaskManager follows %r", session_id,
                        self._registered_session)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"leader session {session_id!r} is not the one this TaskManager follows "
                          f"({self._registered_session!r})")

    def SubmitTask(self, request, context):
        self._check_fencing(request.leader_session_id, context)
        with self._lock:
            actions = self.table.handle(st.TaskSubmitted(request.slot_index, request.job_id, request.execution_id))
            rejected = [a for a in actions if isinstance(a, st.Rejected)]
            if rejected:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"task {request.execution_id}: {rejected[0].reason}")
            task = Task(request, self.engine, self.partitions, self.address, self._report, self._acknowledge,
                        self._decline)
            self.tasks[request.execution_id] = task
        log.info("[job %s attempt %d] deploying %s to slot %d", request.job_id, request.attempt,
                 request.execution_id, request.slot_index)
        task.start()
        return taskmanager_pb2.SubmitTaskResponse()

    def CancelTask(self, request, context):
        self._check_fencing(request.leader_session_id, context)
        with self._lock:
            task = self.tasks.get(request.execution_id)
        if task is None:
            return taskmanager_pb2.CancelTaskResponse(found=False)
        log.info("[job %s] cancelling %s", request.job_id, request.execution_id)
        task.cancel()
        return taskmanager_pb2.CancelTaskResponse(found=True)


    def _task_for(self, request, context) -> Task | None:
        self._check_fencing(request.leader_session_id, context)
        with self._lock:
            return self.tasks.get(request.execution_id)

    def TriggerCheckpoint(self, request, context):
        task = self._task_for(request, context)
        if task is not None:
            task.trigger_checkpoint(request.checkpoint_id, request.final)
        return taskmanager_pb2.TriggerCheckpointResponse(found=task is not None)

    def NotifyCheckpointComplete(self, request, context):
        task = self._task_for(request, context)
        if task is not None:
            task.notify_complete(request.checkpoint_id, request.final)
        return taskmanager_pb2.CheckpointNotificationResponse(found=task is not None)

    def NotifyCheckpointAborted(self, request, context):
        task = self._task_for(request, context)
        if task is not None:
            task.notify_aborted(request.checkpoint_id)
        return taskmanager_pb2.CheckpointNotificationResponse(found=task is not None)


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
