"""Window panes on the rocksdb state backend (taskmanager/state/rocksdb_panes.py), against a
real RocksDB in a temporary directory: the key layout sorts by key group, then pane, then
key; tumbling and sliding windows with count/sum/min/max/avg give exactly the memory
backend's rows (late updates within the allowed lateness included) while only pane starts
stay in memory; fired panes are deleted; a snapshot restores at the same key-group range,
into a split range, and across backends (memory <-> rocksdb), and the restored operator
goes on exactly as one that never stopped."""

from __future__ import annotations

import os
import random
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sluice.checkpoints.storage import CheckpointStorage
from sluice.eventtime import MAX_WATERMARK
from sluice.eventtime.windows import (
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from sluice.key_groups import KEY_GROUP, key_group_range
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.window import WindowOperator
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import NativeRestore, StateBackendConfig
from taskmanager.state.rocksdb_panes import PANE_TAG, decode, encode, encode_many, fold, pane_prefix

FS = pafs.LocalFileSystem()
MAXP = 128
AGGS = {
    "n": ("count", "*"),
    "total": ("sum", "v"),
    "lo": ("min", "v"),
    "hi": ("max", "v"),
    "mean": ("avg", "v"),
}
TUMBLING = TumblingEventTimeWindows.of(100)
SLIDING = SlidingEventTimeWindows.of(300, 100)


def kg_of(key: Any) -> int:
    return zlib.crc32(repr(key).encode()) % MAXP


def operator(tmp_path: Any, kind: str, name: str, assigner: Any, lateness: int = 0, keys: tuple[str, ...] = ("url",)):
    config = StateBackendConfig(kind, True, str(tmp_path / "work" / name) if kind == "rocksdb" else "")
    ctx = OperatorContext(name, 0, 1, "job", 0, True, state_backend=config)
    payload = {
        "keys": list(keys),
        "window": assigner.to_config(),
        "timestamp_column": "ts",
        "allowed_lateness_ms": lateness,
        "aggs": AGGS,
    }
    return WindowOperator(payload, ctx)


def events(seed: int, n: int, keys: int = 40, disorder: int = 150) -> list[dict[str, Any]]:
    """Rows with timestamps mostly increasing, out of order by up to `disorder` ms."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        url = f"/p{rng.randrange(keys)}"
        v = rng.randrange(-50, 1000) if rng.random() > 0.05 else None  # a null value: count only
        out.append(
            {"url": url, "region": rng.choice(["eu", "us"]), "ts": 1_000 + i * 3 - rng.randrange(disorder), "v": v}
        )
    return out


def batch(rows: list[dict[str, Any]], keys: tuple[str, ...] = ("url",)) -> pa.Table:
    return pa.table(
        {
            "url": [r["url"] for r in rows],
            "region": [r["region"] for r in rows],
            "ts": pa.array([r["ts"] for r in rows], pa.int64()),
            "v": pa.array([r["v"] for r in rows], pa.int64()),
            KEY_GROUP: pa.array(
                [kg_of(tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]) for r in rows], pa.int32()
            ),
        }
    )


def step(op: WindowOperator, rows: list[dict[str, Any]], watermark: int, keys: tuple[str, ...] = ("url",)) -> list[Any]:
    """Feed one batch as the producers send it (partials per key and pane), then a watermark."""
    out: list[Any] = []
    table = batch(rows, keys)
    combiner = WindowOperator.combiner_for({"window": op.assigner.to_config(), "aggs": AGGS, "timestamp_column": "ts"})
    assert combiner is not None
    for got in (op.process(Batch(None, table=combiner.combine(table, list(keys)))), op.on_watermark(watermark)):
        if got is not None:
            out.append(got.table())
    return out


def rows_of(tables: list[pa.Table]) -> list[tuple[Any, ...]]:
    return sorted((tuple(sorted(r.items())) for t in tables for r in t.to_pylist()), key=repr)


def drive(op: WindowOperator, evs: list[dict[str, Any]], chunks: int, ooo: int, keys: tuple[str, ...] = ("url",)):
    """Feed `evs` in `chunks` batches, each followed by the watermark max(ts) - ooo."""
    out: list[pa.Table] = []
    size = -(-len(evs) // chunks)
    top = -(2**62)
    for i in range(0, len(evs), size):
        part = evs[i : i + size]
        top = max(top, *(r["ts"] for r in part))
        out += step(op, part, top - ooo, keys)
    return out


def upload(
    op: WindowOperator, storage: CheckpointStorage, cid: int, subtask: int, kgs: tuple[int, int]
) -> dict[str, Any]:
    snap = op.snapshot(cid)
    assert snap.keyed is None and snap.native is not None
    return snap.native.upload(storage.fs, storage.checkpoint_dir(cid), storage.shared_dir(), "win", subtask, kgs)


def test_entries_sort_by_key_group_then_pane_then_key() -> None:
    assert PANE_TAG not in (0x00, 0x01, 0x02, 0x10, 0x11)
    order = [(1, -5, "a"), (1, -5, "b"), (1, 0, "a"), (1, 10, "a"), (1, 2**40, "a"), (2, -(2**62), "a")]
    raws = [encode(*e) for e in order]
    assert raws == sorted(raws)
    assert [decode(r) for r in raws] == order
    assert all(r.startswith(pane_prefix(kg, p)) for r, (kg, p, _k) in zip(raws, order, strict=True))
    assert decode(encode(3, 7, ("/x", 2))) == (3, 7, ("/x", 2))  # a composite key's tuple
    with pytest.raises(ValueError, match="not a window pane entry"):
        decode(b"\x00\x01\x02" + bytes(8))
    assert fold(["sum", "min", "max"], (1, None, 3), (2, 5, None)) == (3, 5, 3)
    assert fold(["sum"], None, (4,)) == (4,)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([5, -7, 2**62], pa.int64()),
        pa.array([1, 2, 3], pa.int32()),
        pa.array([1, None, 3], pa.int64()),
        pa.array([1, 2**63 + 1, 3], pa.uint64()),
        pa.array(["/a", "", "/é"]),
    ],
    ids=["int64", "int32", "null", "uint64", "str"],
)
def test_encoding_a_batch_at_once_equals_encoding_each_row(column: pa.Array) -> None:
    kgs = np.array([0, 5, 127], np.int32)
    panes = np.array([-1_000, 0, 2**40], np.int64)
    table = pa.table({"k": column, "r": ["x", "y", "z"]})
    keys = column.to_pylist()
    assert encode_many(kgs, panes, table, ["k"]) == [
        encode(int(g), int(p), k) for g, p, k in zip(kgs, panes, keys, strict=True)
    ]
    composite = [(k, r) for k, r in zip(keys, ["x", "y", "z"], strict=True)]
    got = encode_many(kgs, panes, table, ["k", "r"])
    assert got == [encode(int(g), int(p), k) for g, p, k in zip(kgs, panes, composite, strict=True)]
    assert [decode(r)[2] for r in got] == composite


@pytest.mark.parametrize("assigner", [TUMBLING, SLIDING], ids=["tumbling", "sliding"])
@pytest.mark.parametrize("keys", [("url",), ("url", "region")], ids=["one-key", "composite-key"])
def test_windows_on_rocksdb_equal_the_memory_backend(tmp_path: Any, assigner: Any, keys: tuple[str, ...]) -> None:
    evs = events(seed=1, n=3_000)
    memory = operator(tmp_path, "memory", "m", assigner, keys=keys)
    rocks = operator(tmp_path, "rocksdb", "r", assigner, keys=keys)
    want = drive(memory, evs, chunks=30, ooo=60, keys=keys) + step(memory, [], MAX_WATERMARK, keys)
    got = drive(rocks, evs, chunks=30, ooo=60, keys=keys) + step(rocks, [], MAX_WATERMARK, keys)
    assert rows_of(got) == rows_of(want)
    assert len(rows_of(got)) > 100
    assert pa.concat_tables(got).schema == pa.concat_tables(want).schema
    assert memory.records_late_dropped == rocks.records_late_dropped
    if assigner is TUMBLING:  # the disorder exceeds the bound: some records missed their one window
        assert rocks.records_late_dropped > 0
    assert rocks.panes == {} and rocks.store is not None
    assert rocks.store.panes == set() and len(rocks.store) == 0  # every pane deleted once past
    rocks.dispose()
    memory.dispose()


def test_late_updates_within_the_allowed_lateness_re_read_only_the_updated_keys(tmp_path: Any) -> None:
    evs = events(seed=2, n=2_000)
    memory = operator(tmp_path, "memory", "m", SLIDING, lateness=120)
    rocks = operator(tmp_path, "rocksdb", "r", SLIDING, lateness=120)
    want = drive(memory, evs, chunks=40, ooo=30)
    got = drive(rocks, evs, chunks=40, ooo=30)
    assert rows_of(got) == rows_of(want)
    per_window: dict[Any, int] = {}
    for t in got:
        for r in t.to_pylist():
            per_window[(r["url"], r["window_start"])] = per_window.get((r["url"], r["window_start"]), 0) + 1
    assert max(per_window.values()) > 1, "some window should have been updated by a late record"
    assert rocks.store is not None and rocks.store.panes  # open windows still hold panes
    assert all(rocks.store.panes)
    rocks.dispose()


def test_panes_past_their_lateness_are_deleted_and_only_pane_starts_stay_in_memory(tmp_path: Any) -> None:
    rocks = operator(tmp_path, "rocksdb", "r", TUMBLING)
    rows = [{"url": f"/k{i}", "region": "eu", "ts": 1_000 + i % 250, "v": i} for i in range(5_000)]
    step(rocks, rows, 0)
    store = rocks.store
    assert store is not None
    assert store.panes == {1_000, 1_100, 1_200} and len(store) == 5_000  # one entry per key and pane
    assert rocks.panes == {}  # nothing per key in memory
    out = step(rocks, [], 1_099)
    assert sorted(r["url"] for t in out for r in t.to_pylist()) == sorted(
        f"/k{i}" for i in range(5_000) if i % 250 < 100
    )
    assert store.panes == {1_100, 1_200} and store.window_table([1_000]) is None
    assert len(store) == 3_000


@pytest.mark.parametrize("assigner", [TUMBLING, SLIDING], ids=["tumbling", "sliding"])
def test_a_snapshot_restores_at_the_same_range_and_into_a_split_range(tmp_path: Any, assigner: Any) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    evs = events(seed=3, n=3_000)
    first, second = evs[:1_500], evs[1_500:]
    memory = operator(tmp_path, "memory", "m", assigner)
    want = drive(memory, evs, 30, 200) + step(memory, [], MAX_WATERMARK)

    rocks = operator(tmp_path, "rocksdb", "r", assigner)
    got = drive(rocks, first, 15, 200)
    wm = rocks.watermark
    h = upload(rocks, storage, 1, 0, (0, MAXP - 1))
    inline = rocks.snapshot(2).inline
    assert rocks.store is not None and inline is not None and inline["panes"] == sorted(rocks.store.panes)
    assert h["backend"] == "rocksdb"
    rocks.dispose()

    # the same range: opened as it is
    same = operator(tmp_path, "rocksdb", "same", assigner)
    same.restore(
        OperatorSnapshot(inline=inline, native=NativeRestore([h], FS, (0, MAXP - 1), None, str(tmp_path / "s")))
    )
    assert same.watermark == wm and same.store is not None and same.store.panes == set(inline["panes"])
    tail = drive(same, second, 15, 200) + step(same, [], MAX_WATERMARK)
    assert rows_of(got + tail) == rows_of(want)
    same.dispose()

    # two subtasks, each with half of the key groups: each copies its range, together they fire the rest
    split: list[pa.Table] = []
    for s in range(2):
        lo, hi = key_group_range(s, 2, MAXP)
        half = operator(tmp_path, "rocksdb", f"half{s}", assigner)
        half.restore(
            OperatorSnapshot(inline=inline, native=NativeRestore([h], FS, (lo, hi), None, str(tmp_path / "s")))
        )
        assert half.store is not None and all(lo <= kg <= hi for kg in half.store.key_groups)
        mine = [r for r in second if lo <= kg_of(r["url"]) <= hi]
        # the same watermarks as one subtask would see: each batch's watermark from all the input
        out: list[pa.Table] = []
        size = 100
        top = max(r["ts"] for r in first)
        for i in range(0, len(second), size):
            top = max(top, *(r["ts"] for r in second[i : i + size]))
            part = [r for r in second[i : i + size] if lo <= kg_of(r["url"]) <= hi]
            out += step(half, part, top - 200)
        out += step(half, [], MAX_WATERMARK)
        assert all(lo <= kg_of(r["url"]) <= hi for t in out for r in t.to_pylist())
        assert mine
        split += out
        half.dispose()
    assert rows_of(got + split) == rows_of(want)


@pytest.mark.parametrize(("first", "second"), [("rocksdb", "memory"), ("memory", "rocksdb")])
def test_window_state_restores_across_backends(tmp_path: Any, first: str, second: str) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    evs = events(seed=4, n=2_000)
    reference = operator(tmp_path, "memory", "ref", SLIDING)
    want = drive(reference, evs, 20, 200) + step(reference, [], MAX_WATERMARK)

    op = operator(tmp_path, first, "a", SLIDING)
    got = drive(op, evs[:1_000], 10, 200)
    snap = op.snapshot(1)
    restored = operator(tmp_path, second, "b", SLIDING)
    if first == "rocksdb":
        assert snap.native is not None and snap.keyed is None
        h = snap.native.upload(storage.fs, storage.checkpoint_dir(1), storage.shared_dir(), "win", 0, (0, MAXP - 1))
        restored.restore(
            OperatorSnapshot(
                inline=snap.inline, native=NativeRestore([h], FS, (0, MAXP - 1), None, str(tmp_path / "s"))
            )
        )
        assert restored.panes  # the memory backend's panes, read from the RocksDB files
    else:
        assert snap.keyed is not None and snap.native is None
        restored.restore(OperatorSnapshot(inline=snap.inline, keyed=snap.keyed))
        assert restored.store is not None and restored.store.panes and not restored.panes
    got += drive(restored, evs[1_000:], 10, 200) + step(restored, [], MAX_WATERMARK)
    assert rows_of(got) == rows_of(want)
    op.dispose()
    restored.dispose()


def test_processing_time_windows_keep_their_panes_in_rocksdb(tmp_path: Any, monkeypatch: Any) -> None:
    import time

    rocks = operator(tmp_path, "rocksdb", "r", TumblingProcessingTimeWindows.of(1_000))
    monkeypatch.setattr(time, "time", lambda: 5_000.2)  # the task's clock: 5 000 200 ms
    rows = [{"url": f"/k{i % 7}", "region": "eu", "ts": None, "v": i} for i in range(70)]
    assert rocks.process(Batch(None, table=batch(rows))) is None  # raw rows: panes assigned here
    assert rocks.store is not None and rocks.store.panes == {5_000_000} and not rocks.panes
    out = rocks.on_processing_time(5_001_000)
    assert out is not None
    got = sorted((r["url"], r["window_start"], r["n"], r["total"]) for r in out.table().to_pylist())
    want = sorted((f"/k{k}", 5_000_000, 10, sum(range(k, 70, 7))) for k in range(7))
    assert got == want
    assert rocks.store.panes == set()
    rocks.dispose()


def test_late_rows_go_to_the_side_output_and_on_time_ones_to_rocksdb(tmp_path: Any) -> None:
    late: list[pa.Table] = []
    config = StateBackendConfig("rocksdb", True, str(tmp_path / "work" / "r"))
    ctx = OperatorContext("w", 0, 1, "job", 0, True, state_backend=config)
    p = {"keys": ["url"], "window": TUMBLING.to_config(), "timestamp_column": "ts", "late_output": True, "aggs": AGGS}
    op = WindowOperator(p, ctx)
    op.side_output = late.append
    assert WindowOperator.combiner_for(p) is None  # raw rows: the operator pre-aggregates them itself
    rows = [{"url": "/a", "region": "eu", "ts": 1_010, "v": 5}, {"url": "/a", "region": "eu", "ts": 1_150, "v": 7}]
    assert op.process(Batch(None, table=batch(rows))) is None
    fired = op.on_watermark(1_099)
    assert fired is not None and [(r["url"], r["n"], r["total"]) for r in fired.table().to_pylist()] == [("/a", 1, 5)]
    assert op.process(Batch(None, table=batch([{"url": "/a", "region": "us", "ts": 1_020, "v": 9}]))) is None
    assert [r["ts"] for t in late for r in t.to_pylist()] == [1_020]  # its window fired: late
    assert op.store is not None and op.store.panes == {1_100}
    fired = op.on_watermark(MAX_WATERMARK)
    assert fired is not None and [(r["window_start"], r["n"], r["total"]) for r in fired.table().to_pylist()] == [
        (1_100, 1, 7)
    ]
    op.dispose()


def test_apply_and_session_windows_stay_in_memory_on_the_rocksdb_backend(tmp_path: Any) -> None:
    from sluice.eventtime.windows import EventTimeSessionWindows

    config = StateBackendConfig("rocksdb", True, str(tmp_path / "work" / "r"))
    ctx = OperatorContext("w", 0, 1, "job", 0, True, state_backend=config)
    base = {"keys": ["url"], "timestamp_column": "ts"}
    session = WindowOperator({**base, "window": EventTimeSessionWindows.with_gap(50).to_config(), "aggs": AGGS}, ctx)
    apply = WindowOperator({**base, "window": TUMBLING.to_config(), "apply": lambda *a: None}, ctx)
    assert session.store is None and apply.store is None
    assert not os.path.exists(config.local_dir)  # no database opened for them
