"""The LeaderElectionDriver contract (tests/leader_election_contract.py) run against the in-memory driver.

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

import pytest
from leader_election_contract import LeaderElectionDriverContract, RecordingContender

from jobmanager.leader.driver import ContenderNotifier, LeaderElectionDriver
from jobmanager.leader.in_memory import InMemoryLeaderElectionService

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
