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

The buckets and the classification are in profile_hot_path_samples.py, the section in
profile_hot_path_report.py.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import page_views_runs
from bench_common import begin_run, finish_workdir, publish, run_main
from generate_page_views import generate
from profile_hot_path_report import report
from profile_hot_path_samples import classify

PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")
log = page_views_runs.log


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
            raise page_views_runs.BenchError(f"py-spy did not start sampling: {' | '.join(self.lines[-5:])}")

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
            raise page_views_runs.BenchError(f"py-spy was not sampling until stopped: {' | '.join(self.lines[-5:])}")
        return self.t1 - self.t0

    @property
    def behind(self) -> int:
        return sum("behind in sampling" in line for line in self.lines)

    @property
    def errors(self) -> str:
        m = next((m for line in self.lines if (m := re.search(r"Samples: (\d+) Errors: (\d+)", line))), None)
        return f"{m.group(2)} of {m.group(1)}" if m else "?"


def source_batches(cluster: page_views_runs.Cluster, job_id: str) -> tuple[int, float]:
    pat = re.compile(rf"\[job {job_id} attempt \d+ task [^\]]+\] source batch: offset \d+ -> \d+ in ([\d.]+)s")
    n, total = 0, 0.0
    for p in cluster.info["processes"]:
        if p["role"] == "taskmanager":
            with open(p["log"], errors="replace") as f:
                for m in pat.finditer(f.read()):
                    n, total = n + 1, total + float(m.group(1))
    return n, total


def start_spies(cluster: page_views_runs.Cluster, work: str, args: argparse.Namespace) -> list[Spy]:
    """One py-spy per TaskManager (each to be waited for: `Spy.wait_ready`)."""
    tms = [p for p in cluster.info["processes"] if p["role"] == "taskmanager"]
    return [
        Spy(
            p["pid"],
            os.path.join(work, f"py-spy-{os.path.basename(p['log'])[:-4]}.txt"),
            args.rate,
            args.blocking,
            int(args.job_timeout) + 60,
        )
        for p in tms
    ]


def parse_args() -> argparse.Namespace:
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
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    command, facts, temp, work = begin_run(page_views_runs.REPO, args.workdir, "sluice-profile-")
    cluster = page_views_runs.Cluster(os.path.join(work, "cluster"), taskmanagers=2, slots=2)
    spies: list[Spy] = []
    failed = True
    try:
        data = os.path.join(work, "events")
        expected = generate(data, events=args.events, files=args.files, urls=args.urls, seed=7)
        log(f"generated {args.events} events in {args.files} files in {work}")
        cluster.start()

        def run(label: str) -> dict:
            r = page_views_runs.throughput_run(
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
        spies = start_spies(cluster, work, args)
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
