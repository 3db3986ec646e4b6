"""gRPC server plumbing shared by JobManager and TaskManager: health
service, reflection, free ports, graceful shutdown on SIGTERM."""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import threading
from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

# Large batches cross the wire as single messages.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

log = logging.getLogger("sluice.rpc")

# Health service SERVING for as long as the server runs, whatever the role's own
# services report (a standby JobManager is alive but NOT_SERVING): liveness probes.
LIVENESS_SERVICE = "sluice.v1.Liveness"


class Server:
    """A grpc.Server with health and reflection, bound to host:port (0 = free port)."""

    def __init__(self, host: str, port: int, service_names: Iterable[str], max_workers: int = 32):
        self.server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=max_workers), options=CHANNEL_OPTIONS
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        self._names = list(service_names)
        reflection.enable_server_reflection(self._names + [health.SERVICE_NAME, reflection.SERVICE_NAME], self.server)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"cannot bind {host}:{port}")
        self.host = host

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in [""] + self._names:
            self.health.set(name, status)

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float = 5.0) -> None:
        self.set_serving(False)
        self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server.stop(grace).wait(grace + 1)


def on_sigterm(callback: Callable[[], None]) -> threading.Event:
    """Run `callback` once on SIGTERM/SIGINT; returns an event set when it ran."""
    done = threading.Event()

    def shut_down() -> None:
        callback()
        done.set()

    def handler(signum: int, _frame: object) -> None:
        if not done.is_set():
            log.info("received signal %d: shutting down gracefully", signum)
            threading.Thread(target=shut_down, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return done


def is_serving(address: str, timeout: float = 1.0, service: str = "") -> bool:
    """True when `address` answers the health check with SERVING."""
    try:
        with grpc.insecure_channel(address) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
            return reply.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False


def run_until_signalled(process, role: str, address_file: str | None) -> None:
    """Start a server process object (start/stop/address), publish its address in
    `address_file`, and block until SIGTERM/SIGINT has stopped it gracefully."""
    from sluice.storage import write_text_atomic

    done = on_sigterm(process.stop)
    process.start()
    if address_file:
        write_text_atomic(address_file, process.address)
    done.wait()
    log.info("%s stopped", role)
