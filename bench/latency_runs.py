"""One measured run of bench/latency_suite.py on either system: `sluice_run` (a new page_views job on
the suite's cluster) and `Peer.run` (a new query in the peer's one child process), each feeding the
watched directory, watching the markers, metering every process and checking the committed output;
`Setup` is what every run shares.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import paced_latency
import page_views_runs
import spark_peer
import structured_streaming_child
import structured_streaming_runs
from bench_common import write_atomically
from checkpoint_overhead import cluster_roles
from latency_figures import BLOCK_S, PEER, SLUICE, block_bootstrap_ci, drain_rate, latencies, summary
from latency_workload import Contents, Feeder, Watcher
from output_check import check_peer_output, check_sluice_output
from procstat import ResourceMeter, Usage, excluded


@dataclass
class Setup:
    work: str
    contents: Contents
    file_rate: float
    warm: int
    interval: int
    timeout: float
    limit: float
    meter: Callable[[], ResourceMeter]


def _result(system: str, label: str, feeder: Feeder, watcher: Watcher, events: int, setup: Setup, **extra) -> dict:
    series = latencies(feeder.arrival, watcher.seen, 0 if feeder.backlog else setup.warm)
    lat = [x for _, x in series]
    block = max(1, int(BLOCK_S * setup.file_rate))
    usage: Usage | None = extra.get("usage")
    r = {
        "system": system,
        "label": label,
        "events_per_file": events,
        "files": len(feeder.arrival),
        "rate": events * setup.file_rate,
        "series": series,
        "missing": len(feeder.arrival) - len(watcher.seen),
        "p50_ci": block_bootstrap_ci(lat, block),
        **summary(lat),
        **extra,
    }
    if feeder.backlog:
        r["capacity"] = drain_rate(feeder.arrival, watcher.seen, events * len(feeder.arrival))
    r["excluded"] = excluded(usage, setup.limit)
    r["ok"] = bool(extra.get("check") and extra["check"].ok and r["missing"] == 0 and feeder.error is None)
    return r


def sluice_run(
    cluster: page_views_runs.Cluster, setup: Setup, label: str, events: int, files: int, backlog=False
) -> dict:
    watched = os.path.join(setup.work, f"sluice-{label}-in")
    out = os.path.join(setup.work, f"sluice-{label}-out")
    job_id = paced_latency.start_watching(cluster, watched, out, setup.interval, setup.timeout)
    feeder = Feeder(watched, setup.contents, events, files, setup.file_rate, backlog)
    watcher = Watcher(out)
    meter = None
    try:
        feeder.prepare()
        watcher.start()
        meter = setup.meter().start()
        feeder.start()
        feeder.join()
        paced_latency.wait_for_markers(
            watcher, files, setup.timeout, lambda: cluster.status(job_id)["state"] in ("RUNNING", "RESTARTING")
        )
        status = cluster.status(job_id)
    finally:
        usage = meter.stop() if meter else None
        feeder.stop_event.set()
        watcher.stop_event.set()
        cluster.cancel(job_id)
    watcher.join()
    check = check_sluice_output(out, setup.contents.expected(len(feeder.arrival), events))
    if check.ok:
        shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(watched, ignore_errors=True)
    return _result(
        SLUICE,
        label,
        feeder,
        watcher,
        events,
        setup,
        usage=usage,
        check=check,
        job_id=job_id,
        restarts=status["restarts"],
        roles=cluster_roles(cluster),
    )


class Peer(spark_peer.PeerSide):
    """One child process (one SparkSession, warmed by a bounded query, query 0); each run is a new query
    on its own directories, started when the run begins (structured_streaming_bench's `go_file`)."""

    MAX_QUERIES = 40

    def __init__(self, work: str, warm_data: str, timeout: float):
        self.work, self.warm_data = work, warm_data
        super().__init__(work, 0, timeout, name="latency-peer")
        self.next = 1
        self.spawn()

    def go_file(self, i: int) -> str:
        return os.path.join(self.work, f"peer-go-{i}.json")

    def spec(self) -> dict:
        """Query 0 warms the session on `warm_data`; each later one waits for its go file (the child's
        default master)."""
        placeholder = structured_streaming_runs.query_spec(self.work, self.work, self.work, 0, None)
        warm = os.path.join(self.work, "peer-warm")
        queries = [structured_streaming_runs.query_spec(self.warm_data, warm + "-ckpt", warm, 0, None)]
        queries += [{**placeholder, "go_file": self.go_file(k)} for k in range(1, self.MAX_QUERIES + 1)]
        return {"queries": queries}

    def pids(self) -> list[int]:
        return self.roots()

    def ready(self) -> None:
        self.child.wait_for("done", self.timeout, query=0)

    def run(self, setup: Setup, label: str, events: int, files: int, backlog=False) -> dict:
        k = self.next
        if k > self.MAX_QUERIES:
            raise structured_streaming_child.BenchError("the peer child has no query left")
        self.next += 1
        watched = os.path.join(self.work, f"peer-{label}-in")
        out = os.path.join(self.work, f"peer-{label}-out")
        ckpt = os.path.join(self.work, f"peer-{label}-ckpt")
        until = os.path.join(self.work, f"peer-{label}.stop")
        os.makedirs(watched)
        write_atomically(
            self.go_file(k), json.dumps({"input": watched, "out": out, "checkpoint": ckpt, "until_file": until})
        )
        self.child.wait_for("started", self.timeout, query=k)
        feeder = Feeder(watched, setup.contents, events, files, setup.file_rate, backlog)
        watcher = Watcher(out)
        feeder.prepare()
        watcher.start()
        meter = setup.meter().start()
        try:
            feeder.start()
            feeder.join()
            paced_latency.wait_for_markers(watcher, files, setup.timeout, lambda: self.child.proc.poll() is None)
        finally:
            usage = meter.stop()
            feeder.stop_event.set()
            with open(until, "w"):
                pass
        self.child.wait_for("done", self.timeout, query=k)
        watcher.stop_event.set()
        watcher.join()
        check = check_peer_output(out, setup.contents.expected(len(feeder.arrival), events))
        for d in ([out] if check.ok else []) + [watched, ckpt]:
            shutil.rmtree(d, ignore_errors=True)
        return _result(PEER, label, feeder, watcher, events, setup, usage=usage, check=check)

    def close(self) -> None:
        if self.next <= self.MAX_QUERIES:
            self.stop()  # the exit go file, then the child's end
        elif self.child is not None:
            self.child.kill()
