"""The LeaderElectionDriver contract suite: each backing runs it by subclassing
LeaderElectionDriverContract and providing an election fixture
(tests/unit/test_leader_election_contract.py: in memory;
tests/integration/test_zookeeper_election.py: ZooKeeper)."""

from __future__ import annotations

import threading
import uuid
from typing import Protocol, TypeVar

import pytest
from helpers import wait_until

from jobmanager.leader.driver import LeaderContender, LeaderElectionDriver

DEADLINE = 10.0
D = TypeVar("D", bound=LeaderElectionDriver)


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
            return [sid for kind, sid in self.events if kind == "grant" and sid is not None]

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


class Election(Protocol[D]):
    """What the contract asks of a backing's election fixture (new drivers of its kind)."""

    def new_driver(self) -> D: ...

    def wait_joined(self, driver: D) -> None: ...


def started(election: Election[D], name: str) -> tuple[D, RecordingContender]:
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
        session_id = cl.session_id
        assert session_id is not None
        assert leader.has_leadership(session_id)
        assert not standby.has_leadership(session_id)
        assert cs.events == []
        assert not standby.publish_leader_info(session_id, "standby:1")

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
