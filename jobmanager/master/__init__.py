"""The JobMaster's collaborators (jobmanager/job_master.py wires them): checkpointing.py,
failover.py, exception_history.py, deployment.py, status.py and ports.py. The package
re-exports nothing."""
