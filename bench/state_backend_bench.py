"""State backends at scale: memory vs rocksdb (full and incremental checkpoints) on a job with
many distinct keys (docs/state-backends.md).

    python bench/state_backend_bench.py [--keys 10000000] [--updates-pct 20] [--interval-ms 2000]
        [--systems memory,rocksdb-incremental,rocksdb-full] [--runs 2] [--kill] [--quick]
        [--out bench/RESULTS.md] [--workdir DIR]

The job (bench/jobs/state_keys.py): a generator source whose first N ids are N distinct keys (the
load), then U = updates-pct % of N updates spread over every key (key = pmod(id * 2654435761, N)),
into a keyed count at parallelism 1 on a cluster of 2 TaskManagers x 1 slot; only keys below 1000
reach the file sink, and their final counts are checked exactly against the generator's formula.

Measured per run, from the outside:

- *throughput*: input rows per second, from the source's batch log lines (taskmanager/task.py's
  SOURCE_BATCH_LOG), over the load phase and over the update phase (first attempt only);
- *peak RSS*: the largest VmHWM of a TaskManager's Python process (where the state lives; its Spark
  JVM is not counted), polled every 0.5 s, so the high-water mark before a kill counts;
- *checkpoints*: duration and size (`size_bytes`: bytes a checkpoint wrote; for incremental rocksdb
  only its new files) of every completed checkpoint, from the JobManager's status, split into those
  triggered in the load phase and in the update phase; with updates per interval about 1 % of N,
  the update-phase sizes are the issue's "1 % of keys updated per checkpoint interval";
- *restore* (with --kill): kill -9 of the TaskManager running the keyed count once the source is
  half way through the updates; the restore time is what the new task logs for its restore
  ("restored from checkpoint n ... in x s"), and kill -> RUNNING again is the whole recovery.

Systems alternate run by run (memory, rocksdb-incremental, rocksdb-full, memory, ...); every run
on a fresh cluster, so each peak RSS is that run's. Medians with 95 % bootstrap intervals
(bench/stats.py); the load rule of the other benchmarks applies (bench/README.md). The section
appended to --out is bench/state_backend_bench_report.py's.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_common import (
    LOG_TIME,
    SOURCE_BATCH,
    SOURCE_SNAPSHOT,
    begin_run,
    finish_workdir,
    median,
    publish,
    run_main,
    size,
)
from page_views_runs import Cluster, sluice
from run_matrix import Cell, matrix
from state_backend_bench_report import report

JOB = os.path.join(HERE, "jobs", "state_keys.py")
MULT = 2654435761
SAMPLE = 1000
SYSTEMS = {
    "memory": ("memory", False),
    "rocksdb-incremental": ("rocksdb", False),
    "rocksdb-full": ("rocksdb", True),
}
RESTORED = re.compile(LOG_TIME + r" .*\[job (\w+) attempt (\d+) task .*restored from checkpoint (\d+).* in ([\d.]+) s")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class RunError(Exception):
    pass


def expected_sample(keys: int, updates: int) -> dict[int, int]:
    """Final count of every key below SAMPLE: 1 from the load, plus its updates."""
    counts = np.ones(min(SAMPLE, keys), dtype=np.int64)
    step = 10_000_000
    for start in range(keys, keys + updates, step):
        ids = np.arange(start, min(start + step, keys + updates), dtype=np.int64)
        k = (ids * MULT) % keys
        k = k[k < SAMPLE]
        np.add.at(counts, k, 1)
    return {i: int(c) for i, c in enumerate(counts)}


def read_sample(out: str) -> dict[int, int]:
    final: dict[int, int] = {}
    for path in sorted(glob.glob(os.path.join(out, "*"))):
        if os.path.basename(path).startswith((".", "_")) or os.path.isdir(path):
            continue
        with open(path) as f:
            for line in f:
                k, c = line.strip().split(",")
                final[int(k)] = max(final.get(int(k), 0), int(c))
    return final


def taskmanager_pids(cluster: Cluster) -> list[int]:
    return [p["pid"] for p in cluster.info["processes"] if p["role"] == "taskmanager"]


def peak_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def kill_tree(pid: int) -> None:
    """kill -9 a TaskManager and wait for it; its Spark JVM follows it."""
    proc = psutil.Process(pid)
    children = proc.children(recursive=True)
    proc.kill()
    psutil.wait_procs([proc], timeout=10)
    for child in children:
        try:
            child.wait(30)
        except psutil.TimeoutExpired:
            child.kill()


def source_snapshots(cluster: Cluster, job_id: str) -> dict[int, int]:
    """checkpoint id -> the source offset it holds (every attempt)."""
    out = {}
    for path in glob.glob(os.path.join(cluster.dir, "log", "taskmanager-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                m = SOURCE_SNAPSHOT.search(line)
                if m and m.group(2) == job_id:
                    out[int(m.group(6))] = int(m.group(7))
    return out


def _ts(text: str) -> float:
    return time.mktime(time.strptime(text[:19], "%Y-%m-%d %H:%M:%S")) + int(text[20:23]) / 1000


def source_batches(cluster: Cluster, job_id: str) -> list[tuple[float, int, int]]:
    """(time, offset before, offset after) of every source batch of the first attempt."""
    out = []
    for path in glob.glob(os.path.join(cluster.dir, "log", "taskmanager-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                m = SOURCE_BATCH.search(line)
                if m and m.group(2) == job_id and m.group(3) == "0":
                    out.append((_ts(m.group(1)), int(m.group(6)), int(m.group(7))))
    return sorted(out)


def restores(cluster: Cluster, job_id: str) -> list[float]:
    found = []
    for path in glob.glob(os.path.join(cluster.dir, "log", "taskmanager-*.log")):
        with open(path, errors="replace") as f:
            found += [float(m.group(5)) for line in f if (m := RESTORED.search(line)) and m.group(2) == job_id]
    return found


def rate(batches: list[tuple[float, int, int]], lo: int, hi: int) -> float | None:
    """Rows per second of the batches whose offsets lie in [lo, hi)."""
    inside = [b for b in batches if b[1] >= lo and b[2] <= hi]
    if len(inside) < 3:
        return None
    span = inside[-1][0] - inside[0][0]
    rows = sum(b[2] - b[1] for b in inside[1:])
    return rows / span if span > 0 else None


def launch(cluster: Cluster, args: Any, system: str, updates: int, out: str) -> str:
    """Submit bench/jobs/state_keys.py with `system`'s backend; returns the job's id."""
    backend, full = SYSTEMS[system]
    job_args = ["--keys", str(args.keys), "--updates", str(updates), "--output", out, "--backend", backend]
    job_args += ["--interval", str(args.interval_ms), "--sample", str(SAMPLE), "--batch", str(args.batch)]
    if full:
        job_args.append("--full")
    proc = sluice("run", JOB, "--detach", "--parallelism", "1", "--cluster-dir", cluster.dir, "--", *job_args)
    return proc.stdout.strip().splitlines()[-1].strip()


@dataclass
class Watched:
    """What `watch` saw of a job: its last status, the peak RSS per TaskManager pid, every completed
    checkpoint (by id), when the kill and the recovery were (None: not made, not seen)."""

    status: dict = field(default_factory=dict)
    rss: dict[int, int] = field(default_factory=dict)
    checkpoints: dict[int, dict] = field(default_factory=dict)
    killed_at: float | None = None
    recovered_at: float | None = None


def watch(cluster: Cluster, job_id: str, args: Any, updates: int, what: str) -> Watched:
    """Poll the job every 0.5 s to its end: TaskManagers' peak RSS, completed checkpoints, and with
    --kill the kill -9 of the keyed count's TaskManager half way through the updates and the recovery."""
    w = Watched()
    deadline = time.monotonic() + args.job_timeout
    while True:
        for pid in taskmanager_pids(cluster):
            w.rss[pid] = max(w.rss.get(pid, 0), peak_rss(pid))
        status = w.status = cluster.status(job_id)
        for c in status["checkpoints"]:
            if c["status"] == "COMPLETED":
                w.checkpoints.setdefault(c["id"], {**c, "seen": time.time()})
        if status["state"] in ("FINISHED", "FAILED", "CANCELED"):
            return w
        if args.kill and w.killed_at is None and status["state"] == "RUNNING":
            batches = source_batches(cluster, job_id)
            if batches and batches[-1][2] >= args.keys + updates // 2 and w.checkpoints:
                address = next(t["taskmanager"] for t in status["tasks"] if t["chain_id"] == "counts")
                pid = next(p["pid"] for p in cluster.info["processes"] if p["address"] == address)
                w.rss[pid] = max(w.rss.get(pid, 0), peak_rss(pid))
                kill_tree(pid)
                w.killed_at = time.time()
                log(f"{what}: killed TaskManager {pid} at offset {batches[-1][2]:,}")
        if w.killed_at is not None and w.recovered_at is None and status["restarts"] >= 1:
            if status["state"] == "RUNNING" and all(t["state"] == "RUNNING" for t in status["tasks"]):
                w.recovered_at = time.time()
        if time.monotonic() > deadline:
            raise RunError(f"job {job_id} did not end within {args.job_timeout}s")
        time.sleep(0.5)


def checkpoint_figures(cluster: Cluster, job_id: str, keys: int, w: Watched) -> dict:
    """The run's checkpoint figures: sizes and durations of the update-phase ones (those whose previous
    completed checkpoint already held the whole load), the largest, the rows between them."""
    ckpts = sorted(w.checkpoints.values(), key=lambda c: c["id"])
    offsets = source_snapshots(cluster, job_id)
    update_ckpts = [c for prev, c in zip(ckpts, ckpts[1:], strict=False) if offsets.get(prev["id"], 0) >= keys]
    return {
        "ckpt_sizes": [c["size_bytes"] for c in update_ckpts],
        "ckpt_durations": [c["duration_ms"] / 1000 for c in update_ckpts],
        "max_ckpt_size": max((c["size_bytes"] for c in ckpts), default=None),
        "max_ckpt_duration": max((c["duration_ms"] / 1000 for c in ckpts), default=None),
        "checkpoints": len(ckpts),
        # rows between consecutive update-phase checkpoints, as a share of the keys
        "updates_per_checkpoint": [
            (offsets[c["id"]] - offsets[p["id"]]) / keys
            for p, c in zip(ckpts, ckpts[1:], strict=False)
            if c in update_ckpts and c["id"] in offsets and p["id"] in offsets
        ],
    }


def one_run(args: Any, work: str, system: str, index: int) -> dict:
    """One run of `system` on a fresh cluster of its own: the job, watched to its end, its sample of
    counts checked, its figures."""
    updates = args.keys * args.updates_pct // 100
    what = f"{system} run {index}"
    cluster = Cluster(os.path.join(work, f"{system}-{index}"), 2, 1)
    try:
        cluster.start()
        out = os.path.join(work, f"out-{system}-{index}")
        launched = time.time()
        job_id = launch(cluster, args, system, updates, out)
        log(f"{what}: job {job_id}")
        w = watch(cluster, job_id, args, updates, what)
        ended = time.time()
        if w.status["state"] != "FINISHED":
            raise RunError(f"job {job_id} ended {w.status['state']}: {w.status.get('failure')}")
        got, want = read_sample(out), expected_sample(args.keys, updates)
        exact = got == want
        if not exact:
            log(f"{what}: WRONG counts for keys {[k for k in want if got.get(k) != want[k]][:5]}")
        batches = source_batches(cluster, job_id)
        r = {
            "system": system,
            "job_id": job_id,
            "exact": exact,
            "wall": ended - launched,
            "load_rate": rate(batches, 0, args.keys),
            "update_rate": rate(batches, args.keys, args.keys + updates),
            "peak_rss": max(w.rss.values()) if w.rss else None,
            **checkpoint_figures(cluster, job_id, args.keys, w),
            "restore": next(reversed(restores(cluster, job_id)), None) if args.kill else None,
            "recovery": (w.recovered_at - w.killed_at) if w.killed_at and w.recovered_at else None,
        }
        log(
            f"{what}: {'exact' if exact else 'WRONG'}, load {r['load_rate'] or 0:,.0f}/s, "
            f"updates {r['update_rate'] or 0:,.0f}/s, peak RSS {size(r['peak_rss'])}, "
            f"{len(r['ckpt_sizes'])} update-phase checkpoints median {size(median(r['ckpt_sizes']))} "
            f"{median(r['ckpt_durations']) or 0:.2f}s, restore {r['restore']}, recovery {r['recovery']}"
        )
        return r
    finally:
        cluster.stop()


def run_order(systems: list[str], runs: int) -> list[Cell[str]]:
    """The systems alternate run by run: `runs` rounds, each running every system once in the order
    given (every run on a fresh cluster of its own)."""
    return matrix(systems, [JOB], runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--updates-pct", type=int, default=20, help="updates after the load, in percent of --keys")
    ap.add_argument("--interval-ms", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--kill", action="store_true", help="kill -9 the keyed count's TaskManager half way")
    ap.add_argument("--job-timeout", type=float, default=1800)
    ap.add_argument("--quick", action="store_true", help="200,000 keys, one run each")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    if args.quick:
        args.keys, args.runs = 200_000, 1
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"--systems: unknown {unknown}; expected some of {', '.join(SYSTEMS)}")
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-state-backends-", log)
    runs: list[dict] = []
    try:
        for cell in run_order(systems, args.runs):
            i = cell.round - 1
            try:
                runs.append(one_run(args, work, cell.system, i))
            except RunError as exc:
                log(f"{cell.system} run {i} failed: {exc}")
    finally:
        if runs:
            publish(report(args, command, facts, runs, list(SYSTEMS)), args.out, log)
        finish_workdir(work, temp, log)
    return 0 if runs and all(r["exact"] for r in runs) else 1


if __name__ == "__main__":
    run_main(main)
