"""How long a local cluster takes to start, and its first job on it: `sluice cluster start`
(1 JobManager, 2 TaskManagers x 2 slots) until the leader sees every slot, each TaskManager's
process start until it registered with its slots, and the first small job's `sluice run`.

    python bench/startup_bench.py [--runs 5] [--before COMMIT] [--conditions NAME,...] [--events 20000]
                                  [--out bench/RESULTS.md]

Conditions, alternating run by run (the order rotates each round):

- **archive**: this checkout as it is: the Spark JVM maps the class-data sharing archive
  `make install` built (taskmanager/spark_cds.py), the warm-up runs while the slots are offered;
- **archive off**: the same with `-D spark.cds-archive=off`;
- **no bytecode**: the same with every Python process (CLI, JobManager, TaskManagers) compiling
  what it imports from source, as in a venv without .pyc files under PYTHONDONTWRITEBYTECODE
  (PYTHONPYCACHEPREFIX at an empty directory: no .pyc is found, none is written);
- **before** (with --before COMMIT): that commit, checked out into a temporary git worktree and
  run from it (PYTHONPATH), the same cluster and job.

Per run: the wall time of `sluice cluster start` (it returns once the leader sees every
TaskManager with all its slots) and the CPU seconds its processes used until then (the CLI, the
JobManager, the TaskManagers with their Spark JVMs, ZooKeeper); per TaskManager, from its
process's start (psutil) to its log's "registered with leader" line; then `sluice run
examples/page_views.py` on --events generated events (it returns when the job ended), whose output
is checked against the generator's counts; then the cluster is stopped. Reported: medians with
95 % bootstrap intervals (bench/stats.py), by bench/startup_report.py.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import sys
import time
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples"))

import psutil
from bench_common import add_worktree, begin_run, finish_workdir, log_epoch, publish, remove_worktree, run_main
from generate_page_views import generate
from procstat import tree_cpu
from run_matrix import Order, matrix
from startup_report import report

from sluice.cluster_file import ClusterFile
from sluice.testing import LocalCluster

REGISTERED = "registered with leader"
MAPPED = "maps the class-data sharing archive"


def log(message: str) -> None:
    print(f"[startup_bench] {message}", file=sys.stderr, flush=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _registered_after_start(cluster_dir: str) -> tuple[list[float], bool]:
    """Per TaskManager: seconds from its process's start to its registration (log timestamp);
    and whether every TaskManager's log says its JVM mapped the archive."""
    out, mapped = [], True
    info = ClusterFile.read(cluster_dir)
    for entry in info.of_role("taskmanager"):
        created = psutil.Process(entry.pid).create_time()
        with open(entry.log or "", errors="replace") as f:
            text = f.read()
        line = next(line for line in text.splitlines() if REGISTERED in line)
        stamp = log_epoch(line[:23])
        out.append(stamp - created)
        mapped = mapped and MAPPED in text
    return out, mapped


def _cluster_cpu(cluster_dir: str) -> float:
    """CPU seconds used so far by the cluster's processes and their children (the JVMs)."""
    return sum(tree_cpu(entry.pid) for entry in ClusterFile.read(cluster_dir).processes)


def _final_counts(output_dir: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "*"))):
        if os.path.basename(path).startswith((".", "_")) or os.path.isdir(path):
            continue
        with open(path) as f:
            for line in f:
                url, _, count = line.rstrip("\n").rpartition(",")
                counts[url] = int(count)
    return counts


def one_run(env: dict[str, str], options: list[str], work: str, run: int, expected: dict, input_dir: str) -> dict:
    """One cluster started and stopped from the condition's code: `python -m` puts the working
    directory first on sys.path, so the CLI runs in the condition's checkout (PYTHONPATH), and so do
    the processes it starts."""
    cluster = LocalCluster(
        os.path.join(work, f"cluster-{run}"), 2, 2, extra_args=tuple(options), checkout=env["PYTHONPATH"], env=env
    )
    result: dict = {}
    try:
        cli_cpu, t0 = _children_cpu(), time.monotonic()
        cluster.start()
        result["cluster_start_s"] = time.monotonic() - t0
        result["cluster_start_cpu_s"] = _cluster_cpu(cluster.dir) + _children_cpu() - cli_cpu
        result["taskmanager_ready_s"], result["archive_mapped"] = _registered_after_start(cluster.dir)
        output = os.path.join(work, f"out-{run}")
        page_views = os.path.join(REPO, "examples", "page_views.py")
        t0 = time.monotonic()
        cluster.sluice(
            "run", "--cluster-dir", cluster.dir, "-p", "2", page_views, "--", "--input", input_dir, "--output", output
        )
        result["first_job_s"] = time.monotonic() - t0
        if _final_counts(output) != expected:
            raise RuntimeError(f"run {run}: the first job's counts differ from the input's")
    finally:
        cluster.stop()
    return result


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs per condition")
    ap.add_argument("--before", default=None, help="a commit to compare against (a temporary git worktree)")
    ap.add_argument(
        "--conditions", default=None, help="comma-separated: archive, archive off, no bytecode (default: all)"
    )
    ap.add_argument("--events", type=int, default=20_000, help="events of the first job")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    return ap.parse_args()


def conditions_of(selected: str | None, work: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    """The conditions (name -> the environment and `cluster start` options of its runs), all or the
    comma-separated `selected` ones in that order."""
    base_env = {**os.environ, "PYTHONPATH": REPO}
    conditions: dict[str, tuple[dict[str, str], list[str]]] = {
        "archive": (base_env, []),
        "archive off": (base_env, ["-D", "spark.cds-archive=off"]),
        "no bytecode": (
            {**base_env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": os.path.join(work, "no-pyc")},
            [],
        ),
    }
    if not selected:
        return conditions
    wanted = [c.strip() for c in selected.split(",")]
    unknown = [c for c in wanted if c not in conditions]
    if unknown:
        raise SystemExit(f"--conditions: unknown {unknown}; choose from {list(conditions)}")
    return {c: conditions[c] for c in wanted}


def run_order(names: Sequence[str], runs: int) -> list[tuple[int, str]]:
    """(round, condition) of each run in order: every condition once a round, the first turned by one
    each round (A B C, B C A, C A B, ...)."""
    return [(c.round, c.system) for c in matrix(names, [None], runs, systems_order=Order.ROTATE)]


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-startup-", log)
    conditions = conditions_of(args.conditions, work)
    worktree = None
    if args.before:
        worktree = add_worktree(REPO, args.before, os.path.join(work, "before"))
        conditions[f"before ({args.before[:8]})"] = ({**os.environ, "PYTHONPATH": worktree}, [])
    input_dir = os.path.join(work, "in")
    expected = dict(generate(input_dir, events=args.events, files=4, urls=1000, seed=5))
    results: dict[str, list[dict]] = {name: [] for name in conditions}
    try:
        for n, (round_, name) in enumerate(run_order(list(conditions), args.runs)):
            env, options = conditions[name]
            got = one_run(env, options, work, n, expected, input_dir)
            results[name].append(got)
            log(f"round {round_} {name}: {json.dumps(got, default=lambda x: round(x, 2))}")
    finally:
        if worktree:
            remove_worktree(REPO, worktree)
        finish_workdir(work, temp, log)
    publish(report(results, args.runs, args.events, command, facts), args.out, log)
    return 0


if __name__ == "__main__":
    run_main(main)
