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

This file is the suite's declaration (command line, the runs, main); bench/checkpoint_overhead_plan.py
holds the state sizes, their data sets and the order of a block's runs, and
bench/checkpoint_overhead_report.py the figures and the section.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import page_views_runs
import psutil
from bench_common import begin_run, finish_workdir, fmt, publish, run_main
from checkpoint_overhead_plan import FULL, FULL_BLOCKS, QUICK, StateSize, block_order, make_dataset, parse_blocks
from checkpoint_overhead_report import cases, report
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, excluded

from sluice.client import SluiceError

log = page_views_runs.log


def cluster_roles(cluster: page_views_runs.Cluster) -> dict[int, str]:
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


def one_run(
    cluster: page_views_runs.Cluster, data: str, out: str, interval: int, spec: StateSize, expected: dict, args
) -> dict:
    meter = ResourceMeter({"sluice": lambda: cluster.pids}).start()
    try:
        r = page_views_runs.throughput_run(cluster, data, out, interval, spec.events, expected, args.job_timeout)
    finally:
        usage = meter.stop()
    r["usage"] = usage
    r["roles"] = cluster_roles(cluster)
    r["excluded"] = excluded(usage, args.max_foreign_cores)
    return r


def parse_args(
    argv: Sequence[str] | None = None,
) -> tuple[argparse.Namespace, dict[str, StateSize], list[str], list[int], dict[str, int]]:
    """The command line; with the sizes table (full or quick), the state sizes chosen, the intervals
    and the blocks per size."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one case (10k urls, 1000 ms), 2 pairs, small input")
    ap.add_argument("--sizes", default=None, help="state sizes to run, of 10k,1m,5m (default: all; quick: 10k)")
    ap.add_argument("--intervals", default=None, help="checkpoint intervals, ms (default 250,1000,10000; quick 1000)")
    ap.add_argument("--blocks", default=None, help="blocks per size, e.g. 10k=4,1m=4,5m=2 (quick: 2)")
    ap.add_argument(
        "--warmups", type=int, default=None, help="uncounted runs per state size (default 1 above 10k urls, else 0)"
    )
    ap.add_argument("--max-foreign-cores", type=float, default=FOREIGN_CORES_LIMIT, help="load rule; 0 = off")
    ap.add_argument(
        "--out", default=os.path.join(page_views_runs.HERE, "RESULTS.md"), help="Markdown file to append to"
    )
    ap.add_argument("--workdir", default=None, help="data, cluster and outputs (default: a temp dir, removed)")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--job-timeout", type=float, default=600)
    args = ap.parse_args(argv)
    table = QUICK if args.quick else FULL
    names = [s.strip().lower() for s in (args.sizes or ",".join(table)).split(",") if s.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        ap.error(f"unknown state sizes {unknown}; choose from {list(table)}")
    intervals = [int(x) for x in (args.intervals or ("1000" if args.quick else "250,1000,10000")).split(",")]
    blocks = {n: 2 for n in names} if args.quick else {n: FULL_BLOCKS.get(n, 2) for n in names}
    blocks.update(parse_blocks(args.blocks or ""))
    return args, table, names, intervals, blocks


@dataclass
class Sweep:
    """One invocation: its options, cluster, work directory and intervals, and what it measured so
    far (`results`: state size -> its intervals, blocks of runs and cases; `notes`; `failed`)."""

    args: argparse.Namespace
    cluster: page_views_runs.Cluster
    work: str
    intervals: list[int]
    results: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: bool = False

    def warm_up(self) -> None:
        """One short job each way, uncounted (the first Spark jobs of a TaskManager are slow)."""
        warm = os.path.join(self.work, "warm")
        warm_expected = make_dataset(warm, StateSize("warm", 10_000, 2, 50_000, 1), seed=3)
        for interval in (1000, 0):
            out = os.path.join(self.work, f"out-warm-{interval}")
            page_views_runs.throughput_run(
                self.cluster, warm, out, interval, 100_000, warm_expected, self.args.job_timeout
            )
        shutil.rmtree(warm, ignore_errors=True)

    def measure(self, name: str, spec: StateSize, n_blocks: int) -> None:
        """State size `name`: its data, its uncounted warm-ups, then `n_blocks` blocks of runs."""
        args, data = self.args, os.path.join(self.work, f"data-{name}")
        t0 = time.monotonic()
        expected = make_dataset(data, spec)
        log(
            f"{name}: {spec.events:,} events in {spec.files} files, {len(expected):,} urls, "
            f"generated in {time.monotonic() - t0:.1f}s"
        )
        res = self.results[name] = {"intervals": self.intervals, "blocks": [], "cases": []}
        default_warmups = 0 if args.quick or spec.keys <= 10_000 else 1  # 10k: the cluster's warm-up jobs
        for w in range(args.warmups if args.warmups is not None else default_warmups):
            # uncounted: the first job on a bigger state grows the TaskManagers' memory
            out = os.path.join(self.work, f"out-{name}-warm-{w}")
            r = page_views_runs.throughput_run(self.cluster, data, out, 1000, spec.events, expected, args.job_timeout)
            log(
                f"{name} warm-up {w + 1} (uncounted): {r['throughput']:,.0f} events/s, "
                f"output {'ok' if r['counts_ok'] else 'FAILED'}"
            )
        for b in range(n_blocks):
            block: dict[int, dict] = {}
            res["blocks"].append(block)
            for interval in block_order(self.intervals, b):
                block[interval] = self.run(name, spec, data, expected, b, interval)
                self.record(name, b, n_blocks, interval, block[interval])
        res["cases"] = cases(res["blocks"], name, self.intervals)
        shutil.rmtree(data, ignore_errors=True)

    def run(self, name: str, spec: StateSize, data: str, expected: dict, b: int, interval: int) -> dict:
        """One counted run; a failed one noted, as a run without figures."""
        out = os.path.join(self.work, f"out-{name}-{b}-{interval}")
        try:
            return one_run(self.cluster, data, out, interval, spec, expected, self.args)
        except (page_views_runs.BenchError, SluiceError) as exc:
            self.notes.append(f"{name} block {b + 1} interval {interval or 'off'}: run failed: {exc}")
            log(f"run failed: {exc}")
            return {"counts_ok": False, "checkpoints": [], "throughput": None, "excluded": False}

    def record(self, name: str, b: int, n_blocks: int, interval: int, r: dict) -> None:
        """A run's notes (a failed output check, restarts) and its log line."""
        if not r["counts_ok"]:
            self.failed = True
            if "output_check" in r:
                self.notes.append(f"{name} job {r.get('job_id')}: OUTPUT CHECK FAILED: {r['output_check'].describe()}")
        if r.get("restarts"):
            self.notes.append(f"{name} job {r['job_id']} restarted {r['restarts']} times")
        u = r.get("usage")
        log(
            f"{name} block {b + 1}/{n_blocks} interval {interval or 'off':>5}: "
            f"{fmt(r.get('throughput'), ',.0f')} events/s, {len(r['checkpoints'])} checkpoints, "
            f"foreign {fmt(u.foreign_cores() if u else None)} cores"
            f"{' (excluded)' if r.get('excluded') else ''}, "
            f"output {'ok' if r['counts_ok'] else 'FAILED'}"
        )


def main() -> int:
    args, table, names, intervals, blocks = parse_args()
    command, facts, temp, work = begin_run(page_views_runs.REPO, args.workdir, "sluice-ckpt-overhead-", log)
    sweep = Sweep(
        args, page_views_runs.Cluster(os.path.join(work, "cluster"), taskmanagers=2, slots=2), work, intervals
    )
    interrupted = False
    t_start = time.monotonic()
    try:
        sweep.cluster.start()
        sweep.warm_up()
        for name in names:
            sweep.measure(name, table[name], blocks[name])
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the cluster")
        raise
    except BaseException as exc:
        sweep.failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        try:
            leftovers = sweep.cluster.stop()
            if leftovers:
                sweep.notes.append(f"`cluster stop` left processes behind (killed): {leftovers}")
        finally:
            if sweep.results:
                sweep.notes.append(f"whole invocation {time.monotonic() - t_start:.0f} s")
                for name, res in sweep.results.items():
                    if not res["cases"]:
                        res["cases"] = cases(res["blocks"], name, intervals)
                publish(report(args, facts, command, table, sweep.results, sweep.notes), args.out, log)
            remove = temp and (interrupted or not sweep.failed) and not args.keep_workdir
            finish_workdir(work, remove, log, "cluster logs under cluster/log/")
    return 1 if sweep.failed else 0


if __name__ == "__main__":
    run_main(main)
