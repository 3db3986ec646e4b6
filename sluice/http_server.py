"""An ASGI app served by uvicorn on a thread of its own: the REST API and dashboard of a
JobManager and the Prometheus endpoint of every process (docs/monitoring.md).

Bounded like the gRPC servers: at most `max_connections` connections at once (more get
503), `per_client` of them from one client address and each request's head within
`request_timeout` (sluice/http_limits.py), request bodies beyond `max_body_bytes` are
refused by the apps, keep-alive connections idle for 5 s are closed, and a slow client
costs a coroutine, not a thread.
The socket is bound before the thread starts, so `address` is known at once (port 0:
a free one)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from sluice.http_limits import ClientLimits, bounded_h11

log = logging.getLogger("sluice.http")

MAX_CONNECTIONS = 64
MAX_CONNECTIONS_PER_CLIENT = 16
REQUEST_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5


class HttpServer:
    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        name: str,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        max_connections: int = MAX_CONNECTIONS,
        per_client: int = MAX_CONNECTIONS_PER_CLIENT,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.name = name
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._socket.listen(128)
        self._socket.setblocking(False)
        bound = self._socket.getsockname()
        self.host, self.port = host, bound[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            limit_concurrency=max_connections,
            timeout_keep_alive=KEEP_ALIVE_S,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            lifespan="off",
            server_header=False,
            http=bounded_h11(ClientLimits(per_client, time.monotonic), request_timeout, name),
        )
        self.secure = ssl_certfile is not None
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=f"http-{name}", daemon=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _serve(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except Exception:
            log.exception("%s server at %s stopped", self.name, self.address)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        try:
            self._socket.close()
        except OSError:
            pass
