"""Sluice and Spark Structured Streaming side by side: one invocation, the
same data, the same machine, the same Spark (pyspark, local[2] per process).

    python bench/compare.py [--size quick|full] [--runs N] [--recovery-runs N] [--failover-runs N]
        [--paced-files N] [--max-load L] [--out bench/RESULTS.md] [--plot bench/compare.png] [--workdir DIR]
        [--keep-workdir]

quick (`make bench-quick`, ~2.5 minutes): 200,000 events in 16 files, 3 runs;
full (`make bench`, ~10 minutes): 2,000,000 events in 40 files, 5 runs. Events come from
examples/generate_page_views.py (10,000 urls, Zipf s = 1, fixed seed); the
expected count per url is computed there, apart from both systems, and every
run's committed output is checked against it, line by line
(bench/output_check.py: no (url, count) line twice, each url's counts
increasing, final counts exact); a run that breaks it is named at the top of
the section and the invocation exits 1.

Sluice: `examples/page_views.py` (key_by(url).count() into the
exactly-once FileSink) on a local cluster of 2 TaskManagers x 2 slots,
parallelism 2, checkpoints every 1 s (and off, for the overhead), runs
interleaved on/off/off/on... after warm-up jobs (4 quick, 6 full; the JVMs'
JIT keeps speeding jobs up over the first few). The peer:
`bench/structured_streaming_bench.py`'s query (file source with
maxFilesPerTrigger, groupBy(url).count(), update mode, checkpointLocation,
an idempotent file sink per micro-batch) in one warm child process (one
SparkSession, like a TaskManager's): as many warm-up queries, then the runs.

Figures
- throughput: events / (job submitted -> FINISHED) for Sluice, events /
  (query started -> all input processed) for the peer; medians with their
  95 % bootstrap interval (bench/stats.py). Every measured run records the
  1-minute load average at its start and end; with --max-load, runs above
  it are marked and left out of the medians (off by default: bench/README.md
  says why).
- startup, apart: Sluice cluster start (ZooKeeper, JobManager, TaskManagers
  with Spark warmed up) and job submit -> RUNNING; the peer's Python process +
  SparkSession and query start.
- end-to-end latency per event: from the start of the read of the batch that
  holds it to the commit of its count, p50/p99 weighted by events. Sluice: a
  source batch (TaskManager log line `source batch: offset a -> b in s`) is
  covered by the next checkpoint its subtask snapshots; its counts are
  visible when the sinks commit that checkpoint (the latest `committed ...
  (checkpoint n)` line: an upper bound). The peer: a micro-batch reads after
  its trigger starts and commits at its end (triggerExecution).
  Both run on a backlog (all files present), so this is latency at full load.
  Sluice's latency follows its checkpoint interval (the sink commits on
  checkpoint completion), so a few runs with checkpoints every 250 ms show
  what a shorter interval buys and costs.
- latency at a fixed rate (full; --paced-files N elsewhere): files of
  25,000 events arrive in a watched directory 4 per second (100,000 events/s,
  below both systems' capacity) and each system reads them as they come
  (Sluice: page_views --monitor-interval; the peer: its streaming file
  source, a fresh child after one warm-up query over the throughput input);
  per file, arrival → the first committed output holding its marker event
  (bench/paced_latency.py), p50/p99 over the files after the first 20 %.
  Sluice with checkpoints every 1 s and every 250 ms.
- checkpoint overhead (Sluice): median throughput off / on - 1, in full on
  jobs of 6,000,000 events (several checkpoints each, interleaved on/off
  runs; the ~1.5 s jobs of 2,000,000 events see one checkpoint, and their
  off/on ratio, also reported, is mostly job-to-job noise). The peer
  cannot run a stateful query without its checkpoint (offset/commit logs and
  state store per micro-batch), so it has no "off".
- recovery: Sluice runs the job over a bigger input with checkpoints every
  1 s; after the first committed output, `kill -9` of the TaskManager of
  source subtask 0 (its Spark JVM dies with it); the peer's driver process
  group (Python + JVM) gets `kill -9` after its first committed micro-batch and
  is started again at once on its checkpointLocation. Time from the kill to
  the first output file written after it; the jobs run to the end and their
  output is checked.
- JobManager failover (Sluice only: the peer's driver is its single point of
  failure): bench/failover_bench.py's measurement, session timeout 6 s, its
  output checked too.

Output: a dated section in --out with ratios Sluice / peer, and a PNG plot
(--plot) of events read per second over time: the throughput runs, and the
recovery runs with the kill marked. Every process started is stopped on exit,
error, Ctrl-C or SIGTERM.

This file is the command line and main. What runs and in which order: bench/compare_plan.py; the
runs: bench/compare_runs.py (the TaskManager logs they read: bench/compare_joblog.py); the figures:
bench/compare_figures.py; the section: bench/compare_report.py; the plot: bench/compare_plot.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import paced_latency
import page_views_runs
import structured_streaming_child
from bench_common import append_results, begin_run, finish_workdir, run_main
from compare_figures import summarize
from compare_plan import PACED_EVENTS_PER_FILE, PACED_RATE, SIZES
from compare_plot import plot
from compare_report import report
from compare_runs import failover_runs, peer_phase, sluice_phase
from generate_page_views import generate
from stats import LOAD_FACTOR, default_load_threshold

REPO = os.path.dirname(HERE)
log = page_views_runs.log


def parse_args() -> tuple[argparse.Namespace, SimpleNamespace]:
    """The command line, and the configuration of the run: the size's settings, overridden by flags."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="quick")
    ap.add_argument("--runs", type=int, help="measured runs per system (and per checkpoint mode)")
    ap.add_argument("--recovery-runs", type=int)
    ap.add_argument("--failover-runs", type=int, help="0 skips the JobManager failover measurement")
    ap.add_argument(
        "--paced-files",
        type=int,
        help=f"files for the fixed-rate latency runs ({PACED_RATE:g} files/s of "
        f"{PACED_EVENTS_PER_FILE:,} events; full 60, quick 0 = skipped)",
    )
    ap.add_argument("--session-timeout", type=float, default=6.0, help="ZooKeeper session timeout for failover")
    ap.add_argument(
        "--max-load",
        type=float,
        default=0.0,
        help="runs whose 1-minute load average at start or end exceeds this are left out of the medians "
        f"(default 0: every run counts, the load is only recorded; cores x {LOAD_FACTOR:g} = "
        f"{default_load_threshold():g} here); see bench/README.md",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--plot", default=None, help="PNG to write (default bench/compare-<size>.png)")
    ap.add_argument("--workdir", default=None, help="data, clusters, logs (default: a temp dir, removed)")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--timeout", type=float, default=600, help="seconds any one job or query may take")
    args = ap.parse_args()
    cfg = SimpleNamespace(
        size=args.size, timeout=args.timeout, session_timeout=args.session_timeout, **SIZES[args.size]
    )
    for name in ("runs", "recovery_runs", "failover_runs", "paced_files"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    if cfg.runs < 1:
        ap.error("--runs must be at least 1")
    if cfg.paced_files and cfg.paced_files < 5:
        ap.error("--paced-files must be 0 (skip) or at least 5")
    return args, cfg


def make_inputs(cfg: Any, work: str) -> dict[str, tuple]:
    """The inputs by use: throughput, recovery, warm-up, and per the size overhead and paced
    ((directory, expected counts); paced: (directory, file names, expected counts))."""
    t_start = time.monotonic()
    data = os.path.join(work, "events")
    expected = generate(data, events=cfg.events, files=cfg.files, urls=10_000, seed=7)
    rec_data = os.path.join(work, "events-recovery")
    rec_expected = generate(rec_data, events=cfg.recovery_events, files=cfg.recovery_files, urls=10_000, seed=11)
    warm_data = os.path.join(work, "events-warmup")
    generate(warm_data, events=30_000, files=6, urls=10_000, seed=13)
    log(f"generated the inputs in {time.monotonic() - t_start:.1f}s")
    inputs: dict[str, tuple] = {
        "throughput": (data, expected),
        "recovery": (rec_data, rec_expected),
        "warm-up": (warm_data, None),
    }
    if cfg.overhead_events:
        o_data = os.path.join(work, "events-overhead")
        inputs["overhead"] = (
            o_data,
            generate(o_data, events=cfg.overhead_events, files=cfg.overhead_files, urls=10_000, seed=17),
        )
        log(f"generated {cfg.overhead_events:,} events for the checkpoint overhead")
    if cfg.paced_files:
        p_data = os.path.join(work, "events-paced")
        names, p_expected = paced_latency.prepare(p_data, cfg.paced_files, PACED_EVENTS_PER_FILE, seed=19)
        inputs["paced"] = (p_data, names, p_expected)
        log(f"generated {cfg.paced_files} files of {PACED_EVENTS_PER_FILE:,} events for the fixed-rate runs")
    return inputs


def main() -> int:
    args, cfg = parse_args()
    plot_path = os.path.abspath(args.plot or os.path.join(HERE, f"compare-{args.size}.png"))
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-compare-", log)
    clusters: list = []
    notes: list[str] = []
    failed = False
    t_start = time.monotonic()
    try:
        inputs = make_inputs(cfg, work)
        sl = sluice_phase(cfg, work, inputs, clusters, notes)
        os.makedirs(os.path.join(work, "peer"), exist_ok=True)
        peer = peer_phase(cfg, os.path.join(work, "peer"), inputs, notes)
        failover = failover_runs(cfg, work, notes)
        f = summarize(sl, peer, failover, args.max_load or None)
        plot(plot_path, sl, peer, f)
        log(f"wrote {plot_path}")
        notes.append(f"whole invocation {time.monotonic() - t_start:.0f} s")
        plot_link = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(args.out)))
        section = report(cfg, facts, command, sl, peer, failover, f, plot_link, notes)
        print("\n" + section, flush=True)
        append_results(args.out, section)
        log(f"appended to {args.out}")
        for failure in f["output_failures"]:
            log(f"OUTPUT CHECK FAILED: {failure}")
        failed = bool(f["output_failures"])
    except BaseException as exc:
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        structured_streaming_child.Child.kill_all()
        for c in clusters:
            try:
                c.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping {c.dir}: {exc}")
        finish_workdir(work, temp and not failed and not args.keep_workdir, log)
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
