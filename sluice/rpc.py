"""gRPC plumbing shared by JobManager, TaskManager and clients: servers with
health service, reflection, mutual TLS and the role table
(sluice/security/auth.py), an optional plaintext health-only port, free
ports, graceful shutdown on SIGTERM; and :func:`channel`, the one way any
Sluice code dials a server (same message size limit as the servers, TLS when
configured). See docs/security.md."""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sluice.security.tls import SERVER_NAME, TlsFiles, channel_credentials, server_credentials

# Large batches cross the wire as single messages.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

log = logging.getLogger("sluice.rpc")

INSECURE_WARNING = (
    "SECURITY WARNING: %s runs plaintext gRPC without authentication (--insecure): anyone who can reach "
    "its ports can submit jobs, which run arbitrary code on the TaskManagers, and can read or forge "
    "cluster traffic. Use it on a trusted network only (docs/security.md)."
)


@dataclass(frozen=True)
class Security:
    """How a server authenticates its callers and a process dials others: TLS files (None =
    plaintext, `--insecure`), and for a JobManager an optional bearer token with its port."""

    tls: TlsFiles | None = None
    token: bytes | None = None
    token_port: int = 0

    @classmethod
    def from_settings(cls, settings: Any) -> Security:
        """From a process's sluice.config.Settings; config.ConfigError when neither TLS files
        nor security.insecure are set, or a file cannot be read."""
        from sluice import config
        from sluice.security.auth import read_token
        from sluice.security.tls import TlsError

        config.check_security(settings)
        if settings.get(config.SECURITY_INSECURE):
            log.warning(INSECURE_WARNING, config.ROLE_NAMES[settings.role])
            return cls()
        files = TlsFiles(
            settings.get(config.SECURITY_SSL_CA),
            settings.get(config.SECURITY_SSL_CERT),
            settings.get(config.SECURITY_SSL_KEY),
        )
        try:
            files.read()
        except TlsError as exc:
            raise config.ConfigError(f"security.ssl: {exc}", "security.ssl.cert") from None
        token_file = settings.values.get("security.token.file")
        token = None
        if token_file is not None:
            try:
                token = read_token(token_file)
            except ValueError as exc:
                raise config.ConfigError(f"security.token.file: {exc}", "security.token.file") from None
        return cls(files, token, settings.values.get("security.token.port") or 0)


# The TLS files of this process's outgoing channels (use_tls), when a caller gives none.
_process_tls: TlsFiles | None = None


def use_tls(files: TlsFiles | None) -> None:
    """Make `files` the credentials of every channel this process opens without explicit ones
    (a JobManager's calls to TaskManagers, a TaskManager's to the leader and its peers)."""
    global _process_tls
    _process_tls = files


class _ProcessTls:
    pass


PROCESS_TLS = _ProcessTls()  # channel(tls=PROCESS_TLS): the files given to use_tls


def channel(
    address: str,
    tls: TlsFiles | None | _ProcessTls = PROCESS_TLS,
    token: str | None = None,
    own_connections: bool = False,
) -> grpc.Channel:
    """A channel to `address` with the servers' message size limit: mutual TLS with `tls`
    (default: this process's files, see use_tls), plaintext when there are none. The server's
    certificate must be signed by the CA and name SERVER_NAME (servers are dialled by
    addresses no certificate lists in advance). `token`: sent as `authorization: Bearer` on
    every call (needs TLS). `own_connections`: the channel does not share connections with
    other channels of this process to the same address, nor their reconnect backoff (by
    default gRPC shares both, so a new channel to an address that refused connections
    fails at once until the backoff, growing to minutes, runs out)."""
    files = _process_tls if isinstance(tls, _ProcessTls) else tls
    options = [*CHANNEL_OPTIONS, *([("grpc.use_local_subchannel_pool", 1)] if own_connections else [])]
    if files is None:
        if token is not None:
            raise ValueError("a bearer token is only sent over TLS: give the cluster's CA certificate")
        return grpc.insecure_channel(address, options=options)
    credentials = channel_credentials(files)
    if token is not None:
        credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
    return grpc.secure_channel(address, credentials, options=[*options, ("grpc.ssl_target_name_override", SERVER_NAME)])


# Health service SERVING for as long as the server runs, whatever the role's own
# services report (a standby JobManager is alive but NOT_SERVING): liveness probes.
LIVENESS_SERVICE = "sluice.v1.Liveness"


class Server:
    """A grpc.Server with health and reflection, bound to host:port (0 = free port).

    With `security.tls` the port takes mutual TLS only and every call passes the role table
    (sluice/security/auth.py); with `security.token` a second TLS port (`token_port`) takes
    bearer-token clients without certificates. `health_port` (0 = free): a separate
    plaintext server on host:health_port that serves grpc.health.v1 and nothing else."""

    def __init__(
        self,
        host: str,
        port: int,
        service_names: Iterable[str],
        max_workers: int = 32,
        security: Security | None = None,
        health_port: int | None = None,
        interceptors: Iterable[grpc.ServerInterceptor] = (),
    ):
        from sluice.security.auth import Authorizer

        security = security or Security()
        tls = security.tls
        # the role table first: a call it denies costs no admission (sluice/rpc_admission.py)
        self.server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers=max_workers),
            options=CHANNEL_OPTIONS,
            interceptors=[*([Authorizer(security.token)] if tls is not None else []), *interceptors],
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        self._names = list(service_names)
        reflection.enable_server_reflection(self._names + [health.SERVICE_NAME, reflection.SERVICE_NAME], self.server)
        self.secure = tls is not None
        if tls is None:
            self.port = self.server.add_insecure_port(f"{host}:{port}")
        else:
            self.port = self.server.add_secure_port(f"{host}:{port}", server_credentials(tls))
        if self.port == 0:
            raise OSError(f"cannot bind {host}:{port}")
        self.token_port: int | None = None
        if security.token is not None:
            if tls is None:
                raise ValueError("a bearer token needs TLS")
            self.token_port = self.server.add_secure_port(
                f"{host}:{security.token_port}", server_credentials(tls, require_client_auth=False)
            )
            if self.token_port == 0:
                raise OSError(f"cannot bind the token port {host}:{security.token_port}")
        self.health_server: grpc.Server | None = None
        self.health_port: int | None = None
        if health_port is not None:
            self.health_server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
            self.health_port = self.health_server.add_insecure_port(f"{host}:{health_port}")
            if self.health_port == 0:
                raise OSError(f"cannot bind the health port {host}:{health_port}")
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
        if self.health_server is not None:
            self.health_server.start()

    def stop(self, grace: float = 5.0) -> None:
        self.set_serving(False)
        self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.health_server is not None:
            self.health_server.stop(0)
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


def is_serving(
    address: str, timeout: float = 1.0, service: str = "", tls: TlsFiles | None | _ProcessTls = PROCESS_TLS
) -> bool:
    """True when `address` answers the health check with SERVING (over `channel(address, tls)`)."""
    try:
        with channel(address, tls) as ch:
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
    if address_file:  # the address, then e.g. `metrics=host:port` (sluice/cluster_file.py reads it)
        endpoints = getattr(process, "endpoints", {})
        write_text_atomic(address_file, "\n".join([process.address, *(f"{k}={v}" for k, v in endpoints.items())]))
    done.wait()
    log.info("%s stopped", role)
