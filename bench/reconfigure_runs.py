"""One round of the reconfiguration benchmark (bench/reconfigure_bench.py) on the local cluster: a
fresh page_views job on fresh input with a steady feed, caught up, a steady window, the change by
one method ((a) `sluice rescale`, (b) `sluice reconfigure`), the new configuration running and
committing, a window after it, then the exact check of the committed output; the job is cancelled
whatever happens. What the round records goes to reconfigure_analysis for the run's figures.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench_common import SOURCE_BATCH
from page_views_recovery import DirWatch
from page_views_runs import SLUICE, TERMINAL, BenchError, Cluster, sluice
from procstat import ResourceMeter, excluded
from reconfigure_analysis import Recorded, analyse
from reconfigure_workload import (
    CHECKPOINT_MS,
    MONITOR_MS,
    OPERATOR,
    P_FROM,
    P_TO,
    POLL,
    POST_S,
    PRE_S,
    SINK_CHAIN,
    Data,
    Feeder,
    OutputReader,
)
from stats import load1

from sluice.v1 import common_pb2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job_state(info: common_pb2.JobInfo) -> str:
    return common_pb2.JobState.Name(info.state).removeprefix("JOB_STATE_")


def task_state(t: common_pb2.TaskStatus) -> str:
    return common_pb2.ExecutionState.Name(t.state).removeprefix("EXECUTION_STATE_")


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
        if state in TERMINAL:
            return state
        if not asked:
            sluice("cancel", job, "--cluster-dir", cluster.dir, timeout=120, check=False)
            asked = True
        if time.monotonic() > deadline:
            return f"{state} after {timeout:.0f}s"
        time.sleep(0.2)


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


class Round:
    """One round: `run(method, r)` puts the run's figures into `r` (a failure raises, after the
    job was cancelled and the figures of what was recorded were taken)."""

    def __init__(self, cluster: Cluster, data: Data, args: argparse.Namespace, rdir: str):
        self.cluster, self.data, self.args, self.rdir = cluster, data, args, rdir
        self.rec = Recorded(off=0.0)
        self.r: dict[str, Any] = {}
        self.jobs: list[str] = []
        self.meter: ResourceMeter | None = None

    def sample(self, job: str) -> common_pb2.JobInfo | None:
        """One `status` of `job`, kept: (time, job, state, [(task, subtask, state, taskmanager, records_out)])."""
        try:
            info = self.cluster.raw(job)
        except Exception:  # noqa: BLE001 — a status that failed is a missing sample
            return None
        tasks = [(t.operator, t.subtask, task_state(t), t.taskmanager, t.counters.records_out) for t in info.tasks]
        self.rec.samples.append((time.monotonic(), job, job_state(info), tasks))
        return info

    def sample_until(self, job: str, until: float) -> None:
        while time.monotonic() < until:
            self.sample(job)
            time.sleep(POLL)

    def wait_job(self, job: str, ok: Callable[[Any], bool], what: str, timeout: float) -> common_pb2.JobInfo:
        deadline = time.monotonic() + timeout
        while True:
            info = self.cluster.raw(job)
            if ok(info):
                return info
            if job_state(info) in TERMINAL:
                raise BenchError(f"job {job} ended {job_state(info)} while waiting for {what}: {info.failure[-300:]}")
            if time.monotonic() > deadline:
                raise BenchError(f"job {job}: no {what} after {timeout:.0f}s (state {job_state(info)})")
            time.sleep(POLL)

    def wait_covered(self, reader: OutputReader, feeder: Feeder, expected: Counter, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            reader.poll()
            if reader.covers(expected):
                return
            if feeder.error is not None:
                raise BenchError(f"the feed failed: {feeder.error}")
            if time.monotonic() > deadline:
                short = len(reader.short(expected))
                raise BenchError(f"{what}: {short} urls still below what was fed after {timeout:.0f}s")
            time.sleep(0.2)

    def run(self, method: str, r: dict[str, Any]) -> None:
        """One round of `method`; its figures go into `r` (a failure raises, after cleaning up)."""
        self.r = r
        cl = self.cluster
        inp, out, stage = (os.path.join(self.rdir, d) for d in ("in", "out", "stage"))
        self.data.copy_initial(inp)
        self.rec.off = time.time() - time.monotonic()  # epoch = monotonic + off
        tm_log = LogTail(os.path.join(cl.dir, "log", "taskmanager-*.log"))
        jm_log = LogTail(os.path.join(cl.dir, "log", "jobmanager-*.log"))
        watch = DirWatch(out)
        watch.start()
        feeder = Feeder(self.data, inp, stage, self.args.feed_every_ms / 1000)
        reader = OutputReader(out)
        try:
            job = self.start(inp, out, feeder, reader)
            self.meter = ResourceMeter({"Sluice": lambda: sorted(cl.pids)}).start()
            self.sample_until(job, time.monotonic() + PRE_S)  # the steady window, then the change
            before = set(watch.first_seen)
            target, new_config = self.change(method, job)
            self.wait_new_config(target, watch, before, new_config)
            self.post_window(method, target)
            self.check(feeder, reader)
            r["ok"] = True
        finally:
            feeder.stop()
            if self.meter is not None:
                self.meter.stop()
            for j in reversed(self.jobs):
                r.setdefault("end_states", []).append(cancel_and_wait(cl, j))
            watch.stop_event.set()
            watch.join(timeout=5)
            self.analyse(method, watch, tm_log, jm_log)

    def start(self, inp: str, out: str, feeder: Feeder, reader: OutputReader) -> str:
        """The job submitted at P_FROM, the feed started, every task RUNNING and the output caught up."""
        r = self.r
        r["load_start"] = load1()
        t_submit = time.monotonic()
        job = self.cluster.submit(
            "--input", inp, "--output", out,
            "--monitor-interval", str(MONITOR_MS), "--checkpoint-interval", str(CHECKPOINT_MS),
            parallelism=P_FROM,
        )  # fmt: skip
        self.jobs.append(job)
        r["jobs"] = [job]
        feeder.start()
        self.wait_job(job, all_running, "every task RUNNING", 120)
        self.wait_covered(reader, feeder, feeder.snapshot(), self.args.timeout, "catching up")
        r["catchup_s"] = time.monotonic() - t_submit
        t = time.monotonic()
        self.wait_covered(reader, feeder, feeder.snapshot(), 60, "keeping up")
        r["lag_s"] = time.monotonic() - t
        return job

    def command(self, method: str, job: str) -> str:
        """The change's command, sampling `job` while it runs; the last line it printed."""
        cl, r = self.cluster, self.r
        cmd = (
            ["rescale", job, "--parallelism", str(P_TO)]
            if method == "a"
            else ["reconfigure", job, "--operator", OPERATOR, "--parallelism", str(P_TO)]
        )
        r["t_issue"] = t_issue = time.monotonic()
        proc = subprocess.Popen(
            [*SLUICE, *cmd, "--cluster-dir", cl.dir],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO,
        )  # fmt: skip
        try:
            while proc.poll() is None:
                self.sample(job)
                time.sleep(POLL)
            stdout, stderr = proc.communicate(timeout=self.args.timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        r["t_cli"] = time.monotonic()
        r["cli_s"] = r["t_cli"] - t_issue
        if proc.returncode != 0:
            raise BenchError(f"sluice {' '.join(cmd)} exited {proc.returncode}: {stderr.strip()[-400:]}")
        return stdout.strip().splitlines()[-1].strip()

    def change(self, method: str, job: str) -> tuple[str, Callable[[str], bool]]:
        """The change by `method`: the job of the new configuration and which part files are its."""
        last = self.command(method, job)
        r, off = self.r, self.rec.off
        old = self.cluster.raw(job)
        if method == "a":
            target = last
            self.jobs.append(target)
            r["jobs"].append(target)
            sp = old.savepoints[-1]
            r["request_t"] = sp.trigger_ms / 1000 - off
            r["savepoint_done_t"] = (sp.trigger_ms + sp.duration_ms) / 1000 - off
            r["savepoint_ms"] = sp.duration_ms
            r["old_ended_t"] = old.ended_ms / 1000 - off if old.ended_ms else None
            return target, lambda name: f"-{target[:8]}-" in name
        rid, status = last.split()
        rc = old.reconfigurations[-1]
        if status != "COMPLETED" or rc.id != rid:
            raise BenchError(f"reconfiguration {rid}: {status} ({rc.failure})")
        r["rid"], r["barrier"], r["pause_ms"] = rid, rc.checkpoint_id, rc.pause_ms
        r["request_t"] = rc.trigger_ms / 1000 - off
        r["redeployed"] = list(rc.redeployed)
        r["switched"] = list(rc.switched)

        def new_config(name: str) -> bool:
            m = re.match(r"part-(\d+)-", name)
            return m is not None and int(m.group(1)) > rc.checkpoint_id

        return job, new_config

    def wait_new_config(
        self, target: str, watch: DirWatch, before: set[str], new_config: Callable[[str], bool]
    ) -> None:
        """Until the new configuration has every task RUNNING (P_TO sinks) and a part of its own committed."""
        t_running_seen = t_first = None
        deadline = time.monotonic() + self.args.timeout
        while t_running_seen is None or t_first is None:
            info = self.sample(target)
            if t_running_seen is None and info is not None and all_running(info):
                sinks = [t for t in info.tasks if SINK_CHAIN in t.operator]
                if len(sinks) == P_TO:
                    t_running_seen = time.monotonic()
            new = [watch.first_seen[n] for n in list(watch.first_seen) if n not in before and new_config(n)]
            if new:
                t_first = min(new)
            if info is not None and job_state(info) in TERMINAL:
                raise BenchError(f"job {target} ended {job_state(info)}: {info.failure[-300:]}")
            if time.monotonic() > deadline:
                raise BenchError(
                    f"job {target}: the new configuration not running and committing after {self.args.timeout:.0f}s"
                )
            time.sleep(POLL)
        self.r["t_running_seen"], self.r["t_first"] = t_running_seen, t_first

    def post_window(self, method: str, target: str) -> None:
        """POST_S more of samples, then the run's load figures."""
        r = self.r
        if method == "a":
            r["submitted_t"] = self.cluster.raw(target).submitted_ms / 1000 - self.rec.off
        self.sample_until(target, max(r["t_first"], r["t_running_seen"]) + POST_S)
        assert self.meter is not None
        usage = self.meter.stop()
        self.meter = None
        r["foreign_cores"] = usage.foreign_cores()
        r["excluded"] = excluded(usage, self.args.max_foreign_cores or None)
        r["load_end"] = load1()

    def check(self, feeder: Feeder, reader: OutputReader) -> None:
        """The feed stopped, the committed counts must come to the sum of every file fed, exactly."""
        r = self.r
        feeder.stop()
        if feeder.error is not None:
            raise BenchError(f"the feed failed: {feeder.error}")
        expected = feeder.snapshot()
        r["fed_files"], r["events_total"] = feeder.fed, sum(expected.values())
        r["feed_late_max"], r["feed_skipped"] = feeder.late_max, feeder.skipped
        deadline = time.monotonic() + self.args.timeout
        while True:
            reader.poll()
            if reader.final == dict(expected):
                break
            over = reader.over(expected)
            if over or time.monotonic() > deadline:
                short = reader.short(expected)
                u = over[0] if over else short[0]
                raise BenchError(
                    f"committed counts differ from the input's: {len(over)} urls above, {len(short)} below "
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

    def analyse(self, method: str, watch: DirWatch, tm_log: LogTail, jm_log: LogTail) -> None:
        """The run's figures from what was recorded (a failure of its own is a note of the run)."""
        try:
            self.rec.first_seen = dict(watch.first_seen)
            self.rec.jm_lines = jm_log.lines()
            self.rec.batches = [
                (m.group(1), m.group(2), m.group(4)) for line in tm_log.lines() if (m := SOURCE_BATCH.search(line))
            ]
            analyse(self.r, method, self.rec)
        except Exception as exc:  # noqa: BLE001 — the figures of a run that failed anyway
            self.r.setdefault("notes", []).append(f"analysis failed: {type(exc).__name__}: {exc}")
