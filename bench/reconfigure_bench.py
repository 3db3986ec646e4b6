"""Reconfiguration: changing a running job's `counts` operator from parallelism 3 to 2, live
(`sluice reconfigure`) against stop-with-savepoint and restore (`sluice rescale`), on the same job
and data, alternating the two methods run by run on one local cluster.

    python bench/reconfigure_bench.py [--quick] [--rounds 10] [--warmup 1] [--events 200000] [--files 40]
        [--feed-events 250] [--feed-every-ms 100] [--urls 10000] [--max-foreign-cores 0.3]
        [--out bench/RESULTS.md] [--workdir DIR] [--keep]

The job is the reference job examples/page_views.py in watched-directory mode (`--monitor-interval
200 --checkpoint-interval 300`) at parallelism 3 on one cluster (`sluice cluster start
--taskmanagers 2 --slots 2`, reused by every round, stopped at the end whatever happens).

Each round: a fresh job on fresh input (--events events in --files files, generated once with
examples/generate_page_views.py and copied in) and a steady feed: a thread renames one more file of
--feed-events events into the watched directory every --feed-every-ms (written beside it, then
renamed, so it appears whole). Once the committed output has caught up with what was fed (every
url's committed count at least its count in the files fed at that moment, twice over), the harness
samples a steady window of PRE_S seconds, then changes the parallelism of `counts` with one method:

 (a) `sluice rescale JOB --parallelism 2`: stop with a savepoint, then `run --from-savepoint` of the
     same job graph at parallelism 2 (every operator: the command's default), a new job;
 (b) `sluice reconfigure JOB --operator counts --parallelism 2`: live; the counts chain (counts ->
     counts sink) stops at one checkpoint barrier and is redeployed at 2, the source tasks switch
     their outputs at the barrier and keep running.

Measured per run (all times on the harness's monotonic clock; log and JobManager times, wall clock
with ms resolution, converted):

- total: from starting the command until the job in its new configuration (the new job for (a))
  has every task RUNNING and its output commits again: the first committed part file of the new
  configuration (for (a) a part of the new job, for (b) one of a checkpoint after the barrier's),
  seen by listing the output directory every 20 ms;
- when the command returned and when the new configuration's last task went RUNNING (JobManager
  log), and the phases in between (from the JobManager's log and status);
- output stall: the longest gap between consecutive commits (new part files seen) from PRE_S
  before the command to POST_S after the total's end; the baseline is the longest gap in the
  steady PRE_S before the command;
- source stall: the longest gap between consecutive source batches of any source subtask in the
  same window (each TaskManager logs a line as a batch is done, ms resolution), and the longest
  interval without growth of the source tasks' summed `records_out` in `sluice status`, sampled
  every 0.1 s (a TaskManager reports it with its heartbeat, every 1 s: that is its resolution);
  whether the source tasks changed state at all (the JobManager logs every task state change).

Afterwards the feed stops, the committed counts (each url's largest) must equal the sum of every
file generated into the directory exactly, and no (url, count) line may be committed twice; a run
that breaks this fails (and the script exits 1). The job is cancelled and CANCELED before the next
round. Load rule (bench/procstat.py): a run during which processes other than the cluster and this
harness used more than --max-foreign-cores cores on average is left out of the medians; the
1-minute load average at each run's start and end is recorded too.

Order: --warmup uncounted rounds of (a), then --rounds pairs alternating a, b | b, a | a, b ...
Medians with percentile-bootstrap 95 % intervals (bench/stats.py). Quick (--quick): 50,000 events
in 10 files, no warm-up, one round of each method. Appends one section ("Reconfiguration") to
bench/RESULTS.md.

This file is the suite's declaration (command line, run order, main); the input, the feed and the
output reader are in reconfigure_workload.py, one round on the cluster in reconfigure_runs.py, a
run's figures from what the round recorded in reconfigure_analysis.py, the section in
reconfigure_report.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_common import _commit, begin_run, finish_workdir, publish, run_main
from markdown import cell
from page_views_runs import Cluster, log
from procstat import FOREIGN_CORES_LIMIT
from reconfigure_report import report, run_notes
from reconfigure_runs import Round
from reconfigure_workload import SHORT, Data
from run_matrix import Order, matrix, warm_ups

METHOD_ORDER = ("a", "b")
CHANGE = "counts 3 -> 2"  # the one item of the run matrix: every run makes the same change


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 50,000 events, no warm-up, one round")
    ap.add_argument("--rounds", type=int, default=None, help="measured runs per method (default 10; quick 1)")
    ap.add_argument("--warmup", type=int, default=None, help="uncounted rounds of (a) first (default 1; quick 0)")
    ap.add_argument("--events", type=int, default=None, help="initial events per round (default 200,000)")
    ap.add_argument("--files", type=int, default=None, help="initial files per round (default 40)")
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--feed-events", type=int, default=250, help="events per fed file")
    ap.add_argument("--feed-every-ms", type=int, default=100, help="one fed file every this many ms")
    ap.add_argument("--feed-templates", type=int, default=400, help="distinct feed files generated (reused in turn)")
    ap.add_argument("--timeout", type=float, default=240, help="seconds a step may take")
    ap.add_argument(
        "--max-foreign-cores",
        type=float,
        default=FOREIGN_CORES_LIMIT,
        help="load rule: leave out runs where other processes used more cores than this on average (0: off)",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None, help="working directory (default: a fresh temp dir)")
    ap.add_argument("--keep", "--keep-workdir", action="store_true", help="keep the working directory")
    a = ap.parse_args(argv)
    a.rounds = a.rounds if a.rounds is not None else (1 if a.quick else 10)
    a.warmup = a.warmup if a.warmup is not None else (0 if a.quick else 1)
    a.events = a.events or (50_000 if a.quick else 200_000)
    a.files = a.files or (10 if a.quick else 40)
    if a.rounds < 1 or a.warmup < 0 or a.events <= 0 or a.files <= 0 or a.feed_events <= 0 or a.feed_every_ms <= 0:
        ap.error("--rounds >= 1, --warmup >= 0, and positive --events, --files, --feed-events, --feed-every-ms")
    return a


def run_order(rounds: int, warmup: int) -> list[tuple[str, str]]:
    """(phase, method) of every run in order: `warmup` uncounted runs of (a), then `rounds` pairs
    alternating a, b | b, a | a, b ..."""
    cells = [c for _ in range(warmup) for c in warm_ups(["a"], [CHANGE])]
    cells += matrix(METHOD_ORDER, [CHANGE], rounds, systems_order=Order.ROTATE)
    return [(c.phase, c.system) for c in cells]


def run_one(cluster: Cluster, data: Data, args: argparse.Namespace, work: str, r: dict[str, Any]) -> None:
    """Run `r` (its number, phase and method set) in a round of its own; its figures or its error into `r`."""
    rdir = os.path.join(work, f"round-{r['n']:02d}")
    try:
        Round(cluster, data, args, rdir).run(r["method"], r)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 — reported; the next rounds go on
        r["ok"] = False
        r["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:400]
    unended = [s for s in r.get("end_states", []) if s not in ("CANCELED", "FINISHED")]
    if unended and r.get("ok"):
        r["ok"] = False
        r["error"] = f"a job did not end when cancelled: {unended}"
    log(
        f"  total {cell(r.get('total_s'))}s (command {cell(r.get('cli_s'))}s, RUNNING "
        f"{cell(r.get('running_s'))}s), output stall {cell(r.get('out_stall_s'))}s "
        f"(baseline {cell(r.get('out_base_s'))}), source stall {cell(r.get('src_gap_s'))}s "
        f"(baseline {cell(r.get('src_base_s'))}), records_out {cell(r.get('src_status_gap_s'))}s, "
        f"phases {r.get('phases')}; {r.get('check') or r.get('error')}" + (" (excluded)" if r.get("excluded") else "")
    )
    if r.get("ok"):
        shutil.rmtree(rdir, ignore_errors=True)


def invocation_notes(facts: dict, dirty_paths: list[str], seconds: float) -> list[str]:
    """What the invocation itself adds: the working tree measured, the repository moving under it, its time."""
    notes = []
    if dirty_paths:
        notes.append(
            "the measured code is the working tree at the start, which differed from the commit in: "
            + ", ".join(f"`{p}`" for p in dirty_paths)
        )
    moved = _commit()
    if moved != facts["commit"]:
        notes.append(
            f"the repository moved from {facts['commit']} to {moved} during the run (by others): the cluster ran "
            "the code of the start, each `sluice` command the code of its moment"
        )
    notes.append(f"the invocation took {seconds:.0f} s")
    return notes


def changed_paths() -> list[str]:
    """The tracked files the working tree changes against the commit."""
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=REPO
    ).stdout.split("\n")
    return sorted({line[3:] for line in dirty if line.strip()})


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "reconfigure-bench-", log)
    dirty_paths = changed_paths()
    t_begin = time.monotonic()
    data = Data(os.path.join(work, "data"), args.events, args.files, args.feed_templates, args.feed_events, args.urls)
    log(
        f"generated {args.events:,} events in {args.files} files and {args.feed_templates} feed files of "
        f"{args.feed_events} events ({time.monotonic() - t_begin:.1f}s)"
    )
    order = run_order(args.rounds, args.warmup)
    cluster = Cluster(os.path.join(work, "cluster"), taskmanagers=2, slots=2)
    runs: list[dict] = []
    notes: list[str] = []
    failed = interrupted = False
    try:
        cluster.start()
        for n, (phase, method) in enumerate(order, 1):
            r: dict[str, Any] = {"n": n, "phase": phase, "method": method, "ok": False}
            runs.append(r)
            log(f"run {n}/{len(order)} ({phase}): {SHORT[method]}")
            run_one(cluster, data, args, work, r)
            failed = failed or not r.get("ok")
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping the cluster")
        notes.append("interrupted: the section holds the runs done before")
    except Exception as exc:  # noqa: BLE001 — the cluster failed to start, say
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        notes.append(f"aborted: {type(exc).__name__}: {exc}".split("\n")[0])
    finally:
        left = cluster.stop()
        if left:
            notes.append(f"processes left behind by `cluster stop` and killed: {left}")
    notes += run_notes(runs) + invocation_notes(facts, dirty_paths, time.monotonic() - t_begin)
    plan = {
        "events": args.events,
        "files": args.files,
        "urls": args.urls,
        "feed_events": args.feed_events,
        "feed_every_ms": args.feed_every_ms,
        "feed_rate": args.feed_events * 1000 / args.feed_every_ms,
        "max_foreign_cores": args.max_foreign_cores,
    }
    if runs:
        publish(report(facts, command, runs, plan, notes), args.out, log)
    finish_workdir(work, temp and not args.keep and not failed, log, "its logs and failed rounds")
    if interrupted:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
