"""Process functions' user state and timers on the rocksdb backend, against a real RocksDB in a
temporary directory: the same results as the memory backend, entries and timers in the
database (not on the heap), TTL cleanup that keeps the database flat, snapshots restored as
they are, split across a rescale, and across backends in both directions."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sluice.checkpoints.storage import CheckpointStorage
from sluice.eventtime import MAX_WATERMARK
from sluice.key_groups import KEY_GROUP, key_group_range
from taskmanager.operators import keyed_process
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.keyed_process import KeyedProcess
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import NativeRestore, StateBackendConfig
from taskmanager.state.rocksdb_user_state import STATE_TAG, TIMER_TAG, decode, encode_entry, state_key, timer_key
from taskmanager.state.timer_service import TimeDomain

MAXP = 128
EVENT, PROC = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME


def rows(*events: tuple[int, int]) -> pa.Table:
    return pa.table(
        {
            "user": pa.array([u for u, _t in events], pa.int64()),
            "ts": pa.array([t for _u, t in events], pa.int64()),
            KEY_GROUP: pa.array([u % MAXP for u, _t in events], pa.int32()),
        }
    )


class FirstPerUser:
    """Dedup with every kind of state: the first event per user, forgotten 100 ms after it."""

    def process(self, key: Any, frame: pd.DataFrame, ctx: Any) -> pd.DataFrame | None:
        seen = ctx.value_state("seen")
        if seen.value is not None:
            ctx.list_state("later").add(int(frame["ts"].min()))
            return None
        first = int(frame["ts"].min())
        seen.update(first)
        ctx.map_state("by_ts")[first] = len(frame)
        ctx.register_event_time_timer(first + 100)
        return pd.DataFrame({"user": [key], "ts": [first]})

    def on_timer(self, key: Any, ts: int, ctx: Any) -> pd.DataFrame:
        later = ctx.list_state("later").get()
        ctx.value_state("seen").clear()
        ctx.list_state("later").clear()
        return pd.DataFrame({"user": [key], "ts": [-ts - len(later)]})


class Backends:
    """Operators on either backend, their databases under one temporary directory."""

    def __init__(self, tmp_path: Any) -> None:
        self.tmp = tmp_path
        self.n = 0
        self.storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")

    def make(self, kind: str, subtask: int = 0, parallelism: int = 1, **payload: Any) -> KeyedProcess:
        self.n += 1
        config = (
            None if kind == "memory" else StateBackendConfig("rocksdb", True, str(self.tmp / "work" / f"op{self.n}"))
        )
        ctx = OperatorContext(
            name="p",
            subtask=subtask,
            parallelism=parallelism,
            job_id="j",
            restore_checkpoint_id=0,
            checkpointing=True,
            state_backend=config,
        )
        fn = payload.pop("fn", None) or FirstPerUser()
        return KeyedProcess(
            {"keys": ["user"], "process": fn, "output_schema": "user bigint, ts bigint", **payload}, ctx
        )

    def checkpoint(self, op: KeyedProcess, cid: int, kgs: tuple[int, int] = (0, MAXP - 1)) -> OperatorSnapshot:
        """`op`'s snapshot as a task would write it, and how a task would restore it."""
        snap = op.snapshot(cid)
        if snap.native is None:
            return snap
        handle = snap.native.upload(
            self.storage.fs, self.storage.checkpoint_dir(cid), self.storage.shared_dir(), "p", 0, kgs
        )
        op.notify_checkpoint_complete(cid)
        return OperatorSnapshot(inline=snap.inline, native=self.restore_from([handle], kgs))

    def restore_from(self, handles: list[dict[str, Any]], kgs: tuple[int, int]) -> NativeRestore:
        self.n += 1
        return NativeRestore(handles, pafs.LocalFileSystem(), kgs, None, str(self.tmp / "work" / f"scratch{self.n}"))


def out(batch: Batch | None) -> list[dict[str, Any]]:
    return [] if batch is None else batch.table().to_pylist()


def run_scenario(op: KeyedProcess) -> list[list[dict[str, Any]]]:
    return [
        out(op.process(Batch(None, table=rows((1, 10), (2, 11), (1, 12), (1, 9))))),
        out(op.process(Batch(None, table=rows((1, 50), (1, 60), (2, 70))))),
        out(op.on_watermark(109)),
        out(op.process(Batch(None, table=rows((1, 120))))),
        out(op.end_input()),
    ]


def test_the_same_results_as_the_memory_backend_with_state_and_timers_in_the_database(tmp_path: Any) -> None:
    b = Backends(tmp_path)
    memory, rocks = b.make("memory"), b.make("rocksdb")
    assert rocks.native is not None and memory.native is None
    expected = run_scenario(memory)
    assert expected[2] == [{"user": 1, "ts": -109 - 1}]  # user 1's timer saw its later event
    assert run_scenario(rocks) == expected
    assert rocks.store.size() == 0  # nothing on the heap: the entries are in RocksDB
    rocks.dispose()


def test_entries_and_timers_are_keyed_by_key_group_and_decode_back() -> None:
    raw = state_key(5, "seen", ("DE", 3))
    assert raw[:2] == b"\x00\x05" and raw[2] == STATE_TAG
    import numpy as np

    assert state_key(5, "seen", (np.str_("DE"), np.int64(3))) == raw  # numpy scalars: the same bytes
    assert decode(raw, encode_entry(7, None)) == (
        "state",
        5,
        ("seen", ("DE", 3), 7, None),
    )
    early, late = timer_key(3, EVENT, -5, "k"), timer_key(3, EVENT, 2**40, "k")
    assert early[2] == TIMER_TAG and early < late  # timers sort by time, negative ones first
    assert decode(late, b"") == ("timer", 3, (EVENT, 2**40, "k"))
    with pytest.raises(ValueError, match="not a process function's state entry"):
        decode(b"\x00\x01\x02abc", b"")


def test_state_with_a_ttl_is_invisible_once_expired_and_cleaned_up_in_bounded_steps(
    tmp_path: Any, monkeypatch: Any
) -> None:
    clock = {"now": 0}
    monkeypatch.setattr(keyed_process, "_now_ms", lambda: clock["now"])

    def remember(key: Any, frame: pd.DataFrame, ctx: Any) -> None:
        state = ctx.value_state("seen", ttl_ms=1_000)
        state.update((state.value or 0) + len(frame))

    op = Backends(tmp_path).make("rocksdb", fn=remember, output_schema=None)
    assert op.native is not None
    sizes = []
    for batch in range(60):  # 100 fresh users every 100 ms: 10 batches live within the TTL
        clock["now"] = batch * 100
        op.process(Batch(None, table=rows(*[(u, 0) for u in range(batch * 100, batch * 100 + 100)])))
        sizes.append(op.native.size())
    assert max(sizes[30:]) <= 2_100  # bounded by the users of the last TTL and a cleanup lap, not 6,000
    op.context.current_key, op.context.current_kg = 5_950, 5_950 % MAXP
    assert op.context.value_state("seen").value == 1
    clock["now"] = 10_000
    assert op.context.value_state("seen").value is None  # expired: invisible before any cleanup
    op.dispose()


@pytest.mark.parametrize(("first", "second"), [("rocksdb", "rocksdb"), ("memory", "rocksdb"), ("rocksdb", "memory")])
def test_a_snapshot_restores_state_and_fires_each_pending_timer_once(tmp_path: Any, first: str, second: str) -> None:
    b = Backends(tmp_path)
    op = b.make(first)
    op.process(Batch(None, table=rows((1, 10), (300, 40), (7, 70))))
    op.process(Batch(None, table=rows((300, 45))))
    op.on_watermark(115)  # user 1's timer fired
    snap = b.checkpoint(op, 1)
    restored = b.make(second)
    restored.restore(snap)
    assert out(restored.on_watermark(115)) == []  # nothing fires twice
    assert out(restored.process(Batch(None, table=rows((300, 41), (1, 60))))) == [{"user": 1, "ts": 60}]
    assert out(restored.on_watermark(MAX_WATERMARK)) == [
        {"user": 300, "ts": -140 - 2},  # its two later events, one from before the snapshot
        {"user": 1, "ts": -160},
        {"user": 7, "ts": -170},
    ]
    for o in (op, restored):
        o.dispose()


def test_a_rescale_gives_each_new_subtask_the_state_and_timers_of_its_key_groups(tmp_path: Any) -> None:
    b = Backends(tmp_path)
    op = b.make("rocksdb")
    users = list(range(0, 400, 3))
    op.process(Batch(None, table=rows(*[(u, 1000 + u) for u in users])))
    snap = b.checkpoint(op, 1)
    assert snap.inline is not None and snap.inline["states"]["seen"] == ["value", None]
    fired: dict[int, int] = {}
    for subtask in range(2):
        kgs = key_group_range(subtask, 2, MAXP)
        part = b.make("rocksdb", subtask=subtask, parallelism=2)
        assert isinstance(snap.native, NativeRestore)
        part.restore(OperatorSnapshot(inline=snap.inline, native=b.restore_from(snap.native.handles, kgs)))
        for row in out(part.on_watermark(MAX_WATERMARK)):
            assert kgs[0] <= row["user"] % MAXP <= kgs[1]  # only its own key groups
            fired[row["user"]] = row["ts"]
        part.dispose()
    assert fired == {u: -(1100 + u) for u in users}  # every timer fired once, on one subtask
    op.dispose()


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_state_values_plain_pickle_cannot_write_are_kept(tmp_path: Any, backend: str) -> None:
    def keep_a_function(key: Any, frame: pd.DataFrame, ctx: Any) -> pd.DataFrame:
        state = ctx.value_state("f")
        if state.value is None:
            state.update(lambda x: x + key)  # a lambda: written with cloudpickle
        return pd.DataFrame({"user": [key], "ts": [state.value(len(frame))]})

    b = Backends(tmp_path)
    op = b.make(backend, fn=keep_a_function)
    op.process(Batch(None, table=rows((4, 0))))
    restored = b.make(backend, fn=keep_a_function)
    restored.restore(b.checkpoint(op, 1))
    assert out(restored.process(Batch(None, table=rows((4, 0), (4, 1))))) == [{"user": 4, "ts": 6}]
    for o in (op, restored):
        o.dispose()


def test_a_broadcast_process_function_keeps_its_keyed_state_in_rocksdb_across_a_snapshot(tmp_path: Any) -> None:
    from taskmanager.operators.broadcast_process import BROADCAST, KEYED, BroadcastProcess

    def count(key: Any, frame: pd.DataFrame, ctx: Any) -> None:
        n = ctx.value_state("n")
        n.update((n.value or 0) + len(frame))
        ctx.register_event_time_timer(10**15)

    def rules(frame: pd.DataFrame, ctx: Any) -> None:
        ctx.broadcast_state("factor").update(zip(frame["rule"], frame["factor"], strict=True))

    def report(key: Any, ts: int, ctx: Any) -> pd.DataFrame:
        factor = ctx.broadcast_state("factor").get("odd" if key % 2 else "even", 1)
        return pd.DataFrame({"user": [key], "ts": [ctx.value_state("n").value * factor]})

    b = Backends(tmp_path)
    payload = {"keys": ["user"], "process": count, "process_broadcast": rules, "on_timer": report, "left": "2-map"}

    ctxs = [
        OperatorContext(
            name="b",
            subtask=0,
            parallelism=1,
            job_id="j",
            restore_checkpoint_id=0,
            checkpointing=True,
            state_backend=StateBackendConfig("rocksdb", True, str(tmp_path / "work" / f"broadcast{i}")),
        )
        for i in range(2)
    ]
    op = BroadcastProcess({**payload, "output_schema": "user bigint, ts bigint"}, ctxs[0])
    op.process_input(Batch(None, table=pa.table({"rule": ["odd"], "factor": [10]})), BROADCAST)
    op.process_input(Batch(None, table=rows((1, 0), (2, 0), (1, 0))), KEYED)
    snap = b.checkpoint(op, 1)
    assert snap.native is not None and snap.inline is not None and "broadcast" in snap.inline
    restored = BroadcastProcess({**payload, "output_schema": "user bigint, ts bigint"}, ctxs[1])
    restored.restore(snap)
    assert restored.broadcast == {"factor": {"odd": 10}}
    assert sorted(out(restored.end_input()), key=lambda r: r["user"]) == [{"user": 1, "ts": 20}, {"user": 2, "ts": 1}]
    for o in (op, restored):
        o.dispose()
