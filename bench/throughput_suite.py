"""Throughput of Sluice and of Spark Structured Streaming (the peer) under one window, taken from
the outside in the same way for both: first record read → last result committed
(bench/window.py), with configuration sweeps, a headline comparison and an input-size sweep.

    python bench/throughput_suite.py [--quick] [--out bench/RESULTS.md] [--sizes 0.5,2,8]
        [--events 1000000] [--sweep-runs 2] [--headline-runs 10] [--size-runs 3]
        [--skip-sweep] [--skip-sizes] [--max-foreign-cores 0.3] [--workdir DIR] [--keep-workdir]

The job: page_views, a running count per url (examples/page_views.py on Sluice; the same query in
bench/structured_streaming_bench.py's child for the peer), over the same files for both
(examples/generate_page_views.py's generate(), in chunks of 100,000 events, 8 files of 12,500 events
each; an input of N events is the first N/100,000 chunks, hard-linked into its own directory).
Both read bounded: Sluice's file source reads the files there at submit, then ends (checkpoints
every 1 s, the job's default; the file sink commits at checkpoints and at the end); the peer runs
`Trigger.AvailableNow` (maxFilesPerTrigger unset or set: batches of that many files). Both pass an
explicit schema, so nothing reads the files before the job runs.

Per run: the window (seconds; events/s = events / window), startup (launch → first read: for
Sluice the `sluice run` CLI started, for the peer the query handed to its warm SparkSession),
CPU seconds per million events of the measured system (bench/procstat.py's ResourceMeter, from
the first read to the end seen by the harness; every process of the cluster or SparkSession the
run used: the Sluice cluster's ZooKeeper, JobManager, supervisor, TaskManagers and their Spark
JVMs; the peer's Python driver and its JVM), peak RSS of each of those processes, the CPU of the
suite's other (idle) clusters and sessions, and the CPU other processes of the machine used
meanwhile (the load rule: more than --max-foreign-cores cores on average excludes the run).
Every run's committed output is checked (bench/output_check.py: no line twice, counts strictly
increasing per key, final counts exact); a run that fails it is reported and left out.

1. Sweeps (full only): the peer over maxFilesPerTrigger {unset, 40, 20, 8} x shuffle partitions
   {1, 2, 4} x master {local[2], local[4]}; Sluice over slots per TaskManager {1, 2} x
   TaskManagers {1, 2} x parallelism {2, 4} where the slots allow (the file source sizes each
   Spark call from the last one's pace, execution.source.batch-duration 1 s: not swept).
   --sweep-runs runs per configuration, round-robin (every configuration once, then again in
   reverse order), Sluice and peer runs interleaved.
2. Headline: each system's best configuration (highest median events/s in the sweep) and a
   matched-resource pair (the best configuration of each with as many Spark task threads as the
   machine has cores: Sluice TaskManagers x slots = the peer's local[n]); --headline-runs runs per
   system and pair, alternating S P P S ...; medians with bootstrap 95 % intervals, ratio Sluice/peer.
3. Size sweep: both systems in their best configuration, --size-runs alternating runs per size;
   window = fixed + per_event x events fitted by least squares over all runs, with bootstrap intervals.

Quick (--quick, `make bench-quick`): no sweeps; the matched pair at 2 task threads (Sluice 1
TaskManager x 2 slots, parallelism 2; the peer local[2], shuffle partitions 2, maxFilesPerTrigger
unset) is both the headline and the size-sweep configuration.

One Sluice cluster per (TaskManagers, slots) and one SparkSession per master serve every run of
theirs (each gets one uncounted warm-up run first); they are stopped in `finally`, whatever happens.
bench/README.md ("Throughput: one window for both") says how to read the section this appends.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import spark_peer
from bench_common import aborted, begin_run, finish_workdir, fmt, publish, run_main, write_atomically
from output_check import check_peer_output, check_sluice_output
from stats import RESAMPLES, SEED, Estimate, est, fmt_estimate, kept, valid

CHUNK_EVENTS = 100_000  # events per generated chunk
CHUNK_FILES = 8  # files per chunk: 12,500 events (~0.9 MB) per file
URLS = 10_000
SWEEP_MFPT = (0, 40, 20, 8)  # maxFilesPerTrigger; 0: unset
SWEEP_SHUFFLE = (1, 2, 4)
SWEEP_MASTERS = (2, 4)  # local[n]
SWEEP_SLUICE = ((1, 2, 2), (2, 1, 2), (2, 2, 2), (2, 2, 4))  # (TaskManagers, slots, parallelism)
SLUICE, PEER = "Sluice", "peer"
HEADLINE = "headline"  # the phase of the headline runs
MEASURED, OTHERS = "measured", "others"  # ResourceMeter systems: the run's cluster or session; all the others


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ================================================================================================
# configurations
# ================================================================================================
@dataclass(frozen=True)
class SluiceConfig:
    taskmanagers: int
    slots: int
    parallelism: int

    system = SLUICE

    @property
    def threads(self) -> int:
        """Spark task threads in all: each TaskManager's Spark runs local[slots]."""
        return self.taskmanagers * self.slots

    @property
    def label(self) -> str:
        return f"{self.taskmanagers} TM x {self.slots} slots, p={self.parallelism}"

    @property
    def cluster_key(self) -> tuple[int, int]:
        return (self.taskmanagers, self.slots)


@dataclass(frozen=True)
class PeerConfig:
    master: int  # local[n]
    mfpt: int  # maxFilesPerTrigger; 0: unset
    shuffle: int

    system = PEER

    @property
    def threads(self) -> int:
        return self.master

    @property
    def label(self) -> str:
        return f"local[{self.master}], maxFilesPerTrigger {self.mfpt or 'unset'}, shuffle {self.shuffle}"


Config = SluiceConfig | PeerConfig
C = TypeVar("C", SluiceConfig, PeerConfig)


def sweep_configs() -> tuple[list[SluiceConfig], list[PeerConfig]]:
    sluice = [SluiceConfig(*c) for c in SWEEP_SLUICE if c[2] <= c[0] * c[1]]
    peer = [PeerConfig(m, f, s) for m in SWEEP_MASTERS for f in SWEEP_MFPT for s in SWEEP_SHUFFLE]
    return sluice, peer


def round_robin(configs: Sequence, runs: int) -> list:
    """Every configuration once, then again in reverse order, and so on: `runs` rounds."""
    order = []
    for i in range(runs):
        order += list(configs) if i % 2 == 0 else list(reversed(configs))
    return order


def interleave(a: Sequence, b: Sequence) -> list:
    """The items of both, in their own orders, spread so that each is evenly among the other."""
    if not a or not b:
        return list(a) + list(b)
    out, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        # take from the list that is behind its share
        if j >= len(b) or (i < len(a) and (i + 0.5) / len(a) <= (j + 0.5) / len(b)):
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out


def alternating(n: int, first: str = SLUICE) -> list[str]:
    """S P P S S P P S ...: `n` runs of each system, alternating in ABBA order."""
    other = PEER if first == SLUICE else SLUICE
    seq = []
    for i in range(n):
        seq += [first, other] if i % 2 == 0 else [other, first]
    return seq


# ================================================================================================
# figures (pure)
# ================================================================================================
def best_config(runs: Sequence[dict], configs: Sequence[C]) -> C | None:
    """The configuration with the highest median events/s over its kept runs."""
    scored = []
    for c in configs:
        e = est([r for r in runs if r["config"] == c], "rate")
        if e.median is not None:
            scored.append((e.median, c))
    return max(scored, key=lambda x: x[0])[1] if scored else None


def best_with_threads(runs: Sequence[dict], configs: Sequence[C], threads: int) -> C | None:
    return best_config(runs, [c for c in configs if c.threads == threads])


def fit_line(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Least squares y = a + b x; returns (a, b)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) < 2 or np.ptp(xs) == 0:
        raise ValueError("a fit needs runs at two sizes at least")
    b, a = np.polyfit(xs, ys, 1)
    return float(a), float(b)


def fit_with_ci(
    events: Sequence[float], seconds: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[Estimate, Estimate] | None:
    """window = fixed + per_event x events over all runs: (fixed seconds, µs per event), each the
    least-squares value with a percentile-bootstrap 95 % interval over the runs (resamples with
    fewer than two distinct sizes are skipped). None with fewer than two sizes."""
    x, y = np.asarray(events, dtype=float), np.asarray(seconds, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return None
    a, b = fit_line(x, y)
    rng = np.random.default_rng(seed)
    fixed, per = [], []
    for idx in rng.integers(0, len(x), size=(resamples, len(x))):
        if np.ptp(x[idx]) == 0:
            continue
        ra, rb = fit_line(x[idx], y[idx])
        fixed.append(ra)
        per.append(rb * 1e6)
    n = len(x)
    if not fixed:
        return Estimate(a, None, None, n), Estimate(b * 1e6, None, None, n)
    lo, hi = np.percentile(fixed, [2.5, 97.5])
    plo, phi = np.percentile(per, [2.5, 97.5])
    return Estimate(a, float(lo), float(hi), n), Estimate(b * 1e6, float(plo), float(phi), n)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def process_role(cmdline: Sequence[str]) -> str | None:
    """What a process of either system is, from its command line (None: not one of these)."""
    joined = " ".join(cmdline)
    if "-m" in cmdline[:-1]:
        module = cmdline[cmdline.index("-m") + 1]
        roles = {"jobmanager": "jobmanager", "taskmanager": "taskmanager", "sluice.cli.supervisor": "supervisor"}
        if module in roles:
            return roles[module]
    if "org.apache.zookeeper" in joined:
        return "zookeeper"
    if "structured_streaming_bench.py" in joined and "--child" in cmdline:
        return "peer driver (python)"
    if cmdline and os.path.basename(cmdline[0]) == "java" and "pyspark" in joined:
        return "spark-jvm"
    return None


def relabel(peaks: dict[str, int]) -> dict[str, int]:
    """procstat's `"<label> <pid>"` keys named by process_role while the processes are alive (its own
    labels take a JobManager's or TaskManager's `--zookeeper` flag for ZooKeeper)."""
    import psutil

    out = {}
    for key, rss in peaks.items():
        label, _, pid = key.rpartition(" ")
        try:
            role = process_role(psutil.Process(int(pid)).cmdline())
        except (ValueError, psutil.Error):
            role = None
        if rss > 0 or role:  # a helper gone before its first sample (jspawnhelper) has nothing to show
            out[f"{role or label} {pid}"] = rss
    return out


def peak_rss_by_process(runs: Iterable[dict]) -> dict[str, int]:
    """Process label -> its highest peak RSS over the runs."""
    peaks: dict[str, int] = {}
    for r in runs:
        for name, rss in (r.get("rss") or {}).items():
            peaks[name] = max(peaks.get(name, 0), rss)
    return peaks


# ================================================================================================
# data
# ================================================================================================
def _worker_signals() -> None:
    """A generator worker: default SIGTERM, SIGINT ignored (the parent handles Ctrl-C and ends the pool)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _chunk(args: tuple[str, int]) -> dict[str, int]:
    from generate_page_views import generate

    path, i = args
    return generate(path, events=CHUNK_EVENTS, files=CHUNK_FILES, urls=URLS, seed=1000 + i)


@dataclass
class Dataset:
    path: str
    events: int
    files: int
    expected: dict[str, int]


class Data:
    """Chunks generated once (in parallel); an input of N events is a directory of hard links to the
    first N / CHUNK_EVENTS chunks' files, so every input shares its files with the larger ones."""

    def __init__(self, work: str, max_events: int):
        self.work = work
        self.n_chunks = math.ceil(max_events / CHUNK_EVENTS)
        self.chunks: list[dict[str, int]] = []
        self.sets: dict[int, Dataset] = {}

    def generate(self) -> None:
        t0 = time.monotonic()
        jobs = [(os.path.join(self.work, "chunks", f"c{i:04d}"), i) for i in range(self.n_chunks)]
        procs = max(1, min(os.cpu_count() or 1, 4))
        pool = multiprocessing.get_context("fork").Pool(procs, initializer=_worker_signals)
        try:
            self.chunks = pool.map(_chunk, jobs)
            pool.close()  # workers exit by themselves (terminate() would SIGTERM them)
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
        log(f"generated {self.n_chunks * CHUNK_EVENTS:,} events in {time.monotonic() - t0:.1f}s")

    def of(self, events: int) -> Dataset:
        if events % CHUNK_EVENTS or events <= 0:
            raise ValueError(f"sizes are multiples of {CHUNK_EVENTS:,} events, got {events:,}")
        if events not in self.sets:
            k = events // CHUNK_EVENTS
            if k > self.n_chunks:
                raise ValueError(f"{events:,} events: only {self.n_chunks * CHUNK_EVENTS:,} generated")
            path = os.path.join(self.work, f"input-{events}")
            os.makedirs(path, exist_ok=True)
            expected: dict[str, int] = {}
            files = 0
            for i in range(k):
                src = os.path.join(self.work, "chunks", f"c{i:04d}")
                for name in sorted(os.listdir(src)):
                    os.link(os.path.join(src, name), os.path.join(path, f"c{i:04d}-{name}"))
                    files += 1
                for url, n in self.chunks[i].items():
                    expected[url] = expected.get(url, 0) + n
            self.sets[events] = Dataset(path, events, files, expected)
        return self.sets[events]


# ================================================================================================
# the two systems
# ================================================================================================
class RunError(Exception):
    pass


class SluiceSide:
    """One local cluster (TaskManagers x slots) through page_views_bench.Cluster."""

    started = itertools.count(1)

    def __init__(self, work: str, taskmanagers: int, slots: int, timeout: float):
        from page_views_bench import Cluster

        self.key = (taskmanagers, slots)
        # a new directory per start: the client caches TLS files by path (sluice/security/tls.py), and a
        # cluster started again in the same directory has a new CA
        name = f"cluster-{taskmanagers}x{slots}-{next(SluiceSide.started)}"
        self.cluster = Cluster(os.path.join(work, name), taskmanagers, slots)
        self.timeout = timeout

    def start(self) -> SluiceSide:
        self.cluster.start()
        return self

    def roots(self) -> list[int]:
        return sorted(self.cluster.pids)

    def launch(self, cfg: SluiceConfig, data: Dataset, out: str) -> Callable[[], dict]:
        """Submit page_views (the CLI, detached); returns the function that waits for its end."""
        job_id = self.cluster.submit("--input", data.path, "--output", out, parallelism=cfg.parallelism)
        submitted = time.monotonic()

        def wait() -> dict:
            from page_views_bench import follow

            r = follow(self.cluster, job_id, self.timeout, time.time())
            if r["state"] != "FINISHED":
                raise RunError(f"job {job_id} ended {r['state']}: {r['status']['failure'] or r['status']['message']}")
            return {"job_id": job_id, "submitted": submitted, "restarts": r["status"]["restarts"]}

        return wait

    def check(self, out: str, data: Dataset):
        return check_sluice_output(out, data.expected)

    def stop(self) -> None:
        self.cluster.stop()


class PeerSide(spark_peer.PeerSide):
    """One SparkSession (local[n]) in structured_streaming_bench's child; each run is a query handed to
    it through a go file (its JSON: input, output, checkpoint, maxFilesPerTrigger, shuffle partitions),
    declared in the child's spec up front (MAX_QUERIES of them)."""

    MAX_QUERIES = 1000

    def __init__(self, work: str, master: int, timeout: float):
        super().__init__(work, master, timeout, name=f"peer-local{master}")
        self.warm = False  # its warm-up run done

    def spec(self) -> dict:
        queries = [
            {"go_file": self.go_file(i), "input": "", "out": "", "checkpoint": ""} for i in range(self.MAX_QUERIES)
        ]
        return {"master": f"local[{self.master}]", "queries": queries}

    def launch(self, cfg: PeerConfig, data: Dataset, out: str) -> Callable[[], dict]:
        i = self.next
        if i >= self.MAX_QUERIES:
            raise RunError("too many queries for one SparkSession")
        self.next += 1
        q = {
            "input": data.path,
            "out": out,
            "checkpoint": out + "-ckpt",
            "max_files_per_trigger": cfg.mfpt,
            "shuffle_partitions": cfg.shuffle,
            "available_now": True,
        }
        write_atomically(self.go_file(i), json.dumps(q))

        def wait() -> dict:
            assert self.child is not None
            done = self.child.wait_for("done", self.timeout, query=i)
            batches = [p for p in done["progress"] if p.get("numInputRows", 0) > 0]
            rows = sum(p.get("numInputRows", 0) for p in done["progress"])
            shutil.rmtree(out + "-ckpt", ignore_errors=True)
            return {"query": i, "batches": len(batches), "rows": rows}

        return wait

    def check(self, out: str, data: Dataset):
        return check_peer_output(out, data.expected)


# ================================================================================================
# one measured run
# ================================================================================================
class Suite:
    def __init__(self, args, work: str):
        self.args, self.work = args, work
        self.sluice: dict[tuple[int, int], SluiceSide] = {}
        self.peer: dict[int, PeerSide] = {}
        self.runs: list[dict] = []
        self.notes: list[str] = []
        self.n = 0
        self.failed = False

    # -- sides ------------------------------------------------------------------------------------
    def sluice_side(self, cfg: SluiceConfig, data: Dataset) -> SluiceSide:
        side = self.sluice.get(cfg.cluster_key)
        if side is None:
            side = SluiceSide(self.work, cfg.taskmanagers, cfg.slots, self.args.job_timeout)
            self.sluice[cfg.cluster_key] = side
            side.start()
            self.run(cfg, data, "warm-up")
        return side

    def peer_side(self, cfg: PeerConfig, data: Dataset) -> PeerSide:
        side = self.peer.get(cfg.master)
        if side is None or side.child is None or not side.warm:
            if side is None:
                side = PeerSide(self.work, cfg.master, self.args.job_timeout)
                self.peer[cfg.master] = side
            side.start()
            side.warm = True
            self.run(cfg, data, "warm-up")
        return side

    def prestart(self, configs: Iterable[Config], data: Dataset) -> None:
        """Start the SparkSessions and clusters these configurations need at once (a session starts
        while a cluster does), then warm each up."""
        for c in configs:
            if isinstance(c, PeerConfig) and c.master not in self.peer:
                self.peer[c.master] = PeerSide(self.work, c.master, self.args.job_timeout).spawn()
        for c in configs:
            if isinstance(c, SluiceConfig):
                self.sluice_side(c, data)
        for c in configs:
            if isinstance(c, PeerConfig):
                self.peer_side(c, data)

    def stop_sluice(self, key: tuple[int, int]) -> None:
        side = self.sluice.pop(key, None)
        if side is not None:
            side.stop()

    def stop_all(self) -> None:
        for key in list(self.sluice):
            try:
                self.stop_sluice(key)
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping cluster {key}: {exc}")
        for m, side in list(self.peer.items()):
            try:
                side.stop()
            except BaseException as exc:  # noqa: BLE001 — teardown goes on to the other sessions
                log(f"warning: stopping the peer local[{m}]: {exc}")
        self.peer.clear()
        from structured_streaming_bench import Child

        Child.kill_all()

    def meter_systems(self, measured: SluiceSide | PeerSide) -> dict[str, Callable[[], Iterable[int]]]:
        """The measured cluster or SparkSession, and every other one (idle meanwhile, either system)."""

        def others() -> list[int]:
            sides: list[SluiceSide | PeerSide] = [*self.sluice.values(), *self.peer.values()]
            return [p for s in sides if s is not measured for p in s.roots()]

        return {MEASURED: measured.roots, OTHERS: others}

    # -- a run ------------------------------------------------------------------------------------
    def run(self, cfg: Config, data: Dataset, phase: str) -> dict:
        from paired_runs import close_run, timed_launch, usage_figures
        from window import measure

        side: SluiceSide | PeerSide
        launch: Callable[[str], Callable[[], dict]]  # the side's launch, given its own config type
        if isinstance(cfg, SluiceConfig):
            ours = self.sluice_side(cfg, data) if phase != "warm-up" else self.sluice[cfg.cluster_key]
            side, launch = ours, functools.partial(ours.launch, cfg, data)
        else:
            peer = self.peer_side(cfg, data) if phase != "warm-up" else self.peer[cfg.master]
            side, launch = peer, functools.partial(peer.launch, cfg, data)
        self.n += 1
        out = os.path.join(self.work, f"out-{self.n:04d}")
        os.makedirs(out)
        r: dict = {"n": self.n, "phase": phase, "system": cfg.system, "config": cfg, "events": data.events}
        t = timed_launch(
            r,
            self.meter_systems(side),
            [(data.path, out)],
            lambda: launch(out),
            300,
        )
        usage = t.usage
        check = side.check(out, data) if "error" not in r else None
        w = measure(t.launch, t.events, check, t.overflowed)
        r["check"] = check.describe() if check is not None else None
        r["check_ok"] = check is not None and check.ok
        r.update(
            window=w.seconds,
            startup=w.startup,
            end_part=w.end_part,
            commits=w.commits,
            window_error=w.error,
            rate=w.rate(data.events),
            tail=(r["end_seen"] - w.end) if w.end is not None and "end_seen" in r else None,
        )
        if usage is not None:
            r["cpu_s"] = usage.cpu_s.get(MEASURED, 0.0)
            r.update(usage_figures(usage, data.events, self.args.max_foreign_cores))
            r["rss"] = relabel(dict(usage.peak_rss.get(MEASURED, {})))
            r["meter_s"] = usage.wall_s
            r["steal_s"] = usage.steal_s
        r["ok"] = "error" not in r and r["check_ok"] and w.ok
        if "error" not in r and check is not None and not check.ok:
            self.failed = True
            self.notes.append(
                f"run {self.n} ({cfg.system}, {cfg.label}, {phase}): OUTPUT CHECK FAILED: {check.describe()}"
            )
        elif "error" in r:
            self.notes.append(f"run {self.n} ({cfg.system}, {cfg.label}, {phase}) failed: {r['error']}")
        elif w.error:
            self.notes.append(f"run {self.n} ({cfg.system}, {cfg.label}, {phase}): no window: {w.error}")
        close_run(
            self.runs,
            r,
            out,
            f"{phase} run {self.n}: {cfg.system} {cfg.label}, {data.events:,} events: window {fmt(r['window'])} s "
            f"= {fmt(r['rate'], ',.0f')} events/s, startup {fmt(r['startup'])} s, CPU {fmt(r.get('cpu_per_m'))} "
            f"s/M events, foreign {fmt(r.get('foreign_cores'))} cores",
        )
        return r

    # -- phases ------------------------------------------------------------------------------------
    def sweep(self, data: Dataset) -> tuple[list[SluiceConfig], list[PeerConfig]]:
        sluice_cfgs, peer_cfgs = sweep_configs()
        peer_order = round_robin(peer_cfgs, self.args.sweep_runs)
        clusters = sorted(
            {c.cluster_key for c in sluice_cfgs}, key=lambda k: [c.cluster_key for c in sluice_cfgs].index(k)
        )
        # every cluster's runs among an equal share of the peer's, one cluster at a time
        share = math.ceil(len(peer_order) / len(clusters))
        for ci, key in enumerate(clusters):
            mine = [c for c in sluice_cfgs if c.cluster_key == key]
            s_order = round_robin(mine, self.args.sweep_runs)
            for cfg in interleave(s_order, peer_order[ci * share : (ci + 1) * share]):
                self.run(cfg, data, "sweep")
            self.stop_sluice(key)  # one cluster alive at a time during the sweep
        return sluice_cfgs, peer_cfgs

    def pairs(self, pairs: Sequence[tuple[SluiceConfig, PeerConfig, str]], data: Dataset, n: int) -> None:
        """`n` runs of every configuration of the pairs (a configuration in two pairs runs once for
        both), the systems alternating: S P (P) | (P) P S | S P (P) ..."""
        order = interleave(list(dict.fromkeys(p[0] for p in pairs)), list(dict.fromkeys(p[1] for p in pairs)))
        for i in range(n):
            for cfg in order if i % 2 == 0 else list(reversed(order)):
                self.run(cfg, data, HEADLINE)

    def sizes(self, s_cfg: SluiceConfig, p_cfg: PeerConfig, sizes: Sequence[int], n: int) -> None:
        for i in range(n):
            for size in sizes if i % 2 == 0 else list(reversed(sizes)):
                data = self.data.of(size)
                for system in alternating(1, SLUICE if i % 2 == 0 else PEER):
                    self.run(s_cfg if system == SLUICE else p_cfg, data, f"size {size}")

    data: Data


# ================================================================================================
# report
# ================================================================================================
def fmt_cfg(c: Config | None) -> str:
    return "—" if c is None else f"{c.system}: {c.label}"


def run_row(r: dict) -> str:
    state = (
        "yes"
        if r["check_ok"]
        else ("**NO**" if r.get("check") else f"failed: {(r.get('error') or r.get('window_error') or '')[:80]}")
    )
    return (
        f"| {r['n']} | {r['system']} | {r['config'].label} | {r['events']:,} | {fmt(r['window'])} | "
        f"{fmt(r['rate'], ',.0f')} | {fmt(r['startup'])} | {fmt(r.get('tail'))} | {fmt(r.get('cpu_per_m'))} | "
        f"{fmt(r.get('other_cpu_s'))} | {fmt(r.get('foreign_cores'))}{' (excluded)' if r.get('excluded') else ''} | "
        f"{state}{'' if r.get('ok') or not r['check_ok'] else ' (no window: ' + str(r.get('window_error')) + ')'} |"
    )


RUN_HEADER = [
    "| run | system | configuration | events | window s | events/s | startup s | end seen after s | "
    "CPU s per M events | others' CPU s | foreign cores | output exactly once |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def summary_rows(groups: Sequence[tuple[str, Sequence[dict]]]) -> list[str]:
    L = [
        "| | runs (kept/valid/all) | window s | events/s | startup s | CPU s per M events |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in groups:
        L.append(
            f"| {name} | {len(kept(runs))}/{len(valid(runs))}/{len(runs)} | "
            f"{fmt_estimate(est(runs, 'window'), '.2f')} | "
            f"{fmt_estimate(est(runs, 'rate'))} | {fmt_estimate(est(runs, 'startup'), '.2f')} | "
            f"{fmt_estimate(est(runs, 'cpu_per_m'), '.2f')} |"
        )
    return L


def report(
    facts: dict,
    command: str,
    runs: Sequence[dict],
    notes: Sequence[str],
    plan: dict,
) -> str:
    from procstat import fmt_rss

    L = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} — Throughput suite: one window for both systems",
        "",
        f"Command: `{command}` at commit {facts['commit']}",
        "",
        "| machine | |",
        "|---|---|",
    ]
    for k in ("date", "cores", "cpu", "ram", "python", "java", "pyspark", "os", "load"):
        L.append(f"| {({'date': 'date -u', 'load': 'load average at start'}).get(k, k)} | {facts[k]} |")
    L.append("")
    if any(not r["check_ok"] and r.get("check") for r in runs):
        L += ["**OUTPUT CHECK FAILED** (see the notes).", ""]
    L.append(
        "Window = first read of an input file (inotify IN_ACCESS) → commit (IN_MOVED_TO) of the output file "
        "after which the committed output holds every url's final count; events/s = events / window; startup = "
        "launch → first read; end seen after = window end → the harness saw the run end; CPU = the measured "
        "system's processes from the first read to the end seen by the harness; others' CPU = every other cluster and "
        "SparkSession of the suite, idle meanwhile; foreign cores = CPU of every other "
        f"process / wall time (load rule: above {plan['max_foreign_cores']} excluded). Medians with "
        "percentile-bootstrap 95 % intervals over the kept runs; ratios Sluice/peer of the medians (above 1: "
        f"Sluice better for events/s). Sluice: checkpoints every 1 s (the job's default). {plan['skipped']}"
    )
    L.append("")
    measured = [r for r in runs if r["phase"] != "warm-up"]
    # -- headline
    headline = plan.get("headline", [])
    if headline:
        L += ["### Headline", ""]
        L.append(
            "| pair | Sluice configuration | peer configuration | Sluice events/s | peer events/s | ratio | "
            "Sluice CPU s/M | peer CPU s/M | runs kept S/P |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|")
        for s_cfg, p_cfg, phase in headline:
            rs = [r for r in measured if r["phase"] == HEADLINE and r["config"] == s_cfg]
            rp = [r for r in measured if r["phase"] == HEADLINE and r["config"] == p_cfg]
            es, ep = est(rs, "rate"), est(rp, "rate")
            L.append(
                f"| {phase} | {s_cfg.label} | {p_cfg.label} | {fmt_estimate(es)} | {fmt_estimate(ep)} | "
                f"{fmt(ratio(es.median, ep.median))} | {fmt_estimate(est(rs, 'cpu_per_m'), '.2f')} | "
                f"{fmt_estimate(est(rp, 'cpu_per_m'), '.2f')} | {len(kept(rs))}/{len(kept(rp))} |"
            )
        L.append("")
        cfgs = list(dict.fromkeys(c for pair in headline for c in pair[:2]))
        L += summary_rows(
            [(fmt_cfg(c), [r for r in measured if r["phase"] == HEADLINE and r["config"] == c]) for c in cfgs]
        )
        L.append("")
        L += ["Peak RSS per process (highest over the headline runs of the configuration):", ""]
        L += ["| configuration | process | peak RSS |", "|---|---|---|"]
        for cfg in cfgs:
            peaks = peak_rss_by_process(r for r in measured if r["phase"] == HEADLINE and r["config"] == cfg)
            for name in sorted(peaks):
                L.append(f"| {fmt_cfg(cfg)} | {name} | {fmt_rss(peaks[name])} |")
            if peaks:
                L.append(f"| {fmt_cfg(cfg)} | **all** | **{fmt_rss(sum(peaks.values()))}** |")
        L.append("")
    # -- sweep
    sweep = [r for r in measured if r["phase"] == "sweep"]
    if sweep:
        L += [
            f"### Sweeps ({plan['sweep_events']:,} events, {len(plan['peer_cfgs'])} peer and "
            f"{len(plan['sluice_cfgs'])} Sluice configurations)",
            "",
        ]
        for system, cfgs, best in (
            (SLUICE, plan["sluice_cfgs"], plan.get("best_sluice")),
            (PEER, plan["peer_cfgs"], plan.get("best_peer")),
        ):
            L += [
                f"{system} (best: {best.label if best else '—'}):",
                "",
                "| configuration | task threads | runs kept/all | events/s | window s | startup s "
                "| CPU s per M events |",
                "|---|---|---|---|---|---|---|",
            ]
            for c in cfgs:
                rc = [r for r in sweep if r["config"] == c]
                mark = "**" if c == best else ""
                L.append(
                    f"| {mark}{c.label}{mark} | {c.threads} | {len(kept(rc))}/{len(rc)} | "
                    f"{fmt_estimate(est(rc, 'rate'))} | "
                    f"{fmt_estimate(est(rc, 'window'), '.2f')} | {fmt_estimate(est(rc, 'startup'), '.2f')} | "
                    f"{fmt_estimate(est(rc, 'cpu_per_m'), '.2f')} |"
                )
            L.append("")
    # -- sizes
    size_runs = [r for r in measured if r["phase"].startswith("size")]
    if size_runs:
        L += ["### Input sizes: window = fixed + per event x events", ""]
        L += [
            "Fit: least squares over every kept run of the configuration in the size sweep and in the headline "
            "(its runs at the headline size); intervals: percentile bootstrap over those runs.",
            "",
        ]
        fit_runs = [r for r in measured if r["phase"].startswith("size") or r["phase"] == HEADLINE]
        all_sizes = sorted({r["events"] for r in fit_runs})
        L += [
            "| system | configuration | fixed s | µs per event | runs kept | "
            + " | ".join(f"{s:,} events: window s" for s in all_sizes)
            + " |",
            "|---|---|---|---|---|" + "---|" * len(all_sizes),
        ]
        for cfg in (plan["size_sluice"], plan["size_peer"]):
            rc = [r for r in fit_runs if r["config"] == cfg]
            rk = kept(rc)
            f = fit_with_ci([r["events"] for r in rk], [r["window"] for r in rk])
            cells = [fmt_estimate(est([r for r in rc if r["events"] == s], "window"), ".2f") for s in all_sizes]
            L.append(
                f"| {cfg.system} | {cfg.label} | {fmt_estimate(f[0], '.2f') if f else '—'} | "
                f"{fmt_estimate(f[1], '.3f') if f else '—'} | {len(rk)}/{len(rc)} | " + " | ".join(cells) + " |"
            )
        L.append("")
    # -- every run
    L += ["### Every run", ""]
    warm = [r for r in runs if r["phase"] == "warm-up"]
    L.append(
        "Warm-up runs (one per new cluster or SparkSession, not counted): "
        + (
            "; ".join(
                f"{r['system']} {r['config'].label}: {fmt(r['rate'], ',.0f')} events/s, "
                f"{'output exactly once' if r['check_ok'] else 'OUTPUT CHECK FAILED' if r.get('check') else 'failed'}"
                for r in warm
            )
            or "none"
        )
        + "."
    )
    L.append("")
    for phase in dict.fromkeys(r["phase"] for r in measured):
        L += [f"{phase}:", ""] + RUN_HEADER
        L += [run_row(r) for r in measured if r["phase"] == phase]
        L.append("")
    if notes:
        L += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(L) + "\n"


# ================================================================================================
# main
# ================================================================================================
def parse_sizes(text: str) -> list[int]:
    """'0.5,2,8' (millions of events) -> [500000, 2000000, 8000000]."""
    sizes = [round(float(x) * 1e6) for x in text.split(",") if x.strip()]
    for s in sizes:
        if s <= 0 or s % CHUNK_EVENTS:
            raise ValueError(f"a size is a multiple of {CHUNK_EVENTS / 1e6:g} M events, got {s / 1e6:g} M")
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes: no sweeps, the matched pair only")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--events", type=float, default=None, help="millions of events of the sweep and headline runs")
    ap.add_argument("--sizes", default=None, help="millions of events of the size sweep, e.g. 0.5,2,8,20")
    ap.add_argument("--sweep-runs", type=int, default=2)
    ap.add_argument("--headline-runs", type=int, default=None, help="runs per system and pair (full 10, quick 3)")
    ap.add_argument("--size-runs", type=int, default=3)
    ap.add_argument("--skip-sweep", action="store_true", help="no sweeps: the matched pair at 2 threads only")
    ap.add_argument("--skip-sizes", action="store_true")
    ap.add_argument(
        "--max-foreign-cores",
        type=float,
        default=None,
        help="the load rule: runs during which other processes used more cores on average are excluded "
        "(default procstat.FOREIGN_CORES_LIMIT; 0: off)",
    )
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args()
    from procstat import FOREIGN_CORES_LIMIT

    if args.max_foreign_cores is None:
        args.max_foreign_cores = FOREIGN_CORES_LIMIT
    quick = args.quick
    events = round((args.events if args.events is not None else (0.5 if quick else 1.0)) * 1e6)
    sizes = parse_sizes(args.sizes or ("0.2,1" if quick else "0.5,2,8"))
    headline_runs = args.headline_runs or (3 if quick else 10)
    skip_sweep = quick or args.skip_sweep
    if events % CHUNK_EVENTS:
        ap.error(f"--events is a multiple of {CHUNK_EVENTS / 1e6:g}")

    command, facts, temp, work = begin_run(REPO, args.workdir, "throughput-suite-", log)
    t_begin = time.monotonic()
    suite = Suite(args, work)
    interrupted = False
    plan: dict = {"max_foreign_cores": args.max_foreign_cores or "off", "sizes": [] if args.skip_sizes else sizes}
    skipped = []
    try:
        suite.data = Data(work, max([events, *plan["sizes"]]))
        suite.data.generate()
        data = suite.data.of(events)
        cores = os.cpu_count() or 2
        matched_threads = 2 if cores <= 2 else cores
        default_s, default_p = SluiceConfig(1, 2, 2), PeerConfig(2, 0, 2)
        if skip_sweep:
            skipped.append(
                "Sweeps skipped"
                + (" (--quick)" if quick else " (--skip-sweep)")
                + f": the headline is the matched pair at 2 task threads ({default_s.label} vs {default_p.label}), "
                "which is also the size-sweep configuration."
            )
            best_s, best_p = default_s, default_p
            matched = [(default_s, default_p, "matched")]
            plan["headline"] = matched
        else:
            log(f"sweeps over {events:,} events, {args.sweep_runs} runs per configuration")
            s_cfgs, p_cfgs = suite.sweep(data)
            sweep = [r for r in suite.runs if r["phase"] == "sweep"]
            plan.update(sluice_cfgs=s_cfgs, peer_cfgs=p_cfgs, sweep_events=events)
            best_s = best_config(sweep, s_cfgs) or default_s
            best_p = best_config(sweep, p_cfgs) or default_p
            plan.update(best_sluice=best_s, best_peer=best_p)
            m_s = best_with_threads(sweep, s_cfgs, matched_threads) or default_s
            m_p = best_with_threads(sweep, p_cfgs, matched_threads) or default_p
            log(
                f"best: {best_s.label} / {best_p.label}; "
                f"matched at {matched_threads} threads: {m_s.label} / {m_p.label}"
            )
            if (best_s, best_p) == (m_s, m_p):
                plan["headline"] = [(best_s, best_p, "best = matched")]
            else:
                plan["headline"] = [(best_s, best_p, "best"), (m_s, m_p, "matched")]
            # clusters not needed any more
            for key in list(suite.sluice):
                if key not in {best_s.cluster_key, m_s.cluster_key}:
                    suite.stop_sluice(key)
        log(f"headline: {headline_runs} alternating runs per system and pair over {events:,} events")
        suite.prestart([c for pair in plan["headline"] for c in pair[:2]], data)
        suite.pairs(plan["headline"], data, headline_runs)
        if args.skip_sizes:
            skipped.append("Size sweep skipped (--skip-sizes).")
        else:
            for key in list(suite.sluice):
                if key != best_s.cluster_key:
                    suite.stop_sluice(key)
            plan.update(size_sluice=best_s, size_peer=best_p)
            log(f"size sweep {[f'{s:,}' for s in sizes]}: {args.size_runs} alternating runs each")
            suite.sizes(best_s, best_p, sizes, args.size_runs)
    except BaseException as exc:
        interrupted = aborted(suite, exc, "the clusters and SparkSessions", log)
        raise
    finally:
        suite.stop_all()
        plan["skipped"] = " ".join(skipped)
        if suite.runs:
            suite.notes.append(f"The invocation took {time.monotonic() - t_begin:.0f} s.")
            section = report(facts, command, suite.runs, suite.notes, plan)
            publish(section, args.out, log)
        finish_workdir(work, temp and (interrupted or not suite.failed) and not args.keep_workdir, log)
    return 1 if suite.failed else 0


if __name__ == "__main__":
    run_main(main)
