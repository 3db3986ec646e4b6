"""Event-time windows: Sluice and Spark Structured Streaming (the peer) count page views per url and
window over the same out-of-order events, checked exactly against counts computed without either
system, and timed from the outside in the same way (first input read → last result committed).

    python bench/windowed_bench.py [--quick] [--events 1000000] [--urls 10000] [--disorder-ms 2000]
        [--runs 5] [--workloads tumbling,sliding] [--peer-shuffle 2,200] [--skip-sluice] [--skip-peer]
        [--max-foreign-cores 0.3] [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Input: examples/generate_page_views.py's generate() (Zipf urls, seed 7), 12,500 events per file,
timestamps out of order by up to --disorder-ms (event i: 1.7e12 + i - uniform[0, disorder] ms, so
1 M events span 1,000 s of event time). The expected count of every (url, window) is computed from
the files in numpy (`expected_windows`, not Sluice code). Workloads (windows aligned to epoch 0,
[start, end), end excluded): *tumbling* 10 s; *sliding* 60 s every 10 s. The out-of-orderness
bound of both systems is the disorder, so no event is late on either.

- **Sluice**: one local cluster, 1 TaskManager x 2 slots (its best configuration, bench/README.md),
  `examples/windowed_page_views.py --window-ms W [--slide-ms S] --out-of-orderness-ms D
  --checkpoint-interval 1000` at parallelism 2; committed lines `url,window_start,window_end,count`.
  At the end of bounded input Sluice fires every window: the check is that every expected
  (url, window) is committed exactly once with its exact count (no line twice, none missing, none
  unexpected). State size: the largest completed checkpoint (`size_bytes`, as `sluice status
  --json` shows it) of the run.
- **Peer**: one SparkSession (local[2]) in a child process; per run the query
  `readStream.schema("url string, user long, ts long").json(DIR).withColumn("et", timestamp_millis(ts))
  .withWatermark("et", "D milliseconds").groupBy(window("et", W, S), "url").count()`, append mode,
  the CSV file sink with a checkpointLocation, Trigger.AvailableNow (maxFilesPerTrigger unset: one
  batch, then the no-data batch that evicts the windows the watermark passed). Append mode emits
  only windows whose end passed the watermark, so with bounded input the last windows stay in
  state: the check is that every window emitted has its exact count and none twice, and that every
  window whose end is at or below the final watermark was emitted; the rest are reported as
  unemitted. Shuffle partitions: each of --peer-shuffle is tried once per workload after the
  warm-up, and the fastest is kept (quick: 2 only). State size: the largest `memoryUsedBytes` of the
  query's state operator over its batches (StreamingQueryProgress), and the checkpoint's `state/`
  on disk at the end.
- **Window** (bench/window.py's WindowWatch, inotify): from the first read(2) of an input file to the
  commit of the last output holding a result line. Sluice commits a part by renaming it
  (IN_MOVED_TO of `part-...csv`); the peer's file sink writes its data files in place and commits a
  batch by writing `_spark_metadata/<batch id>` (an atomic rename), so the peer's commit time is that
  log file's, watched in `_spark_metadata/`. events/s = events / window. Startup (launch → first
  read) is reported apart; CPU seconds per million events and the load rule on other processes' CPU
  are bench/procstat.py's, as in bench/throughput_suite.py.
- **Order**: one uncounted warm-up run per system and workload, then --runs rounds; in each round
  each workload runs Sluice, then the peer (S P S P ...). Medians with bootstrap 95 % intervals
  (bench/stats.py).
- **Latency** from the watermark passing a window's end to its row's commit is not measured (neither
  system exposes when its watermark passed an end without instrumenting it).

Quick (--quick): 200,000 events, 2 runs per system and workload, the peer at 2 shuffle partitions.
Appends one section to bench/RESULTS.md ("Event-time windows"). This file declares the suite (the
peer's query, the two sides, the runs, the command line); the workloads and the output check are in
bench/windowed_bench_workload.py, the section in bench/windowed_bench_report.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
WINDOWED_JOB = os.path.join(EXAMPLES, "windowed_page_views.py")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import paired_runs
import spark_peer
from bench_common import begin_run, run_main
from paired_runs import PEER, SLUICE, log
from windowed_bench_report import report
from windowed_bench_workload import EVENTS_PER_FILE, SEED, WORKLOADS, WindowCheck, Workload, check_windows, read_lines

SCHEMA = "url string, user long, ts long"


# ================================================================================================
# peer child: one SparkSession, one query per go file
# ================================================================================================
def windowed_query(spark: Any, q: dict) -> Any:
    """The peer's count per url and window for query spec `q`."""
    from pyspark.sql import functions as F

    return (
        spark.readStream.schema(SCHEMA)
        .json(q["input"])
        .withColumn("et", F.timestamp_millis("ts"))
        .withWatermark("et", f"{int(q['delay_ms'])} milliseconds")
        .groupBy(F.window("et", f"{int(q['size_ms'])} milliseconds", f"{int(q['slide_ms'])} milliseconds"), "url")
        .count()
        .select(
            "url",
            F.unix_millis(F.col("window.start")).alias("window_start"),
            F.unix_millis(F.col("window.end")).alias("window_end"),
            "count",
        )
    )


def child_main(spec_path: str) -> int:
    return spark_peer.serve_queries(spec_path, "sss-windowed-bench", windowed_query, survive_errors=False)


# ================================================================================================
# the two systems
# ================================================================================================
def peer_state(progress: Sequence[dict]) -> dict:
    """From the peer's batches: the largest memoryUsedBytes of a state operator, the rows in the last
    state operator reported, the rows dropped by the watermark."""
    state = [s for p in progress for s in p["state"]]
    return {
        "state_peak": max((s.get("memoryUsedBytes") or 0 for s in state), default=None),
        "state_rows_end": state[-1].get("numRowsTotal") if state else None,
        "late_dropped": sum(s.get("numRowsDroppedByWatermark") or 0 for s in state),
    }


class PeerSide(spark_peer.PeerSide):
    script = os.path.abspath(__file__)

    def launch(self, wl: Workload, data: str, out: str, delay_ms: int, shuffle: int) -> Callable[[], dict]:
        q = {
            "input": data,
            "out": out,
            "size_ms": wl.size_ms,
            "slide_ms": wl.slide_ms,
            "delay_ms": delay_ms,
            "shuffle_partitions": shuffle,
        }
        return self.submit(q, peer_state)


class SluiceSide(paired_runs.SluiceSide):
    """windowed_page_views.py on the local cluster."""

    command_in_errors = False

    def launch(self, wl: Workload, data: str, out: str, delay_ms: int, interval_ms: int) -> Callable[[], dict]:
        args = ["--input", data, "--output", out, "--window-ms", str(wl.size_ms)]
        if wl.slide_ms != wl.size_ms:
            args += ["--slide-ms", str(wl.slide_ms)]
        args += ["--out-of-orderness-ms", str(delay_ms), "--checkpoint-interval", str(interval_ms)]
        return self.submit(WINDOWED_JOB, args)


# ================================================================================================
# runs
# ================================================================================================
class Bench(paired_runs.PairedBench):
    item_key = "workload"

    def __init__(self, args, work: str, data: str, events: int, expected: dict[str, Any]):
        super().__init__(args, work)
        self.data, self.n_events, self.expected = data, events, expected

    def title(self, item: Workload) -> str:
        return item.label

    def events(self, item: Workload) -> int:
        return self.n_events

    def inputs(self, item: Workload) -> list[str]:
        return [self.data]

    def launch(self, side: Any, item: Workload, out: str, knob: int, **extra: Any) -> Callable[[], dict]:
        return side.launch(item, self.data, out, self.args.disorder_ms, knob)

    def judge(self, system: str, item: Workload, files: list[str], r: dict) -> tuple[Any, dict[str, int]]:
        got, per = read_lines(files)
        check = check_windows(
            got,
            self.expected[item.name],
            complete=system == SLUICE,
            emitted_through=r.get("watermark") if system == PEER else None,
        )
        return check, per

    def unreadable(self, error: str) -> WindowCheck:
        return WindowCheck(error=error)

    def checked(self, r: dict, system: str, check: WindowCheck) -> None:
        r["unemitted"] = check.missing if system == PEER else None


# ================================================================================================
# main
# ================================================================================================
def sluice_ready() -> str | None:
    """Why the Sluice side cannot run yet (None: it can)."""
    if not os.path.exists(WINDOWED_JOB):
        return f"{os.path.relpath(WINDOWED_JOB, REPO)} does not exist"
    try:
        import sluice.api as api
    except Exception as exc:  # noqa: BLE001 — reported, not raised
        return f"sluice.api does not import: {exc}"
    if not hasattr(api, "TumblingEventTimeWindows"):
        return "sluice.api has no TumblingEventTimeWindows"
    return None


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="200,000 events, 2 runs per system and workload")
    ap.add_argument("--events", type=int, default=None, help="events (default 1,000,000; quick 200,000)")
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--disorder-ms", type=int, default=2000, help="timestamps out of order by up to this; the bound")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per system and workload (5; quick 2)")
    ap.add_argument("--workloads", default="tumbling,sliding", help=f"any of {', '.join(WORKLOADS)}")
    paired_runs.add_peer_args(ap, "workload")
    paired_runs.add_run_args(ap, 900, skip_sluice_help="the peer only (e.g. before the Sluice job exists)")
    return ap, ap.parse_args()


def generate_input(work: str, args: argparse.Namespace, events: int, workloads: dict[str, Workload]) -> dict:
    """The input files, generated into `work`, and each workload's expected windows: a plan's facts and
    the `input` directory and `expected` counts (by workload) the runs need."""
    from generate_page_views import expected_windows, generate

    data = os.path.join(work, "input")
    files = max(1, -(-events // EVENTS_PER_FILE))
    t0 = time.monotonic()
    generate(data, events=events, files=files, urls=args.urls, seed=SEED, disorder_ms=args.disorder_ms)
    expected = {w.name: expected_windows(data, w.size_ms, w.slide_ms) for w in workloads.values()}
    log(
        f"generated {events:,} events in {files} files, disorder {args.disorder_ms} ms; expected "
        + ", ".join(f"{w}: {len(e):,} windows" for w, e in expected.items())
        + f" ({time.monotonic() - t0:.1f}s)"
    )
    return {"input": data, "files": files, "expected": expected}


def main() -> int:
    ap, args = parse_args()
    if args.child:
        return child_main(args.child)
    runs, shuffle = paired_runs.runs_and_shuffle(args)
    events = args.events or (200_000 if args.quick else 1_000_000)
    try:
        workloads = {w: WORKLOADS[w.strip()] for w in args.workloads.split(",") if w.strip()}
    except KeyError as exc:
        ap.error(f"unknown workload {exc}; known: {', '.join(WORKLOADS)}")
    if args.disorder_ms < 0 or events <= 0 or runs < 1 or not shuffle or not workloads:
        ap.error("--disorder-ms >= 0, --events > 0, --runs >= 1, --peer-shuffle and --workloads not empty")
    systems = paired_runs.choose_systems(ap, args, sluice_ready)
    if systems is None:
        return 2

    command, facts, temp, work = begin_run(REPO, args.workdir, "windowed-bench-", log)
    t_begin = time.monotonic()
    made = generate_input(work, args, events, workloads)
    bench = Bench(args, work, made["input"], events, made["expected"])
    plan = {
        "workloads": workloads,
        "events": events,
        "files": made["files"],
        "urls": args.urls,
        "disorder_ms": args.disorder_ms,
        "checkpoint_interval": args.checkpoint_interval,
        "max_foreign_cores": args.max_foreign_cores or "off",
        "expected_rows": {w: len(e) for w, e in made["expected"].items()},
        "shuffle_text": "",
    }
    return paired_runs.conduct(
        bench,
        systems,
        (SluiceSide, PeerSide),
        list(workloads.values()),
        runs,
        shuffle,
        noun="workload",
        plan=plan,
        label=lambda w: workloads[w].label,
        report=lambda: report(facts, command, bench.runs, plan, bench.notes),
        temp=temp,
        t_begin=t_begin,
    )


if __name__ == "__main__":
    run_main(main)
