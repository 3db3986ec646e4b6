"""bench/compare.py reads latency and throughput timelines out of TaskManager log
lines: the lines a task and its file sink really write (same logging setup,
same format strings) must parse into the batches, snapshots and commits of one
job, and the statistics on them must weigh events correctly."""

from __future__ import annotations

import logging
import os
import sys

import pyarrow as pa
import pytest

from sluice import logs
from taskmanager.operators.sinks import FileSinkWriter
from taskmanager.spark_engine import Batch
from taskmanager.task import SOURCE_BATCH_LOG, SOURCE_SNAPSHOT_LOG, task_tag

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare
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
    log.info(SOURCE_BATCH_LOG, src0, 0, 1, 0.25)
    log.info(SOURCE_SNAPSHOT_LOG, src0, 1, "offset 1")
    # subtask 1 reads both of its files; its snapshot (checkpoint 2) never commits
    log.info(SOURCE_BATCH_LOG, src1, 0, 2, 0.5)
    log.info(SOURCE_SNAPSHOT_LOG, src1, 2, "offset 2")
    commit_one(sink(tmp_path, JOB, 0), 1)
    # another job's lines on the same TaskManager are not this job's
    log.info(SOURCE_BATCH_LOG, task_tag(OTHER, 1, "src", 0), 0, 1, 0.1)
    log.info(SOURCE_SNAPSHOT_LOG, task_tag(OTHER, 1, "src", 0), 1, "offset 1")
    commit_one(sink(tmp_path, OTHER, 0), 7)
    for h in logging.getLogger().handlers:
        h.flush()

    jl = compare.SluiceJobLog([taskmanager_log], JOB, data)

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
    assert compare.weighted_pct(pairs, 10) == 1.0
    assert compare.weighted_pct(pairs, 50) == 2.0
    assert compare.weighted_pct(pairs, 99) == 9.0
    assert compare.weighted_pct([], 50) is None


def test_timeline_spreads_each_batch_over_its_duration_and_keeps_every_event():
    batches = [(100.0, 101.0, 4000), (100.5, 100.75, 1000)]
    tl = compare.timeline(batches, origin=100.0)
    assert sum(rate * compare.BIN for _t, rate in tl) == pytest.approx(5000)
    rates = dict(tl)
    assert rates[0.0] == pytest.approx(4000)  # only the long batch: 4000 events/s
    assert rates[0.5] == pytest.approx(4000 + 4000)  # plus 1000 events in 0.25 s
