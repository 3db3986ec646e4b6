"""Guarded writes: ZooKeeper transactions that commit only while the writer leads.

Theory of operation
-------------------
On a grant the leader writes its session id into its own latch node
(zookeeper_driver.py), which bumps the node's version.  A guarded
transaction starts with ``check(latch_node, version)``, so it fails as soon
as the node is gone (session expired, driver stopped) *or* leadership was
re-granted under a newer session id: a JobManager that lost leadership can
never overwrite a newer leader's pointers (jobmanager/ha/zookeeper.py).

Every value added is counted: one above ``MAX_WRITE_BYTES``, or a
transaction whose values add up to more, raises ``ZNodeTooLargeError`` when
it is added, before anything is sent (sluice/zk/limits.py): ZooKeeper would
drop the session of a request above its ``jute.maxbuffer``, and with it the
leadership.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError, RuntimeInconsistency

from jobmanager.leader.driver import LeadershipLostError
from sluice.zk.limits import MAX_WRITE_BYTES, check_size


class GuardedTransaction:
    """A kazoo transaction whose first operation checks the writer's latch node.

    If the latch node is gone (or its version moved on: a newer grant), the
    whole transaction is rolled back and ``commit`` raises LeadershipLostError.
    Any other failing operation is re-raised as its kazoo exception.
    """

    def __init__(
        self, client: KazooClient, guard_path: str, guard_version: int = -1, timeout: float | None = 10.0
    ) -> None:
        self.guard_path = guard_path
        self._timeout = timeout
        self._txn = client.transaction()
        self._txn.check(guard_path, guard_version)
        self._bytes = 0  # the values added so far

    def _count(self, path: str, value: bytes) -> None:
        check_size(f"the value of ZooKeeper node {path}", len(value), MAX_WRITE_BYTES)
        check_size(f"a ZooKeeper transaction writing {path}", self._bytes + len(value), MAX_WRITE_BYTES)
        self._bytes += len(value)

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False
    ) -> GuardedTransaction:
        self._count(path, value)
        self._txn.create(path, value, ephemeral=ephemeral, sequence=sequence)
        return self

    def set_data(self, path: str, value: bytes, version: int = -1) -> GuardedTransaction:
        self._count(path, value)
        self._txn.set_data(path, value, version)
        return self

    def delete(self, path: str, version: int = -1) -> GuardedTransaction:
        self._txn.delete(path, version)
        return self

    def check(self, path: str, version: int) -> GuardedTransaction:
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
        return list(rest)


def guarded_transaction(
    client: KazooClient, latch_node_path: str, latch_node_version: int = -1, timeout: float | None = 10.0
) -> GuardedTransaction:
    """A transaction that commits only while ``latch_node_path`` (at that version) exists."""
    return GuardedTransaction(client, latch_node_path, latch_node_version, timeout)
