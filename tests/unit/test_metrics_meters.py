"""Rates, time shares and a task's I/O bookkeeping (sluice/metrics), time as an input."""

from __future__ import annotations

import pytest

from sluice.metrics.meters import BACKPRESSURED, BUSY, IDLE, Meter, TimeShare
from sluice.metrics.task_metrics import TaskIO


def test_meter_rate_over_its_span():
    m = Meter(span=60, interval=5)
    assert m.rate(0.0) == 0.0
    for t in range(0, 61):
        m.mark(100, float(t))  # 100 per second
    assert m.count == 6100
    assert m.rate(60.0) == pytest.approx(100.0, rel=0.1)


def test_meter_rate_forgets_what_is_older_than_the_span():
    m = Meter(span=10, interval=1)
    for t in range(0, 10):
        m.mark(1000, float(t))
    for t in range(10, 40):
        m.mark(10, float(t))
    assert m.rate(40.0) == pytest.approx(10.0, rel=0.2)


def test_meter_set_count_follows_an_outside_counter():
    m = Meter(span=10, interval=1)
    for t in range(0, 11):
        m.set_count(t * 50, float(t))
    assert m.rate(10.0) == pytest.approx(50.0, rel=0.05)


def test_time_share_idle_backpressured_busy():
    ts = TimeShare(span=5)
    ts.add(IDLE, 2.0, now=2.0)  # 0..2 idle
    ts.add(BACKPRESSURED, 1.0, now=4.0)  # 3..4 backpressured; 2..3 and 4..5 busy
    shares = ts.ms_per_second(5.0)
    assert shares[IDLE] == pytest.approx(400.0)
    assert shares[BACKPRESSURED] == pytest.approx(200.0)
    assert shares[BUSY] == pytest.approx(400.0)


def test_time_share_counts_a_wait_in_progress_and_forgets_old_time():
    ts = TimeShare(span=5)
    ts.add(IDLE, 5.0, now=5.0)
    ts.start(BACKPRESSURED, 8.0)
    shares = ts.ms_per_second(10.0)  # window 5..10: idle none, backpressured 8..10
    assert shares[IDLE] == pytest.approx(0.0)
    assert shares[BACKPRESSURED] == pytest.approx(400.0)
    ts.stop(BACKPRESSURED, 10.0)
    assert ts.ms_per_second(10.0)[BACKPRESSURED] == pytest.approx(400.0)


def test_time_share_is_bounded():
    ts = TimeShare(span=5, max_intervals=100)
    for i in range(10_000):
        ts.add(IDLE if i % 2 else BACKPRESSURED, 0.0001, now=i * 0.001)
    assert len(ts._intervals) <= 100


def test_nothing_measured_reads_zero():
    assert TimeShare().ms_per_second(3.0) == {IDLE: 0.0, BACKPRESSURED: 0.0, BUSY: 0.0}


def test_task_io_checkpoint_timings():
    io = TaskIO()
    io.first_barrier(7, now=10.0)
    io.first_barrier(7, now=10.5)  # later barriers of the same checkpoint do not move the start
    io.snapshot_taken(7, sync_seconds=0.25, now=12.25)  # aligned at 12.0
    io.snapshot_written(7, async_seconds=0.5)
    io.snapshot_written(6, async_seconds=9.0)  # an older checkpoint's upload does not overwrite
    snap = io.snapshot(13.0)
    assert (snap.checkpoint_id, snap.checkpoint_alignment_ms, snap.checkpoint_sync_ms, snap.checkpoint_async_ms) == (
        7,
        2000,
        250,
        500,
    )


def test_task_io_rates_and_queues():
    io = TaskIO()
    for t in range(0, 11):
        io.read(10, 1000, float(t))
        io.wrote(t * 5, t * 500, float(t))
        io.idle(0.5, float(t))
    io.queues(2.0, -1.0)  # clamped
    snap = io.snapshot(10.0)
    assert snap.records_in == 110
    assert snap.records_in_per_second == pytest.approx(10.0, rel=0.1)
    assert snap.bytes_out_per_second == pytest.approx(500.0, rel=0.1)
    assert snap.idle_ms_per_second == pytest.approx(500.0, rel=0.15)
    assert (snap.input_queue_usage, snap.output_queue_usage) == (1.0, 0.0)


def test_a_task_that_never_waits_is_busy():
    io = TaskIO()
    io.running(0.0)
    snap = io.snapshot(4.0)
    assert (snap.busy_ms_per_second, snap.idle_ms_per_second, snap.backpressured_ms_per_second) == (1000.0, 0.0, 0.0)
