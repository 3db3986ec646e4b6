"""Leader election and (later) the HA stores guarded by it."""

from jobmanager.leader.election import (
    GuardedTransaction,
    InMemoryLeaderElectionDriver,
    InMemoryLeaderElectionService,
    LeaderContender,
    LeaderElectionDriver,
    LeadershipLostError,
    ZooKeeperLeaderElectionDriver,
    guarded_transaction,
)

__all__ = [
    "GuardedTransaction",
    "InMemoryLeaderElectionDriver",
    "InMemoryLeaderElectionService",
    "LeaderContender",
    "LeaderElectionDriver",
    "LeadershipLostError",
    "ZooKeeperLeaderElectionDriver",
    "guarded_transaction",
]
