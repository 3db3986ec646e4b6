"""In-memory leader election: a TEST DOUBLE, not used by the runtime.

It exists so that the driver contract (driver.py) can be pinned down without
ZooKeeper: tests/unit/test_leader_election_contract.py runs the one contract
suite against it, and tests/integration/test_zookeeper_election.py runs the
same suite against the real driver (zookeeper_driver.py). JobManager
processes always elect through ZooKeeper; nothing outside tests imports
this module.
"""

from __future__ import annotations

import threading
import uuid

from jobmanager.leader.driver import LeaderContender, LeaderElectionDriver


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

    def create_driver(self) -> InMemoryLeaderElectionDriver:
        return InMemoryLeaderElectionDriver(self)

    @property
    def leader(self) -> InMemoryLeaderElectionDriver | None:
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
            leader._started_contender.revoke_leadership()
            self._waiting.append(leader)
            self._grant_next()

    def _join(self, driver: InMemoryLeaderElectionDriver) -> None:
        with self._lock:
            self._waiting.append(driver)
            if self._session is None:
                self._grant_next()

    def _leave(self, driver: InMemoryLeaderElectionDriver) -> None:
        with self._lock:
            if driver not in self._waiting:
                return
            leading = self._waiting[0] is driver and self._session is not None
            self._waiting.remove(driver)
            if leading:
                if self._leader_info and self._leader_info[1] == self._session:
                    self._leader_info = None
                self._session = None
                driver._started_contender.revoke_leadership()
                self._grant_next()

    def _grant_next(self) -> None:
        if self._waiting:
            self._session = str(uuid.uuid4())
            self._waiting[0]._started_contender.grant_leadership(self._session)

    def _is_leader(self, driver: InMemoryLeaderElectionDriver, session_id: str) -> bool:
        with self._lock:
            return bool(self._session) and session_id == self._session and self._waiting[0] is driver

    def _publish(self, driver: InMemoryLeaderElectionDriver, session_id: str, address: str) -> bool:
        with self._lock:
            if not self._is_leader(driver, session_id):
                return False
            self._leader_info = (address, session_id)
            return True


class InMemoryLeaderElectionDriver(LeaderElectionDriver):
    """One contender's handle on an ``InMemoryLeaderElectionService``."""

    def __init__(self, service: InMemoryLeaderElectionService) -> None:
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

    @property
    def _started_contender(self) -> LeaderContender:
        if self._contender is None:  # only started drivers are queued in the service
            raise RuntimeError("driver not started")
        return self._contender

    def has_leadership(self, session_id: str) -> bool:
        return self._service._is_leader(self, session_id)

    def publish_leader_info(self, session_id: str, address: str, endpoints: dict[str, str] | None = None) -> bool:  # noqa: ARG002 — in memory: the address alone is what tests read
        return self._service._publish(self, session_id, address)
