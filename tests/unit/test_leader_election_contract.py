"""The LeaderElectionDriver contract, and its run against the in-memory driver.

``LeaderElectionDriverContract`` is the one contract suite; each backing runs
it by subclassing it and providing an ``election`` fixture (see
``tests/integration/test_zookeeper_election.py`` for ZooKeeper).  An
``election`` fixture returns an object with:

- ``new_driver()``: a fresh, unstarted driver, as if in its own process;
- ``read_leader_info()``: the published ``(address, session_id)`` or None;
- ``force_revoke(driver)``: take leadership away from ``driver`` without
  stopping it (it stays in the election);
- ``wait_joined(driver)``: return once a started driver is queued in the
  election (so that contenders started one after the other queue in order).
"""

from __future__ import annotations

import threading
import uuid

import pytest
from helpers import wait_until

from jobmanager.leader.driver import ContenderNotifier, LeaderContender, LeaderElectionDriver
from jobmanager.leader.in_memory import InMemoryLeaderElectionService

DEADLINE = 10.0


class RecordingContender:
    """Records grant/revoke callbacks; thread-safe."""

    def __init__(self, name: str = "contender"):
        self.name = name
        self._lock = threading.Lock()
        self.events: list[tuple[str, str | None]] = []
        self.session_id: str | None = None

    def grant_leadership(self, session_id: str) -> None:
        with self._lock:
            self.events.append(("grant", session_id))
            self.session_id = session_id

    def revoke_leadership(self) -> None:
        with self._lock:
            self.events.append(("revoke", None))
            self.session_id = None

    @property
    def grants(self) -> list[str]:
        with self._lock:
            return [sid for kind, sid in self.events if kind == "grant"]

    @property
    def revokes(self) -> int:
        with self._lock:
            return sum(1 for kind, _ in self.events if kind == "revoke")

    def assert_alternating(self) -> None:
        """Grants and revokes alternate, starting with a grant; every grant has a new id."""
        with self._lock:
            kinds = [kind for kind, _ in self.events]
            sids = [sid for kind, sid in self.events if kind == "grant"]
        assert kinds == ["grant", "revoke"] * (len(kinds) // 2) + ["grant"] * (len(kinds) % 2), kinds
        assert len(set(sids)) == len(sids), sids

    def __repr__(self) -> str:
        return f"RecordingContender({self.name}, {self.events})"


def started(election, name: str) -> tuple[LeaderElectionDriver, RecordingContender]:
    driver, contender = election.new_driver(), RecordingContender(name)
    driver.start(contender)
    election.wait_joined(driver)
    return driver, contender


def granted(contender: RecordingContender, count: int = 1) -> str:
    """Wait for the contender's ``count``-th grant while it is leader; return its session id."""

    def check():
        grants = contender.grants
        return len(grants) >= count and contender.session_id == grants[-1] and grants[-1]

    return wait_until(check, DEADLINE, f"{contender.name} to be granted leadership #{count}")


class LeaderElectionDriverContract:
    """The contract every LeaderElectionDriver fulfils.  Subclasses provide ``election``."""

    @pytest.fixture
    def election(self):
        raise NotImplementedError

    def test_contender_protocol(self):
        assert isinstance(RecordingContender(), LeaderContender)

    def test_single_contender_is_granted_a_session_id(self, election):
        driver, contender = started(election, "a")
        session_id = granted(contender)
        assert uuid.UUID(session_id).version == 4
        assert driver.has_leadership(session_id)
        assert not driver.has_leadership(str(uuid.uuid4()))
        assert driver.publish_leader_info(session_id, "a:6123")
        assert election.read_leader_info() == ("a:6123", session_id)
        contender.assert_alternating()

    def test_two_contenders_exactly_one_leader(self, election):
        a, ca = started(election, "a")
        b, cb = started(election, "b")
        wait_until(lambda: ca.session_id or cb.session_id, DEADLINE, "a leader")
        (leader, cl), (standby, cs) = ((a, ca), (b, cb)) if ca.session_id else ((b, cb), (a, ca))
        assert leader.has_leadership(cl.session_id)
        assert not standby.has_leadership(cl.session_id)
        assert cs.events == []
        assert not standby.publish_leader_info(cl.session_id, "standby:1")

    def test_leader_stop_hands_over_with_a_new_session_id(self, election):
        a, ca = started(election, "a")
        first = granted(ca)
        b, cb = started(election, "b")
        assert a.publish_leader_info(first, "a:1")
        a.stop()
        assert ca.revokes == 1 and ca.session_id is None
        assert not a.has_leadership(first)
        second = granted(cb)
        assert second != first
        assert b.has_leadership(second)
        assert b.publish_leader_info(second, "b:1")
        assert election.read_leader_info() == ("b:1", second)
        ca.assert_alternating()
        cb.assert_alternating()

    def test_stopping_the_leader_withdraws_its_leader_info(self, election):
        a, ca = started(election, "a")
        session_id = granted(ca)
        assert a.publish_leader_info(session_id, "a:1")
        a.stop()
        wait_until(lambda: election.read_leader_info() is None, DEADLINE, "leader info to be removed")
        assert not a.publish_leader_info(session_id, "a:1")
        a.stop()  # idempotent

    def test_stale_session_cannot_publish(self, election):
        a, ca = started(election, "a")
        old = granted(ca)
        b, cb = started(election, "b")
        assert a.publish_leader_info(old, "a:1")
        election.force_revoke(a)
        new = granted(cb)
        wait_until(lambda: ca.revokes == 1, DEADLINE, "a to be revoked")
        assert b.publish_leader_info(new, "b:1")
        assert not a.publish_leader_info(old, "stale:1")
        assert not b.publish_leader_info(old, "stale:2")  # the right driver, the wrong session
        assert election.read_leader_info() == ("b:1", new)
        assert not a.has_leadership(old) and not b.has_leadership(old)

    def test_regrant_mints_a_new_session_id(self, election):
        a, ca = started(election, "a")
        first = granted(ca)
        election.force_revoke(a)
        second = granted(ca, count=2)
        assert second != first
        assert not a.has_leadership(first)
        assert a.has_leadership(second)
        assert not a.publish_leader_info(first, "a:old")
        assert a.publish_leader_info(second, "a:new")
        assert election.read_leader_info() == ("a:new", second)
        ca.assert_alternating()

    def test_revoked_leader_waits_behind_the_standby(self, election):
        a, ca = started(election, "a")
        granted(ca)
        b, cb = started(election, "b")
        election.force_revoke(a)
        granted(cb)
        b.stop()
        granted(ca, count=2)
        ca.assert_alternating()
        cb.assert_alternating()


# --------------------------------------------------------------------------- in memory


class InMemoryElection:
    def __init__(self):
        self.service = InMemoryLeaderElectionService()
        self.drivers: list[LeaderElectionDriver] = []

    def new_driver(self):
        driver = self.service.create_driver()
        self.drivers.append(driver)
        return driver

    def read_leader_info(self):
        return self.service.leader_info

    def force_revoke(self, driver):
        assert self.service.leader is driver, "force_revoke expects the current leader"
        self.service.revoke()

    def wait_joined(self, driver):
        pass  # start() is synchronous

    def close(self):
        for driver in self.drivers:
            driver.stop()


class TestInMemoryLeaderElectionDriver(LeaderElectionDriverContract):
    @pytest.fixture
    def election(self):
        election = InMemoryElection()
        yield election
        election.close()

    def test_callbacks_are_synchronous(self):
        service = InMemoryLeaderElectionService()
        a, b = service.create_driver(), service.create_driver()
        ca, cb = RecordingContender("a"), RecordingContender("b")
        a.start(ca)
        b.start(cb)
        assert ca.session_id and cb.events == []
        assert service.leader is a and service.leader_session_id == ca.session_id
        service.revoke()
        assert ca.events[-1] == ("revoke", None) and cb.session_id == service.leader_session_id
        b.stop()
        assert service.leader is a and ca.session_id == service.leader_session_id
        a.stop()
        assert service.leader is None and service.leader_session_id is None

    def test_start_twice_is_an_error(self):
        driver = InMemoryLeaderElectionService().create_driver()
        driver.start(RecordingContender())
        with pytest.raises(RuntimeError):
            driver.start(RecordingContender())


def test_late_callbacks_of_an_old_session_are_dropped():
    current = {"session": "s2"}
    contender = RecordingContender()
    notifier = ContenderNotifier(contender, lambda sid: sid == current["session"], "test")
    notifier.grant("s1")  # revoked before it could be delivered
    notifier.revoke("s1")  # so its revoke is dropped too
    notifier.grant("s2")
    notifier.revoke("s1")  # a late revoke of an old session does not touch s2
    notifier.close(timeout=5)
    assert contender.events == [("grant", "s2")]
