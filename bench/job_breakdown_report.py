"""Where one page-views job's time goes, for both systems (pure: no Spark, no cluster; tested with
synthetic logs and progress in tests/unit/test_bench_job_breakdown.py).

Sluice's phases come from its own log lines (`sluice_phases`): the JobManager's `submitted`, the
TaskManager's `deploying`, each source batch (`source batch: offset a -> b in Ns (plan Ps, spark
Ss)`, taskmanager/task.py's SOURCE_BATCH_LOG), `reached end of input`, the final checkpoint's
trigger and completion, the sinks' commits and `RUNNING -> FINISHED`. The peer's come from
Structured Streaming's own query progress (`peer_phases`: each micro-batch's `durationMs`).
`report` turns many runs of each into one RESULTS.md section: medians with 95 % intervals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from bench_common import COMMITTED, LOG_TIME, SOURCE_BATCH, TASK_TAG, log_epoch
from markdown import paragraph, section, table
from stats import fmt_estimate, median_ci

JOB = r"\[job (\w+)(?: attempt \d+)?\]"
SUBMITTED = re.compile(LOG_TIME + r" .*?" + JOB + r" submitted '")
DEPLOYING = re.compile(LOG_TIME + r" .*?" + JOB + r" deploying \S+ to slot")
END_OF_INPUT = re.compile(LOG_TIME + r" .*?" + TASK_TAG + r" reached end of input")
FINAL_TRIGGER = re.compile(LOG_TIME + r" .*?" + JOB + r" triggering checkpoint (\d+) \(final\)")
COMPLETED = re.compile(LOG_TIME + r" .*?" + JOB + r" checkpoint (\d+) completed")
FINISHED = re.compile(LOG_TIME + r" .*?" + JOB + r" RUNNING -> FINISHED")

# the phases of one Sluice job, in order, with what each one is
SLUICE_PHASES = (
    ("deploy", "submitted at the JobManager → every task deployed to its slot"),
    ("first read", "deployed → the first source batch starts (task start, source open, listing)"),
    ("source plan", "per subtask: building its batches' Spark plans (Python and py4j)"),
    ("source Spark", "per subtask: Spark's actions (scan, parse, key group, Arrow into Python)"),
    ("source rest", "per subtask: the rest of its batches (the split by key group, pre-aggregation, sends)"),
    ("source skew", "the slowest source subtask's end of input after the fastest one's"),
    ("final trigger", "the last end of input → the final checkpoint triggered"),
    ("final checkpoint", "triggered → completed"),
    ("commit", "completed → the last sink's commit"),
    ("finish", "the last commit → the job FINISHED at the JobManager"),
    ("submitted → FINISHED", "the whole job at the JobManager"),
)
PEER_PHASES = (
    ("planning", "latestOffset + getBatch + queryPlanning (listing the files, planning the batch)"),
    ("execution", "addBatch: the scan, the aggregation and the state store, and the file sink's write"),
    ("commit", "walCommit + commit (the offset and commit logs)"),
    ("other", "triggerExecution not in the above"),
    ("micro-batches", "triggerExecution summed over the batches with input"),
)


def sluice_phases(lines: Iterable[str], job_id: str) -> dict[str, float | None]:
    """One job's phases in seconds (None: a log line it needs is missing), from the JobManager's and
    every TaskManager's log lines (any order). The source phases are the mean over its source
    subtasks (the tasks with source batch lines); `calls`: their batches per subtask (mean)."""
    points: dict[str, float] = {}
    deployed: list[float] = []
    batches: dict[tuple[str, int], list[tuple[float, float, float | None, float | None]]] = {}
    ends: dict[tuple[str, int], float] = {}
    commits: list[float] = []
    final: str | None = None
    completed: dict[str, float] = {}
    for line in lines:
        if job_id[:8] not in line:
            continue
        if (m := SOURCE_BATCH.match(line)) and m.group(2) == job_id:
            plan, spark = m.group(9), m.group(10)
            batches.setdefault((m.group(4), int(m.group(5))), []).append(
                (
                    log_epoch(m.group(1)),
                    float(m.group(8)),
                    float(plan) if plan else None,
                    float(spark) if spark else None,
                )
            )
        elif (m := END_OF_INPUT.match(line)) and m.group(2) == job_id:
            ends[(m.group(4), int(m.group(5)))] = log_epoch(m.group(1))
        elif (m := COMMITTED.match(line)) and m.group(2) == job_id:
            commits.append(log_epoch(m.group(1)))
        elif (m := DEPLOYING.match(line)) and m.group(2) == job_id:
            deployed.append(log_epoch(m.group(1)))
        elif (m := FINAL_TRIGGER.match(line)) and m.group(2) == job_id:
            final, points["final trigger"] = m.group(3), log_epoch(m.group(1))
        elif (m := COMPLETED.match(line)) and m.group(2) == job_id:
            completed[m.group(3)] = log_epoch(m.group(1))
        elif (m := SUBMITTED.match(line)) and m.group(2) == job_id:
            points["submitted"] = log_epoch(m.group(1))
        elif (m := FINISHED.match(line)) and m.group(2) == job_id:
            points["finished"] = log_epoch(m.group(1))
    source_ends = [t for task, t in ends.items() if task in batches]
    per_sub = list(batches.values())
    starts = [t - took for rows in per_sub for t, took, _p, _s in rows]
    plan = _mean([_total(p for *_x, p, _s in rows) for rows in per_sub])
    spark = _mean([_total(s for *_x, s in rows) for rows in per_sub])
    took = _mean([sum(took for _t, took, _p, _s in rows) for rows in per_sub])
    last_end = max(source_ends) if source_ends else None
    done = completed.get(final) if final is not None else None
    deploy_end = max(deployed) if deployed else None
    last_commit = max(commits) if commits else None
    rest = None if took is None or plan is None or spark is None else max(took - plan - spark, 0.0)
    return {
        "deploy": _between(points.get("submitted"), deploy_end),
        "first read": _between(deploy_end, min(starts) if starts else None),
        "source plan": plan,
        "source Spark": spark,
        "source rest": rest,
        "source skew": _between(min(source_ends), last_end) if source_ends else None,
        "final trigger": _between(last_end, points.get("final trigger")),
        "final checkpoint": _between(points.get("final trigger"), done),
        "commit": _between(done, last_commit),
        "finish": _between(last_commit, points.get("finished")),
        "submitted → FINISHED": _between(points.get("submitted"), points.get("finished")),
        "calls": _mean([float(len(rows)) for rows in per_sub]),
    }


def _between(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(b - a, 0.0)


def _total(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any is unknown (a log line of a version without the figure)."""
    known = list(values)
    return None if any(v is None for v in known) else sum(v for v in known if v is not None)


def _mean(values: Sequence[float | None]) -> float | None:
    return (
        None if not values or any(v is None for v in values) else sum(v for v in values if v is not None) / len(values)
    )


def peer_phases(progress: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The peer's phases in seconds over its micro-batches with input (their `durationMs`); `calls`:
    how many such batches."""
    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    if not batches:
        return {name: None for name, _ in PEER_PHASES} | {"calls": 0.0}

    def total(*keys: str) -> float:
        return sum(float(p.get("durationMs", {}).get(k, 0)) for p in batches for k in keys) / 1000

    planning = total("latestOffset", "getBatch", "queryPlanning")
    execution, commit, trigger = total("addBatch"), total("walCommit", "commit"), total("triggerExecution")
    return {
        "planning": planning,
        "execution": execution,
        "commit": commit,
        "other": max(trigger - planning - execution - commit, 0.0),
        "micro-batches": trigger,
        "calls": float(len(batches)),
    }


def _rows(phases: Sequence[tuple[str, str]], runs: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [[name, fmt_estimate(median_ci(r.get(name) for r in runs), ".3f"), what] for name, what in phases]


def report(
    command: str,
    facts: dict[str, Any],
    arms: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    setup: str,
    notes: Sequence[str] = (),
) -> str:
    """The RESULTS.md section: each arm's (name, runs) window, startup and calls, then its phases
    (median [95 % interval] over its runs): Sluice's from its logs, the peer's (the arm named
    "peer") from its query progress; `setup` says what ran."""

    def window_row(name: str, runs: Sequence[dict[str, Any]]) -> list[str]:
        return [
            name,
            str(len(runs)),
            fmt_estimate(median_ci(r.get("window") for r in runs), ".3f"),
            fmt_estimate(median_ci(r.get("startup") for r in runs), ".3f"),
            fmt_estimate(median_ci(r.get("calls") for r in runs), ".1f"),
        ]

    blocks = [
        paragraph(setup),
        table(
            ("system", "runs", "window s", "startup s", "Spark calls per source subtask / micro-batches"),
            [window_row(name, runs) for name, runs in arms],
        ),
    ]
    for name, runs in arms:
        peer = name == "peer"
        title = "### The peer, from its query progress" if peer else f"### {name}, from its logs"
        blocks.append(
            [title, ""] + table(("phase", "seconds", "what"), _rows(PEER_PHASES if peer else SLUICE_PHASES, runs))
        )
    return section("Where a page-views job's time goes", command, facts, blocks, notes)
