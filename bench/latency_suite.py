"""Latency at fixed input rates, a sustained run, and the maximum sustainable throughput at a p99
bound: Sluice and Spark Structured Streaming, runs alternating between the two.

    python bench/latency_suite.py [--quick] [--file-rate 25] [--samples 500] [--sustained-s 300]
                                  [--interval 1000] [--max-foreign-cores 0.3]
                                  [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

The input is a stream of page-view files (examples/generate_page_views.py's events: Zipf urls,
10,000 urls) that a feeder thread writes into a watched directory at a fixed pace: file i is
written under a hidden name and renamed at start + i / file-rate (rename: no reader sees half a
file). Each file ends with one marker event `/marker/<i>`, whose count (1) is committed when file
i has been counted and committed; a watcher lists the output directory every 20 ms, so latency(i)
= first sight of marker i in a committed output file − file i's rename (bench/paced_latency.py's
method). The file rate is fixed (default 25 files/s) and a rate is set by the events per file, so
every point of the suite takes the same time and yields the same number of samples. The first
--warm-files files of every run are left out of its percentiles.

Both systems run the reference job (running count per url): Sluice examples/page_views.py with
--monitor-interval 100 and checkpoints every --interval ms on one local cluster (2 TaskManagers x
2 slots, parallelism 2), a new job per run; the peer's query (bench/structured_streaming_bench.py,
local[2]) in one child process with one SparkSession, warmed by a bounded query, a new query per
run, started only when its run begins (no idle query polls during the other system's runs).

1. Capacity, per system: a backlog drain through the same path: --capacity-events events in files
   of 25,000 written hidden, then all renamed at once into the watched directory; capacity =
   events / (rename → last marker seen committed). Not a ramp: under a backlog both systems batch
   as much as they can (Sluice's source doubles its files per batch, a micro-batch takes every
   file there), the same adaptation a paced stream above their per-batch capacity gets.
2. Fixed rates at 25 / 50 / 75 / 90 % of that system's own capacity, --samples counted files each
   (after the warm files); the systems alternate run by run. Then 100 % and 110 % while the last
   point's p99 was within the larger bound (the knee).
3. Sustained: --sustained-s seconds at one rate for both, 50 % of the slower system's capacity
   (so that run is the slower system's 50 % point); latency percentiles per minute, CPU seconds
   and peak RSS of every process (bench/procstat.py).
4. Maximum sustainable throughput at p99 ≤ 1 s and ≤ 2 s: the highest rate tested (any run of
   that system the load rule kept) whose p99 is within the bound.

p50's 95 % interval is a block bootstrap: the samples are cut into blocks of consecutive files
(one block = BLOCK_S seconds of arrivals, so a checkpoint interval's saw-tooth stays inside a
block), blocks are resampled with replacement, and the interval runs from the 2.5th to the 97.5th
percentile of the resamples' medians (bench/stats.py's seed and resample count). Every run's
committed output is checked (bench/output_check.py: no line twice, counts increasing, final counts
exact); a failed check marks the run failed and leaves it out of every figure. The load rule
(bench/procstat.py): a run during which other processes used more than --max-foreign-cores cores
on average is marked excluded and left out of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import paced_latency
import page_views_bench as pvb  # (also puts the repo and examples/ on sys.path)
import spark_peer
import structured_streaming_bench as ssb
from bench_common import begin_run, finish_workdir, fmt, pct, publish, run_main, write_atomically
from checkpoint_overhead import cluster_roles
from generate_page_views import generate
from markdown import notes_lines, section_head
from output_check import check_peer_output, check_sluice_output
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, Usage, excluded, fmt_rss
from stats import CONFIDENCE, RESAMPLES, SEED, Estimate, fmt_estimate

log = pvb.log
SLUICE, PEER = "Sluice", "Structured Streaming"
MARKER = paced_latency.MARKER
MARKER_B = MARKER.encode()
URL = "/page/"
POINTS = (25, 50, 75, 90)  # % of the system's own capacity
KNEE = (100, 110)  # tested while the previous point's p99 was within max(BOUNDS)
BOUNDS = (1.0, 2.0)  # s: p99 bounds of the maximum sustainable throughput
BLOCK_S = 2.0  # s of arrivals per bootstrap block
CAPACITY_FILE_EVENTS = 25_000
CONTENT_BLOCKS = 16  # distinct file contents, reused round robin (counts just add up)


# -- input ----------------------------------------------------------------------------------------------
class Contents:
    """CONTENT_BLOCKS distinct files of page-view events (generate()'s Zipf urls) of up to `events`
    events each; a file of e events is the first e lines of one of them."""

    def __init__(self, work: str, events: int, urls: int, seed: int = 17):
        self.events, self.urls = events, urls
        d = os.path.join(work, f"contents-{events}")
        generate(d, events=events * CONTENT_BLOCKS, files=CONTENT_BLOCKS, urls=urls, seed=seed)
        self.text: list[bytes] = []
        self.ends: list[np.ndarray] = []  # byte offset after each line
        self.idx: list[np.ndarray] = []  # url index of each line
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            lines = data.splitlines(keepends=True)
            self.text.append(data)
            self.ends.append(np.cumsum([len(x) for x in lines]))
            self.idx.append(np.array([int(json.loads(x)["url"][len(URL) :]) for x in lines]))
        shutil.rmtree(d, ignore_errors=True)

    def content(self, i: int, events: int) -> bytes:
        j = i % CONTENT_BLOCKS
        return self.text[j][: int(self.ends[j][events - 1])] + marker_line(i)

    def expected(self, files: int, events: int) -> dict[str, int]:
        """The final counts after files 0..files-1 of `events` events each (markers included)."""
        total = np.zeros(self.urls, dtype=np.int64)
        for j in range(CONTENT_BLOCKS):
            uses = len(range(j, files, CONTENT_BLOCKS))
            if uses:
                total += uses * np.bincount(self.idx[j][:events], minlength=self.urls)
        out = {f"{URL}{u}": int(c) for u, c in enumerate(total.tolist()) if c}
        out.update({marker_name(i): 1 for i in range(files)})
        return out


def marker_name(i: int) -> str:
    return f"{MARKER}{i:05d}"


def marker_line(i: int) -> bytes:
    return (json.dumps({"url": marker_name(i), "user": 0, "ts": 0}) + "\n").encode()


class Feeder(threading.Thread):
    """Writes file i (hidden name, then rename) at start + i / rate; arrival[i] = monotonic time of
    its rename. backlog: every file is written hidden by `prepare()` and all are renamed at once."""

    def __init__(self, watched: str, contents: Contents, events: int, files: int, rate: float, backlog=False):
        super().__init__(daemon=True)
        self.watched, self.contents, self.events, self.files, self.rate = watched, contents, events, files, rate
        self.backlog = backlog
        self.arrival: list[float] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def _hidden(self, i: int) -> str:
        return os.path.join(self.watched, f".events-{i:05d}.jsonl")

    def _write(self, i: int) -> None:
        with open(self._hidden(i), "wb") as f:
            f.write(self.contents.content(i, self.events))

    def prepare(self) -> None:
        if self.backlog:
            for i in range(self.files):
                self._write(i)

    def run(self) -> None:
        try:
            start = time.monotonic()
            for i in range(self.files):
                if not self.backlog:
                    if self.stop_event.wait(max(0.0, start + i / self.rate - time.monotonic())):
                        return
                    self._write(i)
                os.replace(self._hidden(i), os.path.join(self.watched, f"events-{i:05d}.jsonl"))
                self.arrival.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 — reported by the run
            self.error = exc


class Watcher(paced_latency.Watcher):
    """paced_latency's watcher, reading each committed file once, as bytes (a marker is a line's
    start): the sustained runs commit millions of lines, which csv-parsing every 20 ms would make
    the harness's own load."""

    def scan(self) -> None:
        now = time.monotonic()
        for name in self.visible():
            if name in self._read:
                continue
            try:
                with open(os.path.join(self.path, name), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            self._read[name] = now
            pos = data.find(MARKER_B)
            while pos != -1:
                end = data.find(b",", pos)
                self.seen.setdefault(int(data[pos + len(MARKER_B) : end]), now)
                pos = data.find(MARKER_B, end)


# -- figures (pure) -------------------------------------------------------------------------------------
def latencies(arrival: Sequence[float], seen: dict[int, float], warm: int) -> list[tuple[float, float]]:
    """(arrival − first arrival, latency) of every file after the first `warm` whose marker was seen."""
    if not arrival:
        return []
    t0 = arrival[0]
    return [(t - t0, seen[i] - t) for i, t in enumerate(arrival) if i >= warm and i in seen]


def block_bootstrap_ci(
    samples: Sequence[float], block: int, q: float = 50, resamples: int = RESAMPLES, seed: int = SEED
) -> Estimate:
    """The q-th percentile of `samples` (in arrival order) with a block-bootstrap interval: the samples
    cut into consecutive blocks of `block`, blocks resampled with replacement (as many as there are),
    the percentile of each resample; interval = CONFIDENCE percentiles of those. One block: no interval."""
    xs = np.asarray(samples, dtype=float)
    n = len(xs)
    if n == 0:
        return Estimate(None, None, None, 0)
    value = float(np.percentile(xs, q))
    block = max(1, block)
    blocks = [xs[i : i + block] for i in range(0, n, block)]
    if len(blocks) < 2:
        return Estimate(value, None, None, n)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(blocks), size=(resamples, len(blocks)))
    stats = np.array([np.percentile(np.concatenate([blocks[k] for k in row]), q) for row in picks])
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return Estimate(value, float(low), float(high), n)


def summary(lat: Sequence[float]) -> dict:
    return {
        "n": len(lat),
        "p50": pct(lat, 50),
        "p95": pct(lat, 95),
        "p99": pct(lat, 99),
        "max": max(lat) if lat else None,
    }


def per_minute(series: Sequence[tuple[float, float]], minute: float = 60.0) -> list[dict]:
    """The latency summary of each minute of arrivals (series: (arrival offset s, latency s))."""
    buckets: dict[int, list[float]] = {}
    for t, lat in series:
        buckets.setdefault(int(t // minute), []).append(lat)
    return [{"minute": m + 1, **summary(buckets[m])} for m in sorted(buckets)]


def drain_rate(arrival: Sequence[float], seen: dict[int, float], events: int) -> float | None:
    """Capacity from a backlog drain: events / (first rename → last marker seen); None if a marker is missing."""
    if not arrival or len(seen) < len(arrival):
        return None
    span = max(seen.values()) - arrival[0]
    return events / span if span > 0 else None


def counted(run: dict) -> bool:
    """In the figures: output check passed, every marker seen, not excluded by the load rule."""
    return bool(run.get("ok")) and not run.get("excluded")


def max_sustainable(runs: Iterable[dict], bound: float) -> dict | None:
    """The counted run with the highest rate whose p99 ≤ bound (None: no such run)."""
    ok = [r for r in runs if counted(r) and r["p99"] is not None and r["p99"] <= bound]
    return max(ok, key=lambda r: r["rate"]) if ok else None


def knee_next(points: Sequence[dict], bound: float = max(BOUNDS)) -> bool:
    """Test the next knee rate: the system's last point was counted and its p99 within `bound`."""
    return bool(points) and counted(points[-1]) and points[-1]["p99"] is not None and points[-1]["p99"] <= bound


def events_per_file(rate: float, file_rate: float) -> int:
    return max(1, round(rate / file_rate))


# -- the two systems -------------------------------------------------------------------------------------
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


def _wait(watcher: Watcher, n: int, timeout: float, alive: Callable[[], bool]) -> bool:
    return paced_latency._wait_for_markers(watcher, n, timeout, alive)


def sluice_run(cluster: pvb.Cluster, setup: Setup, label: str, events: int, files: int, backlog=False) -> dict:
    watched = os.path.join(setup.work, f"sluice-{label}-in")
    out = os.path.join(setup.work, f"sluice-{label}-out")
    os.makedirs(watched)
    job_id = cluster.submit(
        "--input",
        watched,
        "--output",
        out,
        "--checkpoint-interval",
        str(setup.interval),
        "--monitor-interval",
        str(paced_latency.MONITOR_MS),
    )
    feeder = Feeder(watched, setup.contents, events, files, setup.file_rate, backlog)
    watcher = Watcher(out)
    meter = None
    try:
        deadline = time.monotonic() + setup.timeout
        while cluster.status(job_id)["state"] != "RUNNING":
            if time.monotonic() > deadline:
                raise pvb.BenchError(f"job {job_id} not RUNNING after {setup.timeout:.0f}s")
            time.sleep(0.1)
        feeder.prepare()
        watcher.start()
        meter = setup.meter().start()
        feeder.start()
        feeder.join()
        _wait(watcher, files, setup.timeout, lambda: cluster.status(job_id)["state"] in ("RUNNING", "RESTARTING"))
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
        placeholder = ssb.query_spec(self.work, self.work, self.work, 0, None)
        warm = os.path.join(self.work, "peer-warm")
        queries = [ssb.query_spec(self.warm_data, warm + "-ckpt", warm, 0, None)]
        queries += [{**placeholder, "go_file": self.go_file(k)} for k in range(1, self.MAX_QUERIES + 1)]
        return {"queries": queries}

    def pids(self) -> list[int]:
        return self.roots()

    def ready(self) -> None:
        self.child.wait_for("done", self.timeout, query=0)

    def run(self, setup: Setup, label: str, events: int, files: int, backlog=False) -> dict:
        k = self.next
        if k > self.MAX_QUERIES:
            raise ssb.BenchError("the peer child has no query left")
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
            _wait(watcher, files, setup.timeout, lambda: self.child.proc.poll() is None)
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


# -- report ----------------------------------------------------------------------------------------------
def status_of(r: dict) -> str:
    if not r.get("ok"):
        return "**FAILED**"
    return "excluded" if r.get("excluded") else "counted"


def cpu_of(r: dict) -> tuple[float | None, float | None]:
    """(CPU s of the run's system, CPU s per million events) within the run's window."""
    u: Usage | None = r.get("usage")
    if u is None:
        return None, None
    cpu = u.cpu_s.get(r["system"])
    events = r["files"] * r["events_per_file"]
    return cpu, (cpu / events * 1e6 if cpu is not None and events else None)


def process_rss(r: dict) -> list[tuple[str, int]]:
    """(process, peak RSS) of the run's system; Sluice's processes named by their role in cluster.json."""
    u: Usage | None = r.get("usage")
    if u is None:
        return []
    roles = r.get("roles", {})
    out = []
    for key, v in u.peak_rss.get(r["system"], {}).items():
        if v < 2**20:  # a process that lived between two samples, or a helper (jspawnhelper)
            continue
        name, _, pid = key.rpartition(" ")
        out.append((f"{roles.get(int(pid), name) if pid.isdigit() else name} {pid}", v))
    return sorted(out)


def report(args, facts: dict, command: str, res: dict, notes: list[str]) -> str:
    L: list[str] = []
    kind = "quick" if args.quick else "full"
    title = f"latency at fixed rates, sustained run, maximum sustainable throughput ({kind})"
    L += section_head(title, command, facts)
    runs = [r for r in res["runs"]]
    bad = [r for r in runs if not r.get("ok")]
    if bad:
        L.append(f"**OUTPUT CHECK FAILED or markers missing** in {len(bad)} runs (marked **FAILED** below).")
        L.append("")
    L.append(
        f"Input: files written into a watched directory at {args.file_rate:g} files/s, the rate set by events per "
        f"file; {args.urls:,} urls (Zipf); a marker per file; latency = the file's rename → its marker seen in a "
        f"committed output file. The first {args.warm_files} files of each run are left out. Sluice: page_views, "
        f"parallelism 2 on 2 TaskManagers x 2 slots, checkpoints every {args.interval} ms, the directory listed every "
        f"{paced_latency.MONITOR_MS} ms. {PEER}: local[2], default trigger, one warm SparkSession, "
        "a new query per run. "
        f"Load rule: a run whose foreign processes used more than {args.max_foreign_cores:g} cores on average is "
        "excluded (0 = off). p50's interval: block bootstrap over "
        f"{BLOCK_S:g} s blocks of arrivals."
    )
    L.append("")
    if args.quick:
        L.append(
            f"Quick: 2 rates (25 %, 75 % of each system's capacity), {args.samples} samples per point, no knee "
            f"points{', no sustained run' if not args.sustained_s else ''}; not for conclusions."
        )
        L.append("")
    L.append("### Capacity (backlog drain through the watched directory)")
    L.append("")
    L.append("| system | events | files | events/s | foreign cores | exactly once | counted |")
    L.append("|---|---|---|---|---|---|---|")
    for system in (SLUICE, PEER):
        c = res["capacity"].get(system)
        if c:
            u = c.get("usage")
            L.append(
                f"| {system} | {c['files'] * c['events_per_file']:,} | {c['files']} | "
                f"{fmt(c.get('capacity'), ',.0f')} | "
                f"{fmt(u.foreign_cores() if u else None)} | {'yes' if c['check'].ok else '**NO**'} | {status_of(c)} |"
            )
    L.append("")
    L.append("### Fixed rates")
    L.append("")
    L.append(
        "| system | % of own capacity | events/s | events/file | samples | p50 s [95 % CI] | p95 s | p99 s | max s | "
        "CPU s per M events | foreign cores | exactly once | counted |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["points"]:
        _cpu, per_m = cpu_of(r)
        u = r.get("usage")
        L.append(
            f"| {r['system']} | {r['label']} | {r['rate']:,.0f} | {r['events_per_file']:,} | {r['n']} | "
            f"{fmt_estimate(r['p50_ci'], '.2f')} | {fmt(r['p95'])} | {fmt(r['p99'])} | {fmt(r['max'])} | "
            f"{fmt(per_m, '.1f')} | {fmt(u.foreign_cores() if u else None)} | "
            f"{'yes' if r['check'].ok else '**NO**'} | {status_of(r)} |"
        )
    L.append("")
    L.append("### Maximum sustainable throughput (highest rate tested with p99 within the bound)")
    L.append("")
    L.append("| system | rates tested, events/s | p99 ≤ 1 s | p99 ≤ 2 s |")
    L.append("|---|---|---|---|")
    for system in (SLUICE, PEER):
        mine = [r for r in res["points"] + res["sustained"] if r["system"] == system]
        tested = ", ".join(
            f"{r['rate']:,.0f}" + ("" if counted(r) else " (not counted)")
            for r in sorted(mine, key=lambda r: r["rate"])
        )
        cells = []
        for b in BOUNDS:
            best = max_sustainable(mine, b)
            cells.append(
                "none of the rates tested"
                if best is None
                else f"{best['rate']:,.0f} events/s (p99 {best['p99']:.2f} s)"
            )
        L.append(f"| {system} | {tested or '—'} | {cells[0]} | {cells[1]} |")
    L.append("")
    if res["sustained"]:
        rate = res["sustained"][0]["rate"]
        L.append(
            f"### Sustained run: {rate:,.0f} events/s for {args.sustained_s:g} s on both (50 % of the slower "
            "system's capacity)"
        )
        L.append("")
        L.append("| system | minute | samples | p50 s | p95 s | p99 s | max s |")
        L.append("|---|---|---|---|---|---|---|")
        for r in res["sustained"]:
            for m in per_minute(r["series"]):
                L.append(
                    f"| {r['system']} | {m['minute']} | {m['n']} | {fmt(m['p50'])} | {fmt(m['p95'])} | "
                    f"{fmt(m['p99'])} | {fmt(m['max'])} |"
                )
            L.append(
                f"| {r['system']} | **all** | {r['n']} | {fmt_estimate(r['p50_ci'], '.2f')} | {fmt(r['p95'])} | "
                f"{fmt(r['p99'])} | {fmt(r['max'])} |"
            )
        L.append("")
        L.append(
            "| system | CPU s | CPU s per M events | cores used | peak RSS per process | foreign cores | exactly once "
            "| counted |"
        )
        L.append("|---|---|---|---|---|---|---|---|")
        for r in res["sustained"]:
            cpu, per_m = cpu_of(r)
            u = r.get("usage")
            rss = ", ".join(f"{k} {fmt_rss(v)}" for k, v in process_rss(r)) or "—"
            L.append(
                f"| {r['system']} | {fmt(cpu, '.0f')} | {fmt(per_m, '.1f')} | "
                f"{fmt(cpu / u.wall_s if u and cpu else None)} | "
                f"{rss} | {fmt(u.foreign_cores() if u else None)} | "
                f"{'yes' if r['check'].ok else '**NO**'} | {status_of(r)} |"
            )
        L.append("")
    L += notes_lines(notes)
    return "\n".join(L) + "\n"


# -- main ------------------------------------------------------------------------------------------------
def describe(r: dict) -> str:
    return (
        f"{r['system']} {r['label']}: {fmt(r.get('capacity', r['rate']), ',.0f')} events/s, {r['n']} samples, "
        f"p50 {fmt(r['p50'])} s, "
        f"p99 {fmt(r['p99'])} s, max {fmt(r['max'])} s, missing {r['missing']}, output "
        f"{'ok' if r['check'].ok else 'FAILED: ' + r['check'].describe()}{', excluded' if r.get('excluded') else ''}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="2 rates (25 %%, 75 %%), 100 samples, no knee, no sustained run"
    )
    ap.add_argument("--file-rate", type=float, default=25.0, help="files per second into the watched directory")
    ap.add_argument("--samples", type=int, default=None, help="counted files per point (default 500; quick 100)")
    ap.add_argument(
        "--warm-files", type=int, default=None, help="files left out at each run's start (default 50; quick 20)"
    )
    ap.add_argument(
        "--sustained-s", type=float, default=None, help="seconds of the sustained run (default 300; quick 0 = none)"
    )
    ap.add_argument(
        "--capacity-events", type=int, default=None, help="events of the capacity drain (default 8M; quick 2M)"
    )
    ap.add_argument("--interval", type=int, default=1000, help="Sluice's checkpoint interval, ms")
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--max-foreign-cores", type=float, default=FOREIGN_CORES_LIMIT, help="load rule; 0 = off")
    ap.add_argument("--out", default=os.path.join(pvb.HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--timeout", type=float, default=180, help="seconds to wait for a step")
    args = ap.parse_args()
    q = args.quick
    args.samples = args.samples or (100 if q else 500)
    args.warm_files = args.warm_files if args.warm_files is not None else (20 if q else 50)
    args.sustained_s = args.sustained_s if args.sustained_s is not None else (0 if q else 300)
    args.capacity_events = args.capacity_events or (2_000_000 if q else 8_000_000)
    pcts = (25, 75) if q else POINTS
    knee = () if q else KNEE

    command, facts, temp, work = begin_run(pvb.REPO, args.workdir, "sluice-latency-", log)
    cluster = pvb.Cluster(os.path.join(work, "cluster"), taskmanagers=2, slots=2)
    peer: Peer | None = None
    res: dict = {"capacity": {}, "points": [], "sustained": [], "runs": []}
    notes: list[str] = []
    failed = interrupted = False
    t_start = time.monotonic()
    try:
        warm_data = os.path.join(work, "warm")
        generate(warm_data, events=200_000, files=8, urls=args.urls, seed=13)
        peer = Peer(work, warm_data, args.timeout)  # its JVM starts while the cluster does
        cluster.start()
        peer.ready()
        systems: dict[str, Callable[[], Iterable[int]]] = {SLUICE: lambda: cluster.pids, PEER: peer.pids}

        def meter() -> ResourceMeter:
            return ResourceMeter(systems)

        cap_contents = Contents(work, CAPACITY_FILE_EVENTS, args.urls)
        setup = Setup(
            work,
            cap_contents,
            args.file_rate,
            args.warm_files,
            args.interval,
            args.timeout,
            args.max_foreign_cores,
            meter,
        )
        runners = {
            SLUICE: lambda label, e, n, backlog=False: sluice_run(cluster, setup, label, e, n, backlog),
            PEER: lambda label, e, n, backlog=False: peer.run(setup, label, e, n, backlog),
        }

        def record(r: dict) -> dict:
            res["runs"].append(r)
            log(describe(r))
            nonlocal failed
            if not r["check"].ok:
                failed = True
                notes.append(f"{r['system']} {r['label']}: OUTPUT CHECK FAILED: {r['check'].describe()}")
            if r["missing"]:
                failed = True
                notes.append(f"{r['system']} {r['label']}: {r['missing']} markers never seen committed")
            return r

        # 1. capacity
        files = max(2, args.capacity_events // CAPACITY_FILE_EVENTS)
        capacity: dict[str, float] = {}
        for system in (SLUICE, PEER):
            r = record(runners[system]("capacity", CAPACITY_FILE_EVENTS, files, backlog=True))
            res["capacity"][system] = r
            if r["capacity"] is None:
                raise pvb.BenchError(f"{system}: no capacity measured (the drain did not complete)")
            capacity[system] = r["capacity"]
        log("capacity: " + ", ".join(f"{s} {c:,.0f} events/s" for s, c in capacity.items()))
        slower = min(capacity, key=lambda s: capacity[s])
        shared_rate = 0.5 * capacity[slower]
        top = max(capacity.values()) * max((*pcts, *knee)) / 100
        setup.contents = Contents(work, events_per_file(top, args.file_rate), args.urls)
        n_point = args.warm_files + args.samples

        # 2. fixed rates, alternating systems (the first system alternates too)
        order = [SLUICE, PEER]
        for k, p in enumerate(pcts):
            for system in order if k % 2 == 0 else order[::-1]:
                if p == 50 and system == slower and args.sustained_s > 0:
                    continue  # its 50 % point is the sustained run
                e = events_per_file(capacity[system] * p / 100, args.file_rate)
                r = record(runners[system](f"{p} %", e, n_point))
                res["points"].append(r)
        for k, p in enumerate(knee):
            for system in order if (len(pcts) + k) % 2 == 0 else order[::-1]:
                mine = [r for r in res["points"] if r["system"] == system]
                if not knee_next(mine):
                    continue
                e = events_per_file(capacity[system] * p / 100, args.file_rate)
                res["points"].append(record(runners[system](f"{p} %", e, n_point)))

        # 3. sustained, the slower system's 50 % point
        if args.sustained_s > 0:
            e = events_per_file(shared_rate, args.file_rate)
            n = int(args.sustained_s * args.file_rate)
            for system in (slower, *[s for s in order if s != slower]):
                r = record(runners[system]("sustained" + (", 50 %" if system == slower else ""), e, n))
                res["sustained"].append(r)
            res["sustained"].sort(key=lambda r: order.index(r["system"]))
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the cluster and the peer")
        raise
    except BaseException as exc:
        failed = True
        notes.append(f"aborted: {type(exc).__name__}: {exc}")
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        try:
            if peer is not None:
                peer.close()
        finally:
            try:
                leftovers = cluster.stop()
                if leftovers:
                    notes.append(f"`cluster stop` left processes behind (killed): {leftovers}")
            finally:
                ssb.Child.kill_all()
                if res["runs"]:
                    notes.append(f"whole invocation {time.monotonic() - t_start:.0f} s")
                    section = report(args, facts, command, res, notes)
                    publish(section, args.out, log)
                finish_workdir(work, temp and (interrupted or not failed) and not args.keep_workdir, log, "logs")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
