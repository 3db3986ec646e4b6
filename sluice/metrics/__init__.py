"""Metrics (docs/monitoring.md): pure bookkeeping in meters.py and task_metrics.py, the
Prometheus endpoint in prometheus.py."""
