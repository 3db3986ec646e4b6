"""ZooKeeper plumbing shared by JobManagers, TaskManagers and clients.

- :mod:`sluice.zk.paths` — the node layout (``ZkPaths``).
- :mod:`sluice.zk.server` — an embedded ZooKeeper server for tests and the local launcher.
- :mod:`sluice.zk.leader_retrieval` — following the leader's address.
- :mod:`sluice.zk.auth` — the cluster's credentials and ACLs; every kazoo client comes from ``make_client``.
- :mod:`sluice.zk.limits` — the size check before every write.

``SerialExecutor`` runs callbacks one at a time, in order, on its own thread.
kazoo delivers watches and connection-state changes on its own threads, which
must never block; everything that reacts to them hands the work to one of these.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from sluice.zk.paths import ZkPaths

__all__ = ["SerialExecutor", "ZkPaths"]

_log = logging.getLogger(__name__)
_STOP = object()


class SerialExecutor:
    """A single daemon thread running submitted callables in submission order."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if not self._closed:
            self._queue.put((fn, args))

    def in_executor_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def shutdown(self, timeout: float | None = 10.0) -> None:
        """Run what is already queued, then stop; waits unless called from the executor itself."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
        if not self.in_executor_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 — a failing callback must not kill the thread
                _log.exception("callback %r failed", fn)
