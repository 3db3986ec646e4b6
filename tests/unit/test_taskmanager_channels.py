"""The JobManager's channels to TaskManagers (jobmanager/taskmanager_rpc.py) against real gRPC
servers on loopback: a TaskManager started again on the port of one that died is reached at
once, not after gRPC's reconnect backoff on the dead one's channel runs out."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator

import grpc
import pytest

from jobmanager.taskmanager_rpc import TaskManagerRpc
from sluice import rpc
from sluice.v1 import taskmanager_pb2, taskmanager_pb2_grpc


class _LogServer(taskmanager_pb2_grpc.TaskExecutorServicer):
    def __init__(self, name: str) -> None:
        self.name = name

    def ReadLog(self, request, context):
        return taskmanager_pb2.ReadLogResponse(file=self.name)


def serve(name: str, port: int = 0) -> tuple[grpc.Server, int]:
    """A TaskExecutor answering ReadLog with `name`, plaintext on 127.0.0.1:`port` (0 = free)."""
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    taskmanager_pb2_grpc.add_TaskExecutorServicer_to_server(_LogServer(name), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    assert bound, f"cannot bind 127.0.0.1:{port}"
    server.start()
    return server, bound


@pytest.fixture
def calls() -> Iterator[TaskManagerRpc]:
    rpc.use_tls(None)  # plaintext channels, as the servers above
    c = TaskManagerRpc(threading.RLock(), lambda: "session", lambda _: None, lambda *_: None, lambda: 0.0)
    yield c
    c.close()


def test_a_taskmanager_on_the_port_of_a_dead_one_is_reached_once_its_channel_is_forgotten(calls):
    old, port = serve("old.log")
    address = f"127.0.0.1:{port}"
    assert calls.read_log(address, "session", 10).file == "old.log"
    old.stop(None).wait()
    with pytest.raises(grpc.RpcError) as refused:
        calls.read_log(address, "session", 10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    new, _ = serve("new.log", port)
    try:
        calls.forget(address)  # what a registration at this address or the loss of its TaskManager does
        assert calls.read_log(address, "session", 10).file == "new.log"
    finally:
        new.stop(None).wait()


def test_forgetting_an_address_leaves_running_calls_their_channel_until_close(calls):
    server, port = serve("tm.log")
    address = f"127.0.0.1:{port}"
    try:
        stub = calls.stub(address)
        calls.forget(address)
        calls.forget(address)  # twice, or an address never used: nothing to do
        calls.forget("127.0.0.1:1")
        assert stub.ReadLog(taskmanager_pb2.ReadLogRequest(), timeout=10).file == "tm.log"
        assert calls.stub(address) is not stub
    finally:
        server.stop(None).wait()
