"""Leader election for JobManagers (Flink's LeaderElectionDriver, in Python).

Theory of operation
-------------------
A *contender* (a JobManager) hands itself to a *driver* with ``start``.  The
driver calls ``grant_leadership(session_id)`` when the contender becomes
leader and ``revoke_leadership()`` when it stops being leader.  Every grant
mints a fresh uuid4 *leader session id*; the JobManager puts it on every RPC
(fencing, DESIGN.md §5) and passes it back to ``has_leadership`` /
``publish_leader_info`` so that work started under an old session can be told
apart from work of the current one.

Callbacks are delivered one at a time, in order, on one thread per driver
(never on kazoo's threads).  A grant whose session was revoked before it could
be delivered is dropped, and so is the matching revoke: a contender never sees
a late callback of an old session.

ZooKeeper driver.  Each driver creates one ephemeral sequential node
``leader/latch/<driver-uuid>-latch-<seq>``; the lowest sequence number leads
and every other node watches its predecessor only (no herd effect).  The
driver-uuid prefix lets a driver find a node whose ``create`` reply was lost
with the connection, and delete strays.  On a grant the leader writes the
session id into its latch node, which bumps the node's version: a guarded
write (``check(latch_node, version)`` inside a transaction) therefore fails as
soon as the node is gone (session expired, driver stopped) *or* leadership
was re-granted under a newer session id.

Connection states (kazoo listener, which only flips flags and queues work):
  SUSPENDED  revoke at once (we cannot know whether our session survives).
  LOST       revoke at once; the latch node died with the session.
  CONNECTED  re-run the election: after SUSPENDED the old node may still be
             there (then, if lowest, a new grant with a new session id);
             after LOST a new node is created at the end of the queue.
The election's ZooKeeper calls run on the driver's election thread, so a
blocked call (ZooKeeper down) never delays a revoke; ``publish_leader_info``
and guarded transactions run on the caller's thread, bounded by ``op_timeout``.  ``stop`` revokes, removes our
connection info and latch node, so a standby takes over at once.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any, Callable, Protocol, runtime_checkable

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState

from sluice.zk import SerialExecutor
from sluice.zk.paths import ZkPaths

_log = logging.getLogger(__name__)


class LeadershipLostError(Exception):
    """A guarded write was refused: the writer is no longer the leader of that session."""


@runtime_checkable
class LeaderContender(Protocol):
    def grant_leadership(self, session_id: str) -> None: ...

    def revoke_leadership(self) -> None: ...


class LeaderElectionDriver(ABC):
    """Elects one leader among the contenders sharing a backing (ZooKeeper, memory)."""

    @abstractmethod
    def start(self, contender: LeaderContender) -> None:
        """Join the election; callbacks go to ``contender``."""

    @abstractmethod
    def stop(self) -> None:
        """Leave the election, releasing leadership so that a standby takes over at once."""

    @abstractmethod
    def has_leadership(self, session_id: str) -> bool:
        """True while leadership granted under ``session_id`` has not been revoked."""

    @abstractmethod
    def publish_leader_info(self, session_id: str, address: str) -> bool:
        """Publish the leader's address, only while still leader for ``session_id``.

        Returns False (and changes nothing) when not leader for that session,
        or when the write could not be made; the caller may retry while
        ``has_leadership(session_id)`` holds.
        """


# --------------------------------------------------------------------------- callbacks


class _ContenderNotifier:
    """Delivers grant/revoke to a contender, serialized and in order, dropping stale ones."""

    def __init__(self, contender: LeaderContender, is_current: Callable[[str], bool], name: str):
        self._contender = contender
        self._is_current = is_current
        self._delivered: str | None = None  # session the contender currently believes in
        self._executor = SerialExecutor(f"{name}-callbacks")

    def grant(self, session_id: str) -> None:
        self._executor.submit(self._deliver_grant, session_id)

    def revoke(self, session_id: str) -> None:
        self._executor.submit(self._deliver_revoke, session_id)

    def close(self, timeout: float | None) -> None:
        self._executor.shutdown(timeout)

    def _deliver_grant(self, session_id: str) -> None:
        if not self._is_current(session_id):
            _log.debug("dropping late grant of session %s", session_id)
            return
        if self._delivered is not None:
            self._deliver_revoke(self._delivered)
        self._delivered = session_id
        self._contender.grant_leadership(session_id)

    def _deliver_revoke(self, session_id: str) -> None:
        if self._delivered != session_id:
            return  # its grant was never delivered, or already revoked
        self._delivered = None
        self._contender.revoke_leadership()


# --------------------------------------------------------------------------- guarded writes


class GuardedTransaction:
    """A kazoo transaction whose first operation checks the writer's latch node.

    If the latch node is gone (or its version moved on: a newer grant), the
    whole transaction is rolled back and ``commit`` raises LeadershipLostError.
    Any other failing operation is re-raised as its kazoo exception.
    """

    def __init__(self, client: KazooClient, guard_path: str, guard_version: int = -1,
                 timeout: float | None = 10.0):
        self.guard_path = guard_path
        self._timeout = timeout
        self._txn = client.transaction()
        self._txn.check(guard_path, guard_version)

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False,
               sequence: bool = False) -> "GuardedTransaction":
        self._txn.create(path, value, ephemeral=ephemeral, sequence=sequence)
        return self

    def set_data(self, path: str, value: bytes, version: int = -1) -> "GuardedTransaction":
        self._txn.set_data(path, value, version)
        return self

    def delete(self, path: str, version: int = -1) -> "GuardedTransaction":
        self._txn.delete(path, version)
        return self

    def check(self, path: str, version: int) -> "GuardedTransaction":
        self._txn.check(path, version)
        return self

    def commit(self) -> list[Any]:
        """Results of the added operations (the guard's own result left out)."""
        results = self._txn.commit_async().get(timeout=self._timeout)
        guard, rest = results[0], results[1:]
        if isinstance(guard, (NoNodeError, BadVersionError)):
            raise LeadershipLostError(f"latch node {self.guard_path} is gone or was re-granted") from guard
        # A failed multi reports the failing op's error; the ops before it come
        # back as RolledBackError and the ops after it as RuntimeInconsistency.
        for result in rest:
            if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
                raise result
        if isinstance(guard, Exception):
            raise guard
        return rest


def guarded_transaction(client: KazooClient, latch_node_path: str, latch_node_version: int = -1,
                        timeout: float | None = 10.0) -> GuardedTransaction:
    """A transaction that commits only while ``latch_node_path`` (at that version) exists."""
    return GuardedTransaction(client, latch_node_path, latch_node_version, timeout)


# --------------------------------------------------------------------------- ZooKeeper


_CHECK, _LOST, _STOP = "check", "lost", "stop"
_RETRY_DELAY = 1.0


def _seq(name: str) -> int:
    return int(name.rsplit("-", 1)[-1])


def _is_latch_node(name: str) -> bool:
    return "-latch-" in name and name.rsplit("-", 1)[-1].isdigit()


class ZooKeeperLeaderElectionDriver(LeaderElectionDriver):
    """Latch-based election under ``paths.leader_latch``; see the module docstring."""

    def __init__(self, client: KazooClient, paths: ZkPaths, *, name: str | None = None,
                 op_timeout: float = 10.0):
        self._client = client
        self._paths = paths
        self._id = uuid.uuid4().hex
        self._prefix = f"{self._id}-latch-"
        self.name = name or f"election-{self._id[:8]}"
        self._op_timeout = op_timeout
        self._lock = threading.Lock()
        self._state = "new"  # new -> running -> stopped
        self._connected = False
        self._node: str | None = None  # our latch node (full path), owned by the election thread
        self._session: str | None = None  # current leader session id, None when not leading
        self._session_node: tuple[str, int] | None = None  # (latch node, version) backing it
        self._published: set[str] = set()  # sessions whose connection info we wrote
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._notifier: _ContenderNotifier | None = None
        self._thread: threading.Thread | None = None
        self._retry_at: float | None = None
        self._epoch = 0  # bumped on every connection state change

    # -- public API ---------------------------------------------------------------

    def start(self, contender: LeaderContender) -> None:
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"{self.name}: start() called twice")
            self._state = "running"
            self._notifier = _ContenderNotifier(contender, self.has_leadership, self.name)
        self._client.add_listener(self._on_connection_state)
        with self._lock:  # after add_listener, so that no transition is missed
            self._connected = self._client.state == KazooState.CONNECTED
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        self._events.put(_CHECK)

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            if self._state != "running":
                self._state = "stopped"
                return
            self._state = "stopped"
            self._revoke_locked("driver stopped")
        self._client.remove_listener(self._on_connection_state)
        self._events.put(_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._notifier.close(timeout)

    def has_leadership(self, session_id: str) -> bool:
        with self._lock:
            return session_id is not None and session_id == self._session

    @property
    def latch_node_path(self) -> str | None:
        """Our current latch node, if any (leader or standby)."""
        return self._node

    def leader_latch(self, session_id: str) -> tuple[str, int] | None:
        """(latch node path, version) guarding writes of ``session_id``; None if not leader."""
        with self._lock:
            return self._session_node if session_id == self._session and session_id else None

    def guarded_transaction(self, session_id: str) -> GuardedTransaction:
        """A transaction that commits only while ``session_id`` is the leader session in ZooKeeper."""
        latch = self.leader_latch(session_id)
        if latch is None:
            raise LeadershipLostError(f"{self.name}: not leader for session {session_id}")
        return GuardedTransaction(self._client, latch[0], latch[1], self._op_timeout)

    def publish_leader_info(self, session_id: str, address: str) -> bool:
        path = self._paths.leader_connection_info
        data = json.dumps({"address": address, "session_id": session_id}).encode()
        for _ in range(5):
            try:
                txn = self.guarded_transaction(session_id)
                # Delete + create rather than set: the node is ephemeral and must
                # belong to *our* ZooKeeper session, not to a previous leader's.
                stat = self._call(self._client.exists_async, path)
                if stat is not None:
                    txn.delete(path, stat.version)
                txn.create(path, data, ephemeral=True)
                txn.commit()
            except LeadershipLostError as exc:
                _log.info("%s: not publishing %s for session %s: %s", self.name, address, session_id, exc)
                return False
            except (NoNodeError, NodeExistsError, BadVersionError):
                continue  # raced with another writer or an expiring node: look again
            except (KazooException, KazooTimeoutError) as exc:
                _log.warning("%s: publishing leader info failed: %r", self.name, exc)
                return False
            with self._lock:
                self._published.add(session_id)
            _log.info("%s: published leader address %s (session %s)", self.name, address, session_id)
            return True
        return False

    # -- kazoo callbacks (must not block) -----------------------------------------

    def _on_connection_state(self, state: str) -> None:
        with self._lock:
            if self._state != "running":
                return
            self._connected = state == KazooState.CONNECTED
            self._epoch += 1
            if not self._connected:
                self._revoke_locked(f"ZooKeeper connection {state}")
        self._events.put(_LOST if state == KazooState.LOST else _CHECK)

    def _on_node_event(self, event: Any) -> None:
        if event.type != EventType.NONE:  # NONE: connection change, handled by the listener
            self._events.put(_CHECK)

    # -- election thread ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            wait = None if self._retry_at is None else max(0.0, self._retry_at - time.monotonic())
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                event = _CHECK
            self._retry_at = None
            try:
                if event == _STOP:
                    self._withdraw()
                    return
                if event == _LOST:
                    self._forget_node("session lost")
                with self._lock:
                    ready = self._state == "running" and self._connected
                if ready:
                    self._run_election()
            except Exception as exc:  # noqa: BLE001 - keep the election alive
                with self._lock:
                    connected = self._connected and self._state == "running"
                level = logging.WARNING if connected else logging.DEBUG
                _log.log(level, "%s: election step failed: %r", self.name, exc)
                if connected:
                    self._retry_at = time.monotonic() + _RETRY_DELAY
                # otherwise the CONNECTED event re-runs the election

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs).get(timeout=self._op_timeout)

    def _run_election(self) -> None:
        latch = self._paths.leader_latch
        for _ in range(10):
            try:
                children = self._call(self._client.get_children_async, latch)
            except NoNodeError:
                self._client.ensure_path(latch)
                continue
            children = sorted(filter(_is_latch_node, children), key=_seq)
            mine = [c for c in children if c.startswith(self._prefix)]
            current = self._node.rsplit("/", 1)[1] if self._node else None
            if current is not None and current not in mine:
                self._forget_node("latch node disappeared")
                current = None
            if current is None and not mine:
                created = self._call(self._client.create_async, f"{latch}/{self._prefix}",
                                     ephemeral=True, sequence=True)
                self._node = created
                _log.debug("%s: joined the election as %s", self.name, created)
                continue  # list again, now with our node
            if current is None:
                current = mine[0]  # adopt a node whose create reply was lost
                self._node = f"{latch}/{current}"
            for stray in mine:
                if stray != current:
                    self._delete_quietly(f"{latch}/{stray}")
            queue_ = [c for c in children if c == current or not c.startswith(self._prefix)]
            index = queue_.index(current)
            if index == 0:
                self._become_leader(self._node)
            else:
                predecessor = f"{latch}/{queue_[index - 1]}"
                if self._call(self._client.exists_async, predecessor, watch=self._on_node_event) is None:
                    continue  # it left meanwhile: look again
                _log.debug("%s: standby behind %s", self.name, predecessor)
            return
        self._retry_at = time.monotonic() + _RETRY_DELAY

    def _become_leader(self, node: str) -> None:
        with self._lock:
            if self._session is not None and self._session_node and self._session_node[0] == node:
                return  # already leading with this node
            epoch = self._epoch
        session_id = str(uuid.uuid4())
        # Writing the session id bumps the node's version: guards of older sessions now fail.
        stat = self._call(self._client.set_async, node, session_id.encode())
        # Watch our node before granting, to notice its deletion (e.g. by an operator).
        if self._call(self._client.exists_async, node, watch=self._on_node_event) is None:
            self._events.put(_CHECK)
            return
        with self._lock:
            if self._state != "running" or not self._connected or self._epoch != epoch or self._node != node:
                return  # the connection changed meanwhile (its listener queued a new check)
            self._session = session_id
            self._session_node = (node, stat.version)
            _log.info("%s: granted leadership, session %s (latch %s)", self.name, session_id, node)
            self._notifier.grant(session_id)

    def _forget_node(self, reason: str) -> None:
        with self._lock:
            if self._session_node and self._session_node[0] == self._node:
                self._revoke_locked(reason)
            self._node = None

    def _revoke_locked(self, reason: str) -> None:
        if self._session is None:
            return
        session_id, self._session, self._session_node = self._session, None, None
        _log.info("%s: leadership revoked (%s), session %s", self.name, reason, session_id)
        self._notifier.revoke(session_id)

    def _withdraw(self) -> None:
        """On stop: remove our connection info and latch node(s), best effort."""
        try:
            path = self._paths.leader_connection_info
            data, stat = self._call(self._client.get_async, path)
            if self._node and json.loads(data or b"{}").get("session_id") in self._published:
                guarded_transaction(self._client, self._node, -1, self._op_timeout).delete(
                    path, stat.version).commit()
        except (KazooException, KazooTimeoutError, LeadershipLostError, ValueError):
            pass
        try:
            latch = self._paths.leader_latch
            for child in self._call(self._client.get_children_async, latch):
                if child.startswith(self._prefix):
                    self._delete_quietly(f"{latch}/{child}")
        except (KazooException, KazooTimeoutError):
            pass  # the node goes with our ZooKeeper session anyway
        self._node = None
        _log.info("%s: left the election", self.name)

    def _delete_quietly(self, path: str) -> None:
        try:
            self._call(self._client.delete_async, path)
        except NoNodeError:
            pass


# --------------------------------------------------------------------------- in memory


class InMemoryLeaderElectionService:
    """A hub shared by in-memory drivers, for unit tests.

    The first started driver is granted leadership; when the leader stops (or
    ``revoke()`` is called) the next waiting driver is granted, with a new
    session id.  Callbacks run synchronously on the calling thread, so a test
    sees them as soon as ``start``/``stop``/``revoke`` return.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting: list[InMemoryLeaderElectionDriver] = []  # the leader first
        self._session: str | None = None
        self._leader_info: tuple[str, str] | None = None

    def create_driver(self) -> "InMemoryLeaderElectionDriver":
        return InMemoryLeaderElectionDriver(self)

    @property
    def leader(self) -> "InMemoryLeaderElectionDriver | None":
        with self._lock:
            return self._waiting[0] if self._session else None

    @property
    def leader_session_id(self) -> str | None:
        return self._session

    @property
    def leader_info(self) -> tuple[str, str] | None:
        """(address, session id) last published, like ``leader/connection_info``."""
        return self._leader_info

    def revoke(self) -> None:
        """Revoke the current leader; it goes to the back of the queue and the next is granted."""
        with self._lock:
            if self._session is None:
                return
            leader = self._waiting.pop(0)
            self._session = None
            leader._contender.revoke_leadership()
            self._waiting.append(leader)
            self._grant_next()

    def _join(self, driver: "InMemoryLeaderElectionDriver") -> None:
        with self._lock:
            self._waiting.append(driver)
            if self._session is None:
                self._grant_next()

    def _leave(self, driver: "InMemoryLeaderElectionDriver") -> None:
        with self._lock:
            if driver not in self._waiting:
                return
            leading = self._waiting[0] is driver and self._session is not None
            self._waiting.remove(driver)
            if leading:
                if self._leader_info and self._leader_info[1] == self._session:
                    self._leader_info = None
                self._session = None
                driver._contender.revoke_leadership()
                self._grant_next()

    def _grant_next(self) -> None:
        if self._waiting:
            self._session = str(uuid.uuid4())
            self._waiting[0]._contender.grant_leadership(self._session)

    def _is_leader(self, driver: "InMemoryLeaderElectionDriver", session_id: str) -> bool:
        with self._lock:
            return bool(self._session) and session_id == self._session and self._waiting[0] is driver

    def _publish(self, driver: "InMemoryLeaderElectionDriver", session_id: str, address: str) -> bool:
        with self._lock:
            if not self._is_leader(driver, session_id):
                return False
            self._leader_info = (address, session_id)
            return True


class InMemoryLeaderElectionDriver(LeaderElectionDriver):
    """One contender's handle on an ``InMemoryLeaderElectionService``."""

    def __init__(self, service: InMemoryLeaderElectionService):
        self._service = service
        self._contender: LeaderContender | None = None
        self._started = False

    def start(self, contender: LeaderContender) -> None:
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True
        self._contender = contender
        self._service._join(self)

    def stop(self) -> None:
        self._service._leave(self)

    def has_leadership(self, session_id: str) -> bool:
        return self._service._is_leader(self, session_id)

    def publish_leader_info(self, session_id: str, address: str) -> bool:
        return self._service._publish(self, session_id, address)
