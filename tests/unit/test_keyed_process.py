"""Keyed process functions without Spark: the timer service's order, state TTL (invisible at
once, cleaned up incrementally and left out of snapshots), one Python call per key and batch,
timers firing on the watermark and on the clock, and a snapshot/restore that keeps state and
fires each pending timer once."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from sluice.eventtime import MAX_WATERMARK
from sluice.key_groups import KEY_GROUP
from taskmanager.operators import keyed_process
from taskmanager.operators.base import OperatorContext
from taskmanager.operators.keyed_process import KeyedProcess
from taskmanager.spark_engine import Batch
from taskmanager.state.keyed_state import MISSING, KeyedStateStore
from taskmanager.state.timer_service import TimeDomain, TimerService

CTX = OperatorContext(name="p", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True)
EVENT, PROC = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME


# -- cores ------------------------------------------------------------------------------------------
def test_timers_fire_in_time_order_once_and_deleted_ones_never():
    t = TimerService()
    assert t.register(EVENT, "a", 30) and t.register(EVENT, "b", 10) and t.register(EVENT, ("c", 1), 20)
    assert not t.register(EVENT, "a", 30)  # the same timer twice is one
    t.register(PROC, "a", 5)
    t.delete(EVENT, "b", 10)
    assert t.due(EVENT, 25) == [(20, ("c", 1))]
    assert t.due(EVENT, 25) == []
    assert t.due(EVENT, 100) == [(30, "a")]
    assert t.due(PROC, 5) == [(5, "a")]
    t.register(EVENT, "z", 7)
    restored = TimerService()
    restored.restore(t.snapshot())
    assert restored.due(EVENT, 10) == [(7, "z")] and restored.keys() == set()


def test_state_ttl_hides_expired_entries_and_cleans_them_up_incrementally():
    s = KeyedStateStore(default_ttl_ms=100)
    s.declare("seen", "value")
    for i in range(10):
        s.put("seen", f"k{i}", i, now=i)  # expires at 100 + i
    s.put("seen", "k0", "again", now=50)  # written again: expires at 150
    assert s.get("seen", "k3", now=103) is MISSING  # invisible at once
    assert s.get("seen", "k4", now=103) == 4
    assert s.cleanup(now=105, budget=3) == 2  # k1, k2 (k0's first write is stale; budget 3 writes)
    assert s.cleanup(now=200) == 7
    assert s.size() == 0
    s.put("seen", "k1", 1, now=300)
    assert [(d.name, k, v) for d, k, v, _e in s.snapshot(now=399)] == [("seen", "k1", 1)]
    assert list(s.snapshot(now=400)) == []  # expired entries stay out of checkpoints


def test_a_state_name_keeps_its_kind():
    s = KeyedStateStore()
    s.declare("x", "value")
    with pytest.raises(ValueError, match="give each state one name"):
        s.declare("x", "list")
    with pytest.raises(ValueError, match="ttl_ms must be"):
        s.declare("y", "value", ttl_ms=0)


# -- the operator -------------------------------------------------------------------------------------
def rows(*events):
    return pa.table(
        {
            "user": pa.array([u for u, _t in events], pa.int64()),
            "ts": pa.array([t for _u, t in events], pa.int64()),
            KEY_GROUP: pa.array([u % 128 for u, _t in events], pa.int32()),
        }
    )


class FirstPerUser:
    """Dedup: the first event per user; forget the user 100 ms (event time) after it."""

    def __init__(self):
        self.calls = []

    def process(self, key, frame, ctx):
        self.calls.append((key, len(frame)))
        seen = ctx.value_state("seen")
        if seen.value is not None:
            return None
        first = int(frame["ts"].min())
        seen.update(first)
        ctx.list_state("log").add(first)
        ctx.map_state("by_ts")[first] = len(frame)
        ctx.register_event_time_timer(first + 100)
        return pd.DataFrame({"user": [key], "ts": [first]})

    def on_timer(self, key, ts, ctx):
        ctx.value_state("seen").clear()
        return pd.DataFrame({"user": [key], "ts": [-ts]})


def make(fn=None, **payload):
    fn = fn or FirstPerUser()
    return KeyedProcess(
        {"keys": ["user"], "process": fn, "output_schema": "user bigint, ts bigint", **payload}, CTX
    ), fn


def table_of(batch):
    return [] if batch is None else batch.table().to_pylist()


def test_one_call_per_key_and_batch_with_state_and_event_timers():
    op, fn = make()
    out = table_of(op.process(Batch(None, table=rows((1, 10), (2, 11), (1, 12), (1, 9)))))
    assert fn.calls == [(1, 3), (2, 1)] and op.python_calls == 2
    assert out == [{"user": 1, "ts": 9}, {"user": 2, "ts": 11}]
    assert table_of(op.process(Batch(None, table=rows((1, 50))))) == []  # seen
    assert table_of(op.on_watermark(109)) == [{"user": 1, "ts": -109}]  # user 1 forgotten
    assert table_of(op.process(Batch(None, table=rows((1, 120))))) == [{"user": 1, "ts": 120}]
    assert table_of(op.end_input()) == [{"user": 2, "ts": -111}, {"user": 1, "ts": -220}]


def test_snapshot_and_restore_keep_state_and_fire_pending_timers_once():
    op, _fn = make()
    op.process(Batch(None, table=rows((1, 10), (300, 40))))
    op.on_watermark(115)  # user 1's timer fired: cleared
    snap = op.snapshot(1)
    assert set(snap.keyed.column(KEY_GROUP).to_pylist()) == {1, 300 % 128}  # each row with its key's group
    restored, fn = make()
    restored.restore(snap)
    assert table_of(restored.on_watermark(115)) == []  # nothing fires twice
    assert table_of(restored.process(Batch(None, table=rows((300, 41), (1, 60))))) == [{"user": 1, "ts": 60}]
    assert fn.calls == [(1, 1), (300, 1)]  # keys in sorted order within a batch
    assert table_of(restored.on_watermark(MAX_WATERMARK)) == [{"user": 300, "ts": -140}, {"user": 1, "ts": -160}]


def test_state_ttl_from_the_job_default_and_processing_time_timers(monkeypatch):
    clock = {"now": 1_000}
    monkeypatch.setattr(keyed_process, "_now_ms", lambda: clock["now"])

    def count_per_user(key, frame, ctx):
        n = ctx.value_state("n")
        n.update((n.value or 0) + len(frame))
        ctx.register_processing_time_timer(ctx.current_processing_time + 10)
        return pd.DataFrame({"user": [key], "ts": [n.value]})

    def report(key, ts, ctx):
        return pd.DataFrame({"user": [key], "ts": [ts]})

    op = KeyedProcess(
        {"keys": ["user"], "process": count_per_user, "on_timer": report, "state_ttl_ms": 50, "output_schema": None},
        CTX,
    )
    assert table_of(op.process(Batch(None, table=rows((1, 0), (1, 0))))) == [{"user": 1, "ts": 2}]
    clock["now"] = 1_049
    assert table_of(op.process(Batch(None, table=rows((1, 0))))) == [{"user": 1, "ts": 3}]
    clock["now"] = 1_100  # 51 ms after the last write: expired
    assert table_of(op.process(Batch(None, table=rows((1, 0))))) == [{"user": 1, "ts": 1}]
    assert table_of(op.on_processing_time(1_060)) == [{"user": 1, "ts": 1_010}, {"user": 1, "ts": 1_059}]


def test_a_function_returning_something_else_is_an_error_naming_the_operator():
    op = KeyedProcess({"keys": ["user"], "process": lambda k, f, c: [1, 2]}, CTX)
    with pytest.raises(TypeError, match="p: the process function returned list"):
        op.process(Batch(None, table=rows((1, 0))))
    op = KeyedProcess(
        {"keys": ["user"], "process": lambda k, f, c: pd.DataFrame({"x": [1]}), "output_schema": "user bigint"}, CTX
    )
    with pytest.raises(ValueError, match="lack user of its output_schema"):
        op.process(Batch(None, table=rows((1, 0))))


# -- the interval join ------------------------------------------------------------------------------
def side_rows(name, *events):
    return pa.table(
        {
            "k": pa.array([k for k, _t in events], pa.int64()),
            name: pa.array([f"{name}{t}" for _k, t in events]),
            "ts": pa.array([t for _k, t in events], pa.int64()),
            KEY_GROUP: pa.array([k % 128 for k, _t in events], pa.int32()),
        }
    )


def test_interval_join_pairs_each_match_once_and_forgets_rows_behind_the_watermark():
    from taskmanager.operators.interval_join import IntervalJoin

    payload = {
        "keys": ["k"],
        "lower_ms": 0,
        "upper_ms": 10,
        "left_timestamp": "ts",
        "right_timestamp": "ts",
        "left": "1-src",
        "right_suffix": "_right",
    }
    op = IntervalJoin(payload, CTX)
    assert op.process_input(Batch(None, table=side_rows("a", (1, 100), (2, 100))), 0) is None
    out = table_of(op.process_input(Batch(None, table=side_rows("b", (1, 105), (1, 111), (2, 100), (3, 101))), 1))
    assert out == [
        {"k": 1, "a": "a100", "ts": 100, "b": "b105", "ts_right": 105},
        {"k": 2, "a": "a100", "ts": 100, "b": "b100", "ts_right": 100},
    ]
    out = table_of(op.process_input(Batch(None, table=side_rows("a", (1, 101), (3, 95))), 0))
    assert sorted((r["k"], r["ts"], r["ts_right"]) for r in out) == [(1, 101, 105), (1, 101, 111), (3, 95, 101)]
    snap = op.snapshot(1)
    op.on_watermark(111)  # left rows up to ts 101 can meet no future right row (ts > 111)
    assert op.buffers[0] is None
    assert op.process_input(Batch(None, table=side_rows("b", (1, 111))), 1) is None  # late: not after 111
    assert op.records_late_dropped == 1
    restored = IntervalJoin(payload, CTX)
    restored.restore(snap)
    out = table_of(restored.process_input(Batch(None, table=side_rows("b", (1, 109))), 1))
    assert sorted((r["k"], r["ts"], r["ts_right"]) for r in out) == [(1, 100, 109), (1, 101, 109)]


# -- broadcast state --------------------------------------------------------------------------------
class Scaled:
    """Counts per user; at the end each count times the factor the rules gave the user's parity."""

    def process(self, key, frame, ctx):
        n = ctx.value_state("n")
        n.update((n.value or 0) + len(frame))
        ctx.register_event_time_timer(10**15)
        with pytest.raises(TypeError):
            ctx.broadcast_state("factor")["odd"] = 0  # read-only on the keyed side

    def process_broadcast(self, frame, ctx):
        factors = ctx.broadcast_state("factor")
        for rule, factor in zip(frame["rule"], frame["factor"], strict=True):
            factors[rule] = int(factor)

    def on_timer(self, key, ts, ctx):
        factor = ctx.broadcast_state("factor").get("odd" if key % 2 else "even", 1)
        return pd.DataFrame({"user": [key], "ts": [ctx.value_state("n").value * factor]})


def test_broadcast_state_is_read_by_the_keyed_side_and_survives_a_snapshot():
    from taskmanager.operators.broadcast_process import BROADCAST, KEYED, BroadcastProcess

    payload = {"keys": ["user"], "process": Scaled(), "left": "2-map", "output_schema": "user bigint, ts bigint"}
    op = BroadcastProcess(payload, CTX)
    rules = pa.table({"rule": ["odd"], "factor": [10]})
    assert op.process_input(Batch(None, table=rules), BROADCAST) is None
    op.process_input(Batch(None, table=rows((1, 0), (2, 0), (1, 0))), KEYED)
    restored = BroadcastProcess(payload, CTX)
    restored.restore(op.snapshot(1))
    assert restored.broadcast == {"factor": {"odd": 10}}
    restored.process_input(Batch(None, table=pa.table({"rule": ["even"], "factor": [3]})), BROADCAST)
    assert sorted(table_of(restored.end_input()), key=lambda r: r["user"]) == [
        {"user": 1, "ts": 20},
        {"user": 2, "ts": 3},
    ]


def test_window_join_pairs_rows_of_a_key_once_per_shared_window():
    from sluice.eventtime.windows import SlidingEventTimeWindows
    from taskmanager.operators.window_join import WindowJoin

    payload = {
        "keys": ["k"],
        "right_keys": ["k"],
        "window": SlidingEventTimeWindows.of(20, 10).to_config(),
        "left_timestamp": "ts",
        "right_timestamp": "ts",
        "left": "1-src",
        "right_suffix": "_right",
    }
    op = WindowJoin(payload, CTX)
    op.process_input(Batch(None, table=side_rows("a", (1, 12))), 0)  # windows [0, 20) and [10, 30)
    out = table_of(op.process_input(Batch(None, table=side_rows("b", (1, 5), (1, 25), (1, 33), (2, 12))), 1))
    assert sorted((r["window_start"], r["window_end"], r["ts"], r["ts_right"]) for r in out) == [
        (0, 20, 12, 5),
        (10, 30, 12, 25),
    ]
    op.on_watermark(19)  # window [0, 20) passed: a new left row at 15 joins in [10, 30) only
    out = table_of(op.process_input(Batch(None, table=side_rows("a", (1, 15))), 0))
    assert sorted((r["window_start"], r["ts"], r["ts_right"]) for r in out) == [(10, 15, 25)]
    assert op.process_input(Batch(None, table=side_rows("a", (1, 8))), 0) is None  # every window passed: late
    assert op.records_late_dropped == 1


def test_state_with_a_ttl_stays_flat_for_a_stream_of_fresh_keys(monkeypatch):
    clock = {"now": 0}
    monkeypatch.setattr(keyed_process, "_now_ms", lambda: clock["now"])

    def remember(key, frame, ctx):
        ctx.value_state("seen", ttl_ms=1_000).update(True)

    op = KeyedProcess({"keys": ["user"], "process": remember}, CTX)
    sizes = []
    for batch in range(60):  # 100 fresh users every 100 ms: 10 batches live within the TTL
        clock["now"] = batch * 100
        users = range(batch * 100, batch * 100 + 100)
        op.process(Batch(None, table=rows(*[(u, 0) for u in users])))
        sizes.append(op.store.size())
    assert max(sizes[20:]) <= 1_100  # bounded by the users written within the last TTL, not by 6,000
    keyed = op.snapshot(1).keyed
    assert keyed is not None and keyed.num_rows <= 1_000
