"""Fixtures shared by all tests.

- ``zookeeper``: one real ZooKeeper server per test session (Debian's package).
- ``zk_client_factory``: started KazooClients rooted at a fresh chroot per test;
  ``zk_client``: one of them.  All are closed at teardown.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import uuid

import pytest
from kazoo.client import KazooClient

from sluice.zk.server import EmbeddedZooKeeper

# Every JVM the tests start (the TaskManagers' Spark drivers, ZooKeeper, Spark standalone and
# Connect servers, a test's own SparkSession) runs with the client compiler only and the serial
# collector: the suite's JVMs live seconds to minutes on small data, where C2 compilation and
# parallel GC threads are most of their CPU. Measured on this 2-core machine: a TaskManager's
# SparkSession start and warm-up 29 -> 14 s of JVM CPU, 20 small Spark actions 8-12 -> 4.5 s.
# Production processes keep the JVM's defaults; set JDK_JAVA_OPTIONS yourself to override this.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"

# pytest keeps the test modules it rewrote (assert introspection) as bytecode in __pycache__, unless
# bytecode writing is off (PYTHONDONTWRITEBYTECODE, set on this machine): then every session parses
# and rewrites every test module again, ~9 s of CPU per session (collecting the suite: 13.6 -> 4.4 s).
# This session writes them; the modules it imports are compiled already (Makefile, `packages`).
sys.dont_write_bytecode = False


def pytest_configure(config):
    """A CI timeout or `kill` sends SIGTERM: turn it into KeyboardInterrupt so that pytest
    still tears down its fixtures (ZooKeeper servers, clusters) instead of leaving them running.
    The JVMs of the session get TEST_JVM_OPTIONS (through the java launcher's JDK_JAVA_OPTIONS)."""
    os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


INTEGRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integration") + os.sep


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Each test's tier, for `pytest -m fast|cluster|chaos` (the make targets of the same names):
    everything under tests/integration/ is `integration` and `cluster` unless it is marked `chaos`
    (kills, SIGSTOP, ZooKeeper restarts, HA, external Spark, a browser); the rest is `fast`."""
    for item in items:
        if str(item.path).startswith(INTEGRATION):
            item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("chaos") is None:
                item.add_marker(pytest.mark.cluster)
        else:
            item.add_marker(pytest.mark.fast)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


class ZkClientFactory:
    """Makes started KazooClients chrooted at ``chroot`` (unique to the test)."""

    def __init__(self, connect_string: str, chroot: str):
        self.connect_string = connect_string
        self.chroot = chroot
        self.hosts = connect_string + chroot
        self.clients: list[KazooClient] = []

    def __call__(self, **kwargs) -> KazooClient:
        client = KazooClient(hosts=self.hosts, **kwargs)
        self.clients.append(client)
        client.start(timeout=15)
        return client

    def close_all(self) -> None:
        for client in self.clients:
            try:
                client.stop()
                client.close()
            except Exception:  # noqa: BLE001 - teardown is best effort
                pass


@pytest.fixture
def zk_client_factory(zookeeper, request):
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    chroot = f"/tests/{name}-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper.connect_string)
    root.start(timeout=15)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    factory = ZkClientFactory(zookeeper.connect_string, chroot)
    yield factory
    factory.close_all()


@pytest.fixture
def zk_client(zk_client_factory) -> KazooClient:
    return zk_client_factory()
