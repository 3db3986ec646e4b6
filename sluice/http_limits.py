"""Per-client limits of the HTTP servers (sluice/http_server.py): so that idle or slow
sockets of one client cannot lock others out of the REST API and dashboard.

- **Connections per client**: a client address (IP) holds at most `per_client` connections
  at once; one more is closed at once (and logged, once a minute per client), before it
  costs a request slot. The server-wide cap (`max_connections`) stays: beyond it uvicorn
  answers 503.
- **Request deadline**: a connection must deliver a request's head within `request_timeout`
  seconds of opening (or of its last response): a socket that sends nothing, or trickles
  bytes, is closed instead of holding a slot until the client goes away. Between requests
  uvicorn's keep-alive timeout (5 s) closes idle connections as before.

`ClientLimits` is the pure core (counts, no sockets); `bounded_h11` wraps uvicorn's h11
protocol with it. Options: `rest.max-connections-per-client` and `rest.request-timeout`
(docs/configuration.md)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("sluice.http")

WARN_EVERY = 60.0  # seconds between two warnings about the same client


class ClientLimits:
    """How many connections each client holds, and whether it may open another."""

    def __init__(self, per_client: int, clock: Callable[[], float]) -> None:
        if per_client < 1:
            raise ValueError("per_client must be >= 1")
        self.per_client = per_client
        self.open: Counter[str] = Counter()
        self._clock = clock
        self._warned: dict[str, float] = {}

    def admit(self, client: str) -> bool:
        """Count a new connection of `client`; False (not counted) when it holds its limit."""
        if self.open[client] >= self.per_client:
            return False
        self.open[client] += 1
        return True

    def release(self, client: str) -> None:
        self.open[client] -= 1
        if self.open[client] <= 0:
            del self.open[client]

    def should_warn(self, client: str) -> bool:
        """True at most once per WARN_EVERY seconds per client (a flood must not flood the log)."""
        now = self._clock()
        if now - self._warned.get(client, float("-inf")) < WARN_EVERY:
            return False
        self._warned[client] = now
        if len(self._warned) > 1024:  # many clients: forget the oldest
            for key in sorted(self._warned, key=self._warned.__getitem__)[:512]:
                del self._warned[key]
        return True


def bounded_h11(limits: ClientLimits, request_timeout: float, name: str) -> type[H11Protocol]:
    """uvicorn's h11 protocol class under `limits` and the request deadline."""

    class BoundedH11(H11Protocol):
        _client_key: str | None = None
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            client = self.client[0] if self.client else "?"
            if not limits.admit(client):
                if limits.should_warn(client):
                    log.warning(
                        "%s server: %s holds %d connections, its limit; closing its new ones",
                        name,
                        client,
                        limits.per_client,
                    )
                transport.close()
                return
            self._client_key = client
            self._arm_deadline()

        def _arm_deadline(self) -> None:
            self._cancel_deadline()
            self._deadline = self.loop.call_later(request_timeout, self._deadline_passed)

        def _cancel_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _deadline_passed(self) -> None:
            self._deadline = None
            if self.cycle is None or self.cycle.response_complete:  # no request in progress
                if not self.transport.is_closing():
                    self.transport.close()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a request's head arrived: the app runs, unbounded here
                self._cancel_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_deadline()  # the next request's head, within the deadline too

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_deadline()
            if self._client_key is not None:
                limits.release(self._client_key)
                self._client_key = None
            super().connection_lost(exc)

    return BoundedH11
