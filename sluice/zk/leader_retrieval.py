"""Following the leading JobManager's address in ZooKeeper.

The leader publishes ``leader/connection_info`` (ephemeral JSON
``{"address": "host:port", "session_id": "..."}``; see
``jobmanager.leader`` (docs/protocols.md)).  TaskManagers and standbys keep a
``LeaderRetriever`` watching it; one-shot clients call ``find_leader``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import DataWatch

from sluice.zk import SerialExecutor
from sluice.zk.auth import ZkAuth, describe_no_auth, make_client
from sluice.zk.paths import ZkPaths

_log = logging.getLogger(__name__)

LeaderListener = Callable[[str | None, str | None], None]


class LeaderNotFoundError(TimeoutError):
    """No leader address appeared in ZooKeeper in time."""


def parse_leader_info(data: bytes | None) -> tuple[str, str] | None:
    """(address, session_id) from a connection_info payload, or None if absent/malformed."""
    if not data:
        return None
    try:
        info = json.loads(data)
        address, session_id = info["address"], info["session_id"]
    except (ValueError, TypeError, KeyError):
        _log.warning("ignoring malformed leader connection info %r", data[:200])
        return None
    if not isinstance(address, str) or not isinstance(session_id, str) or not address:
        _log.warning("ignoring malformed leader connection info %r", data[:200])
        return None
    return address, session_id


def read_leader(client: KazooClient, paths: ZkPaths) -> tuple[str, str] | None:
    """The current (address, session_id), or None when no leader is published."""
    try:
        data, _stat = client.get(paths.leader_connection_info)
    except NoNodeError:
        return None
    return parse_leader_info(data)


def read_leader_endpoint(client: KazooClient, paths: ZkPaths, name: str) -> str | None:
    """Another endpoint the leader published beside its address (e.g. ``rest``), or None."""
    try:
        data, _stat = client.get(paths.leader_connection_info)
        value = json.loads(data).get(name) if data else None
    except (NoNodeError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


class LeaderRetriever:
    """Calls ``listener(address, session_id)`` — ``(None, None)`` when there is no
    leader — once at start and then on every change of the leader info.

    Starts watching on construction (the client should be started).  The
    listener runs on the retriever's own thread, one call at a time and in
    order, so it may block without stalling kazoo; consecutive identical values
    are reported once.
    """

    def __init__(self, client: KazooClient, paths: ZkPaths, listener: LeaderListener):
        self._listener = listener
        self._lock = threading.Lock()
        self._current: tuple[str, str] | None = None
        self._reported: object = object()  # nothing reported yet
        self._stopped = False
        self._executor = SerialExecutor(f"leader-retrieval-{paths.cluster_id}")
        self._watch = DataWatch(client, paths.leader_connection_info, self._on_data)

    @property
    def current(self) -> tuple[str, str] | None:
        """The last known (address, session_id), or None."""
        with self._lock:
            return self._current

    def stop(self) -> None:
        """Stop reporting; waits for a listener call in progress unless called from it."""
        with self._lock:
            self._stopped = True
        self._executor.shutdown(timeout=10.0)

    def __enter__(self) -> LeaderRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _on_data(self, data: bytes | None, _stat: object) -> bool | None:
        with self._lock:
            if self._stopped:
                return False  # tells DataWatch to stop watching
            self._current = value = parse_leader_info(data)
            self._executor.submit(self._report, value)
        return None

    def _report(self, value: tuple[str, str] | None) -> None:
        with self._lock:
            if self._stopped or value == self._reported:
                return
            self._reported = value
        address, session_id = value if value else (None, None)
        self._listener(address, session_id)


def find_leader(zk_hosts: str, cluster_id: str, timeout: float = 30.0, auth_file: str | None = None) -> tuple[str, str]:
    """Connect to ZooKeeper (with the cluster's credentials from ``auth_file``, if it has
    any), wait up to ``timeout`` seconds for a leader, return (address, session_id)."""
    deadline = time.monotonic() + timeout
    auth = ZkAuth.resolve(auth_file, None)
    client = make_client(zk_hosts, auth, timeout=max(2.0, min(timeout, 10.0)))
    try:
        try:
            client.start(timeout=max(0.5, timeout))
        except KazooTimeoutError:
            raise LeaderNotFoundError(
                f"could not connect to ZooKeeper at {zk_hosts!r} within {timeout:g}s "
                f"(looking for the leader of cluster {cluster_id!r})"
            ) from None
        paths = ZkPaths(cluster_id)
        try:  # a secured cluster answers NoAuth without its credentials: say so, not "no leader"
            client.get(paths.leader_connection_info)
        except NoNodeError:
            pass  # no leader yet: wait for one below
        except NoAuthError:
            raise LeaderNotFoundError(describe_no_auth(paths.leader_connection_info, auth)) from None
        found = threading.Event()

        def on_leader(address: str | None, _session_id: str | None) -> None:
            if address:
                found.set()

        retriever = LeaderRetriever(client, paths, on_leader)
        try:
            found.wait(max(0.0, deadline - time.monotonic()))
            leader = retriever.current
        finally:
            retriever.stop()
        if leader is None:
            raise LeaderNotFoundError(
                f"no leading JobManager of cluster {cluster_id!r} registered in ZooKeeper at "
                f"{zk_hosts!r} within {timeout:g}s (is the cluster running, and is the cluster id right?)"
            )
        return leader
    finally:
        try:
            client.stop()
            client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
