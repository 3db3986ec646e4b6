"""Profile of the TaskManager hot path while it runs examples/page_views.py:
where does a task thread's time go per source batch (Spark call, Arrow
conversion, combiner, key-group split, state merge, sink, checkpoints, data
exchange, idle)?

    python bench/profile_hot_path.py [--events 2000000] [--files 40] [--urls 10000] [--rate 100] [--reference-runs 2]
                                     [--blocking] [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]
                                     [--no-append]

How: input from examples/generate_page_views.py's generate(seed 7); one local
cluster of 2 TaskManagers x 2 slots (bench/page_views_bench.py's Cluster);
page_views at parallelism 2 with checkpoints every 1000 ms: one warm-up job,
then unprofiled reference jobs (half before, half after) around one profiled
job. For the profiled job, `py-spy record --pid PID --rate R --threads --idle
--nonblocking --format raw` runs against both TaskManager processes from just
before submission until the job is FINISHED (then SIGINT: py-spy writes its
file). --idle keeps samples of waiting threads, so a task thread blocked on
the JVM (py4j socket, Arrow stream) or on its input counts as wall time.
--nonblocking because blocking sampling falls behind on a busy 2-core machine
and then samples busy periods less often than idle ones (measured: sampled
time inside source batches = 0.55 of the logged batch time, 1.00 with
--nonblocking); --blocking is there to check that.

Samples are converted to seconds per TaskManager with its effective rate
(samples of its main thread / sampling window). Task threads (frames under
Task._run) are bucketed by their frames, exchange threads (DataExchange
Subscribe, remote/local input channels, gRPC client threads) and checkpoint
upload threads separately; every other thread is one "other threads" line.
Per bucket: seconds, % of task-thread time, ms per source batch (batches =
the job's "source batch" lines in the TaskManager logs). The coverage check
compares the sampled time inside Task._run_source with the logged batch time.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import page_views_bench as pvb
from bench_common import (
    begin_run,
    finish_workdir,
    fmt,
    median,
    publish,
    run_main,
)
from generate_page_views import generate

PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")
log = pvb.log


# -- buckets: (name, test on the frames' function names, root first); the first match wins --------
# A test gets the stack's frames, root first, as (function, file) pairs.
def _has(*names):
    return lambda fs: any(f in names for f, _file in fs)


def _under(parent, child):  # `child` called directly from `parent`
    return lambda fs: any(a[0] == parent and b[0] == child for a, b in zip(fs, fs[1:], strict=False))


def _all(*tests):
    return lambda fs: all(t(fs) for t in tests)


SPLIT, TO_ARROW = _has("RecordWriter._split_by_key"), _has("DataFrame.toArrow")
TASK_BUCKETS = [
    ("checkpoint snapshot copy + barrier (Task._snapshot)", _has("Task._snapshot")),
    ("sink commit: rename (FileSinkWriter.notify_complete)", _has("FileSinkWriter.notify_complete")),
    ("sink CSV write (FileSinkWriter.process)", _has("FileSinkWriter.process")),
    ("Spark: spark.read.json plan, py4j (FileSource.next_batch)", _has("FileSource.next_batch")),
    (
        "Spark: toArrow, JVM job until the first Arrow batch (open_stream)",
        _all(SPLIT, _has("RecordBatchStreamReader.__init__")),
    ),
    (
        "Spark: toArrow, reading the Arrow stream (ArrowStreamSerializer.load_stream)",
        _all(SPLIT, _has("ArrowStreamSerializer.load_stream")),
    ),
    ("Spark: toArrow, py4j round trips (_collect_as_arrow)", _all(SPLIT, TO_ARROW)),
    ("Arrow combiner: group_by (keyed_aggregate.combine)", _all(SPLIT, _has("combine"))),
    (
        "Spark: projection plan, py4j (select/xxhash64 in _split_by_key)",
        _all(SPLIT, lambda fs: any(file.startswith(("pyspark/", "py4j/")) for _f, file in fs)),
    ),
    ("key-group split: Arrow filter (RecordWriter._split_by_key)", SPLIT),
    ("enqueue / backpressure (ResultSubpartition.add)", _has("ResultSubpartition.add")),
    (
        "state merge: Arrow group_by (KeyedAggregate.process)",
        _all(_has("KeyedAggregate.process"), _has("_group_by", "TableGroupBy.aggregate")),
    ),
    ("state merge: Python fold into the dict (KeyedAggregate.process)", _has("KeyedAggregate.process")),
    ("input concat (pa.concat_tables in Task._run_inputs)", _has("concat_tables")),
    ("idle: input gate wait (InputGate.poll_all)", _has("InputGate.poll_all")),
    ("idle: end of input, waiting for the final checkpoint (Task._run)", _under("Task._run", "Task._drain_control")),
    ("control messages (Task._drain_control)", _has("Task._drain_control")),
    ("task setup (Task._setup)", _has("Task._setup")),
    ("end of input (Task._end_input)", _has("Task._end_input")),
    ("other (task thread)", lambda fs: True),
]
EXCHANGE_BUCKETS = [
    ("checkpoint upload (Task._upload, snapshot-upload thread)", _has("Task._upload")),
    ("send: Arrow IPC encode (table_to_ipc in DataExchangeServicer.Subscribe)", _has("table_to_ipc")),
    (
        "send: idle, waiting for a batch (ResultSubpartition.poll in Subscribe)",
        _all(_has("DataExchangeServicer.Subscribe"), _has("ResultSubpartition.poll")),
    ),
    ("send: waiting for credit (_Credit.take)", _has("_Credit.take")),
    ("send: gRPC write (_stream_response_in_pool)", _has("DataExchangeServicer.Subscribe", "_stream_response_in_pool")),
    ("receive: Arrow IPC decode (ipc_to_table in RemoteInputChannel.run)", _has("ipc_to_table")),
    ("receive: idle, waiting for a message (RemoteInputChannel.run)", _has("RemoteInputChannel.run")),
    (
        "local channel: idle wait (LocalInputChannel.run)",
        _all(
            _has("LocalInputChannel.run"), _has("ResultSubpartition.poll", "Semaphore.acquire", "PartitionManager.get")
        ),
    ),
    ("local channel: move to the gate (LocalInputChannel.run)", _has("LocalInputChannel.run")),
    (
        "gRPC plumbing: credit reader, channel spin, request iterator (idle)",
        _has(
            "read_credits",
            "_run_channel_spin_thread.<locals>.channel_spin",
            "_consume_request_iterator.<locals>.consume_request_iterator",
        ),
    ),
]
FRAME = re.compile(r"^(.*) \(([^()]*?)(?::(\d+))?\)$")


def parse_raw(path: str):
    """py-spy raw lines `thread (TID): NAME;frame;...;leaf COUNT` -> [(thread name, [(func, file)], count)]."""
    rows = []
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            parts = stack.split(";")
            name = parts[0].partition("): ")[2] if parts[0].startswith("thread (") else ""
            frames = [(m.group(1), m.group(2)) if (m := FRAME.match(p)) else (p, "") for p in parts[1:]]
            rows.append((name, frames, int(count)))
    return rows


def classify(files: list[tuple[str, float]]) -> dict:
    """Seconds per bucket over all TaskManagers; files = [(raw file, sampling window s)]."""
    task: collections.defaultdict[str, float] = collections.defaultdict(float)
    exch: collections.defaultdict[str, float] = collections.defaultdict(float)
    other = source = rate_sum = 0.0
    leaves: collections.defaultdict[tuple[str, str], float] = collections.defaultdict(float)
    for path, window in files:
        rows = parse_raw(path)
        rounds = sum(n for name, _fr, n in rows if name == "MainThread") or 1
        per, rate_sum = window / rounds, rate_sum + rounds / window
        for _name, fs, n in rows:
            if ("Task._run", "taskmanager/task.py") in fs:
                task[next(b for b, test in TASK_BUCKETS if test(fs))] += n * per
                source += n * per if ("Task._run_source", "taskmanager/task.py") in fs else 0
                via = next((f"{f} ({file})" for f, file in reversed(fs) if file.startswith("taskmanager/")), "")
                leaf = f"{fs[-1][0]} ({fs[-1][1]})" + (f" ← {fs[-2][0]}" if len(fs) > 1 else "")
                leaves[(leaf, via)] += n * per
            elif (b := next((b for b, test in EXCHANGE_BUCKETS if test(fs)), None)) is not None:
                exch[b] += n * per
            else:
                other += n * per
    return {
        "task": task,
        "exchange": exch,
        "other": other,
        "source": source,
        "leaves": leaves,
        "rate": rate_sum / max(1, len(files)),
    }


# -- py-spy ---------------------------------------------------------------------------------------
class Spy:
    """One `py-spy record` on one process; started, then stopped with SIGINT (it writes its file then)."""

    def __init__(self, pid: int, out: str, rate: int, blocking: bool, duration: int):
        cmd = [
            PY_SPY,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--threads",
            "--idle",
            "--format",
            "raw",
            "--output",
            out,
            "--duration",
            str(duration),
        ] + ([] if blocking else ["--nonblocking"])
        self.out, self.ready = out, threading.Event()
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
        )
        threading.Thread(target=self._read, daemon=True).start()
        self.t0: float | None = None
        self.t1: float | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None, "started with stdout=PIPE"
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if "Sampling process" in line:
                self.t0 = time.monotonic()
                self.ready.set()
        self.ready.set()

    def wait_ready(self, timeout: float = 30) -> None:
        if not self.ready.wait(timeout) or self.t0 is None:
            raise pvb.BenchError(f"py-spy did not start sampling: {' | '.join(self.lines[-5:])}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.t1 = time.monotonic()
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @property
    def window(self) -> float:
        """Seconds sampled: from the first sample to the SIGINT of stop()."""
        if self.t0 is None or self.t1 is None:
            raise pvb.BenchError(f"py-spy was not sampling until stopped: {' | '.join(self.lines[-5:])}")
        return self.t1 - self.t0

    @property
    def behind(self) -> int:
        return sum("behind in sampling" in line for line in self.lines)

    @property
    def errors(self) -> str:
        m = next((m for line in self.lines if (m := re.search(r"Samples: (\d+) Errors: (\d+)", line))), None)
        return f"{m.group(2)} of {m.group(1)}" if m else "?"


def source_batches(cluster: pvb.Cluster, job_id: str) -> tuple[int, float]:
    pat = re.compile(rf"\[job {job_id} attempt \d+ task [^\]]+\] source batch: offset \d+ -> \d+ in ([\d.]+)s")
    n, total = 0, 0.0
    for p in cluster.info["processes"]:
        if p["role"] == "taskmanager":
            with open(p["log"], errors="replace") as f:
                for m in pat.finditer(f.read()):
                    n, total = n + 1, total + float(m.group(1))
    return n, total


# -- report ---------------------------------------------------------------------------------------
def report(args, facts, command, job, refs, warm, res, batches, logged, spies) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    per_b = (lambda s: s * 1000 / batches) if batches else (lambda s: None)
    task_total = sum(res["task"].values())
    ref_tput = median(r["throughput"] for r in refs)
    mode = "blocking" if args.blocking else "--nonblocking"
    L = [
        f"## {now} — profile of the TaskManager hot path (py-spy)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {facts['cores']} cores ({facts['cpu']}), {facts['ram']}, Python {facts['python']}, "
        f"pyspark {facts['pyspark']}, {facts['java']}; load average at start {facts['load']}.",
        "",
        f"Job: examples/page_views.py, parallelism 2, checkpoints every 1000 ms, on 2 TaskManagers x 2 slots; "
        f"{args.events:,} events in {args.files} files (generate(seed=7), {args.urls:,} urls); "
        f"**{batches} source batches** "
        f"(logged batch time {logged:.2f} s in total).",
        "",
        "| run | py-spy | submit→FINISHED s | events/s | counts correct |",
        "|---|---|---|---|---|",
        f"| warm-up (first job on the cluster) | no | {warm['submit_to_end']:.2f} | {warm['throughput']:,.0f} | "
        f"{'yes' if warm['counts_ok'] else 'NO'} |",
    ]
    L += [
        f"| reference {i} | no | {r['submit_to_end']:.2f} | {r['throughput']:,.0f} | "
        f"{'yes' if r['counts_ok'] else 'NO'} |"
        for i, r in enumerate(refs, 1)
    ]
    L += [
        f"| **profiled** | {mode}, {args.rate} Hz, --idle | **{job['submit_to_end']:.2f}** | "
        f"**{job['throughput']:,.0f}** | {'yes' if job['counts_ok'] else 'NO'} |",
        "",
    ]
    if ref_tput:
        L.append(
            f"py-spy distortion: profiled throughput / median reference = "
            f"{job['throughput'] / ref_tput:.2f} (job-to-job spread of the references: "
            f"{fmt(min(r['throughput'] for r in refs), ',.0f')}–{fmt(max(r['throughput'] for r in refs), ',.0f')}"
            " events/s)."
        )
    L.append(
        f"Sampling: effective {res['rate']:.0f} samples/s per thread (nominal {args.rate}); py-spy reported "
        f"falling behind {sum(s.behind for s in spies)} times; sampling errors "
        f"{', '.join(s.errors for s in spies)} (per TaskManager). Coverage check: sampled time inside "
        f"Task._run_source {res['source']:.2f} s vs logged source batch time {logged:.2f} s "
        f"(ratio {fmt(res['source'] / logged if logged else None)})."
    )
    L += [
        "",
        f"### Task threads (`task-<chain>-<subtask>`, {task_total:.2f} thread-seconds)",
        "",
        "| bucket | seconds | % of task-thread time | ms per source batch |",
        "|---|---|---|---|",
    ]
    for b, s in sorted(res["task"].items(), key=lambda kv: -kv[1]):
        L.append(f"| {b} | {s:.2f} | {100 * s / task_total:.1f} % | {fmt(per_b(s), '.0f')} |")
    busy = sum(s for b, s in res["task"].items() if not b.startswith("idle"))
    spark = sum(s for b, s in res["task"].items() if b.startswith("Spark"))
    L += [
        f"| **busy (not idle)** | **{busy:.2f}** | **{100 * busy / task_total:.1f} %** | "
        f"**{fmt(per_b(busy), '.0f')}** |",
        f"| of which Spark (all Spark rows) | {spark:.2f} | {100 * spark / task_total:.1f} % | "
        f"{fmt(per_b(spark), '.0f')} |",
        "",
        "### Data-exchange and checkpoint-upload threads",
        "",
        "| bucket | seconds | ms per source batch |",
        "|---|---|---|",
    ]
    for b, s in sorted(res["exchange"].items(), key=lambda kv: -kv[1]):
        L.append(f"| {b} | {s:.2f} | {fmt(per_b(s), '.0f')} |")
    L += [
        f"| other threads (heartbeats, reports, gRPC server pool, ZooKeeper, py4j finalizer; mostly idle) | "
        f"{res['other']:.2f} | — |",
        "",
        "### Top 15 leaf frames of the task threads",
        "",
        "| leaf frame ← its caller | nearest Sluice frame | seconds | % of task-thread time |",
        "|---|---|---|---|",
    ]
    for (leaf, via), s in sorted(res["leaves"].items(), key=lambda kv: -kv[1])[:15]:
        L.append(f"| `{leaf}` | `{via}` | {s:.2f} | {100 * s / task_total:.1f} % |")
    L += [
        "",
        "Seconds are thread-seconds (wall time per thread, summed over the 4 task threads); idle rows are "
        "threads waiting (input, final checkpoint). Spark rows include the JVM's work: the Python thread waits "
        "on the py4j or Arrow socket while the JVM reads the JSON files, projects and serialises to Arrow.",
        "",
    ]
    return "\n".join(L)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--urls", type=int, default=10_000, help="the pool of urls (Zipf-drawn): the job's keys")
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument(
        "--reference-runs",
        type=int,
        default=2,
        help="unprofiled jobs for the distortion figure, half before and half after the profiled one",
    )
    ap.add_argument("--blocking", action="store_true", help="py-spy pauses the process per sample (default: not)")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--workdir", default=None, help="data, cluster and py-spy files (default: a temp dir, removed)")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the working directory (raw py-spy files, logs)")
    ap.add_argument("--no-append", action="store_true", help="print only")
    ap.add_argument("--job-timeout", type=float, default=600)
    args = ap.parse_args()
    command, facts, temp, work = begin_run(pvb.REPO, args.workdir, "sluice-profile-")
    cluster = pvb.Cluster(os.path.join(work, "cluster"), taskmanagers=2, slots=2)
    spies: list[Spy] = []
    failed = True
    try:
        data = os.path.join(work, "events")
        expected = generate(data, events=args.events, files=args.files, urls=args.urls, seed=7)
        log(f"generated {args.events} events in {args.files} files in {work}")
        cluster.start()

        def run(label: str) -> dict:
            r = pvb.throughput_run(
                cluster, data, os.path.join(work, f"out-{label}"), 1000, args.events, expected, args.job_timeout
            )
            log(
                f"{label}: {r['submit_to_end']:.2f}s submit→FINISHED, {r['throughput']:,.0f} events/s, counts "
                f"{'correct' if r['counts_ok'] else 'WRONG'}"
            )
            return r

        warm = run("warm-up")
        before = (args.reference_runs + 1) // 2
        refs = [run(f"reference-{i + 1}") for i in range(before)]
        tms = [p for p in cluster.info["processes"] if p["role"] == "taskmanager"]
        spies = [
            Spy(
                p["pid"],
                os.path.join(work, f"py-spy-{os.path.basename(p['log'])[:-4]}.txt"),
                args.rate,
                args.blocking,
                int(args.job_timeout) + 60,
            )
            for p in tms
        ]
        for s in spies:
            s.wait_ready()
        job = run("profiled")
        for s in spies:
            s.stop()
        refs += [run(f"reference-{i + 1}") for i in range(before, args.reference_runs)]
        batches, logged = source_batches(cluster, job["job_id"])
        res = classify([(s.out, s.window) for s in spies])
        section = report(args, facts, command, job, refs, warm, res, batches, logged, spies)
        publish(section, args.out, log, append=not args.no_append)
        failed = False
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping py-spy and the cluster")
        raise
    finally:
        for s in spies:
            s.stop()
        cluster.stop()
        finish_workdir(work, temp and not failed and not args.keep_workdir, log, "py-spy-*.txt, cluster/log/")
    return 0


if __name__ == "__main__":
    run_main(main)
