"""Testing a job or the runtime against a real local cluster: `LocalCluster` (local_cluster.py)."""

from sluice.testing.local_cluster import CliError, LocalCluster, run_cli, running

__all__ = ["CliError", "LocalCluster", "run_cli", "running"]
