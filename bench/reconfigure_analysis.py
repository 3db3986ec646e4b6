"""The figures of one reconfiguration run (bench/reconfigure_bench.py), from what the round recorded:
the JobManager's log lines, the TaskManagers' source-batch lines, the output files' first sightings
and the `sluice status` samples. Pure: no clock, no files, no cluster.

All times are on the harness's monotonic clock; log times (local wall clock, ms) are converted with
the round's offset (epoch = monotonic + off).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench_common import log_epoch
from reconfigure_workload import POST_S, PRE_S, SOURCE_CHAIN, SOURCE_TASK

JM_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+\s+jobmanager (.*)$")
TASK_CHANGE = re.compile(r"\[job (\w+)\] task \w+/(\S+)/([\w-]+)/(\d+) -> (\w+)")
STORAGE_WARNING = "storage operation failed"

# one `sluice status` sample: (time, job, job state, [(task, subtask, state, taskmanager, records_out)])
Sample = tuple[float, str, str, list[tuple[str, int, str, str, int]]]
# one task state change in the JobManager's log: (time, job, execution, task, subtask, new state)
Change = tuple[float, str, str, str, str, str]


@dataclass
class Recorded:
    """What a round recorded for its figures."""

    off: float  # epoch seconds = monotonic + off
    first_seen: dict[str, float] = field(default_factory=dict)  # output file -> when first listed
    jm_lines: list[str] = field(default_factory=list)  # the JobManager's log since the round began
    batches: list[tuple[str, str, str]] = field(default_factory=list)  # source batch lines: (log time, job, task)
    samples: list[Sample] = field(default_factory=list)


def max_gap(times: Iterable[float], lo: float, hi: float) -> float | None:
    """The longest interval between consecutive `times` within [lo, hi] (None: fewer than 2)."""
    ts = sorted(t for t in times if lo <= t <= hi)
    if len(ts) < 2:
        return None
    return max(b - a for a, b in zip(ts, ts[1:], strict=False))


def jm_events(lines: Iterable[str], off: float) -> list[tuple[float, str]]:
    """The JobManager's log lines as (monotonic time, text)."""
    jm = []
    for line in lines:
        m = JM_LINE.search(line)
        if m:
            jm.append((log_epoch(m.group(1)) - off, m.group(2)))
    return jm


def task_changes(jm: list[tuple[float, str]], jobs: list[str]) -> list[Change]:
    """The task state changes of `jobs` the JobManager logged."""
    return [(t, m[1], m[2], m[3], m[4], m[5]) for t, text in jm if (m := TASK_CHANGE.search(text)) and m[1] in jobs]


def live_times(r: dict[str, Any], jm: list[tuple[float, str]], changes: list[Change]) -> None:
    """(b): when its barrier's checkpoint was triggered, the last old subtask FINISHED and the last
    new one RUNNING after it, and the reconfiguration COMPLETED."""
    target = r["jobs"][-1]
    barrier = next(
        (t for t, text in jm if f"[job {target} " in text and f"triggering checkpoint {r['barrier']}" in text
         and text.rstrip().endswith(str(r["barrier"]))),
        None,
    )  # fmt: skip
    r["barrier_t"] = barrier
    after = [(t, state) for t, j, _e, _task, _s, state in changes if j == target and barrier and t >= barrier]
    fin = [t for t, state in after if state == "FINISHED"]
    run = [t for t, state in after if state == "RUNNING"]
    r["retired_t"] = max(fin) if fin else None
    r["running_t"] = max(run) if run else r["t_running_seen"]
    r["completed_t"] = next((t for t, text in jm if f"[reconfiguration {r['rid']}] COMPLETED" in text), None)


def analyse(r: dict[str, Any], method: str, rec: Recorded) -> None:
    """Every figure of run `r` (method "a" or "b") into `r`; nothing when it never saw the new
    configuration commit."""
    if "t_first" not in r:
        return
    t_issue, t_first, jobs = r["t_issue"], r["t_first"], r["jobs"]
    jm = jm_events(rec.jm_lines, rec.off)
    r["storage_warnings"] = sum(1 for t, text in jm if STORAGE_WARNING in text and t >= t_issue - PRE_S)
    changes = task_changes(jm, jobs)
    if method == "a":
        running = [t for t, j, _e, _task, _s, state in changes if j == jobs[-1] and state == "RUNNING"]
        r["running_t"] = max(running) if running else r["t_running_seen"]
    else:
        live_times(r, jm, changes)
    t_end = max(t_first, r["running_t"])
    r["total_s"] = t_end - t_issue
    r["running_s"] = r["running_t"] - t_issue
    r["first_commit_s"] = t_first - t_issue
    lo, hi = t_issue - PRE_S, t_end + POST_S
    # the source tasks' state changes inside the window (none: never redeployed)
    r["source_changes"] = sum(1 for t, _j, _e, task, _s, _st in changes if task == SOURCE_TASK and lo <= t <= hi)
    commits = list(rec.first_seen.values())
    r["out_stall_s"] = max_gap(commits, lo, hi)
    r["out_base_s"] = max_gap(commits, lo, t_issue)
    batches = [log_epoch(when) - rec.off for when, job, task in rec.batches if job in jobs and task == SOURCE_TASK]
    r["src_gap_s"] = max_gap(batches, lo, hi)
    r["src_base_s"] = max_gap(batches, lo, t_issue)
    for what in ("out", "src"):
        gap, base = r[f"{what}_gap_s" if what == "src" else "out_stall_s"], r[f"{what}_base_s"]
        r[f"{what}_extra_s"] = gap - base if gap is not None and base is not None else None
    growth, same = source_status(rec.samples, jobs, lo, hi)
    r["src_status_gap_s"] = max_gap(growth, lo, hi)
    r["src_status_base_s"] = max_gap(growth, lo, t_issue)
    r["sources_kept"] = same and method == "b" and r["source_changes"] == 0
    r["phases"] = phases(r, method, t_end)
    req = r.get("request_t")
    r["server_s"] = t_end - req if req is not None else None


def source_status(samples: list[Sample], jobs: list[str], lo: float, hi: float) -> tuple[list[float], bool]:
    """From the status samples: when the source tasks' summed `records_out` grew (a new job's first
    output counts), and whether the first job's source subtasks stayed the same and RUNNING in every
    sample within [lo, hi]."""
    growth: list[float] = []
    last_by_job: dict[str, int] = {}
    same, before_tasks = True, None
    for t, job, _state, tasks in samples:
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
    return growth, same


def phases(r: dict[str, Any], method: str, t_end: float) -> dict[str, float | None]:
    """Where the total went, phase by phase (reconfigure_report.PHASE_TEXT says what each is)."""
    ph: dict[str, float | None] = {}
    req = r.get("request_t")
    ph["client"] = req - r["t_issue"] if req is not None else None
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
    return ph
