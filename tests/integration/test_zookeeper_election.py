"""The leader election contract against real ZooKeeper, plus what only ZooKeeper has:
sessions that expire, ephemeral leader info, guarded writes and leader retrieval."""

from __future__ import annotations

import socket
import threading

import pytest
from helpers import wait_until
from kazoo.client import KazooClient
from leader_election_contract import (
    DEADLINE,
    LeaderElectionDriverContract,
    granted,
    started,
)

from jobmanager.leader.driver import LeadershipLostError
from jobmanager.leader.guarded_transaction import guarded_transaction
from jobmanager.leader.zookeeper_driver import ZooKeeperLeaderElectionDriver
from sluice.zk.leader_retrieval import LeaderNotFoundError, LeaderRetriever, find_leader, read_leader
from sluice.zk.paths import ZkPaths
from sluice.zk.server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

CLUSTER = "test-cluster"


class ZooKeeperElection:
    """Contract hooks; every driver gets its own KazooClient (its own ZooKeeper session)."""

    def __init__(self, factory):
        self.factory = factory
        self.paths = ZkPaths(CLUSTER)
        self.admin = factory()
        self.drivers: list[ZooKeeperLeaderElectionDriver] = []
        self.clients: dict[int, KazooClient] = {}

    def new_driver(self, **client_kwargs) -> ZooKeeperLeaderElectionDriver:
        client = self.factory(**client_kwargs)
        driver = ZooKeeperLeaderElectionDriver(client, self.paths, name=f"election-{len(self.drivers)}")
        self.drivers.append(driver)
        self.clients[id(driver)] = client
        return driver

    def client_of(self, driver) -> KazooClient:
        return self.clients[id(driver)]

    def read_leader_info(self):
        return read_leader(self.admin, self.paths)

    def force_revoke(self, driver):
        # An operator deleting the leader's latch node: it is revoked and re-enters at the back.
        self.admin.delete(driver.latch_node_path)

    def wait_joined(self, driver):
        wait_until(lambda: driver.latch_node_path, DEADLINE, f"{driver.name} to join the election")

    def latch_children(self) -> list[str]:
        return self.admin.get_children(self.paths.leader_latch)

    def close(self):
        for driver in self.drivers:
            driver.stop()


def expire_session(factory, client: KazooClient) -> None:
    """Expire ``client``'s session for real: a second client takes it over, then closes it."""
    thief = KazooClient(hosts=factory.hosts, client_id=client.client_id)
    thief.start(timeout=15)
    thief.stop()
    thief.close()


def _election(factory):
    election = ZooKeeperElection(factory)
    yield election
    election.close()


@pytest.fixture
def election(zk_client_factory):
    yield from _election(zk_client_factory)


class TestZooKeeperLeaderElectionDriver(LeaderElectionDriverContract):
    @pytest.fixture
    def election(self, zk_client_factory):
        yield from _election(zk_client_factory)


# --------------------------------------------------------------------------- ZooKeeper only


def test_closing_the_leaders_client_revokes_it_and_the_standby_takes_over(election: ZooKeeperElection):
    a, ca = started(election, "a")
    first = granted(ca)
    b, cb = started(election, "b")
    election.client_of(a).stop()  # the ZooKeeper session ends with it
    wait_until(lambda: ca.revokes == 1, DEADLINE, "a to be revoked")
    assert not a.has_leadership(first)
    second = granted(cb)
    assert second != first
    assert b.publish_leader_info(second, "b:1")


def test_session_expiry_revokes_and_the_expired_leader_rejoins_with_a_new_node(
    election: ZooKeeperElection, zk_client_factory
):
    a, ca = started(election, "a")
    first = granted(ca)
    old_node = a.latch_node_path
    old_guard = a.leader_latch(first)
    b, cb = started(election, "b")
    expire_session(zk_client_factory, election.client_of(a))
    wait_until(lambda: ca.revokes == 1, DEADLINE, "a to be revoked on session expiry")
    second = granted(cb)
    # a's client reconnects with a new session; a re-enters behind b with a new latch node.
    wait_until(lambda: a.latch_node_path not in (None, old_node), DEADLINE, "a to rejoin with a new node")
    assert not election.admin.exists(old_node)
    assert not a.publish_leader_info(first, "a:stale")
    with pytest.raises(LeadershipLostError):
        guarded_transaction(election.admin, *old_guard).create("/stale").commit()
    b.stop()
    third = granted(ca, count=2)
    assert len({first, second, third}) == 3
    ca.assert_alternating()


def test_suspension_revokes_at_once_and_reconnection_regrants_with_a_new_session(election: ZooKeeperElection):
    a, ca = started(election, "a")
    first = granted(ca)
    node = a.latch_node_path
    stale_txn = a.guarded_transaction(first)  # prepared under the first session
    election.client_of(a)._connection._socket.shutdown(socket.SHUT_RDWR)  # drop the TCP connection
    wait_until(lambda: ca.revokes == 1, DEADLINE, "a to be revoked on SUSPENDED")
    second = granted(ca, count=2)  # same ZooKeeper session: same node, new leader session
    assert second != first and a.latch_node_path == node
    stale_txn.create("/written-by-stale-session")
    with pytest.raises(LeadershipLostError):
        stale_txn.commit()
    assert not election.admin.exists("/written-by-stale-session")
    a.guarded_transaction(second).create("/written-by-leader").commit()
    assert election.admin.exists("/written-by-leader")
    ca.assert_alternating()


def test_guarded_transaction_fences_a_revoked_leader(election: ZooKeeperElection):
    a, ca = started(election, "a")
    session_id = granted(ca)
    txn = a.guarded_transaction(session_id).create("/pointer", b"1")
    assert txn.commit() == ["/pointer"]
    late = a.guarded_transaction(session_id).set_data("/pointer", b"stale")
    election.force_revoke(a)
    wait_until(lambda: ca.revokes == 1, DEADLINE, "a to be revoked")
    with pytest.raises(LeadershipLostError):
        late.commit()
    with pytest.raises(LeadershipLostError):
        a.guarded_transaction(session_id)
    assert election.admin.get("/pointer")[0] == b"1"


def test_guarded_transaction_reports_the_failing_operation(election: ZooKeeperElection):
    a, ca = started(election, "a")
    session_id = granted(ca)
    from kazoo.exceptions import NoNodeError

    with pytest.raises(NoNodeError):
        a.guarded_transaction(session_id).create("/ok").delete("/missing").commit()
    assert not election.admin.exists("/ok")


def test_connection_info_is_ephemeral(election: ZooKeeperElection):
    a, ca = started(election, "a")
    session_id = granted(ca)
    assert a.publish_leader_info(session_id, "a:6123")
    assert election.read_leader_info() == ("a:6123", session_id)
    stat = election.admin.exists(election.paths.leader_connection_info)
    assert stat.ephemeralOwner == election.client_of(a).client_id[0]
    election.client_of(a).stop()
    wait_until(lambda: election.read_leader_info() is None, DEADLINE, "connection info to vanish")


def test_new_leader_owns_the_connection_info(election: ZooKeeperElection):
    """The new leader's info must outlive the old leader's session."""
    a, ca = started(election, "a")
    first = granted(ca)
    assert a.publish_leader_info(first, "a:1")
    b, cb = started(election, "b")
    election.force_revoke(a)  # a stays connected, its stale info stays until b publishes
    second = granted(cb)
    assert b.publish_leader_info(second, "b:1")
    election.client_of(a).stop()
    stat = election.admin.exists(election.paths.leader_connection_info)
    assert stat.ephemeralOwner == election.client_of(b).client_id[0]
    assert election.read_leader_info() == ("b:1", second)


def test_stop_removes_the_latch_node(election: ZooKeeperElection):
    a, ca = started(election, "a")
    b, cb = started(election, "b")
    granted(ca)
    assert len(election.latch_children()) == 2
    b.stop()
    a.stop()
    assert election.latch_children() == []


def test_leader_retriever_follows_the_leader(election: ZooKeeperElection):
    seen: list[tuple] = []
    lock = threading.Lock()

    def listener(address, session_id):
        with lock:
            seen.append((address, session_id))

    def last():
        with lock:
            return seen[-1] if seen else "nothing"

    retriever = LeaderRetriever(election.admin, election.paths, listener)
    try:
        wait_until(lambda: last() == (None, None), DEADLINE, "the initial (None, None)")
        a, ca = started(election, "a")
        first = granted(ca)
        b, cb = started(election, "b")
        assert a.publish_leader_info(first, "a:1")
        wait_until(lambda: last() == ("a:1", first), DEADLINE, "a's address")
        assert retriever.current == ("a:1", first)
        a.stop()
        second = granted(cb)
        assert b.publish_leader_info(second, "b:1")
        wait_until(lambda: last() == ("b:1", second), DEADLINE, "b's address")
        with lock:
            assert seen == [(None, None), ("a:1", first), (None, None), ("b:1", second)]
    finally:
        retriever.stop()
    assert b.publish_leader_info(second, "b:2")
    assert election.read_leader_info() == ("b:2", second)
    with lock:
        assert seen[-1] == ("b:1", second)  # stopped: no more calls


def test_leader_retriever_ignores_malformed_info(election: ZooKeeperElection):
    seen = []
    election.admin.create(election.paths.leader_connection_info, b"not json", makepath=True)
    retriever = LeaderRetriever(election.admin, election.paths, lambda *a: seen.append(a))
    try:
        wait_until(lambda: seen == [(None, None)], DEADLINE, "malformed info read as no leader")
    finally:
        retriever.stop()


def test_find_leader(election: ZooKeeperElection, zk_client_factory):
    a, ca = started(election, "a")
    session_id = granted(ca)
    assert a.publish_leader_info(session_id, "a:6123")
    assert find_leader(zk_client_factory.hosts, CLUSTER, timeout=10) == ("a:6123", session_id)


def test_find_leader_times_out_naming_what_it_looked_for(zk_client_factory):
    with pytest.raises(LeaderNotFoundError) as info:
        find_leader(zk_client_factory.hosts, "no-such-cluster", timeout=0.5)
    assert zk_client_factory.hosts in str(info.value) and "no-such-cluster" in str(info.value)


def test_find_leader_without_zookeeper():
    hosts = f"127.0.0.1:{free_port()}"
    with pytest.raises(LeaderNotFoundError) as info:
        find_leader(hosts, "c1", timeout=1.0)
    assert hosts in str(info.value) and "c1" in str(info.value)
