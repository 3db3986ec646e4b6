"""bench/job_breakdown_report.py: a Sluice job's phases from its JobManager's and TaskManager's log
lines (the batch line in the format taskmanager/task.py writes, the others as a cluster writes them),
another job's lines ignored; the peer's from its query progress; the section's tables."""

from __future__ import annotations

import os
import sys

import pytest

from taskmanager.task import SOURCE_BATCH_LOG, task_tag

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import job_breakdown_report as jb

JOB = "e9ca65e3b22e4eb4ba66ecb9a6eb4803"
OTHER = "ffff0000ffff0000ffff0000ffff0000"
FACTS = {"commit": "x", "cores": 2, "cpu": "c", "ram": "r", "python": "3", "java": "j", "pyspark": "4", "load": "0"}


def tm(at: str, thread: str, text: str) -> str:
    return f"2026-12-07 22:07:{at} INFO  taskmanager sluice.taskmanager.task [{thread}] {text}\n"


def jm(at: str, job: str, text: str, attempt: bool = True) -> str:
    scope = f"[job {job} attempt 0]" if attempt else f"[job {job}]"
    return f"2026-12-07 22:07:{at} INFO  jobmanager sluice.jobmanager [ThreadPoolExecutor-0_0] {scope} {text}\n"


def batch(at: str, job: str, name: str, sub: int, took: float, plan: float, spark: float) -> str:
    tag = task_tag(job, 0, name, sub)
    return tm(at, f"task-{name}-{sub}", SOURCE_BATCH_LOG % (tag, 0, 40, took, plan, spark))


def end(at: str, job: str, name: str, sub: int) -> str:
    return tm(at, f"task-{name}-{sub}", f"{task_tag(job, 0, name, sub)} reached end of input; waiting")


def job_lines(job: str) -> list[str]:
    return [
        jm("16,968", job, "submitted 'page_views': 4 tasks in 2 slots", attempt=False),
        tm("16,972", "ThreadPoolExecutor-0_8", f"[job {job} attempt 0] deploying {job}/x/page-views/0 to slot 0"),
        tm("16,976", "ThreadPoolExecutor-0_5", f"[job {job} attempt 0] deploying {job}/x/page-views/1 to slot 1"),
        # subtask 1: two batches; subtask 0: one, ending 0.35 s later
        batch("17,500", job, "page-views", 1, 0.5, 0.2, 0.25),
        batch("18,223", job, "page-views", 1, 0.7, 0.1, 0.55),
        end("18,229", job, "page-views", 1),
        batch("18,575", job, "page-views", 0, 1.59, 0.6, 0.9),
        end("18,579", job, "page-views", 0),
        end("18,581", job, "counts", 1),  # not a source: no batch lines; its end is not the sources'
        jm("18,587", job, "triggering checkpoint 2 (final)"),
        jm("18,609", job, "checkpoint 2 completed"),
        tm("18,614", "task-counts-0", f"{task_tag(job, 0, 'counts', 0)} committed part-1.csv (checkpoint 1)"),
        tm("18,620", "task-counts-1", f"{task_tag(job, 0, 'counts', 1)} committed part-2.csv (checkpoint 1)"),
        jm("18,665", job, "RUNNING -> FINISHED"),
    ]


def test_a_jobs_phases_come_from_its_own_lines_only():
    other = [line.replace("22:07:", "22:08:") for line in job_lines(OTHER)]
    p = jb.sluice_phases(job_lines(JOB)[::-1] + other, JOB)  # any order
    assert p["deploy"] == pytest.approx(0.008, abs=1e-6)
    assert p["first read"] == pytest.approx(16.985 - 16.976, abs=1e-6)  # subtask 0's batch began at 16.985
    assert p["calls"] == pytest.approx(1.5)
    assert p["source plan"] == pytest.approx((0.3 + 0.6) / 2)
    assert p["source Spark"] == pytest.approx((0.8 + 0.9) / 2)
    assert p["source rest"] == pytest.approx((1.2 + 1.59) / 2 - 0.45 - 0.85)
    assert p["source skew"] == pytest.approx(0.35, abs=1e-6)
    assert p["final trigger"] == pytest.approx(0.008, abs=1e-6)  # from the last source's end, not the counts'
    assert p["final checkpoint"] == pytest.approx(0.022, abs=1e-6)
    assert p["commit"] == pytest.approx(0.011, abs=1e-6)
    assert p["finish"] == pytest.approx(0.045, abs=1e-6)
    assert p["submitted → FINISHED"] == pytest.approx(1.697, abs=1e-6)


def test_missing_lines_leave_their_phases_unknown():
    lines = [line for line in job_lines(JOB) if "FINISHED" not in line and "(final)" not in line]
    lines = [line.replace(" (plan 0.600s, spark 0.900s)", "") for line in lines]  # a version without the split
    p = jb.sluice_phases(lines, JOB)
    assert p["finish"] is None and p["submitted → FINISHED"] is None
    assert p["final trigger"] is None and p["final checkpoint"] is None
    assert p["source plan"] is None and p["source Spark"] is None and p["source rest"] is None
    assert p["deploy"] == pytest.approx(0.008, abs=1e-6)
    assert jb.sluice_phases([], JOB)["calls"] is None


def test_the_peers_phases_sum_its_batches_with_input():
    progress = [
        {"numInputRows": 0, "durationMs": {"triggerExecution": 900, "latestOffset": 800}},
        {
            "numInputRows": 1000,
            "durationMs": {
                "latestOffset": 300,
                "getBatch": 100,
                "queryPlanning": 200,
                "addBatch": 1000,
                "walCommit": 20,
                "commit": 30,
                "triggerExecution": 1700,
            },
        },
        {"numInputRows": 5, "durationMs": {"addBatch": 100, "triggerExecution": 150}},
    ]
    p = jb.peer_phases(progress)
    assert p == pytest.approx(
        {"planning": 0.6, "execution": 1.1, "commit": 0.05, "other": 0.1, "micro-batches": 1.85, "calls": 2.0}
    )
    assert jb.peer_phases([])["execution"] is None


def test_the_section_has_each_phase_with_its_median_and_interval():
    sluice = [{"window": 1.0 + i / 10, "startup": 1.0, **jb.sluice_phases(job_lines(JOB), JOB)} for i in range(3)]
    peer = [{"window": 0.8, "startup": 0.9, "execution": 1.0 + i / 10, "calls": 1.0} for i in range(3)]
    text = jb.report("cmd", FACTS, [("Sluice", sluice), ("peer", peer)], "The setup.")
    assert "— Where a page-views job's time goes" in text and "The setup." in text
    assert "| Sluice | 3 | 1.100 [1.000–1.200] | 1.000 [1.000–1.000] | 1.5 [1.5–1.5] |" in text
    assert "| source skew | 0.350 [0.350–0.350] |" in text
    assert "| execution | 1.100 [1.000–1.200] |" in text
    assert "| planning | — |" in text  # no run had it
    assert "### Sluice, from its logs" in text and "### The peer, from its query progress" in text
