"""Admission of client calls on a JobManager's gRPC server, so that no client can starve
the control plane (docs/security.md "Client calls").

The JobManager serves the client API (`sluice.v1.JobManager`: submit, status, list, cancel,
...) and the control plane (`sluice.v1.ResourceManager`: registrations, heartbeats, task
states, checkpoint acks, split requests) from one pool of `SERVER_WORKERS` threads. A flood
of client calls used to take every thread, heartbeats then missed their timeout, and the
leader declared healthy TaskManagers lost. Here a client call is admitted only while

- fewer than `max_concurrent` client calls run in all (so at least `SERVER_WORKERS -
  max_concurrent` threads are always left to the control plane),
- its client (the peer's IP address) runs fewer than `per_client` of them, and
- its client's token bucket holds a token (`rate` calls per second, bursts of `burst`).

Otherwise the call ends at once with RESOURCE_EXHAUSTED, a message saying which limit and
when to retry, and the trailer `grpc-retry-pushback-ms` (gRPC's retry hint); sluice's client
(sluice/client.py) retries it within its budget. Control-plane methods are never limited.

`Admission` is the pure core (time as an input, no sockets); `ClientCallLimiter` the grpc
server interceptor around it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import grpc

CLIENT_SERVICE = "/sluice.v1.JobManager/"
PUSHBACK_MS = 200
MAX_TRACKED_CLIENTS = 4096  # buckets kept; the least recently seen idle ones go first


@dataclasses.dataclass(frozen=True)
class Limits:
    max_concurrent: int = 16
    per_client: int = 8
    rate: float = 200.0  # calls per second per client, sustained
    burst: int = 400


@dataclasses.dataclass
class _Client:
    running: int = 0
    tokens: float = 0.0
    refilled: float = 0.0


class Admission:
    """Which client calls may run now. `admit` returns None (admitted: call `release` when the
    call ends) or the reason it was refused."""

    def __init__(self, limits: Limits) -> None:
        if limits.max_concurrent < 1 or limits.per_client < 1 or limits.rate <= 0 or limits.burst < 1:
            raise ValueError(f"client call limits must be positive: {limits}")
        self.limits = limits
        self.running = 0
        self._clients: dict[str, _Client] = {}

    def admit(self, client: str, now: float) -> str | None:
        limits = self.limits
        state = self._clients.get(client)
        if state is None:
            self._forget_idle()
            state = self._clients[client] = _Client(tokens=float(limits.burst), refilled=now)
        else:
            self._clients[client] = self._clients.pop(client)  # most recently seen last
        state.tokens = min(float(limits.burst), state.tokens + (now - state.refilled) * limits.rate)
        state.refilled = now
        if self.running >= limits.max_concurrent:
            return f"the JobManager runs {self.running} client calls, its limit"
        if state.running >= limits.per_client:
            return f"client {client} has {state.running} calls running, its limit"
        if state.tokens < 1.0:
            return f"client {client} exceeds {limits.rate:g} calls per second"
        state.tokens -= 1.0
        state.running += 1
        self.running += 1
        return None

    def release(self, client: str) -> None:
        self.running -= 1
        state = self._clients.get(client)
        if state is not None:
            state.running -= 1

    def _forget_idle(self) -> None:
        if len(self._clients) < MAX_TRACKED_CLIENTS:
            return
        for key in [k for k, c in self._clients.items() if c.running == 0][: MAX_TRACKED_CLIENTS // 2]:
            del self._clients[key]


def client_of(peer: str) -> str:
    """The client's address in a gRPC peer string: `ipv4:127.0.0.1:5000` -> `127.0.0.1`,
    `ipv6:[::1]:5000` -> `::1`; anything else whole."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


class ClientCallLimiter(grpc.ServerInterceptor):
    """Runs `Admission` around every unary client-API call (module docstring)."""

    def __init__(self, limits: Limits, clock: Callable[[], float]) -> None:
        self.admission = Admission(limits)
        self._clock = clock
        self._lock = threading.Lock()

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(CLIENT_SERVICE):
            return handler
        if handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        def limited(request: Any, context: grpc.ServicerContext) -> Any:
            client = client_of(context.peer())
            with self._lock:
                refused = self.admission.admit(client, self._clock())
            if refused is not None:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", str(PUSHBACK_MS)),))
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{refused}: retry in {PUSHBACK_MS / 1000:g} s (heartbeats and task reports go first)",
                )
            try:
                return inner(request, context)
            finally:
                with self._lock:
                    self.admission.release(client)

        return grpc.unary_unary_rpc_method_handler(
            limited, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
