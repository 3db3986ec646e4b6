"""Leader election for JobManagers.

- driver.py: the contract (LeaderContender, LeaderElectionDriver,
  LeadershipLostError) and the callback notifier;
- zookeeper_driver.py: ZooKeeperLeaderElectionDriver, the runtime's driver;
- guarded_transaction.py: writes that commit only while the writer leads;
- in_memory.py: an in-memory driver, a test double for the contract tests.

Import from the module that defines a name; this package re-exports nothing.
"""
