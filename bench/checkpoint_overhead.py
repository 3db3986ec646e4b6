"""Checkpoint overhead of Sluice by state size and checkpoint interval, from interleaved on/off runs.

    python bench/checkpoint_overhead.py [--quick] [--sizes 10k,1m,5m] [--intervals 250,1000,10000]
                                        [--blocks 10k=4,1m=4,5m=2] [--max-foreign-cores 0.3]
                                        [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

One local cluster (`sluice cluster start --taskmanagers 2 --slots 2`) runs examples/page_views.py at
parallelism 2, bounded input, again and again. A *state size* is the number of distinct urls in
the input (the keyed state of the running count: 10k, 1 M, 5 M keys); its data set is a few base
files in which every url occurs (a random permutation of the urls, tiled), hard-linked several
times under other names, so that a job lasts long enough for several checkpoints at 1 s without
generating (or storing) every event. The expected count of every url is known from the base files.

For each state size, *blocks* of runs: one run with checkpoints off (`--checkpoint-interval 0`)
and one with each interval, in one order in even blocks (off, then the intervals, rotating which
interval comes first) and reversed in odd ones, so a drift of the machine (other load, JIT) moves
the on runs and the off run of a block by the same amount on average. Per block and interval, the
pair (that interval's run, the block's off run) gives overhead = off events/s / on events/s − 1
(events/s: events / the JobManager's submitted → ended time). A case (state size × interval)
reports the median of its pairs' overheads with a percentile-bootstrap 95 % interval
(bench/stats.py), the number of pairs, completed checkpoints per run (the periodic ones and the
final one a bounded job takes at its end), checkpoint duration p50/max and state size (the
checkpoints of `sluice status --json`), and the TaskManagers' peak RSS (bench/procstat.py).

Every run's committed output is checked (bench/output_check.py: no line twice, counts increasing,
final counts exact); a run that fails it is marked failed, and its pairs are left out of the
figures. The load rule (bench/procstat.py): a run during which processes outside the benchmark
used more than --max-foreign-cores cores on average is marked excluded; its pairs are left out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import page_views_bench as pvb  # (also puts the repo and examples/ on sys.path)
import psutil
from bench_common import begin_run, finish_workdir, fmt, pct, publish, run_main, size
from markdown import notes_lines, section_head
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, excluded, fmt_rss
from stats import Estimate, fmt_estimate, median_ci

from sluice.client import SluiceError

log = pvb.log
PARALLELISM = 2
URL = "/page/"


@dataclass(frozen=True)
class StateSize:
    """A data set whose url count (keys of state) is `keys`: `base_files` files of `per_file` events
    each, every url at least once (when base_files * per_file >= keys), each hard-linked `copies` times."""

    name: str
    keys: int
    base_files: int
    per_file: int
    copies: int

    @property
    def events(self) -> int:
        return self.base_files * self.per_file * self.copies

    @property
    def files(self) -> int:
        return self.base_files * self.copies


# Full sizes: each run lasts ~5-10 s on the 2-core reference machine (several 1 s checkpoints).
FULL = {
    "10k": StateSize("10k", 10_000, 4, 100_000, 15),
    "1m": StateSize("1m", 1_000_000, 10, 100_000, 2),
    "5m": StateSize("5m", 5_000_000, 50, 100_000, 1),
}
QUICK = {"10k": StateSize("10k", 10_000, 2, 100_000, 5)}
FULL_BLOCKS = {"10k": 4, "1m": 4, "5m": 2}


# -- data --------------------------------------------------------------------------------------------------
def url_sequence(keys: int, events: int, seed: int) -> np.ndarray:
    """`events` url indices in [0, keys): random permutations of all urls, one after the other (so
    every url occurs once `events` >= `keys`, and the counts differ by at most one)."""
    rng = np.random.default_rng(seed)
    reps = -(-events // keys)
    return np.concatenate([rng.permutation(keys) for _ in range(reps)])[:events]


def make_dataset(directory: str, spec: StateSize, seed: int = 7) -> dict[str, int]:
    """The input files of `spec` under `directory`; returns the expected final count per url."""
    os.makedirs(directory, exist_ok=True)
    seq = url_sequence(spec.keys, spec.base_files * spec.per_file, seed)
    for f in range(spec.base_files):
        idx = seq[f * spec.per_file : (f + 1) * spec.per_file]
        base = f * spec.per_file
        text = "".join(
            f'{{"url": "{URL}{u}", "user": {(u * 7919) % 1_000_003}, "ts": {1_700_000_000_000 + base + i}}}\n'
            for i, u in enumerate(idx.tolist())
        )
        first = os.path.join(directory, f"events-000-{f:04d}.jsonl")
        with open(first, "w") as fh:
            fh.write(text)
        for c in range(1, spec.copies):  # the same events again, under another name
            os.link(first, os.path.join(directory, f"events-{c:03d}-{f:04d}.jsonl"))
    counts = np.bincount(seq, minlength=spec.keys) * spec.copies
    return {f"{URL}{i}": int(n) for i, n in enumerate(counts.tolist()) if n}


# -- the plan ----------------------------------------------------------------------------------------------
def block_order(intervals: Sequence[int], block: int) -> list[int]:
    """The runs of one block: 0 (checkpoints off) and every interval. Even blocks: off first, then the
    intervals rotated by block // 2; odd blocks: the previous block's order reversed."""
    if block % 2:
        return list(reversed(block_order(intervals, block - 1)))
    k = (block // 2) % len(intervals) if intervals else 0
    return [0, *intervals[k:], *intervals[:k]]


# -- figures ------------------------------------------------------------------------------------------------
@dataclass
class Case:
    size: str
    interval: int
    overheads: list[float] = field(default_factory=list)  # per kept pair: off / on - 1
    pairs_left_out: int = 0
    on_runs: list[dict] = field(default_factory=list)
    off_runs: list[dict] = field(default_factory=list)

    @property
    def estimate(self) -> Estimate:
        return median_ci(self.overheads, excluded=self.pairs_left_out)


def usable(run: dict | None) -> bool:
    """Counted in the figures: it ran, its output passed the check, the load rule kept it."""
    return run is not None and bool(run.get("counts_ok")) and not run.get("excluded", False)


def cases(blocks: list[dict[int, dict]], size: str, intervals: Sequence[int]) -> list[Case]:
    """Pairs per interval from the blocks of one state size: (the interval's run, the block's off run)."""
    out = []
    for interval in intervals:
        case = Case(size, interval)
        for block in blocks:
            on, off = block.get(interval), block.get(0)
            if on is None or off is None:
                continue
            case.on_runs.append(on)
            case.off_runs.append(off)
            if usable(on) and usable(off):
                case.overheads.append(off["throughput"] / on["throughput"] - 1)
            else:
                case.pairs_left_out += 1
        out.append(case)
    return out


def checkpoint_figures(runs: Sequence[dict]) -> dict:
    """Completed checkpoints per run (all, and without the final one), duration p50/max, state size."""
    kept = [r for r in runs if usable(r)]
    per_run = [len(r["checkpoints"]) for r in kept]
    cks = [c for r in kept for c in r["checkpoints"]]
    durations = [c["duration_ms"] for c in cks if c.get("duration_ms") is not None]
    sizes = [c["size_bytes"] for c in cks if c.get("size_bytes")]
    return {
        "per_run": per_run,
        "durations": durations,
        "p50_ms": pct(durations, 50),
        "max_ms": max(durations) if durations else None,
        "size": pct(sizes, 50),
        "max_size": max(sizes) if sizes else None,
    }


def peak_rss(runs: Sequence[dict], role: str) -> int | None:
    """The highest peak RSS over the runs of the processes whose role (`roles`: pid -> role, from
    cluster.json and the process tree) is `role`."""
    peaks = [
        v
        for r in runs
        if r.get("usage")
        for k, v in r["usage"].peak_rss.get("sluice", {}).items()
        # keys are "<name> <pid>", and one "<n> small processes, largest" (procstat.py): no role
        if (pid := k.rsplit(" ", 1)[-1]).isdigit() and r.get("roles", {}).get(int(pid)) == role
    ]
    return max(peaks) if peaks else None


def cluster_roles(cluster: pvb.Cluster) -> dict[int, str]:
    """pid -> role of the cluster's processes; a TaskManager's descendants: `spark-jvm` (its Spark JVM),
    `pyspark-worker` (Python workers) or their executable's name."""
    roles: dict[int, str] = {}
    for p in cluster.info.get("processes", []):
        roles[p["pid"]] = p["role"]
        if p["role"] == "taskmanager":
            try:
                for child in psutil.Process(p["pid"]).children(recursive=True):
                    name = child.name()
                    roles[child.pid] = (
                        "spark-jvm" if name == "java" else "pyspark-worker" if name.startswith("python") else name
                    )
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    return roles


def fmt_range(xs: Sequence[int]) -> str:
    if not xs:
        return "—"
    lo, hi = min(xs), max(xs)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def fmt_pct(est: Estimate) -> str:
    """An overhead estimate in per cent: `+3.1 % [−1.2–+6.0]`."""
    if est.median is None:
        return fmt_estimate(est)
    if est.low is None:
        return f"{est.median * 100:+.1f} % (1 pair, no interval)"
    scaled = Estimate(
        est.median * 100,
        None if est.low is None else est.low * 100,
        None if est.high is None else est.high * 100,
        est.n,
        est.excluded,
    )
    return fmt_estimate(scaled, "+.1f").replace("]", " %]").replace(" [", " % [", 1)


def run_label(r: dict) -> str:
    if not r.get("counts_ok"):
        return "**FAILED**"
    return "excluded" if r.get("excluded") else "kept"


def report(args, facts: dict, command: str, sizes: dict[str, StateSize], results: dict, notes: list[str]) -> str:
    """The RESULTS.md section."""
    title = f"Sluice checkpoint overhead by state size and interval ({'quick' if args.quick else 'full'})"
    L: list[str] = section_head(title, command, facts)
    failed = [r for res in results.values() for b in res["blocks"] for r in b.values() if not r.get("counts_ok")]
    if failed:
        L.append(f"**OUTPUT CHECK FAILED** in {len(failed)} runs (see the run table).")
        L.append("")
    L.append(
        f"Job: examples/page_views.py, parallelism {PARALLELISM}, on 2 TaskManagers x 2 slots (one cluster for every "
        "run). Data per state size: every url occurs in base files of random url permutations, hard-linked "
        "several times. Overhead = off events/s ÷ on events/s − 1 per pair (an interval's run and the off run "
        "of its block), median over the pairs with a 95 % bootstrap interval; positive = checkpoints cost "
        "throughput. Checkpoints: completed per run, the final one of a bounded job included. Load rule: a run "
        f"whose foreign processes used more than {args.max_foreign_cores:g} cores on average is excluded "
        "(0 = off); a pair with an excluded or failed run is left out."
    )
    L.append("")
    L.append(
        "| state (urls) | events / files | interval ms | overhead [95 % CI] | pairs (left out) | on events/s | "
        "off events/s | checkpoints per run | checkpoint p50 / max ms | state size p50 / max | "
        "peak RSS TaskManager / Spark JVM |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, res in results.items():
        spec = sizes[name]
        for case in res["cases"]:
            ck = checkpoint_figures(case.on_runs)
            on = median_ci(r["throughput"] for r in case.on_runs if usable(r))
            off = median_ci(r["throughput"] for r in case.off_runs if usable(r))
            L.append(
                f"| {spec.keys:,} | {spec.events:,} / {spec.files} | {case.interval:,} | {fmt_pct(case.estimate)} | "
                f"{len(case.overheads)} ({case.pairs_left_out}) | {fmt_estimate(on)} | {fmt_estimate(off)} | "
                f"{fmt_range(ck['per_run'])} | {fmt(ck['p50_ms'], '.0f')} / {fmt(ck['max_ms'], '.0f')} | "
                f"{size(ck['size'])} / {size(ck['max_size'])} | "
                f"{fmt_rss(peak_rss(case.on_runs, 'taskmanager'))} / {fmt_rss(peak_rss(case.on_runs, 'spark-jvm'))} |"
            )
    L.append("")
    L.append(
        "Runs in order (events/s; checkpoints completed; foreign = cores used on average by processes outside "
        "the benchmark; peak RSS is each process's high-water mark since it started, so it only grows):"
    )
    L.append("")
    L.append(
        "| # | state | block | interval ms | events/s | s | checkpoints | foreign cores | steal s | exactly once "
        "| counted |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    n = 0
    for name, res in results.items():
        for b, block in enumerate(res["blocks"]):
            for interval in block_order(res["intervals"], b):
                r = block.get(interval)
                if r is None:
                    continue
                n += 1
                u = r.get("usage")
                L.append(
                    f"| {n} | {name} | {b + 1} | {interval or 'off'} | {fmt(r.get('throughput'), ',.0f')} | "
                    f"{fmt(r.get('submit_to_end'))} | {len(r.get('checkpoints', []))} | "
                    f"{fmt(u.foreign_cores() if u else None)} | {fmt(u.steal_s if u else None, '.1f')} | "
                    f"{'yes' if r.get('counts_ok') else '**NO**'} | {run_label(r)} |"
                )
    L.append("")
    L += notes_lines(notes)
    return "\n".join(L) + "\n"


# -- main -----------------------------------------------------------------------------------------------------
def parse_blocks(text: str) -> dict[str, int]:
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, n = item.partition("=")
        out[name.strip().lower()] = int(n)
    return out


def one_run(cluster: pvb.Cluster, data: str, out: str, interval: int, spec: StateSize, expected: dict, args) -> dict:
    meter = ResourceMeter({"sluice": lambda: cluster.pids}).start()
    try:
        r = pvb.throughput_run(cluster, data, out, interval, spec.events, expected, args.job_timeout)
    finally:
        usage = meter.stop()
    r["usage"] = usage
    r["roles"] = cluster_roles(cluster)
    r["excluded"] = excluded(usage, args.max_foreign_cores)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one case (10k urls, 1000 ms), 2 pairs, small input")
    ap.add_argument("--sizes", default=None, help="state sizes to run, of 10k,1m,5m (default: all; quick: 10k)")
    ap.add_argument("--intervals", default=None, help="checkpoint intervals, ms (default 250,1000,10000; quick 1000)")
    ap.add_argument("--blocks", default=None, help="blocks per size, e.g. 10k=4,1m=4,5m=2 (quick: 2)")
    ap.add_argument(
        "--warmups", type=int, default=None, help="uncounted runs per state size (default 1 above 10k urls, else 0)"
    )
    ap.add_argument("--max-foreign-cores", type=float, default=FOREIGN_CORES_LIMIT, help="load rule; 0 = off")
    ap.add_argument("--out", default=os.path.join(pvb.HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None, help="data, cluster and outputs (default: a temp dir, removed)")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--job-timeout", type=float, default=600)
    args = ap.parse_args()
    table = QUICK if args.quick else FULL
    names = [s.strip().lower() for s in (args.sizes or ",".join(table)).split(",") if s.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        ap.error(f"unknown state sizes {unknown}; choose from {list(table)}")
    intervals = [int(x) for x in (args.intervals or ("1000" if args.quick else "250,1000,10000")).split(",")]
    blocks = {n: 2 for n in names} if args.quick else {n: FULL_BLOCKS.get(n, 2) for n in names}
    blocks.update(parse_blocks(args.blocks or ""))

    command, facts, temp, work = begin_run(pvb.REPO, args.workdir, "sluice-ckpt-overhead-", log)
    cluster = pvb.Cluster(os.path.join(work, "cluster"), taskmanagers=2, slots=2)
    results: dict[str, dict] = {}
    notes: list[str] = []
    failed = interrupted = False
    t_start = time.monotonic()
    try:
        cluster.start()
        # warm-up: one short job each way, uncounted (first Spark jobs of a TaskManager are slow)
        warm = os.path.join(work, "warm")
        warm_expected = make_dataset(warm, StateSize("warm", 10_000, 2, 50_000, 1), seed=3)
        for interval in (1000, 0):
            pvb.throughput_run(
                cluster,
                warm,
                os.path.join(work, f"out-warm-{interval}"),
                interval,
                100_000,
                warm_expected,
                args.job_timeout,
            )
        shutil.rmtree(warm, ignore_errors=True)
        for name in names:
            spec = table[name]
            data = os.path.join(work, f"data-{name}")
            t0 = time.monotonic()
            expected = make_dataset(data, spec)
            log(
                f"{name}: {spec.events:,} events in {spec.files} files, {len(expected):,} urls, "
                f"generated in {time.monotonic() - t0:.1f}s"
            )
            res = results[name] = {"intervals": intervals, "blocks": [], "cases": []}
            default_warmups = 0 if args.quick or spec.keys <= 10_000 else 1  # 10k: the cluster's warm-up jobs
            for w in range(args.warmups if args.warmups is not None else default_warmups):
                # uncounted: the first job on a bigger state grows the TaskManagers' memory
                r = pvb.throughput_run(
                    cluster,
                    data,
                    os.path.join(work, f"out-{name}-warm-{w}"),
                    1000,
                    spec.events,
                    expected,
                    args.job_timeout,
                )
                log(
                    f"{name} warm-up {w + 1} (uncounted): {r['throughput']:,.0f} events/s, "
                    f"output {'ok' if r['counts_ok'] else 'FAILED'}"
                )
            for b in range(blocks[name]):
                block: dict[int, dict] = {}
                res["blocks"].append(block)
                for interval in block_order(intervals, b):
                    out = os.path.join(work, f"out-{name}-{b}-{interval}")
                    try:
                        r = one_run(cluster, data, out, interval, spec, expected, args)
                    except (pvb.BenchError, SluiceError) as exc:
                        notes.append(f"{name} block {b + 1} interval {interval or 'off'}: run failed: {exc}")
                        log(f"run failed: {exc}")
                        r = {"counts_ok": False, "checkpoints": [], "throughput": None, "excluded": False}
                        failed = True
                    block[interval] = r
                    if not r["counts_ok"]:
                        failed = True
                        if "output_check" in r:
                            notes.append(
                                f"{name} job {r.get('job_id')}: OUTPUT CHECK FAILED: {r['output_check'].describe()}"
                            )
                    if r.get("restarts"):
                        notes.append(f"{name} job {r['job_id']} restarted {r['restarts']} times")
                    u = r.get("usage")
                    log(
                        f"{name} block {b + 1}/{blocks[name]} interval {interval or 'off':>5}: "
                        f"{fmt(r.get('throughput'), ',.0f')} events/s, {len(r['checkpoints'])} checkpoints, "
                        f"foreign {fmt(u.foreign_cores() if u else None)} cores"
                        f"{' (excluded)' if r.get('excluded') else ''}, "
                        f"output {'ok' if r['counts_ok'] else 'FAILED'}"
                    )
            res["cases"] = cases(res["blocks"], name, intervals)
            shutil.rmtree(data, ignore_errors=True)
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the cluster")
        raise
    except BaseException as exc:
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        try:
            leftovers = cluster.stop()
            if leftovers:
                notes.append(f"`cluster stop` left processes behind (killed): {leftovers}")
        finally:
            if results:
                notes.append(f"whole invocation {time.monotonic() - t_start:.0f} s")
                for name, res in results.items():
                    if not res["cases"]:
                        res["cases"] = cases(res["blocks"], name, intervals)
                section = report(args, facts, command, table, results, notes)
                publish(section, args.out, log)
            finish_workdir(
                work,
                temp and (interrupted or not failed) and not args.keep_workdir,
                log,
                "cluster logs under cluster/log/",
            )
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
