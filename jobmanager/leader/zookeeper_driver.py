"""The ZooKeeper leader election driver (Flink's ZooKeeperLeaderElectionDriver).

Theory of operation
-------------------
The driver contract (grants, revokes, session ids, callback order) is in
driver.py; the ZooKeeper layout in docs/protocols.md.

Each driver creates one ephemeral sequential node
``leader/latch/<driver-uuid>-latch-<seq>``; the lowest sequence number leads
and every other node watches its predecessor only (no herd effect).  The
driver-uuid prefix lets a driver find a node whose ``create`` reply was lost
with the connection, and delete strays.  On a grant the leader writes the
session id into its latch node, which bumps the node's version: a guarded
write (guarded_transaction.py) therefore fails as soon as the node is gone
(session expired, driver stopped) *or* leadership was re-granted under a
newer session id.

Connection states (kazoo listener, which only flips flags and queues work):
  SUSPENDED  revoke at once (we cannot know whether our session survives).
  LOST       revoke at once; the latch node died with the session.
  CONNECTED  re-run the election: after SUSPENDED the old node may still be
             there (then, if lowest, a new grant with a new session id);
             after LOST a new node is created at the end of the queue.
The election's ZooKeeper calls run on the driver's election thread, an event
loop reacting to connection changes and watches, so a blocked call
(ZooKeeper down) never delays a revoke.  A failed election step is re-run
after a tenacity backoff (``_STEP_BACKOFF``), while the loop keeps serving
events.  ``publish_leader_info`` and guarded transactions run on the
caller's thread, bounded by ``op_timeout``.  ``stop`` revokes, removes our
connection info and latch node, so a standby takes over at once.

Self-repair: the leader watches the ``leader/connection_info`` it published
(its data and its owner).  Changed, deleted or re-created by any other
session, the watch queues an election step, which re-publishes it — a
guarded transaction, so only while this driver still leads under that
session: a stale leader never overwrites a newer one's address.  The latch
node is watched too; losing it revokes leadership and re-runs the election.

Log lines carry the driver's name ("election-<id>") as correlation id.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from tenacity.wait import wait_base

from jobmanager.leader.driver import ContenderNotifier, LeaderContender, LeaderElectionDriver, LeadershipLostError
from jobmanager.leader.guarded_transaction import GuardedTransaction, guarded_transaction
from sluice.zk.paths import ZkPaths

_log = logging.getLogger(__name__)

_CHECK, _LOST, _STOP = "check", "lost", "stop"
_ELECTION_PASSES = 10  # list-create-list passes of one election step before it backs off
# After a failed election step: 0.5-1 s, then doubling up to 5 s (+ up to 0.5 s jitter).
_STEP_BACKOFF = wait_exponential_jitter(multiplier=0.5, max=5.0, jitter=0.5)
# Publishing the leader address raced with another writer or an expiring node: look again.
_PUBLISH_RACES = (NoNodeError, NodeExistsError, BadVersionError)
_PUBLISH_ATTEMPTS = 5


def _seq(name: str) -> int:
    return int(name.rsplit("-", 1)[-1])


def _is_latch_node(name: str) -> bool:
    return "-latch-" in name and name.rsplit("-", 1)[-1].isdigit()


class _Backoff:
    """Successive delays of a tenacity wait strategy, for an event loop that must keep
    reading its queue while it waits (so it cannot sleep inside ``tenacity.Retrying``)."""

    def __init__(self, wait: wait_base) -> None:
        self._wait = wait
        self._state = RetryCallState(Retrying(), None, (), {})

    def next_delay(self) -> float:
        delay = float(self._wait(self._state))
        self._state.attempt_number += 1
        return delay

    def reset(self) -> None:
        self._state.attempt_number = 1


class ZooKeeperLeaderElectionDriver(LeaderElectionDriver):
    """Latch-based election under ``paths.leader_latch``; see the module docstring."""

    def __init__(
        self, client: KazooClient, paths: ZkPaths, *, name: str | None = None, op_timeout: float = 10.0
    ) -> None:
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
        self._leader_info: tuple[str, bytes] | None = None  # (session id, connection info) to keep in place
        self._events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._notifier: ContenderNotifier | None = None
        self._thread: threading.Thread | None = None
        self._retry_at: float | None = None
        self._backoff = _Backoff(_STEP_BACKOFF)
        self._epoch = 0  # bumped on every connection state change

    # -- public API ---------------------------------------------------------------

    def start(self, contender: LeaderContender) -> None:
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"{self.name}: start() called twice")
            self._state = "running"
            self._notifier = ContenderNotifier(contender, self.has_leadership, self.name)
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
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._notifier is not None:
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

    def publish_leader_info(self, session_id: str, address: str, endpoints: dict[str, str] | None = None) -> bool:
        path = self._paths.leader_connection_info
        data = json.dumps({**(endpoints or {}), "address": address, "session_id": session_id}).encode()

        def log_race(attempt: RetryCallState) -> None:
            error = attempt.outcome.exception() if attempt.outcome is not None else None
            _log.info(
                "%s: publishing leader address %s (session %s) raced with another writer (%r); looking again in %.2fs",
                self.name,
                address,
                session_id,
                error,
                attempt.upcoming_sleep,
            )

        retrying = Retrying(
            stop=stop_after_attempt(_PUBLISH_ATTEMPTS) | stop_after_delay(self._op_timeout),
            wait=wait_exponential_jitter(multiplier=0.02, max=0.5, jitter=0.02),
            retry=retry_if_exception_type(_PUBLISH_RACES),
            before_sleep=log_race,
            reraise=True,
        )
        try:
            retrying(self._publish_once, session_id, path, data)
        except LeadershipLostError as exc:
            _log.info("%s: not publishing %s for session %s: %s", self.name, address, session_id, exc)
            return False
        except _PUBLISH_RACES as exc:
            _log.warning(
                "%s: publishing leader address %s still raced after %d attempts: %r",
                self.name,
                address,
                _PUBLISH_ATTEMPTS,
                exc,
            )
            return False
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("%s: publishing leader info failed: %r", self.name, exc)
            return False
        with self._lock:
            self._published.add(session_id)
            self._leader_info = (session_id, data)
        _log.info("%s: published leader address %s (session %s)", self.name, address, session_id)
        self._events.put(_CHECK)  # the election thread watches what we published
        return True

    def _publish_once(self, session_id: str, path: str, data: bytes) -> None:
        txn = self.guarded_transaction(session_id)
        # Delete + create rather than set: the node is ephemeral and must
        # belong to *our* ZooKeeper session, not to a previous leader's.
        stat = self._call(self._client.exists_async, path)
        if stat is not None:
            txn.delete(path, stat.version)
        txn.create(path, data, ephemeral=True)
        txn.commit()

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

    def _on_leader_info_event(self, event: Any) -> None:
        if event.type != EventType.NONE:
            self._events.put(_CHECK)

    def _on_node_event(self, event: Any) -> None:
        if event.type != EventType.NONE:  # NONE: connection change, handled by the listener
            self._events.put(_CHECK)

    # -- election thread ----------------------------------------------------------

    def _run(self) -> None:
        """The event loop: one election step per event (not a retry loop; a failed
        step is re-run after a backoff unless an event comes first)."""
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
                    self._keep_leader_info()
            except Exception as exc:  # noqa: BLE001 - keep the election alive
                with self._lock:
                    connected = self._connected and self._state == "running"
                if connected:
                    self._retry_later(f"election step failed: {exc!r}", logging.WARNING)
                else:  # the CONNECTED event re-runs the election
                    _log.debug("%s: election step failed while disconnected: %r", self.name, exc)

    def _retry_later(self, why: str, level: int) -> None:
        delay = self._backoff.next_delay()
        self._retry_at = time.monotonic() + delay
        _log.log(level, "%s: %s; running the election again in %.1fs", self.name, why, delay)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs).get(timeout=self._op_timeout)

    def _run_election(self) -> None:
        latch = self._paths.leader_latch
        for _ in range(_ELECTION_PASSES):  # bounded: each pass either decides or looks again
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
                created = self._call(
                    self._client.create_async, f"{latch}/{self._prefix}", ephemeral=True, sequence=True
                )
                self._node = created
                _log.debug("%s: joined the election as %s", self.name, created)
                continue  # list again, now with our node
            if current is None:
                current = mine[0]  # adopt a node whose create reply was lost
            node = self._node = f"{latch}/{current}"
            for stray in mine:
                if stray != current:
                    self._delete_quietly(f"{latch}/{stray}")
            queue_ = [c for c in children if c == current or not c.startswith(self._prefix)]
            index = queue_.index(current)
            if index == 0:
                self._become_leader(node)
            else:
                predecessor = f"{latch}/{queue_[index - 1]}"
                if self._call(self._client.exists_async, predecessor, watch=self._on_node_event) is None:
                    continue  # it left meanwhile: look again
                _log.debug("%s: standby behind %s", self.name, predecessor)
            self._backoff.reset()
            return
        self._retry_later(f"no decision after {_ELECTION_PASSES} passes", logging.INFO)

    def _keep_leader_info(self) -> None:
        """While leading: watch our published connection info and re-publish it when it was
        changed, deleted or re-created under us (on the election thread; see the module docstring)."""
        with self._lock:
            info = self._leader_info
            if info is None or info[0] != self._session:
                return
        session_id, data = info
        path = self._paths.leader_connection_info
        try:
            found, stat = self._call(self._client.get_async, path, watch=self._on_leader_info_event)
        except NoNodeError:
            found, stat = None, None
            # watch for its creation (a get watch is only set on an existing node)
            if self._call(self._client.exists_async, path, watch=self._on_leader_info_event) is not None:
                self._events.put(_CHECK)  # created meanwhile: look at it
                return
        owner = self._client.client_id[0] if self._client.client_id else None
        if stat is not None and found == data and stat.ephemeralOwner == owner:
            return
        what = "deleted" if stat is None else "overwritten" if found != data else "re-created by another session"
        _log.warning(
            "%s [cluster %s session %s]: %s was %s under the leader; publishing it again",
            self.name,
            self._paths.cluster_id,
            session_id,
            path,
            what,
        )
        try:
            self._publish_once(session_id, path, data)
        except LeadershipLostError as exc:
            _log.info("%s [session %s]: not re-publishing the leader address: %s", self.name, session_id, exc)
            return
        _log.info(
            "%s [cluster %s session %s]: leader address re-published", self.name, self._paths.cluster_id, session_id
        )

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
            if self._notifier is not None:
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
        if self._notifier is not None:
            self._notifier.revoke(session_id)

    def _withdraw(self) -> None:
        """On stop: remove our connection info and latch node(s), best effort."""
        try:
            path = self._paths.leader_connection_info
            data, stat = self._call(self._client.get_async, path)
            if self._node and json.loads(data or b"{}").get("session_id") in self._published:
                guarded_transaction(self._client, self._node, -1, self._op_timeout).delete(path, stat.version).commit()
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
