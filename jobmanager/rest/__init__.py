"""The JobManager's REST API and web dashboard (docs/monitoring.md)."""
