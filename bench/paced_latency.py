"""End-to-end latency at a fixed input rate, for bench/compare.py: files
arrive in a watched directory at a steady pace below both systems' capacity,
and each file's latency is the time from its arrival to the first committed
output that counts it.

How: the page-view files are generated up front (examples/generate_page_views.py),
and one marker event `{"url": "/marker/<i>"}` is appended to file i, so its
url's count (1) appears in the committed output exactly when file i has been
counted and committed. A feeder renames file i into the watched directory at
start + i / rate (rename: a reader never sees half a file) and records the
time; a watcher lists the output directory every DIR_POLL s and reads each
new visible file once (a peer batch file rewritten on replay is read again),
recording when each marker is first seen. Latency(i) = seen(marker i) -
arrival(i). Both systems watch the directory themselves: Sluice's
`from_files(..., monitor_interval_ms=...)` (examples/page_views.py
--monitor-interval) and the peer's file source (a streaming file source
always watches). The first WARM_FRACTION of the files are left out of the
percentiles (the peer runs in a fresh JVM, warmed by one bounded query first). When the last marker is seen,
the job is cancelled (Sluice) or the query stopped (the peer), and the
committed output is checked (bench/output_check.py: no line twice, counts
increasing, final counts equal to the generator's).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import threading
import time

import page_views_recovery
import page_views_runs
import structured_streaming_child
import structured_streaming_runs
from generate_page_views import generate
from output_check import check_peer_output, check_sluice_output

MARKER = "/marker/"
WARM_FRACTION = 0.2  # of the files, left out of the percentiles
MONITOR_MS = 100  # Sluice's listing interval of the watched directory


def prepare(directory: str, files: int, events_per_file: int, seed: int) -> tuple[list[str], dict[str, int]]:
    """The files (not yet visible to anyone: they are moved in by the feeder) and the expected counts."""
    expected = generate(directory, events=files * events_per_file, files=files, urls=10_000, seed=seed)
    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    for i, name in enumerate(names):
        with open(os.path.join(directory, name), "a") as f:
            f.write(json.dumps({"url": f"{MARKER}{i:05d}", "user": 0, "ts": 0}) + "\n")
        expected[f"{MARKER}{i:05d}"] = 1
    return names, expected


class Feeder(threading.Thread):
    """Moves file i from `staged` into `watched` at start + i / rate; arrival[i] = monotonic time."""

    def __init__(self, staged: str, watched: str, names: list[str], rate: float):
        super().__init__(daemon=True)
        self.staged, self.watched, self.names, self.rate = staged, watched, names, rate
        self.arrival: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        for i, name in enumerate(self.names):
            if self.stop_event.wait(max(0.0, start + i / self.rate - time.monotonic())):
                return
            os.replace(os.path.join(self.staged, name), os.path.join(self.watched, name))
            self.arrival.append(time.monotonic())


class Watcher(page_views_recovery.DirWatch):
    """The recovery benchmark's output-directory watch (a listing every DIR_POLL s), which also reads
    each new (or rewritten) visible file once; seen[marker index] = monotonic time."""

    def __init__(self, out: str):
        super().__init__(out)
        self.seen: dict[int, float] = {}
        self._read: dict[str, float] = {}  # name -> mtime when read

    def scan(self) -> None:
        now = time.monotonic()
        for name in self.visible():
            path = os.path.join(self.path, name)
            try:
                mtime = os.stat(path).st_mtime
                if self._read.get(name) == mtime:
                    continue
                with open(path, newline="") as f:
                    rows = list(csv.reader(f))
            except FileNotFoundError:
                continue
            self._read[name] = mtime
            for row in rows:
                if row and row[0].startswith(MARKER):
                    self.seen.setdefault(int(row[0][len(MARKER) :]), now)


def wait_for_markers(watcher: Watcher, n: int, timeout: float, alive) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(watcher.seen) >= n:
            return True
        if not alive():
            return False
        time.sleep(0.1)
    return False


def figures(feeder: Feeder, watcher: Watcher, counts_ok: bool, **extra) -> dict:
    skip = int(len(feeder.arrival) * WARM_FRACTION)
    lat = [watcher.seen[i] - t for i, t in enumerate(feeder.arrival) if i >= skip and i in watcher.seen]
    missing = sum(1 for i in range(skip, len(feeder.arrival)) if i not in watcher.seen)
    t0 = feeder.arrival[0] if feeder.arrival else 0.0
    series = [(t - t0, watcher.seen[i] - t) for i, t in enumerate(feeder.arrival) if i in watcher.seen]
    return {
        "latencies": lat,
        "series": series,
        "missing": missing,
        "files": len(feeder.arrival),
        "counted": len(lat),
        "counts_ok": counts_ok,
        **extra,
    }


def start_watching(cluster: page_views_runs.Cluster, watched: str, out: str, interval: int, timeout: float) -> str:
    """examples/page_views.py watching `watched` (created here, empty) on a running cluster, its
    output in `out`, checkpoints every `interval` ms: the job's id once it is RUNNING (cancelled when
    it is not within `timeout` seconds)."""
    os.makedirs(watched)
    job_id = cluster.submit(
        "--input",
        watched,
        "--output",
        out,
        "--checkpoint-interval",
        str(interval),
        "--monitor-interval",
        str(MONITOR_MS),
    )
    deadline = time.monotonic() + timeout
    while cluster.status(job_id)["state"] != "RUNNING":
        if time.monotonic() > deadline:
            cluster.cancel(job_id)
            raise page_views_runs.BenchError(f"job {job_id} not RUNNING after {timeout:.0f}s")
        time.sleep(0.1)
    return job_id


def run_sluice(
    cluster: page_views_runs.Cluster,
    staged: str,
    names: list[str],
    expected: dict,
    work: str,
    rate: float,
    interval: int,
    timeout: float,
) -> dict:
    """page_views watching a directory on a running cluster; cancelled once every file is counted."""
    watched, out = os.path.join(work, "sluice-paced-in"), os.path.join(work, "sluice-paced-out")
    job_id = start_watching(cluster, watched, out, interval, timeout)
    feeder, watcher = Feeder(staged, watched, names, rate), Watcher(out)
    watcher.start()
    feeder.start()
    try:
        feeder.join()
        done = wait_for_markers(
            watcher, len(names), timeout, lambda: cluster.status(job_id)["state"] in ("RUNNING", "RESTARTING")
        )
        status = cluster.status(job_id)
    finally:
        feeder.stop_event.set()
        watcher.stop_event.set()
        cluster.cancel(job_id)
    watcher.join()
    check = check_sluice_output(out, expected)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(watched, ignore_errors=True)
    return figures(feeder, watcher, done and check.ok, job_id=job_id, restarts=status["restarts"], output_check=check)


def run_peer(
    staged: str, names: list[str], expected: dict, work: str, rate: float, warm_data: str, timeout: float
) -> dict:
    """The peer's query watching a directory, in a fresh child after one warm-up query; stopped once every
    file is counted (the child then processes what is left and exits)."""
    watched, out = os.path.join(work, "peer-paced-in"), os.path.join(work, "peer-paced-out")
    until = os.path.join(work, "peer-paced.stop")
    os.makedirs(watched)
    spec = {
        "queries": [
            structured_streaming_runs.query_spec(
                warm_data, os.path.join(work, "peer-paced-warm-ckpt"), os.path.join(work, "peer-paced-warm"), 0, None
            ),
            {
                **structured_streaming_runs.query_spec(watched, os.path.join(work, "peer-paced-ckpt"), out, 0, None),
                "until_file": until,
            },
        ]
    }
    child = structured_streaming_child.Child(spec, work, "paced")
    try:
        child.wait_for("started", timeout, query=1)
        feeder, watcher = Feeder(staged, watched, names, rate), Watcher(out)
        watcher.start()
        feeder.start()
        feeder.join()
        done = wait_for_markers(watcher, len(names), timeout, lambda: child.proc.poll() is None)
        with open(until, "w"):
            pass
        child.wait_for("done", timeout, query=1)
        watcher.stop_event.set()
        watcher.join()
        child.finish(timeout)
    finally:
        child.kill()
    check = check_peer_output(out, expected)
    for d in (
        out,
        watched,
        os.path.join(work, "peer-paced-warm"),
        os.path.join(work, "peer-paced-ckpt"),
        os.path.join(work, "peer-paced-warm-ckpt"),
    ):
        shutil.rmtree(d, ignore_errors=True)
    return figures(feeder, watcher, done and check.ok, output_check=check)
