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
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
PAGE_VIEWS = os.path.join(EXAMPLES, "page_views.py")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_common import SOURCE_BATCH, _commit, begin_run, finish_workdir, publish, run_main
from markdown import notes_lines, section_head
from page_views_bench import SLUICE, BenchError, Cluster, DirWatch, log, sluice
from procstat import FOREIGN_CORES_LIMIT, ResourceMeter, excluded
from stats import Estimate, fmt_estimate, load1, median_ci

from sluice.v1 import common_pb2

CHECKPOINT_MS = 300
MONITOR_MS = 200
P_FROM, P_TO = 3, 2
OPERATOR = "counts"  # the uid whose parallelism changes
SOURCE_CHAIN = "page views"  # the source task's name in `sluice status`
SOURCE_TASK = "page-views"  # its chain id in log tags and execution ids
SINK_CHAIN = "counts sink"  # part of the counts chain's name
PRE_S = 4.0  # the steady window sampled before the command
POST_S = 3.0  # sampled after the new configuration's first commit
POLL = 0.1  # status samples
SEED_INITIAL, SEED_FEED = 7, 8
METHODS = {
    "a": "stop-with-savepoint + restore (`sluice rescale JOB --parallelism 2`)",
    "b": f"live (`sluice reconfigure JOB --operator {OPERATOR} --parallelism 2`)",
}
SHORT = {"a": "(a) stop + restore", "b": "(b) live"}
JM_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+\s+jobmanager (.*)$")
TASK_CHANGE = re.compile(r"\[job (\w+)\] task \w+/(\S+)/([\w-]+)/(\d+) -> (\w+)")
STORAGE_WARNING = "storage operation failed"


def log_epoch(text: str) -> float:
    """A log line's time (local time, as Python's logging writes it) as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def job_state(info: common_pb2.JobInfo) -> str:
    return common_pb2.JobState.Name(info.state).removeprefix("JOB_STATE_")


def task_state(t: common_pb2.TaskStatus) -> str:
    return common_pb2.ExecutionState.Name(t.state).removeprefix("EXECUTION_STATE_")


def max_gap(times, lo: float, hi: float) -> float | None:
    """The longest interval between consecutive `times` within [lo, hi] (None: fewer than 2)."""
    ts = sorted(t for t in times if lo <= t <= hi)
    if len(ts) < 2:
        return None
    return max(b - a for a, b in zip(ts, ts[1:], strict=False))


# ================================================================================================
# input: generated once, copied into each round's directory; the feed
# ================================================================================================
class Data:
    """The initial files (one generate() call) and the feed's templates (another), with the counts
    of every feed file (read back from it)."""

    def __init__(self, root: str, events: int, files: int, feed_files: int, feed_events: int, urls: int):
        from generate_page_views import generate

        self.initial_dir = os.path.join(root, "initial")
        self.feed_dir = os.path.join(root, "feed")
        self.initial = collections.Counter(
            generate(self.initial_dir, events=events, files=files, urls=urls, seed=SEED_INITIAL)
        )
        generate(self.feed_dir, events=feed_files * feed_events, files=feed_files, urls=urls, seed=SEED_FEED)
        self.feed = sorted(os.path.join(self.feed_dir, n) for n in os.listdir(self.feed_dir))
        self.feed_counts = []
        for path in self.feed:
            with open(path) as f:
                self.feed_counts.append(collections.Counter(json.loads(line)["url"] for line in f if line.strip()))
        self.events, self.files, self.feed_events = events, files, feed_events

    def copy_initial(self, inp: str) -> None:
        os.makedirs(inp, exist_ok=True)
        for name in sorted(os.listdir(self.initial_dir)):
            shutil.copyfile(os.path.join(self.initial_dir, name), os.path.join(inp, name))


class Feeder(threading.Thread):
    """Every `every` s one more file (a feed template, in turn, under a name of its own) is written
    into `stage` and renamed into the watched `inp`. `total`: the counts of everything in `inp`
    (the initial files and every file fed), kept as files land."""

    def __init__(self, data: Data, inp: str, stage: str, every: float):
        super().__init__(daemon=True, name="feeder")
        self.data, self.inp, self.stage, self.every = data, inp, stage, every
        os.makedirs(stage, exist_ok=True)
        self.total = collections.Counter(data.initial)
        self.fed = 0
        self.late_max = 0.0  # the furthest a file landed after its slot
        self.skipped = 0  # slots dropped because the harness was late by more than one period
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0, k = time.monotonic(), 0
            while not self.halt.is_set():
                slot = t0 + k * self.every
                wait = slot - time.monotonic()
                if wait > 0 and self.halt.wait(wait):
                    break
                late = time.monotonic() - slot
                if late > self.every:  # the machine stalled: go on from now, do not feed a burst
                    self.skipped += int(late // self.every)
                    t0 = time.monotonic() - k * self.every
                    late = 0.0
                self.late_max = max(self.late_max, late)
                template = self.data.feed[self.fed % len(self.data.feed)]
                name = f"feed-{self.fed:05d}.jsonl"
                shutil.copyfile(template, os.path.join(self.stage, name))
                os.rename(os.path.join(self.stage, name), os.path.join(self.inp, name))
                with self.lock:
                    self.total.update(self.data.feed_counts[self.fed % len(self.data.feed)])
                    self.fed += 1
                k += 1
        except BaseException as exc:  # noqa: BLE001 — reported by the round
            self.error = exc

    def snapshot(self) -> collections.Counter:
        with self.lock:
            return collections.Counter(self.total)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(timeout=10)


class OutputReader:
    """The committed output read incrementally: each visible part once (a committed part does not
    change); each url's largest count, and (url, count) lines committed more than once."""

    def __init__(self, out: str):
        self.out = out
        self.read: set[str] = set()
        self.final: dict[str, int] = {}
        self.seen: set[tuple[str, int]] = set()
        self.lines = 0
        self.twice: list[tuple[str, int]] = []
        self.malformed: list[str] = []

    def poll(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.out) if n.startswith("part-"))
        except FileNotFoundError:
            return
        for name in names:
            if name in self.read:
                continue
            with open(os.path.join(self.out, name)) as f:
                for line in f:
                    line = line.rstrip("\n")
                    if not line:
                        continue
                    url, _, count = line.rpartition(",")
                    try:
                        c = int(count)
                    except ValueError:
                        self.malformed.append(f"{name}: {line!r}")
                        continue
                    self.lines += 1
                    if (url, c) in self.seen:
                        self.twice.append((url, c))
                    self.seen.add((url, c))
                    if c > self.final.get(url, 0):
                        self.final[url] = c
            self.read.add(name)

    def covers(self, expected: collections.Counter) -> bool:
        return all(self.final.get(u, 0) >= c for u, c in expected.items())

    def over(self, expected: collections.Counter) -> list[str]:
        """Urls committed above what was fed: counted twice (it can only get worse)."""
        return [u for u, c in self.final.items() if c > expected.get(u, 0)]


class LogTail:
    """New lines of some log files since the mark (their sizes when the object was made)."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.offsets = {p: os.path.getsize(p) for p in glob.glob(pattern)}

    def lines(self) -> list[str]:
        out: list[str] = []
        for path in sorted(glob.glob(self.pattern)):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                out += f.read().decode(errors="replace").splitlines()
        return out


# ================================================================================================
# one round
# ================================================================================================
class Round:
    def __init__(self, cluster: Cluster, data: Data, args, rdir: str):
        self.cluster, self.data, self.args, self.rdir = cluster, data, args, rdir
        self.samples: list[tuple[float, str, str, list[tuple[str, int, str, str, int]]]] = []

    def sample(self, job: str) -> common_pb2.JobInfo | None:
        """One `status` of `job`, kept: (time, job, state, [(task, subtask, state, taskmanager, records_out)])."""
        try:
            info = self.cluster.raw(job)
        except Exception:  # noqa: BLE001 — a status that failed is a missing sample
            return None
        tasks = [(t.operator, t.subtask, task_state(t), t.taskmanager, t.counters.records_out) for t in info.tasks]
        self.samples.append((time.monotonic(), job, job_state(info), tasks))
        return info

    def wait_job(self, job: str, ok, what: str, timeout: float) -> common_pb2.JobInfo:
        deadline = time.monotonic() + timeout
        while True:
            info = self.cluster.raw(job)
            if ok(info):
                return info
            if job_state(info) in ("FAILED", "CANCELED", "FINISHED"):
                raise BenchError(f"job {job} ended {job_state(info)} while waiting for {what}: {info.failure[-300:]}")
            if time.monotonic() > deadline:
                raise BenchError(f"job {job}: no {what} after {timeout:.0f}s (state {job_state(info)})")
            time.sleep(POLL)

    def wait_covered(self, reader: OutputReader, feeder: Feeder, expected, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            reader.poll()
            if reader.covers(expected):
                return
            if feeder.error is not None:
                raise BenchError(f"the feed failed: {feeder.error}")
            if time.monotonic() > deadline:
                short = sum(1 for u, c in expected.items() if reader.final.get(u, 0) < c)
                raise BenchError(f"{what}: {short} urls still below what was fed after {timeout:.0f}s")
            time.sleep(0.2)

    def run(self, method: str, r: dict) -> None:
        """One round of `method`; its figures go into `r` (a failure raises, after cleaning up)."""
        cl, args = self.cluster, self.args
        inp, out, stage = (os.path.join(self.rdir, d) for d in ("in", "out", "stage"))
        self.data.copy_initial(inp)
        mono_off = time.time() - time.monotonic()  # epoch = monotonic + mono_off
        tm_log = LogTail(os.path.join(cl.dir, "log", "taskmanager-*.log"))
        jm_log = LogTail(os.path.join(cl.dir, "log", "jobmanager-*.log"))
        watch = DirWatch(out)
        watch.start()
        feeder = Feeder(self.data, inp, stage, args.feed_every_ms / 1000)
        reader = OutputReader(out)
        jobs: list[str] = []
        meter: ResourceMeter | None = None
        try:
            r["load_start"] = load1()
            t_submit = time.monotonic()
            job = (
                sluice(
                    "run", PAGE_VIEWS, "--detach", "--cluster-dir", cl.dir, "--parallelism", str(P_FROM), "--",
                    "--input", inp, "--output", out,
                    "--monitor-interval", str(MONITOR_MS), "--checkpoint-interval", str(CHECKPOINT_MS),
                    timeout=300,
                )
                .stdout.strip()
                .splitlines()[-1]
                .strip()
            )  # fmt: skip
            jobs.append(job)
            r["jobs"] = [job]
            feeder.start()
            self.wait_job(job, all_running, "every task RUNNING", 120)
            self.wait_covered(reader, feeder, feeder.snapshot(), args.timeout, "catching up")
            r["catchup_s"] = time.monotonic() - t_submit
            t = time.monotonic()
            self.wait_covered(reader, feeder, feeder.snapshot(), 60, "keeping up")
            r["lag_s"] = time.monotonic() - t

            # the steady window, then the change
            meter = ResourceMeter({"Sluice": lambda: sorted(cl.pids)}).start()
            t_pre = time.monotonic()
            while time.monotonic() < t_pre + PRE_S:
                self.sample(job)
                time.sleep(POLL)
            before = set(watch.first_seen)
            cmd = (
                ["rescale", job, "--parallelism", str(P_TO)]
                if method == "a"
                else ["reconfigure", job, "--operator", OPERATOR, "--parallelism", str(P_TO)]
            )
            t_issue = time.monotonic()
            proc = subprocess.Popen(
                [*SLUICE, *cmd, "--cluster-dir", cl.dir],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO,
            )  # fmt: skip
            try:
                while proc.poll() is None:
                    self.sample(job)
                    time.sleep(POLL)
                stdout, stderr = proc.communicate(timeout=args.timeout)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            t_cli = time.monotonic()
            r["cli_s"] = t_cli - t_issue
            if proc.returncode != 0:
                raise BenchError(f"sluice {' '.join(cmd)} exited {proc.returncode}: {stderr.strip()[-400:]}")
            last = stdout.strip().splitlines()[-1].strip()
            old = cl.raw(job)
            if method == "a":
                target = last
                jobs.append(target)
                r["jobs"].append(target)
                sp = old.savepoints[-1]
                r["request_t"] = sp.trigger_ms / 1000 - mono_off
                r["savepoint_done_t"] = (sp.trigger_ms + sp.duration_ms) / 1000 - mono_off
                r["savepoint_ms"] = sp.duration_ms
                r["old_ended_t"] = old.ended_ms / 1000 - mono_off if old.ended_ms else None

                def new_config(name: str) -> bool:
                    return f"-{target[:8]}-" in name
            else:
                target = job
                rid, status = last.split()
                rc = old.reconfigurations[-1]
                if status != "COMPLETED" or rc.id != rid:
                    raise BenchError(f"reconfiguration {rid}: {status} ({rc.failure})")
                r["rid"], r["barrier"], r["pause_ms"] = rid, rc.checkpoint_id, rc.pause_ms
                r["request_t"] = rc.trigger_ms / 1000 - mono_off
                r["redeployed"] = list(rc.redeployed)
                r["switched"] = list(rc.switched)

                def new_config(name: str) -> bool:
                    m = re.match(r"part-(\d+)-", name)
                    return m is not None and int(m.group(1)) > rc.checkpoint_id

            # the new configuration: every task RUNNING, and committing again
            t_running_seen = t_first = None
            deadline = time.monotonic() + args.timeout
            while t_running_seen is None or t_first is None:
                info = self.sample(target)
                if t_running_seen is None and info is not None and all_running(info):
                    sinks = [t for t in info.tasks if SINK_CHAIN in t.operator]
                    if len(sinks) == P_TO:
                        t_running_seen = time.monotonic()
                new = [watch.first_seen[n] for n in list(watch.first_seen) if n not in before and new_config(n)]
                if new:
                    t_first = min(new)
                if info is not None and job_state(info) in ("FAILED", "CANCELED", "FINISHED"):
                    raise BenchError(f"job {target} ended {job_state(info)}: {info.failure[-300:]}")
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"job {target}: the new configuration not running and committing after {args.timeout:.0f}s"
                    )
                time.sleep(POLL)
            if method == "a":
                r["submitted_t"] = cl.raw(target).submitted_ms / 1000 - mono_off
            r["t_issue"], r["t_cli"], r["t_running_seen"], r["t_first"] = t_issue, t_cli, t_running_seen, t_first
            t_post = max(t_first, t_running_seen) + POST_S
            while time.monotonic() < t_post:
                self.sample(target)
                time.sleep(POLL)
            usage = meter.stop()
            meter = None
            r["foreign_cores"] = usage.foreign_cores()
            r["excluded"] = excluded(usage, args.max_foreign_cores or None)
            r["load_end"] = load1()

            # the feed stops; the committed counts must come to the sum of every file fed, exactly
            feeder.stop()
            if feeder.error is not None:
                raise BenchError(f"the feed failed: {feeder.error}")
            expected = feeder.snapshot()
            r["fed_files"], r["events_total"] = feeder.fed, sum(expected.values())
            r["feed_late_max"], r["feed_skipped"] = feeder.late_max, feeder.skipped
            deadline = time.monotonic() + args.timeout
            while True:
                reader.poll()
                if reader.final == dict(expected):
                    break
                over = reader.over(expected)
                if over or time.monotonic() > deadline:
                    missing = sum(1 for u, c in expected.items() if reader.final.get(u, 0) < c)
                    u = over[0] if over else next(u for u, c in expected.items() if reader.final.get(u, 0) < c)
                    raise BenchError(
                        f"committed counts differ from the input's: {len(over)} urls above, {missing} below "
                        f"(e.g. {u}: {reader.final.get(u, 0)} committed, {expected.get(u, 0)} fed)"
                    )
                time.sleep(0.3)
            if reader.twice or reader.malformed:
                raise BenchError(
                    f"{len(reader.twice)} (url, count) lines committed twice (e.g. {reader.twice[:2]}), "
                    f"{len(reader.malformed)} malformed lines {reader.malformed[:2]}"
                )
            r["check"] = (
                f"exact: {len(expected):,} urls, {r['events_total']:,} events, {reader.lines:,} lines in "
                f"{len(reader.read)} parts, none twice"
            )
            r["ok"] = True
        finally:
            feeder.stop()
            if meter is not None:
                meter.stop()
            for j in reversed(jobs):
                r.setdefault("end_states", []).append(cancel_and_wait(cl, j))
            watch.stop_event.set()
            watch.join(timeout=5)
            try:
                self.analyse(r, method, watch, tm_log, jm_log, mono_off)
            except Exception as exc:  # noqa: BLE001 — the figures of a run that failed anyway
                r.setdefault("notes", []).append(f"analysis failed: {type(exc).__name__}: {exc}")

    # -- the figures of one run, from what was recorded -----------------------------------------
    def analyse(self, r: dict, method: str, watch: DirWatch, tm_log: LogTail, jm_log: LogTail, off: float) -> None:
        if "t_first" not in r:
            return
        t_issue, t_first = r["t_issue"], r["t_first"]
        jobs = r["jobs"]
        jm = []  # (monotonic time, text)
        for line in jm_log.lines():
            m = JM_LINE.search(line)
            if m:
                jm.append((log_epoch(m.group(1)) - off, m.group(2)))
        r["storage_warnings"] = sum(1 for t, text in jm if STORAGE_WARNING in text and t >= t_issue - PRE_S)
        changes = [
            (t, m[1], m[2], m[3], m[4], m[5]) for t, text in jm if (m := TASK_CHANGE.search(text)) and m[1] in jobs
        ]
        target = jobs[-1]
        if method == "a":
            running = [t for t, j, _e, _task, _s, state in changes if j == target and state == "RUNNING"]
            r["running_t"] = max(running) if running else r["t_running_seen"]
        else:
            barrier = next(
                (t for t, text in jm if f"[job {target} " in text and f"triggering checkpoint {r['barrier']}" in text
                 and text.rstrip().endswith(str(r["barrier"]))),
                None,
            )  # fmt: skip
            r["barrier_t"] = barrier
            after = [(t, state) for t, j, _e, task, _s, state in changes if j == target and barrier and t >= barrier]
            fin = [t for t, state in after if state == "FINISHED"]
            run = [t for t, state in after if state == "RUNNING"]
            r["retired_t"] = max(fin) if fin else None
            r["running_t"] = max(run) if run else r["t_running_seen"]
            done = next((t for t, text in jm if f"[reconfiguration {r['rid']}] COMPLETED" in text), None)
            r["completed_t"] = done
        t_end = max(t_first, r["running_t"])
        r["total_s"] = t_end - t_issue
        r["running_s"] = r["running_t"] - t_issue
        r["first_commit_s"] = t_first - t_issue
        lo, hi = t_issue - PRE_S, t_end + POST_S
        # the source tasks' state changes inside the window (none: never redeployed)
        r["source_changes"] = sum(1 for t, _j, _e, task, _s, _st in changes if task == SOURCE_TASK and lo <= t <= hi)
        # output commits
        commits = list(watch.first_seen.values())
        r["out_stall_s"] = max_gap(commits, lo, hi)
        r["out_base_s"] = max_gap(commits, lo, t_issue)
        # source batches (TaskManager logs)
        batches = []
        for line in tm_log.lines():
            m = SOURCE_BATCH.search(line)
            if m and m.group(2) in jobs and m.group(4) == SOURCE_TASK:
                batches.append(log_epoch(m.group(1)) - off)
        r["src_gap_s"] = max_gap(batches, lo, hi)
        r["src_base_s"] = max_gap(batches, lo, t_issue)
        for what in ("out", "src"):
            gap, base = r[f"{what}_gap_s" if what == "src" else "out_stall_s"], r[f"{what}_base_s"]
            r[f"{what}_extra_s"] = gap - base if gap is not None and base is not None else None
        # records_out of the source tasks, as `sluice status` shows them
        growth: list[float] = []
        last_by_job: dict[str, int] = {}
        same, before_tasks = True, None
        for t, job, _state, tasks in self.samples:
            src = sorted((s, tm, st, n) for name, s, st, tm, n in tasks if name == SOURCE_CHAIN)
            total = sum(n for *_x, n in src)
            prev = last_by_job.get(job)
            if (prev is None and total > 0 and job != jobs[0]) or (prev is not None and total > prev):
                growth.append(t)
            last_by_job[job] = max(total, prev or 0)
            if job == jobs[0] and lo <= t <= hi:
                ident = [(s, tm) for s, tm, _st, _n in src]
                if before_tasks is None:
                    before_tasks = ident
                same = same and ident == before_tasks and all(st == "RUNNING" for _s, _tm, st, _n in src)
        r["src_status_gap_s"] = max_gap(growth, lo, hi)
        r["src_status_base_s"] = max_gap(growth, lo, t_issue)
        r["sources_kept"] = same and method == "b" and r["source_changes"] == 0
        # phases
        ph = {}
        req = r.get("request_t")
        ph["client"] = req - t_issue if req is not None else None
        if method == "a":
            ph["savepoint"] = r["savepoint_done_t"] - req if req is not None else None
            ph["finish"] = (r["old_ended_t"] - r["savepoint_done_t"]) if r.get("old_ended_t") else None
            ph["resubmit"] = (r["submitted_t"] - r["old_ended_t"]) if r.get("old_ended_t") else None
            ph["deploy"] = r["running_t"] - r["submitted_t"]
        else:
            b, rt = r.get("barrier_t"), r.get("retired_t")
            ph["prepare"] = (b - req) if b is not None and req is not None else None
            ph["barrier+retire"] = (rt - b) if rt is not None and b is not None else None
            ph["deploy"] = (r["running_t"] - rt) if rt is not None else None
        ph["first commit"] = t_end - r["running_t"]
        r["phases"] = ph
        r["server_s"] = t_end - req if req is not None else None


def all_running(info: common_pb2.JobInfo) -> bool:
    return job_state(info) == "RUNNING" and bool(info.tasks) and all(task_state(t) == "RUNNING" for t in info.tasks)


def cancel_and_wait(cluster: Cluster, job: str, timeout: float = 90) -> str:
    """Cancel `job` unless it ended; wait for its end state (CANCELED for a running one)."""
    deadline = time.monotonic() + timeout
    asked = False
    while True:
        try:
            state = job_state(cluster.raw(job))
        except Exception as exc:  # noqa: BLE001 — reported as the state
            return f"unknown ({type(exc).__name__})"
        if state in ("CANCELED", "FINISHED", "FAILED"):
            return state
        if not asked:
            sluice("cancel", job, "--cluster-dir", cluster.dir, timeout=120, check=False)
            asked = True
        if time.monotonic() > deadline:
            return f"{state} after {timeout:.0f}s"
        time.sleep(0.2)


# ================================================================================================
# the report
# ================================================================================================
PHASES = {
    "a": ("client", "savepoint", "finish", "resubmit", "deploy", "first commit"),
    "b": ("client", "prepare", "barrier+retire", "deploy", "first commit"),
}
PHASE_TEXT = {
    "client": "command started → request at the JobManager (the CLI's Python start-up, TLS connection, RPC)",
    "savepoint": "stop-with-savepoint requested → savepoint completed (sources stop, a checkpoint, sinks commit)",
    "finish": "savepoint completed → old job FINISHED",
    "resubmit": "old job FINISHED → new job submitted (the CLI reads the savepoint's path, submits the job graph)",
    "deploy": "(a) new job submitted → its last task RUNNING (slots, deployment, restore); "
    "(b) last old task FINISHED → last new task RUNNING",
    "prepare": "reconfiguration requested → its barrier's checkpoint triggered (PrepareReconfiguration to the "
    "affected tasks, then the first moment a checkpoint may trigger: after the one in flight)",
    "barrier+retire": "barrier triggered → the last old subtask of the counts chain FINISHED (the barrier "
    "passes the sources after their batch in progress, the checkpoint completes, the old subtasks commit and end)",
    "first commit": "last task of the new configuration RUNNING → its first committed part seen",
}


def kept(runs: list[dict], method: str) -> list[dict]:
    return [
        r for r in runs if r["phase"] == "measured" and r["method"] == method and r.get("ok") and not r.get("excluded")
    ]


def est_of(rs: list[dict], get, excluded: int = 0) -> Estimate:
    return median_ci((get(r) for r in rs), excluded=excluded)


def sec(e: Estimate) -> str:
    return fmt_estimate(e, ".2f")


def cell(x, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def report(facts: dict, command: str, runs: list[dict], plan: dict, notes: list[str]) -> str:
    L = section_head("Reconfiguration: live vs stop-with-savepoint and restore", command, facts)
    L.append(
        f"**Job**: `examples/page_views.py` (watched directory, `--monitor-interval {MONITOR_MS} "
        f"--checkpoint-interval {CHECKPOINT_MS}`) at parallelism {P_FROM} on one cluster of 2 TaskManagers x 2 "
        f"slots, reused by every round. **Input** per round: {plan['events']:,} events in {plan['files']} files "
        f"({plan['urls']:,} urls, seed {SEED_INITIAL}), then one more file of {plan['feed_events']} events every "
        f"{plan['feed_every_ms']} ms ({plan['feed_rate']:,.0f} events/s, renamed into the directory) until "
        f"{POST_S:g} s after the change. **Change**: the `{OPERATOR}` operator from parallelism {P_FROM} to {P_TO}, "
        f"(a) {METHODS['a']}: a new job, every operator at {P_TO}; (b) {METHODS['b']}: the counts chain "
        f"(counts → counts sink) redeployed at {P_TO}, the {P_FROM} source tasks switched. Each round starts the "
        f"change once the committed output has caught up with the feed, after a steady window of {PRE_S:g} s."
    )
    L.append("")
    L.append(
        "**Total**: the command started → the new configuration has every task RUNNING (JobManager log) and its "
        "first part committed (output directory listed every 20 ms). **Output stall**: the longest gap between "
        f"consecutive commits from {PRE_S:g} s before the command to {POST_S:g} s after the total's end; *baseline*: "
        f"the longest in the {PRE_S:g} s before the command. **Source stall**: the same over the ends of source "
        "batches of all source subtasks together (each TaskManager logs one line per batch, ms; with a file every "
        f"{plan['feed_every_ms']} ms and a directory listing every {MONITOR_MS} ms the sources as a whole have work "
        "at every listing; a single subtask may get no file for a second, so gaps of one subtask say little); "
        "*over baseline*: the median of each run's stall less its own baseline; and over the growth of the source "
        "tasks' summed `records_out` in `sluice "
        "status` sampled every 0.1 s (reported by heartbeat every 1 s: its resolution). *From the request*: the total "
        "less the command's own start (its request's time at the JobManager → the end). *Source tasks kept*: "
        "the same source subtasks RUNNING in every status sample and no state change of a source task in the "
        "JobManager log within the window. **Check**: after the feed stops, every url's largest committed count "
        "equals its count over all files fed, no line twice (a run failing it fails the benchmark). Medians with "
        "percentile-bootstrap 95 % intervals over the measured runs the load rule kept."
    )
    L.append("")
    L += [
        "| method | runs kept/valid/all | total s | from the request s | command returned s | last task RUNNING s "
        "| output stall s | baseline s | over baseline s | source stall s | baseline s | over baseline s "
        "| source stall (records_out) s | baseline s | source tasks kept |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    meds = {}
    for m in ("a", "b"):
        rs = kept(runs, m)
        allm = [r for r in runs if r["phase"] == "measured" and r["method"] == m]
        valid = [r for r in allm if r.get("ok")]
        meds[m] = {k: est_of(rs, lambda r, k=k: r.get(k)) for k in ("total_s", "server_s", "src_gap_s", "src_base_s")}
        sources = f"{sum(1 for r in rs if r.get('sources_kept'))}/{len(rs)}"
        keys = (
            "total_s", "server_s", "cli_s", "running_s", "out_stall_s", "out_base_s", "out_extra_s", "src_gap_s",
            "src_base_s", "src_extra_s", "src_status_gap_s", "src_status_base_s",
        )  # fmt: skip
        n_ex = sum(1 for r in valid if r.get("excluded"))
        cells = " | ".join(sec(est_of(rs, lambda r, k=k: r.get(k), n_ex)) for k in keys)
        L.append(f"| {SHORT[m]} | {len(rs)}/{len(valid)}/{len(allm)} | {cells} | {sources} |")
    L.append("")
    ta, tb = meds["a"]["total_s"].median, meds["b"]["total_s"].median
    ratio = ta / tb if ta and tb else None
    rb = kept(runs, "b")
    limit = CHECKPOINT_MS / 1000
    worst = max((r["src_gap_s"] for r in rb if r.get("src_gap_s") is not None), default=None)
    sa, sb = meds["a"]["server_s"].median, meds["b"]["server_s"].median
    L.append(
        f"**Against the goal.** End to end, (a)/(b) = {cell(ratio)} (medians; goal ≥ 10): "
        f"{'met' if ratio is not None and ratio >= 10 else 'missed'}; from the request on, "
        f"{cell(sa / sb if sa and sb else None)}. The source tasks, which (b) leaves running: the longest gap between "
        f"source batches was {cell(meds['b']['src_gap_s'].median)} s (median; the worst run {cell(worst)} s; "
        f"baseline before the command {cell(meds['b']['src_base_s'].median)} s) against one checkpoint interval, "
        f"{limit:.2f} s (goal): {'met' if worst is not None and worst <= limit else 'missed'}."
    )
    L.append("")
    L += ["Where the time goes (medians [95 % interval] in seconds, over the same runs):", ""]
    for m in ("a", "b"):
        rs = kept(runs, m)
        parts = [f"{p} {sec(est_of(rs, lambda r, p=p: (r.get('phases') or {}).get(p)))}" for p in PHASES[m]]
        L.append(f"- {SHORT[m]}: " + "; ".join(parts) + ".")
    extra = est_of(rb, lambda r: r.get("pause_ms"))
    sp = est_of(kept(runs, "a"), lambda r: r.get("savepoint_ms"))
    L.append(
        "- `pause_ms` the JobManager reports for (b) (barrier → redeployed tasks running): "
        f"{fmt_estimate(extra, ',.0f')}; the savepoint's `duration_ms` for (a): {fmt_estimate(sp, ',.0f')}."
    )
    L.append("")
    L += ["Phases:", ""] + [f"- *{k}*: {v}" for k, v in PHASE_TEXT.items()] + [""]
    L += ["### Every run", ""]
    L += [
        "| run | phase | method | job | total s | command s | RUNNING s | output stall (baseline) s "
        "| source stall (baseline) s | records_out (baseline) s | source tasks kept "
        "| phases s | pause / savepoint ms | catch-up s | files fed | check | foreign cores | load 1 min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ph = r.get("phases") or {}
        phases = ", ".join(f"{k} {cell(v)}" for k, v in ph.items())
        pms = r.get("pause_ms") if r["method"] == "b" else r.get("savepoint_ms")
        mark = " (excluded)" if r.get("excluded") else ""
        check = r.get("check") or f"FAILED: {r.get('error')}"
        L.append(
            f"| {r['n']} | {r['phase']} | {r['method']} | {' → '.join(j[:8] for j in r.get('jobs', []))} | "
            f"{cell(r.get('total_s'))} | {cell(r.get('cli_s'))} | {cell(r.get('running_s'))} | "
            f"{cell(r.get('out_stall_s'))} ({cell(r.get('out_base_s'))}) | {cell(r.get('src_gap_s'))} "
            f"({cell(r.get('src_base_s'))}) | {cell(r.get('src_status_gap_s'))} ({cell(r.get('src_status_base_s'))}) | "
            f"{'yes' if r.get('sources_kept') else 'no'} ({r.get('source_changes', '—')} changes) | {phases} | "
            f"{cell(pms, ',.0f')} | {cell(r.get('catchup_s'), '.1f')} | {r.get('fed_files', '—')} | {check} | "
            f"{cell(r.get('foreign_cores'))}{mark} | {cell(r.get('load_start'))}→{cell(r.get('load_end'))} |"
        )
    L.append("")
    thr = plan["max_foreign_cores"]
    out_rule = [r for r in runs if r["phase"] == "measured" and r.get("excluded")]
    L.append(
        (
            f"Load rule: a run during which other processes used more than {thr:g} cores on average (from "
            f"{PRE_S:g} s before the command to {POST_S:g} s after the total's end) is left out of the medians "
            f"(marked *excluded*); {len(out_rule)} measured run(s) left out."
        )
        if thr
        else "Load rule: off (every run counted)."
    )
    L.append("")
    L += notes_lines(notes)
    return "\n".join(L) + "\n"


# ================================================================================================
# main
# ================================================================================================
def main() -> int:
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
    args = ap.parse_args()
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 10)
    warmup = args.warmup if args.warmup is not None else (0 if args.quick else 1)
    events = args.events or (50_000 if args.quick else 200_000)
    files = args.files or (10 if args.quick else 40)
    if rounds < 1 or warmup < 0 or events <= 0 or files <= 0 or args.feed_events <= 0 or args.feed_every_ms <= 0:
        ap.error("--rounds >= 1, --warmup >= 0, and positive --events, --files, --feed-events, --feed-every-ms")

    command, facts, temp, work = begin_run(REPO, args.workdir, "reconfigure-bench-", log)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=REPO
    ).stdout.split("\n")
    dirty_paths = sorted({line[3:] for line in dirty if line.strip()})
    t_begin = time.monotonic()
    t0 = time.monotonic()
    data = Data(os.path.join(work, "data"), events, files, args.feed_templates, args.feed_events, args.urls)
    log(
        f"generated {events:,} events in {files} files and {args.feed_templates} feed files of "
        f"{args.feed_events} events ({time.monotonic() - t0:.1f}s)"
    )
    order = [("warm-up", "a")] * warmup
    for i in range(rounds):
        order += [("measured", m) for m in (("a", "b") if i % 2 == 0 else ("b", "a"))]
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
            try:
                Round(cluster, data, args, os.path.join(work, f"round-{n:02d}")).run(method, r)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 — reported; the next rounds go on
                r["ok"] = False
                r["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:400]
            unended = [s for s in r.get("end_states", []) if s not in ("CANCELED", "FINISHED")]
            if unended and r.get("ok"):
                r["ok"] = False
                r["error"] = f"a job did not end when cancelled: {unended}"
            failed = failed or not r.get("ok")
            log(
                f"  total {cell(r.get('total_s'))}s (command {cell(r.get('cli_s'))}s, RUNNING "
                f"{cell(r.get('running_s'))}s), output stall {cell(r.get('out_stall_s'))}s "
                f"(baseline {cell(r.get('out_base_s'))}), source stall {cell(r.get('src_gap_s'))}s "
                f"(baseline {cell(r.get('src_base_s'))}), records_out {cell(r.get('src_status_gap_s'))}s, "
                f"phases {r.get('phases')}; {r.get('check') or r.get('error')}"
                + (" (excluded)" if r.get("excluded") else "")
            )
            if r.get("ok"):
                shutil.rmtree(os.path.join(work, f"round-{n:02d}"), ignore_errors=True)
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
    bad = [r for r in runs if not r.get("ok")]
    if bad:
        notes.append("failed runs: " + "; ".join(f"run {r['n']} ({SHORT[r['method']]}): {r.get('error')}" for r in bad))
    per: collections.Counter[str] = collections.Counter()
    for r in runs:
        per[r["method"]] += r.get("storage_warnings", 0)
    if sum(per.values()):
        notes.append(
            f"the JobManager logged `{STORAGE_WARNING}` (with an empty message) {sum(per.values())} time(s) in the "
            "measured windows: " + ", ".join(f"{SHORT[m]} {k}" for m, k in sorted(per.items()) if k)
        )
    late = max((r.get("feed_late_max", 0) for r in runs), default=0)
    skipped = sum(r.get("feed_skipped", 0) for r in runs)
    notes.append(
        f"the feed landed each file at most {late * 1000:.0f} ms after its slot"
        + (f"; {skipped} slots skipped" if skipped else "")
    )
    catch = median_ci(r.get("catchup_s") for r in runs if r.get("ok"))
    notes.append(
        f"catching up with the initial input and the feed took {fmt_estimate(catch, '.1f')} s per round (submit → "
        "committed counts at least the fed ones); once caught up the job kept up with the feed"
    )
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
    notes.append(f"the invocation took {time.monotonic() - t_begin:.0f} s")
    plan = {
        "events": events,
        "files": files,
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
