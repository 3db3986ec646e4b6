"""Page views on this checkout against another commit's: the before/after figures a performance
change lands with (bench/README.md), from one run on one machine.

    python bench/before_after.py --before COMMIT [--runs 5] [--events 1000000]
        [--events-per-file 12500,50000] [--urls 10000] [--taskmanagers 1] [--slots 2]
        [--checkpoint-interval 1000] [--title TEXT] [--out bench/RESULTS.md] [--no-append] [--workdir DIR]

Two clusters side by side (`sluice cluster start`, TaskManagers x slots each): one runs this
checkout, the other COMMIT checked out into a temporary git worktree (its CLI and every process it
starts run that commit's code). Each gets one uncounted warm-up job, then examples/page_views.py
runs (parallelism 2) on each in turn, the order flipped every round, over inputs of --events events in files of
each --events-per-file size (examples/generate_page_views.py; 12,500 is the throughput suite's file,
50,000 the profile's; --urls: the pool of urls, the keys, drawn Zipf-distributed: a large pool makes
a large keyed state). Per run: submission to FINISHED (the JobManager's timestamps) and events/s;
every output is checked exactly (bench/output_check.py) and a run that fails the check is reported
and left out. Medians with bootstrap 95 % intervals (bench/stats.py).

The run order and the section: bench/before_after_report.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from page_views_runs import REPO, Cluster, throughput_run  # first: puts the repo and examples/ on sys.path

# isort: split
from before_after_report import run_order, section
from bench_common import add_worktree, begin_run, finish_workdir, publish, remove_worktree, run_main
from generate_page_views import generate
from procstat import peak_rss
from run_matrix import MEASURED


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def taskmanager_memory(cluster: Cluster) -> tuple[int, int] | None:
    """(the highest peak RSS of the cluster's TaskManagers since they started, the highest RSS now),
    or None when none could be read."""
    peaks, now = [], []
    for p in cluster.info.get("processes", []):
        if p["role"] != "taskmanager":
            continue
        try:
            proc = psutil.Process(p["pid"])
            peaks.append(peak_rss(proc))
            now.append(proc.memory_info().rss)
        except psutil.Error:
            continue
    return (max(peaks), max(now)) if peaks else None


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the commit to compare against (a temporary git worktree)")
    ap.add_argument("--runs", type=int, default=5, help="measured runs per condition and input")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--events-per-file", default="12500,50000", help="one input per size, comma-separated")
    ap.add_argument("--urls", type=int, default=10_000, help="urls to draw from (the job's keys)")
    ap.add_argument("--taskmanagers", type=int, default=1)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="ms")
    ap.add_argument("--title", default="page views: this commit against an earlier one")
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--no-append", action="store_true", help="print the section only")
    ap.add_argument("--workdir", default=None)
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-before-after-", log)
    worktree = add_worktree(REPO, args.before, os.path.join(work, "before"))
    after = f"after ({facts['commit']})"
    before = f"before ({args.before[:8]})"
    clusters: dict[str, Cluster] = {}
    inputs: dict[int, tuple[str, dict]] = {}
    runs: dict[tuple[str, int], list[dict]] = {}
    memory: dict[str, tuple[int, int] | None] = {}
    failed = False
    try:
        for per_file in [int(x) for x in args.events_per_file.split(",")]:
            path = os.path.join(work, f"in-{per_file}")
            counts = generate(path, events=args.events, files=max(1, args.events // per_file), urls=args.urls)
            inputs[per_file] = (path, dict(counts))
        for name, repo in ((after, REPO), (before, worktree)):
            directory = os.path.join(work, "cluster-" + name.split()[0])
            clusters[name] = Cluster(directory, args.taskmanagers, args.slots, repo=repo).start()
        for cell in run_order([after, before], list(inputs), args.runs):  # round 0: the uncounted warm-ups
            name, per_file, r = cell.system, cell.item, cell.round
            path, expected = inputs[per_file]
            out = os.path.join(work, f"out-{name.split()[0]}-{per_file}-{r}")
            got = throughput_run(
                clusters[name], path, out, args.checkpoint_interval, args.events, expected, args.job_timeout
            )
            log(f"round {r} {name} {per_file}/file: {got['submit_to_end']:.2f}s counts ok {got['counts_ok']}")
            if cell.phase == MEASURED:
                runs.setdefault((name, per_file), []).append(got)
    except BaseException as exc:  # the runs so far are reported; the clusters always stop
        failed = True
        log(f"stopped: {type(exc).__name__}: {exc}")
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        for name, cluster in clusters.items():
            memory[name] = taskmanager_memory(cluster)
            cluster.stop()
        remove_worktree(REPO, worktree)
        finish_workdir(work, temp, log)
    text = section(args, command, facts, (before, after), inputs, runs, memory, failed)
    publish(text, args.out, log, append=not args.no_append)
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
