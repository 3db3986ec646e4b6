"""The Prometheus endpoint of a JobManager or TaskManager (docs/monitoring.md): a
collector that asks its process for samples at every scrape, served by
sluice/http_server.py on metrics.port.

Names follow Flink's Prometheus reporter: `sluice_<scope>_<metric>`, e.g.
`sluice_taskmanager_job_task_numRecordsInPerSecond{job_id, task, subtask}`;
every metric is a gauge (Flink reports counters as gauges too)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, make_asgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sluice.http_server import HttpServer


@dataclass(frozen=True)
class Sample:
    name: str  # e.g. "taskmanager_job_task_numRecordsIn"
    help: str
    labels: tuple[tuple[str, str], ...]
    value: float


class _Collector(Collector):
    def __init__(self, collect: Callable[[], Iterable[Sample]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        label_names: dict[str, Sequence[str]] = {}
        for s in self._collect():
            name = f"sluice_{s.name}"
            keys = [k for k, _ in s.labels]
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, s.help, labels=keys)
                label_names[name] = keys
            elif list(label_names[name]) != keys:
                continue  # one label set per family; a mismatch is a bug in the caller, not the scrape's problem
            family.add_metric([v for _, v in s.labels], s.value)
        return list(families.values())


def metrics_app(collect: Callable[[], Iterable[Sample]]) -> object:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(collect))
    return make_asgi_app(registry)


def serve(collect: Callable[[], Iterable[Sample]], host: str, port: int) -> HttpServer:
    """Serve `collect`'s samples at http://host:port/metrics (started)."""
    server = HttpServer(metrics_app(collect), host, port, name="metrics")
    server.start()
    return server
