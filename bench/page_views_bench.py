"""page_views benchmark: checkpoint overhead, checkpoint durations, and
recovery time after kill -9 of a TaskManager, in one invocation.

    python bench/page_views_bench.py [--events 1000000] [--files 8] [--runs 3] [--warmup-runs 2]
                                     [--recovery-runs 3] [--recovery-events 2000000] [--recovery-files 400]
                                     [--spare cold|warm|both] [--skip-recovery] [--skip-throughput]
                                     [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Input is generated once per part with examples/generate_page_views.py's
generate() (Zipf urls, 10,000 urls).

1. Throughput: on one local cluster (`sluice cluster start --taskmanagers 2
   --slots 2`), examples/page_views.py at parallelism 2 runs with checkpoints
   every 1000 ms ("on") and with `--checkpoint-interval 0` ("off"), `--runs`
   times each, interleaved on, off | off, on | on, off ... (so that a drift,
   JIT warm-up or other load, favours neither mode) after `--warmup-runs`
   uncounted runs. Per run: events / (JobManager's submitted -> ended time),
   the client's wall time (CLI launch -> FINISHED seen) and RUNNING ->
   FINISHED (RUNNING as first seen polling every 0.1 s, the end from the
   JobManager). The committed output is checked against generate()'s counts
   (bench/output_check.py: no line twice, counts increasing, final counts
   exact); the load average at each run's start and end is recorded.
   Overhead = median_off / median_on - 1 (throughput; goal <= 5 %).
2. Checkpoint durations: every COMPLETED checkpoint of the "on" runs
   (duration_ms, size_bytes as in `sluice status JOB --json`): p50, p99, median size.
3. Recovery: per run a fresh cluster of 3 TaskManagers x 2 slots (one
   spare); page_views with checkpoints every 500 ms; once a checkpoint
   completed (and a file was committed), the TaskManager hosting subtask 0 of
   the first task is killed with SIGKILL (pid from cluster.json). Measured
   from the kill: (a) the job RUNNING again with restarts >= 1 and all tasks
   RUNNING, (b) the first committed output file written after the kill
   (visible name not there before, mtime after the kill), plus the first
   completed checkpoint after the restored one and the first new visible
   file of any age. Then `sluice cancel` and the cluster is stopped; the
   committed output is checked for lines twice and counts not increasing
   (a canceled job has no final counts to compare). With
   --spare warm, a short job at parallelism 3 runs on every TaskManager
   first, so the spare's Spark is warm; cold measures a spare that never ran
   a job; both (default) interleaves the two.

Job status is polled in-process through sluice.client (the same fields as
`sluice status JOB --json`, built by the CLI's own _job_dict) so that polling
every 0.1 s does not start a Python process each time; jobs are submitted,
canceled and clusters started/stopped through the `sluice` CLI.

Results are printed and appended to --out as a dated Markdown section.
Every cluster started is stopped (and every process of it gone) on exit,
error, Ctrl-C or SIGTERM.

The pieces: page_views_runs.py (the CLI, `Cluster`, one throughput run),
page_views_recovery.py (one recovery run), page_views_plan.py (the run
order), page_views_report.py (the section); the other suites import these
pieces from them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from dataclasses import dataclass, field

# first: puts the repo and examples/ on sys.path
from page_views_runs import (
    HERE,
    POLL,
    REPO,
    BenchError,
    Cluster,
    log,
    throughput_run,
)

# isort: split
from bench_common import aborted, begin_run, finish_workdir, fmt, publish, run_main
from generate_page_views import generate
from output_check import check_sluice_output
from page_views_plan import recovery_order, throughput_order, warmup_intervals
from page_views_recovery import recovery_run, warm_all_taskmanagers
from page_views_report import report

from sluice.client import SluiceError


@dataclass
class Invocation:
    """What one invocation gathers: its runs, its notes, whether it failed, the clusters to stop."""

    args: argparse.Namespace
    work: str
    clusters: list[Cluster] = field(default_factory=list)
    tput: list[dict] = field(default_factory=list)
    warmup: list[dict] = field(default_factory=list)
    recovery: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed: bool = False


# -- 1. throughput -------------------------------------------------------------------------------
def throughput_part(run: Invocation) -> None:
    args, work = run.args, run.work
    data = os.path.join(work, "events")
    t0 = time.monotonic()
    expected = generate(data, events=args.events, files=args.files, urls=10_000, seed=7)
    log(f"generated {args.events} events in {args.files} files ({len(expected)} urls) in {time.monotonic() - t0:.1f}s")
    c = Cluster(os.path.join(work, "cluster-throughput"), taskmanagers=2, slots=2)
    run.clusters.append(c)
    c.start()
    for w, interval in enumerate(warmup_intervals(args.warmup_runs)):
        out = os.path.join(work, f"out-warmup-{w}")
        r = throughput_run(c, data, out, interval, args.events, expected, args.job_timeout)
        run.warmup.append(r)
        log(
            f"warm-up {w + 1}/{args.warmup_runs} (checkpoints {r['mode']}): {r['submit_to_end']:.2f}s "
            f"submit→FINISHED, counts {'correct' if r['counts_ok'] else 'WRONG'}"
        )
    for cell in throughput_order(args.runs):  # on, off | off, on | on, off ...
        out = os.path.join(work, f"out-{cell.round - 1}-{cell.item}")
        r = throughput_run(c, data, out, cell.item, args.events, expected, args.job_timeout)
        run.tput.append(r)
        log(
            f"run {cell.round}/{args.runs} checkpoints {r['mode']:>3}: {r['throughput']:,.0f} events/s, "
            f"{r['submit_to_end']:.2f}s submit→FINISHED, RUNNING→FINISHED {fmt(r['running_to_end'])}s, "
            f"{len(r['checkpoints'])} checkpoints, counts {'correct' if r['counts_ok'] else 'WRONG'}"
        )
        if not r["counts_ok"]:
            run.failed = True
            run.notes.append(f"job {r['job_id']} ({r['mode']}): OUTPUT CHECK FAILED: {r['output_check'].describe()}")
        if r["restarts"]:
            run.notes.append(f"job {r['job_id']} ({r['mode']}) restarted {r['restarts']} times")
    leftovers = c.stop()
    if leftovers:
        run.notes.append(f"`cluster stop` left processes behind (killed): {leftovers}")
    shutil.rmtree(data, ignore_errors=True)


# -- 3. recovery ---------------------------------------------------------------------------------
def recovery_part(run: Invocation) -> None:
    args, work = run.args, run.work
    data = os.path.join(work, "events-recovery")
    t0 = time.monotonic()
    generate(data, events=args.recovery_events, files=args.recovery_files, urls=10_000, seed=11)
    log(
        f"generated {args.recovery_events} events in {args.recovery_files} files for recovery "
        f"in {time.monotonic() - t0:.1f}s"
    )
    warm_data = os.path.join(work, "events-warmup")
    if args.spare in ("warm", "both"):
        generate(warm_data, events=30_000, files=6, urls=10_000, seed=13)
    spares = ["cold", "warm"] if args.spare == "both" else [args.spare]
    for n, cell in enumerate(recovery_order(args.recovery_runs, spares), 1):
        label = f"recovery {cell.round}/{args.recovery_runs} ({cell.item} spare)"
        out = os.path.join(work, f"out-recovery-{n}")
        rec = one_recovery(run, label, n, cell.item, data, warm_data, out)
        if rec:
            run.recovery.append(rec)
            recovery_checked(run, label, rec, out)
        shutil.rmtree(out, ignore_errors=True)


def one_recovery(run: Invocation, label: str, n: int, spare: str, data: str, warm_data: str, out: str) -> dict | None:
    """One recovery run on a fresh cluster of 3 TaskManagers x 2 slots (None: it failed, noted)."""
    c = Cluster(os.path.join(run.work, f"cluster-recovery-{n}"), taskmanagers=3, slots=2)
    run.clusters.append(c)
    rec: dict | None = None
    try:
        c.start()
        if spare == "warm":
            used = warm_all_taskmanagers(c, warm_data, out + "-warmup", run.args.job_timeout)
            if used != "3/3":
                run.notes.append(f"{label}: the warm-up job ran on {used} TaskManagers only")
        rec = recovery_run(c, data, out, run.args.job_timeout)
        rec["spare"] = spare
    except (BenchError, SluiceError) as exc:
        run.notes.append(f"{label} failed: {exc}")
        log(f"{label} failed: {exc}")
        run.failed = True
    finally:
        leftovers = c.stop()
        if leftovers:
            run.notes.append(f"{label}: `cluster stop` left processes behind (killed): {leftovers}")
    return rec


def recovery_checked(run: Invocation, label: str, rec: dict, out: str) -> None:
    """The output check of a recovery run (canceled once recovery is measured: no final counts to
    expect, rules (a) and (b) only), its log line and notes."""
    rec["output_check"] = check_sluice_output(out, None)
    if not rec["output_check"].ok:
        run.failed = True
        run.notes.append(f"{label}: OUTPUT CHECK FAILED: {rec['output_check'].describe()}")
    log(
        f"{label}: first checkpoint {fmt(rec['first_checkpoint'], '.1f')}s after submission; "
        f"after the kill: detected {fmt(rec['detected'])}s, RUNNING again {fmt(rec['running'])}s, "
        f"checkpoint {fmt(rec['checkpoint_after'])}s, first file written after the kill "
        f"{fmt(rec['first_written_file'])}s ({rec['first_written_file_name']}), any new file "
        f"{fmt(rec['first_file'])}s ({rec['first_file_name']}); states {rec['states']}; output "
        f"{rec['output_check'].describe()}"
    )
    if rec["end_state"]:
        run.notes.append(
            f"{label}: job {rec['job_id']} ended {rec['end_state']} before recovery was "
            "measured (make --recovery-events larger)"
        )


# -- main ----------------------------------------------------------------------------------------
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="events for the throughput runs")
    ap.add_argument("--files", type=int, default=8, help="input files (splits) for the throughput runs")
    ap.add_argument("--runs", type=int, default=3, help="runs per mode (checkpoints on / off), interleaved")
    ap.add_argument("--warmup-runs", type=int, default=2, help="uncounted runs first (checkpoints on, off, ...)")
    ap.add_argument("--recovery-runs", type=int, default=3)
    ap.add_argument("--recovery-events", type=int, default=2_000_000, help="enough for the job to run >= 15 s")
    ap.add_argument("--recovery-files", type=int, default=400)
    ap.add_argument(
        "--spare",
        choices=("cold", "warm", "both"),
        default="both",
        help="recovery onto a spare TaskManager whose Spark never ran a job (cold), after a short job "
        "on every TaskManager (warm), or both, interleaved (default)",
    )
    ap.add_argument("--skip-recovery", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None, help="data, clusters and outputs (default: a temp dir, removed)")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the working directory (logs) at the end")
    ap.add_argument("--job-timeout", type=float, default=900, help="seconds a job may take")
    args = ap.parse_args()
    if args.runs < 1 and not args.skip_throughput:
        ap.error("--runs must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-bench-", log)
    run = Invocation(args, work)
    interrupted = False
    try:
        if not args.skip_throughput:
            throughput_part(run)
        if not args.skip_recovery and args.recovery_runs > 0:
            recovery_part(run)
    except BaseException as exc:
        interrupted = aborted(run, exc, "the clusters", log)
        raise
    finally:
        for c in run.clusters:
            try:
                c.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping {c.dir}: {exc}")
        if run.tput or run.recovery:
            section = report(args, facts, command, run.tput, run.warmup, run.recovery, run.notes, POLL)
            publish(section, args.out, log)
        finish_workdir(
            work, temp and (interrupted or not run.failed) and not args.keep_workdir, log, "cluster logs under */log/"
        )
    return 1 if run.failed else 0


if __name__ == "__main__":
    run_main(main)
