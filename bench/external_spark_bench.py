"""Page views with TaskManagers on their own local Spark vs on an external Spark.

    python bench/external_spark_bench.py [--runs 5] [--events 400000] [--files 80]
        [--systems local,standalone,connect] [--max-foreign-cores 0.3] [--workdir DIR] [--quick]

Three local clusters of one TaskManager with 2 slots each, started once through
`sluice cluster start --spark local|standalone|connect` (sluice/cli/spark_cluster.py):

- local: the TaskManager's own `local[2]` SparkSession (the default);
- standalone: a Spark standalone master and worker (2 cores) beside the cluster;
  the TaskManager's Spark application runs its tasks in an executor JVM under the
  worker (spark.cores.max = 2);
- connect: a Spark Connect server (`local[2]`) beside the cluster; the TaskManager
  holds a Connect session.

The same page_views job (examples/page_views.py, parallelism 2, checkpoints every
--interval ms) reads the same files on each, alternating the system run by run
(the order rotates every round), after one unmeasured warm-up run per cluster.
Throughput is events / (job submitted -> job ended) from the JobManager's own
timestamps; every run's committed output is checked exactly against the counts
computed when the input was generated. CPU seconds are those of the measured
cluster's processes (TaskManager, JobManager, ZooKeeper and the Spark processes
with their executors), from bench/procstat.py's ResourceMeter, which also gives
the foreign cores of the load rule. Medians with 95 % bootstrap intervals
(bench/stats.py); the section goes to bench/RESULTS.md, interpretation to
bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))

from bench_common import begin_run, finish_workdir, fmt, publish, run_main
from generate_page_views import generate
from markdown import notes_lines, section_head
from page_views_bench import BenchError, Cluster, log, throughput_run
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, excluded
from stats import fmt_estimate, median_ci

SYSTEMS = ("local", "standalone", "connect")
RESULTS = os.path.join(HERE, "RESULTS.md")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measured runs per system (default 5)")
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--files", type=int, default=80)
    ap.add_argument("--interval", type=int, default=1000, help="checkpoint interval, ms")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of local,standalone,connect")
    ap.add_argument(
        "--max-foreign-cores",
        type=float,
        default=FOREIGN_CORES_LIMIT,
        help="load rule: a run during which other processes used more cores on average is left out (0: off)",
    )
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        help="seconds to wait, before each run, for the machine's foreign load to fall under the limit",
    )
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--quick", action="store_true", help="smoke size: 2 runs of 100k events")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.events, a.files = 2, 100_000, 20
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    bad = [s for s in a.systems if s not in SYSTEMS]
    if bad or not a.systems:
        ap.error(f"--systems: expected some of {','.join(SYSTEMS)}, got {bad or 'none'}")
    if a.runs < 1 or a.events < 1 or a.files < 1:
        ap.error("--runs, --events and --files must be >= 1")
    return a


def wait_for_quiet(roots: dict, limit: float, patience: float) -> None:
    """Before a run: up to `patience` s for other processes on the machine to use at most `limit`
    cores (2 s samples); the run goes ahead either way and the load rule judges it."""
    if not limit or patience <= 0:
        return
    deadline = time.monotonic() + patience
    while True:
        meter = ResourceMeter(roots).start()
        time.sleep(2)
        foreign = meter.stop().foreign_cores()
        if foreign <= limit or time.monotonic() > deadline:
            return
        log(f"  waiting for a quieter machine: foreign {foreign:.2f} cores")


def main() -> int:
    a = parse_args()
    command, facts, temp, work = begin_run(REPO, a.workdir, "sluice-external-spark-", log)
    data = os.path.join(work, "in")
    log(f"generating {a.events:,} events in {a.files} files")
    expected = generate(data, events=a.events, files=a.files, urls=5_000, seed=19)
    clusters: dict[str, Cluster] = {}
    runs: list[dict] = []
    notes: list[str] = []
    failed = False
    try:
        for system in a.systems:
            c = Cluster(os.path.join(work, f"cluster-{system}"), 1, 2, ("--spark", system))
            clusters[system] = c.start()

        def pids_now(c: Cluster) -> Callable[[], Iterable[int]]:
            return lambda: c.pids

        roots = {s: pids_now(c) for s, c in clusters.items()}
        for system, c in clusters.items():  # warm-up: the first job on a fresh Spark compiles and loads classes
            log(f"warm-up run on {system}")
            r = throughput_run(c, data, os.path.join(work, f"out-warmup-{system}"), a.interval, a.events, expected, 600)
            if not r["counts_ok"]:
                raise BenchError(f"warm-up on {system}: output not exact: {r['output_check']}")
        for rnd in range(a.runs):
            order = a.systems[rnd % len(a.systems) :] + a.systems[: rnd % len(a.systems)]
            for system in order:
                out = os.path.join(work, f"out-{system}-{rnd}")
                wait_for_quiet(roots, a.max_foreign_cores, a.quiet_wait)
                meter = ResourceMeter(roots).start()
                try:
                    r = throughput_run(clusters[system], data, out, a.interval, a.events, expected, 600)
                finally:
                    usage = meter.stop()
                r.update(
                    system=system,
                    round=rnd + 1,
                    cpu_s=usage.cpu_s.get(system, 0.0),
                    foreign_cores=usage.foreign_cores(),
                    excluded=excluded(usage, a.max_foreign_cores or None),
                )
                runs.append(r)
                log(
                    f"round {rnd + 1} {system}: {r['throughput']:,.0f} events/s in {r['submit_to_end']:.2f}s, "
                    f"CPU {r['cpu_s']:.1f}s, foreign {r['foreign_cores']:.2f} cores, exact {r['counts_ok']}"
                    + (" (excluded)" if r["excluded"] else "")
                )
                if not r["counts_ok"]:
                    failed = True
                    notes.append(f"round {rnd + 1} {system}: output not exact: {r['output_check']}")
    except Exception as exc:  # noqa: BLE001 — report what ran, then fail
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        notes.append(f"aborted: {type(exc).__name__}: {exc}".split("\n")[0])
    except KeyboardInterrupt:
        log("interrupted: stopping the clusters")
        failed = True
        notes.append("interrupted")
    finally:
        for c in clusters.values():
            c.stop()
    if runs:
        publish(report(a, command, facts, runs, notes), a.results, log)
    finish_workdir(work, temp and not a.keep_workdir and not failed, log)
    return 1 if failed else 0


def report(a: argparse.Namespace, command: str, facts: dict, runs: list[dict], notes: list[str]) -> str:
    lines = section_head(
        "page views: TaskManagers on local Spark vs a Spark standalone cluster vs Spark Connect", command, facts
    )
    lines += [
        f"{a.events:,} events in {a.files} files, 1 TaskManager x 2 slots per cluster, parallelism 2, checkpoints "
        f"every {a.interval} ms; {a.runs} measured runs per system after one warm-up, alternating (order rotating "
        "per round). Throughput = events / (submitted -> ended); CPU = the measured cluster's processes, Spark's "
        f"included. Load rule: runs with more than {a.max_foreign_cores or 'no limit'} foreign cores left out.",
        "",
        "| system | throughput (events/s), median [95 % CI] | time (s) | CPU s per run | runs kept / run | exact "
        "| throughput of every exact run, load rule off |",
        "|---|---|---|---|---|---|---|",
    ]
    est: dict[str, float | None] = {}
    every: dict[str, float | None] = {}
    for system in a.systems:
        rs = [r for r in runs if r["system"] == system]
        kept = [r for r in rs if r["counts_ok"] and not r["excluded"]]
        thr = median_ci([r["throughput"] for r in kept], excluded=len(rs) - len(kept))
        est[system] = thr.median
        lines.append(
            f"| {system} | {fmt_estimate(thr)} | "
            f"{fmt_estimate(median_ci([r['submit_to_end'] for r in kept]), '.2f')} | "
            f"{fmt_estimate(median_ci([r['cpu_s'] for r in kept]), '.1f')} | {len(kept)} / {len(rs)} | "
            f"{sum(r['counts_ok'] for r in rs)} of {len(rs)} | "
            f"{fmt_estimate(median_ci([r['throughput'] for r in rs if r['counts_ok']]))} |"
        )
        every[system] = median_ci([r["throughput"] for r in rs if r["counts_ok"]]).median
    lines.append("")
    for label, medians in (("runs the load rule kept", est), ("every exact run", every)):
        base = medians.get("local")
        for system in a.systems:
            value = medians.get(system)
            if system != "local" and base and value:
                lines.append(f"- {system} / local throughput, ratio of medians over {label}: {value / base:.2f}")
    lines += [
        "",
        "| round | system | time (s) | events/s | CPU s | foreign cores | restarts | exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['round']} | {r['system']} | {r['submit_to_end']:.2f} | {r['throughput']:,.0f} | "
            f"{fmt(r['cpu_s'], '.1f')} | "
            f"{fmt(r['foreign_cores'])}{' (excluded)' if r['excluded'] else ''} | {r['restarts']} | "
            f"{'yes' if r['counts_ok'] else 'NO'} |"
        )
    lines += ["", *notes_lines(notes)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_main(main)
