"""The window operator on Arrow batches, without Spark: pane windows fed by the producers'
combiner (and by raw rows), firing on the watermark exactly once, lateness (dropped and
counted, side output, updates within the allowed lateness), sessions, apply, cleanup of
fired windows, and a snapshot/restore that fires nothing twice."""

from __future__ import annotations

import collections

import pandas as pd
import pyarrow as pa
import pytest

from sluice.eventtime import MAX_WATERMARK
from sluice.eventtime.windows import EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import OperatorContext
from taskmanager.operators.window import WindowOperator, WindowPartials
from taskmanager.spark_engine import Batch

CTX = OperatorContext(name="w", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True)


def payload(assigner, aggs=None, apply=None, lateness=0, late_output=False):
    p = {
        "keys": ["url"],
        "window": assigner.to_config(),
        "timestamp_column": "ts",
        "allowed_lateness_ms": lateness,
        "late_output": late_output,
    }
    if aggs:
        p["aggs"] = aggs
    if apply:
        p["apply"] = apply
    return p


def rows(*events, v=None):
    """(url, ts) events as the hash exchange delivers raw rows (key group included)."""
    return pa.table(
        {
            "url": [u for u, _t in events],
            "ts": pa.array([t for _u, t in events], pa.int64()),
            "v": pa.array(v if v is not None else [1] * len(events), pa.int64()),
            KEY_GROUP: pa.array([7] * len(events), pa.int32()),
        }
    )


def feed(op, table):
    out = op.process(Batch(None, table=table))
    return [] if out is None else out.table().to_pylist()


def fire(op, watermark):
    out = op.on_watermark(watermark)
    return [] if out is None else out.table().to_pylist()


def expected(events, size, slide):
    counts: collections.Counter[tuple[str, int, int]] = collections.Counter()
    for url, ts in events:
        start = ts - ts % slide
        while start + size > ts:
            counts[(url, start, start + size)] += 1
            start -= slide
    return counts


def as_counts(out):
    return collections.Counter({(r["url"], r["window_start"], r["window_end"]): r["count"] for r in out})


@pytest.mark.parametrize("combined", [True, False])
def test_sliding_counts_fire_once_each_when_the_watermark_passes_the_end(combined):
    assigner = SlidingEventTimeWindows.of(30, 10)
    p = payload(assigner, aggs={"count": ("count", "*")})
    op = WindowOperator(p, CTX)
    events = [("a", 3), ("b", 14), ("a", 25), ("a", 31), ("b", 9), ("a", 58)]
    batch = rows(*events)
    if combined:  # what producers send: partials per (key, pane)
        combiner = WindowOperator.combiner_for(p)
        assert isinstance(combiner, WindowPartials)
        batch = combiner.combine(batch, ["url"])
    assert feed(op, batch) == []
    out = fire(op, 28)  # windows ending at 10, 20 have fired (their last ms 9, 19 <= 28)
    assert {(r["window_start"], r["window_end"]) for r in out} == {(-20, 10), (-10, 20)}
    out += fire(op, 28)  # the same watermark again fires nothing
    out += fire(op, 39)
    out += fire(op, MAX_WATERMARK)
    assert as_counts(out) == expected(events, 30, 10)
    assert len(out) == len(expected(events, 30, 10))  # one row per (key, window)
    assert op.panes == {}  # every fired pane cleaned up


def test_aggregates_and_avg_are_exact_across_batches():
    op = WindowOperator(
        payload(
            TumblingEventTimeWindows.of(10),
            aggs={"n": ("count", "*"), "total": ("sum", "v"), "lo": ("min", "v"), "mean": ("avg", "v")},
        ),
        CTX,
    )
    feed(op, rows(("a", 1), ("a", 2), v=[4, 6]))
    feed(op, rows(("a", 5), ("a", 12), v=[11, 100]))
    out = fire(op, MAX_WATERMARK)
    assert out == [
        {"url": "a", "window_start": 0, "window_end": 10, "n": 3, "total": 21, "lo": 4, "mean": 7.0},
        {"url": "a", "window_start": 10, "window_end": 20, "n": 1, "total": 100, "lo": 100, "mean": 100.0},
    ]


def test_late_records_are_dropped_and_counted_or_sent_to_the_side_output():
    op = WindowOperator(payload(TumblingEventTimeWindows.of(10), aggs={"count": ("count", "*")}), CTX)
    feed(op, rows(("a", 1)))
    assert fire(op, 9) == [{"url": "a", "window_start": 0, "window_end": 10, "count": 1}]
    assert feed(op, rows(("a", 2), ("a", 11))) == []  # 2 is late: its window fired
    assert op.records_late_dropped == 1
    assert fire(op, MAX_WATERMARK) == [{"url": "a", "window_start": 10, "window_end": 20, "count": 1}]

    side: list[pa.Table] = []
    op = WindowOperator(payload(TumblingEventTimeWindows.of(10), aggs={"count": ("count", "*")}, late_output=True), CTX)
    op.side_output = side.append
    feed(op, rows(("a", 1)))
    fire(op, 9)
    feed(op, rows(("a", 2), ("b", 15)))
    assert [t.to_pylist() for t in side] == [[{"url": "a", "ts": 2, "v": 1}]]  # the row as it came
    assert op.records_late_dropped == 0


def test_allowed_lateness_updates_a_fired_window_then_forgets_it():
    op = WindowOperator(payload(TumblingEventTimeWindows.of(10), aggs={"count": ("count", "*")}, lateness=5), CTX)
    feed(op, rows(("a", 1), ("b", 2)))
    assert len(fire(op, 9)) == 2
    # within the lateness: the window's row for that key again, updated
    assert feed(op, rows(("a", 3))) == [{"url": "a", "window_start": 0, "window_end": 10, "count": 2}]
    fire(op, 14)  # 9 + 5: past the lateness
    assert op.panes == {}
    feed(op, rows(("a", 4)))
    assert op.records_late_dropped == 1


def test_sessions_merge_on_arrival_and_fire_after_the_gap():
    op = WindowOperator(payload(EventTimeSessionWindows.with_gap(10), aggs={"count": ("count", "*")}), CTX)
    feed(op, rows(("a", 1), ("a", 5), ("b", 3)))
    feed(op, rows(("a", 30), ("a", 14)))  # 14 joins [1, 15) into [1, 24): 30 opens its own
    out = fire(op, 25)
    assert sorted((r["url"], r["window_start"], r["window_end"], r["count"]) for r in out) == [
        ("a", 1, 24, 3),
        ("b", 3, 13, 1),
    ]
    feed(op, rows(("a", 22)))  # bridges nothing fired: [22, 32) merges with [30, 40)
    assert fire(op, MAX_WATERMARK) == [{"url": "a", "window_start": 22, "window_end": 40, "count": 2}]
    assert op.sessions == {}


def test_apply_gets_each_keys_rows_once_per_window():
    calls = []

    def distinct_users(key, start, end, frame):
        calls.append((key, start, end, sorted(frame["v"])))
        return pd.DataFrame({"users": [frame["v"].nunique()]})

    op = WindowOperator(payload(TumblingEventTimeWindows.of(10), apply=distinct_users), CTX)
    feed(op, rows(("a", 1), ("a", 2), ("b", 3), v=[7, 7, 8]))
    feed(op, rows(("a", 4), v=[9]))
    out = fire(op, MAX_WATERMARK)
    assert out == [
        {"url": "a", "window_start": 0, "window_end": 10, "users": 2},
        {"url": "b", "window_start": 0, "window_end": 10, "users": 1},
    ]
    assert calls == [("a", 0, 10, [7, 7, 9]), ("b", 0, 10, [8])]


def test_null_timestamps_are_dropped_and_counted():
    op = WindowOperator(payload(TumblingEventTimeWindows.of(10), aggs={"count": ("count", "*")}), CTX)
    table = pa.table(
        {"url": ["a", "a"], "ts": pa.array([1, None], pa.int64()), KEY_GROUP: pa.array([1, 1], pa.int32())}
    )
    feed(op, table)
    assert op.null_timestamps_dropped == 1
    assert fire(op, MAX_WATERMARK) == [{"url": "a", "window_start": 0, "window_end": 10, "count": 1}]


@pytest.mark.parametrize(
    "assigner", [SlidingEventTimeWindows.of(20, 10), EventTimeSessionWindows.with_gap(10)], ids=["sliding", "session"]
)
def test_a_restored_operator_fires_what_was_open_and_nothing_twice(assigner):
    p = payload(assigner, aggs={"count": ("count", "*")})
    op = WindowOperator(p, CTX)
    feed(op, rows(("a", 1), ("a", 12), ("b", 25)))
    before = fire(op, 19)
    snap = op.snapshot(1)
    after_original = fire(op, MAX_WATERMARK)

    restored = WindowOperator(p, CTX)
    restored.restore(snap)
    assert fire(restored, 19) == []  # fired before the snapshot: not again
    after_restore = fire(restored, MAX_WATERMARK)
    assert as_counts(after_restore) == as_counts(after_original)
    assert not set(as_counts(before)) & set(as_counts(after_restore))
