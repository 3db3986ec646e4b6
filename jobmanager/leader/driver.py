"""Leader election for JobManagers: the driver interface (Flink's LeaderElectionDriver).

Theory of operation
-------------------
A *contender* (a JobManager) hands itself to a *driver* with ``start``.  The
driver calls ``grant_leadership(session_id)`` when the contender becomes
leader and ``revoke_leadership()`` when it stops being leader.  Every grant
mints a fresh uuid4 *leader session id*; the JobManager puts it on every RPC
(fencing, docs/protocols.md) and passes it back to ``has_leadership`` /
``publish_leader_info`` so that work started under an old session can be told
apart from work of the current one.

Callbacks are delivered one at a time, in order, on one thread per driver
(never on a ZooKeeper client's threads): ``ContenderNotifier`` does that.  A
grant whose session was revoked before it could be delivered is dropped, and
so is the matching revoke: a contender never sees a late callback of an old
session.

The backings: ``ZooKeeperLeaderElectionDriver`` (zookeeper_driver.py, the
runtime's) and ``InMemoryLeaderElectionDriver`` (in_memory.py, a test double).
One contract suite runs against both: tests/unit/test_leader_election_contract.py.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from sluice.zk import SerialExecutor

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
    def publish_leader_info(self, session_id: str, address: str, endpoints: dict[str, str] | None = None) -> bool:
        """Publish the leader's address (and its other `endpoints`, e.g. ``rest``), only while
        still leader for ``session_id``.

        Returns False (and changes nothing) when not leader for that session,
        or when the write could not be made; the caller may retry while
        ``has_leadership(session_id)`` holds.
        """


class ContenderNotifier:
    """Delivers grant/revoke to a contender, serialized and in order, dropping stale ones."""

    def __init__(self, contender: LeaderContender, is_current: Callable[[str], bool], name: str) -> None:
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
