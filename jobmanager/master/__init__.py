"""The JobMaster's collaborators (jobmanager/job_master.py wires them): scheduler.py (the
attempts), checkpointing.py (the CheckpointCoordinator's adapter, savepoints), failover.py
(restart decisions) with exception_history.py, deployment.py (deployment descriptors,
partition ids), status.py (JobInfo from a snapshot, pure) and ports.py (the interfaces between
them, the JobMaster and the dispatcher). The package re-exports nothing."""
