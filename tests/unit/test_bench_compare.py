"""bench/compare.py reads latency and throughput timelines out of TaskManager log
lines (bench/compare_joblog.py): the lines a task and its file sink really write
(same logging setup, same format strings) must parse into the batches, snapshots
and commits of one job, and the statistics on them (bench/compare_figures.py)
must weigh events correctly; its Sluice jobs run in a fixed order
(bench/compare_plan.py) and its section (bench/compare_report.py) gives medians
with intervals, loads and the output check."""

from __future__ import annotations

import logging
import os
import sys
from types import SimpleNamespace

import pyarrow as pa
import pytest

from sluice import logs
from taskmanager.operators.sinks import FileSinkWriter
from taskmanager.spark_engine import Batch
from taskmanager.task import SOURCE_BATCH_LOG, SOURCE_SNAPSHOT_LOG, task_tag

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import compare_figures
import compare_joblog
import compare_report
import output_check
import stats
from compare_plan import SluiceJob, sluice_jobs
from generate_page_views import generate

JOB, OTHER = "a1b2c3d4e5f6a7b8", "ffffeeeeddddcccc"


@pytest.fixture
def taskmanager_log(tmp_path):
    """Route logging the way a TaskManager does, into a file; restore the root logger after."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    path = tmp_path / "taskmanager-0.log"
    logs.setup("taskmanager", log_file=str(path))
    yield str(path)
    for h in root.handlers:
        h.close()
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


def sink(tmp_path, job: str, subtask: int) -> FileSinkWriter:
    return FileSinkWriter(
        {"path": str(tmp_path / f"out-{job}")}, subtask, job, 0, True, tag=task_tag(job, 1, "agg", subtask)
    )


def commit_one(writer: FileSinkWriter, checkpoint_id: int) -> None:
    writer.process(Batch(engine=None, table=pa.table({"url": ["/a"], "count": [1]})))
    writer.snapshot(checkpoint_id)
    writer.notify_complete(checkpoint_id)


def test_task_and_sink_log_lines_parse_into_one_jobs_batches_and_latencies(tmp_path, taskmanager_log):
    data = str(tmp_path / "events")
    generate(data, events=400, files=4, urls=50, seed=3)
    log = logging.getLogger("sluice.taskmanager.task")
    src0, src1 = task_tag(JOB, 1, "src", 0), task_tag(JOB, 1, "src", 1)
    # subtask 0 reads its first file (offset 0 -> 1), snapshots at 1 in checkpoint 1, which commits
    log.info(SOURCE_BATCH_LOG, src0, 0, 1, 0.25, 0.01, 0.2)
    log.info(SOURCE_SNAPSHOT_LOG, src0, 1, "offset 1")
    # subtask 1 reads both of its files; its snapshot (checkpoint 2) never commits
    log.info(SOURCE_BATCH_LOG, src1, 0, 2, 0.5, 0.01, 0.4)
    log.info(SOURCE_SNAPSHOT_LOG, src1, 2, "offset 2")
    commit_one(sink(tmp_path, JOB, 0), 1)
    # another job's lines on the same TaskManager are not this job's
    log.info(SOURCE_BATCH_LOG, task_tag(OTHER, 1, "src", 0), 0, 1, 0.1, 0.01, 0.05)
    log.info(SOURCE_SNAPSHOT_LOG, task_tag(OTHER, 1, "src", 0), 1, "offset 1")
    commit_one(sink(tmp_path, OTHER, 0), 7)
    for h in logging.getLogger().handlers:
        h.flush()

    jl = compare_joblog.SluiceJobLog([taskmanager_log], JOB, data)

    files = sorted(os.listdir(data))
    lines = [sum(1 for _ in open(os.path.join(data, f))) for f in files]
    assert [(b["subtask"], b["lo"], b["hi"], b["events"]) for b in jl.batches] == [
        (0, 0, 1, lines[0]),
        (1, 0, 2, lines[1] + lines[3]),
    ]
    assert [(s["subtask"], s["checkpoint"], s["offset"]) for s in jl.snapshots] == [(0, 1, 1), (1, 2, 2)]
    assert set(jl.commits) == {1}
    pairs, missing = jl.latencies()
    assert missing == lines[1] + lines[3]
    assert len(pairs) == 1 and pairs[0][1] == lines[0]
    assert 0.25 <= pairs[0][0] < 5  # from the start of the read (0.25 s before its log line) to the commit
    assert sum(e for _s, _e, e in jl.spans()) == lines[0] + lines[1] + lines[3]


def test_weighted_percentile_counts_each_value_by_its_events():
    pairs = [(1.0, 10), (2.0, 30), (9.0, 1)]
    assert compare_figures.weighted_pct(pairs, 10) == 1.0
    assert compare_figures.weighted_pct(pairs, 50) == 2.0
    assert compare_figures.weighted_pct(pairs, 99) == 9.0
    assert compare_figures.weighted_pct([], 50) is None


def test_timeline_spreads_each_batch_over_its_duration_and_keeps_every_event():
    batches = [(100.0, 101.0, 4000), (100.5, 100.75, 1000)]
    tl = compare_figures.timeline(batches, origin=100.0)
    assert sum(rate * compare_figures.BIN for _t, rate in tl) == pytest.approx(5000)
    rates = dict(tl)
    assert rates[0.0] == pytest.approx(4000)  # only the long batch: 4000 events/s
    assert rates[0.5] == pytest.approx(4000 + 4000)  # plus 1000 events in 0.25 s


# -- the order of Sluice's jobs ---------------------------------------------------------------------------
def test_sluice_jobs_alternate_checkpoints_on_and_off_in_the_order_the_phase_always_ran_them():
    jobs = [
        (j.group, j.label, j.interval, j.input) for j in sluice_jobs(warmups=3, runs=3, short_runs=2, overhead=True)
    ]
    tp, ov = "throughput", "overhead"
    assert jobs == [
        ("warmup", "warm-up 1", 1000, tp), ("warmup", "warm-up 2", 0, tp), ("warmup", "warm-up 3", 1000, tp),
        ("runs", "run 1", 1000, tp), ("runs", "run 1", 0, tp),
        ("runs", "run 2", 0, tp), ("runs", "run 2", 1000, tp),
        ("runs", "run 3", 1000, tp), ("runs", "run 3", 0, tp),
        ("short", "short 1", 250, tp), ("short", "short 2", 250, tp),
        ("overhead", "overhead 1", 1000, ov), ("overhead", "overhead 1", 0, ov),
        ("overhead", "overhead 2", 0, ov), ("overhead", "overhead 2", 1000, ov),
        ("overhead", "overhead 3", 1000, ov), ("overhead", "overhead 3", 0, ov),
    ]  # fmt: skip


@pytest.mark.parametrize("warmups,runs,short_runs,overhead", [(4, 3, 1, False), (6, 5, 3, True), (1, 1, 0, False)])
def test_sluice_jobs_match_the_loops_they_replaced(warmups, runs, short_runs, overhead):
    """The loops of the Sluice phase before bench/run_matrix.py, for the quick and full sizes."""
    old = [SluiceJob("warmup", f"warm-up {i + 1}", 1000 if i % 2 == 0 else 0, "throughput") for i in range(warmups)]
    for i in range(runs):
        for interval in (1000, 0) if i % 2 == 0 else (0, 1000):
            old.append(SluiceJob("runs", f"run {i + 1}", interval, "throughput"))
    old += [SluiceJob("short", f"short {i + 1}", 250, "throughput") for i in range(short_runs)]
    if overhead:
        for i in range(runs):
            for interval in (1000, 0) if i % 2 == 0 else (0, 1000):
                old.append(SluiceJob("overhead", f"overhead {i + 1}", interval, "overhead"))
    assert sluice_jobs(warmups, runs, short_runs, overhead) == old


# -- the report: medians with intervals, loads per run, the load rule, the output check ------------------
def good_output():
    return output_check.OutputCheck(lines=10, paths=["part-1"])


def bad_output():
    v = output_check.Violation("duplicate line", "/o/part-000000000003-00000-x.csv", 1, "/a", "/a,2 was already ...")
    return output_check.OutputCheck(violation=v, paths=["part-1"])


def fabricated(loads: list[float], peer_tput: list[float], sluice_bad: bool = False):
    """Results shaped as sluice_phase, peer_phase and failover_bench.one_run return them."""

    def sluice_run(i, mode, tput, load):
        return {
            "label": f"run {i + 1}",
            "mode": mode,
            "job_id": f"job{i}{mode}",
            "throughput": tput,
            "to_running": 0.3,
            "latency": [(1.0 + i / 10, 1000)] if mode == "on" else [],
            "load_start": load,
            "load_end": load,
            "output_check": bad_output() if sluice_bad and i == 0 and mode == "on" else good_output(),
        }

    runs = []
    for i, load in enumerate(loads):
        runs += [sluice_run(i, "on", 150_000.0 + 1000 * i, load), sluice_run(i, "off", 152_000.0 + 1000 * i, load)]
    sl = {
        "runs": runs,
        "warmup": [],
        "short": [],
        "overhead": [],
        "paced": {},
        "startup": 12.0,
        "recovery": [
            {"label": "recovery 1", "job_id": "r1", "detected": 0.5, "running": 1.2, "first_written_file": 1.9}
            | {"load_start": 1.0, "load_end": 1.1, "output_check": good_output()}
        ],
    }
    peer_runs = [
        {"label": f"run {i + 1}", "throughput": t, "detail": [(0.0, 1000, 500)], "query_start": 0.1, "batches": 4}
        | {"load_start": 1.0, "load_end": 1.2, "output_check": good_output()}
        for i, t in enumerate(peer_tput)
    ]
    peer = {
        "warmup": {"process": 1.0, "session": 3.0},
        "warmups": [],
        "runs": peer_runs,
        "recovery": [
            {"run": 1, "ready": 4.0, "first_output": 6.0, "first_commit": 6.1, "load_start": 1.0, "load_end": 1.0}
            | {"output_check": good_output()}
        ],
        "paced": None,
    }
    failover = [
        {"leader": 6.5, "running": 7.0, "ckpt": 7.9, "load_start": 1, "load_end": 1, "output_check": good_output()}
    ]
    return sl, peer, failover


CFG = SimpleNamespace(
    size="quick",
    runs=3,
    warmups=4,
    events=200_000,
    files=16,
    recovery_events=1_600_000,
    recovery_files=160,
    mfpt=4,
    recovery_mfpt=4,
    overhead_events=None,
    overhead_files=None,
    paced_files=0,
    session_timeout=6.0,
)
FACTS = {"commit": "abc1234", "cores": 2, "cpu": "x", "ram": "1 GiB", "python": "3", "java": "17", "load": "1 1 1"}


def test_the_report_gives_medians_with_intervals_and_each_runs_load():
    sl, peer, failover = fabricated(loads=[1.0, 1.5, 2.0], peer_tput=[120_000.0, 125_000.0, 130_000.0])
    f = compare_figures.summarize(sl, peer, failover, max_load=4.0)
    text = compare_report.report(CFG, FACTS, "python bench/compare.py", sl, peer, failover, f, None, [])
    e = f["s_tput_est"]
    assert (e.median, e.n, e.excluded) == (151_000.0, 3, 0) and e.low <= e.median <= e.high
    assert f"| throughput, events/s | {stats.fmt_estimate(e)} | {stats.fmt_estimate(f['p_tput_est'])} |" in text
    assert "151,000 [" in text and "125,000 [" in text
    assert "| recovery: kill -9 → first output written after it, s | 1.90 (1 run, no interval) (TaskManager) |" in text
    assert "| 1 | 150,000 | 1.00→1.00 | 152,000 | 1.00→1.00 | 120,000 | 1.00→1.20 | 4 |" in text
    assert "exceeded 4 is left out of every median" in text and "no run exceeded it." in text
    assert "| yes | yes |  |" in text and "OUTPUT CHECK FAILED" not in text
    assert "committed output exactly once in every run: met" in text


def test_runs_above_the_load_threshold_are_marked_and_left_out():
    sl, peer, failover = fabricated(loads=[1.0, 5.0, 2.0], peer_tput=[120_000.0, 125_000.0, 130_000.0])
    f = compare_figures.summarize(sl, peer, failover, max_load=4.0)
    text = compare_report.report(CFG, FACTS, "cmd", sl, peer, failover, f, None, [])
    assert (f["s_tput_est"].n, f["s_tput_est"].excluded) == (2, 1)
    assert f["s_tput"] == 151_000.0  # the median of 150,000 and 152,000: run 2 (151,000) is left out
    assert "| 2 | 151,000 *excluded* | 5.00→5.00 (excluded) |" in text
    assert "Sluice throughput, checkpoints on 1 of 3; Sluice throughput, checkpoints off 1 of 3 left out" in text
    assert f["s_p50"] != 1.1  # run 2's latency is left out too


def test_all_runs_excluded_gives_no_valid_runs_and_no_verdict():
    sl, peer, failover = fabricated(loads=[5.0, 5.0, 5.0], peer_tput=[120_000.0])
    f = compare_figures.summarize(sl, peer, failover, max_load=4.0)
    text = compare_report.report(CFG, FACTS, "cmd", sl, peer, failover, f, None, [])
    row = "| throughput, events/s | no valid runs (3 left out by the load rule) | 120,000 (1 run, no interval) |"
    assert row in text
    assert "throughput ratio ≥ 1.0: not judged (no valid runs)" in text


def test_an_output_violation_fails_the_report_loudly():
    sl, peer, failover = fabricated(loads=[1.0, 1.0, 1.0], peer_tput=[120_000.0], sluice_bad=True)
    f = compare_figures.summarize(sl, peer, failover, max_load=None)
    text = compare_report.report(CFG, FACTS, "cmd", sl, peer, failover, f, None, ["a note"])
    head = text.split("\n")[2]
    assert head.startswith("**OUTPUT CHECK FAILED in 1 run(s): committed output not exactly once** — Sluice run 1")
    assert "duplicate line (part-000000000003-00000-x.csv line 1, key '/a')" in head
    assert "| **NO** | yes |  |" in text and "committed output exactly once in every run: **MISSED**" in text
    assert "- **OUTPUT CHECK FAILED**: Sluice run 1 (job job0on): VIOLATION: duplicate line" in text
    assert "Load rule: off" in text
