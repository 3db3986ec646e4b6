"""The dispatcher's calls to TaskManagers and its storage I/O, on a thread pool outside its lock.

`TaskManagerRpc` sends a JobMaster's RPCs to the TaskManager running an execution (each with
a deadline at the caller), asks TaskManagers to release blocking results, runs storage I/O
and reads a TaskManager's log. Results come back under the dispatcher's lock, and only while
the leader session that made the call still holds (and, for an execution's RPC, its attempt
is the same): results of work started under an older session are dropped. Log lines about a
job carry its correlation id, "[job <id> attempt <n>]" or "[job <id>]".
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from jobmanager.master.ports import JobHandle
from sluice import rpc
from sluice.v1 import taskmanager_pb2, taskmanager_pb2_grpc

log = logging.getLogger("sluice.jobmanager")

RELEASE_BATCH = 4096  # partition ids per ReleasePartitions request (the TaskManager's bound)
LONGEST_CALL_S = 30.0  # the longest deadline of a call here (SubmitTask)


class TaskManagerRpc:
    def __init__(
        self,
        lock: threading.RLock,
        session: Callable[[], str | None],
        address_of: Callable[[str], str | None],
        unreachable: Callable[[str, str], None],
        clock: Callable[[], float],
    ) -> None:
        self._lock = lock  # the dispatcher's
        self._session = session  # the current leader session, None when not leading
        self._address_of = address_of  # a living TaskManager's address by resource id
        self._unreachable = unreachable  # (resource id, reason): declare it lost, under the lock
        self._clock = clock
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="jm-rpc")
        self._channels: dict[str, grpc.Channel] = {}
        # Channels forgotten while calls may still run on them: closed once the longest
        # deadline has passed, as (monotonic time to close at, channel).
        self._retired: list[tuple[float, grpc.Channel]] = []
        self._channels_lock = threading.Lock()

    def call_task(
        self,
        job: JobHandle,
        execution_id: str,
        method: str,
        request: Any,
        on_reply: Callable[[Any, str], None] | None = None,
    ) -> None:
        """An RPC to the TaskManager running `execution_id`. An unreachable TaskManager is
        declared lost at once instead of waiting for its heartbeat timeout. `on_reply(reply,
        error)` runs under the lock once it answered (reply None and the error when it failed),
        while this JobManager still leads and the attempt is the same."""
        ex = job.graph.executions.get(execution_id)
        if ex is None or ex.slot is None:  # replaced by a region restart, or not deployed
            if on_reply is not None:
                on_reply(None, "not deployed")
            return
        resource_id, address = ex.slot.resource_id, self._address_of(ex.slot.resource_id)
        if address is None:
            if on_reply is not None:
                on_reply(None, "its TaskManager is gone")
            return  # its TaskManager is gone; the cancel timeout settles it
        session, attempt = self._session(), job.attempt

        def reply(response: Any, error: str) -> None:
            if on_reply is not None:
                with self._lock:
                    if self._session() == session and job.attempt == attempt:
                        on_reply(response, error)

        def call() -> None:
            stub = self.stub(address)
            try:
                response = getattr(stub, method)(request, timeout=LONGEST_CALL_S if method == "SubmitTask" else 10)
                reply(response, "")
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    self.forget(address)
                reply(None, f"{err.code().name}: {err.details()}")
                log.warning(
                    "[job %s attempt %d] %s of %s on %s failed: %s %s",
                    job.job_id,
                    attempt,
                    method,
                    execution_id,
                    address,
                    err.code().name,
                    err.details(),
                )
                with self._lock:
                    if self._session() != session:
                        return
                    if err.code() == grpc.StatusCode.UNAVAILABLE:
                        self._unreachable(resource_id, f"unreachable at {address}")
                    if method == "SubmitTask" and job.attempt == attempt:
                        job.on_deploy_failed(execution_id, f"{address}: {err.details()}", self._clock())

        self.executor.submit(call)

    def release_partitions(
        self, job: JobHandle, resource_id: str, partition_ids: Sequence[str], all_of_job: bool = False
    ) -> None:
        """BATCH: ask a TaskManager to delete blocking results (best effort: a TaskManager that
        is gone took them along; one that restarts starts with none)."""
        address = self._address_of(resource_id)
        if address is None:
            return
        ids = list(partition_ids)
        batches = [ids[i : i + RELEASE_BATCH] for i in range(0, len(ids), RELEASE_BATCH)] or [[]]
        session = self._session() or ""

        def call() -> None:
            for batch in batches:
                request = taskmanager_pb2.ReleasePartitionsRequest(
                    leader_session_id=session, job_id=job.job_id, partition_ids=batch, all_of_job=all_of_job
                )
                try:
                    self.stub(address).ReleasePartitions(request, timeout=10)
                except grpc.RpcError as err:
                    log.info("[job %s] releasing results on %s failed: %s", job.job_id, address, err.code().name)
                    return

        self.executor.submit(call)

    def run_io(self, job: JobHandle, fn: Callable[[], object], done: Callable[[Exception | None], None]) -> None:
        """Storage I/O off the lock; `done(error)` runs back under the lock (if still leader)."""
        session = self._session()

        def work() -> None:
            error = None
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 — any failure is handed to `done`, which decides
                error = exc
                log.warning("[job %s] storage operation failed: %s", job.job_id, exc)
            with self._lock:
                if self._session() == session:
                    done(error)

        self.executor.submit(work)

    def read_log(self, address: str, session: str, max_bytes: int) -> taskmanager_pb2.ReadLogResponse:
        """A TaskManager's ReadLog RPC, on the caller's thread (grpc.RpcError after 10 s)."""
        request = taskmanager_pb2.ReadLogRequest(leader_session_id=session, max_bytes=max_bytes)
        response: taskmanager_pb2.ReadLogResponse = self.stub(address).ReadLog(request, timeout=10)
        return response

    def stub(self, address: str) -> taskmanager_pb2_grpc.TaskExecutorStub:
        with self._channels_lock:
            self._close_retired(time.monotonic())
            ch = self._channels.get(address)
            if ch is None:
                # mutual TLS with the JobManager's certificate; connections of its own, see forget
                ch = self._channels[address] = rpc.channel(address, own_connections=True)
        return taskmanager_pb2_grpc.TaskExecutorStub(ch)

    def forget(self, address: str) -> None:
        """Stop using the channel to `address`: its TaskManager was lost, did not answer, or a
        TaskManager (re-)registered there. A channel whose connects were refused fails every
        call at once for as long as gRPC's reconnect backoff lasts (growing to minutes), even
        after a new TaskManager took over the port; the next call opens a new channel (which
        shares no connection or backoff with the old one: own_connections). Calls
        still running on the old one end by their deadlines; it is closed after the longest."""
        with self._channels_lock:
            ch = self._channels.pop(address, None)
            if ch is not None:
                self._retired.append((time.monotonic() + LONGEST_CALL_S + 5, ch))

    def _close_retired(self, now: float) -> None:
        due = [ch for at, ch in self._retired if at <= now]
        if due:
            self._retired = [(at, ch) for at, ch in self._retired if at > now]
            for ch in due:
                ch.close()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        with self._channels_lock:
            channels = [*self._channels.values(), *(ch for _, ch in self._retired)]
            self._channels.clear()
            self._retired.clear()
        for ch in channels:
            ch.close()
