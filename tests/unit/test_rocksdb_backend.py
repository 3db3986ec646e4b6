"""The rocksdb state backend: keys by key group, snapshots uploaded incrementally, restores
at the same and at another parallelism, and the memory backend reading its state."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sluice.api import StreamExecutionEnvironment
from sluice.api import environment as env_module
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointStorage
from sluice.key_groups import key_group_range
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.keyed_aggregate import KEY_GROUP, KeyedAggregate
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import NativeRestore, StateBackendConfig, is_native
from taskmanager.state.rocksdb_backend import (
    RocksDBKeyedValues,
    decode_key,
    encode_key,
    range_bounds,
)

FS = pafs.LocalFileSystem()
MAXP = 128


@pytest.fixture(autouse=True)
def no_run_context() -> Any:
    saved = dict(env_module._context)
    env_module._context.clear()
    yield
    env_module._context.update(saved)


def backend(tmp_path: Any, name: str = "db", incremental: bool = True) -> RocksDBKeyedValues:
    return RocksDBKeyedValues(StateBackendConfig("rocksdb", incremental, str(tmp_path / "work" / name)))


def fill(db: RocksDBKeyedValues, n: int, start: int = 0, value: int = 1) -> None:
    keys = list(range(start, start + n))
    db.put_many(keys, [k % MAXP for k in keys], [(value, f"v{k}") for k in keys])


def entries(db: Any) -> dict[Any, tuple[int, tuple[Any, ...]]]:
    return {key: (kg, values) for key, kg, values in db.items()}


def upload(db: RocksDBKeyedValues, storage: CheckpointStorage, cid: int, kgs: tuple[int, int]) -> dict[str, Any]:
    return db.snapshot(cid).upload(storage.fs, storage.checkpoint_dir(cid), storage.shared_dir(), "agg", 0, kgs)


def test_keys_encode_by_key_group_first_and_decode_back() -> None:
    for kg, key in [(0, 5), (3, -(2**63)), (127, "käse"), (9, ("DE", 3)), (1, 2**70), (2, None), (4, 1.5)]:
        raw = encode_key(kg, key)
        assert decode_key(raw) == (kg, key)
        lo, end = range_bounds(kg, kg)
        assert lo <= raw < end
    assert encode_key(1, "zzz") < encode_key(2, 0)  # a key-group range is a contiguous key range


def test_get_put_and_iterate(tmp_path: Any) -> None:
    db = backend(tmp_path)
    assert not db
    fill(db, 1000)
    assert db.get_many([0, 999, 5000], [0, 999 % MAXP, 5000 % MAXP]) == [(1, "v0"), (1, "v999"), None]
    db.put_many([7], [7], [(2, "x")])
    got = entries(db)
    assert len(got) == 1000 and got[7] == (7, (2, "x")) and got[130] == (2, (1, "v130"))
    db.clear()
    assert not db and entries(db) == {}
    db.close()
    assert not os.path.exists(db.path)


def test_snapshot_restores_as_it_is_and_incremental_uploads_only_new_files(tmp_path: Any) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    db = backend(tmp_path)
    fill(db, 5000)
    h1 = upload(db, storage, 1, (0, MAXP - 1))
    assert h1["backend"] == "rocksdb" and h1["shared"] and h1["new"] == sorted(h1["shared"])
    assert h1["size"] == h1["full_size"] > 0
    assert all(p.startswith(storage.shared_dir() + "/agg/") for p in h1["shared"].values())
    assert all(p.startswith(storage.checkpoint_dir(1)) for p in h1["private"].values())
    assert not os.path.exists(f"{db.path}-chk-1")  # the local copy goes once uploaded
    # not yet complete: nothing of checkpoint 1 may be referenced by checkpoint 2
    fill(db, 50, value=2)
    h2 = upload(db, storage, 2, (0, MAXP - 1))
    assert not set(h2["shared"].values()) & set(h1["shared"].values())
    db.notify_checkpoint_complete(2)
    fill(db, 50, start=100, value=3)  # 1 % of the keys change
    h3 = upload(db, storage, 3, (0, MAXP - 1))
    reused = set(h3["shared"].values()) & set(h2["shared"].values())
    assert reused and set(h3["new"]) == {n for n, p in h3["shared"].items() if p not in reused}
    assert h3["size"] < h3["full_size"] / 2  # only the new SST file and the small private files

    restored = backend(tmp_path, "restored")
    restored.restore([h3], FS, (0, MAXP - 1))
    assert entries(restored) == entries(db)
    # restored as it is: its shared files are referenced again, not uploaded again
    h4 = upload(restored, storage, 4, (0, MAXP - 1))
    assert h4["new"] == [] and set(h4["shared"].values()) == set(h3["shared"].values())


def test_full_snapshots_put_every_file_in_the_checkpoint(tmp_path: Any) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    db = backend(tmp_path, incremental=False)
    fill(db, 2000)
    h1 = upload(db, storage, 1, (0, MAXP - 1))
    db.notify_checkpoint_complete(1)
    h2 = upload(db, storage, 2, (0, MAXP - 1))
    assert h1["shared"] == h2["shared"] == {} and h2["size"] == h2["full_size"]
    assert any(n.endswith(".sst") for n in h2["private"])


@pytest.mark.parametrize(("old_p", "new_p"), [(1, 3), (3, 2)])
def test_rescale_copies_each_new_subtask_its_key_range(tmp_path: Any, old_p: int, new_p: int) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    handles, expected = [], {}
    for s in range(old_p):
        lo, hi = key_group_range(s, old_p, MAXP)
        db = backend(tmp_path, f"old{s}")
        keys = [k for k in range(3000) if lo <= k % MAXP <= hi]
        db.put_many(keys, [k % MAXP for k in keys], [(k,) for k in keys])
        expected.update({k: (k % MAXP, (k,)) for k in keys})
        h = db.snapshot(1).upload(storage.fs, storage.checkpoint_dir(1), storage.shared_dir(), "agg", s, (lo, hi))
        handles.append(h)
    merged: dict[Any, Any] = {}
    for s in range(new_p):
        kgs = key_group_range(s, new_p, MAXP)
        db = backend(tmp_path, f"new{s}")
        db.restore(handles, FS, kgs)
        got = entries(db)
        assert all(kgs[0] <= kg <= kgs[1] for kg, _v in got.values())
        merged.update(got)
    assert merged == expected


def aggregate(tmp_path: Any, kind: str, name: str) -> KeyedAggregate:
    config = StateBackendConfig(kind, True, str(tmp_path / "work" / name) if kind == "rocksdb" else "")
    ctx = OperatorContext("agg", 0, 1, "job", 0, True, state_backend=config)
    return KeyedAggregate.create(None, {"key": "k", "aggs": {"n": ("count", "*"), "m": ("avg", "v")}}, ctx)  # type: ignore[arg-type]  # the kind is unused


def partials(rows: list[tuple[str, int, int, float, int]]) -> Batch:
    k, kg, n, s, c = zip(*rows, strict=True)
    table = pa.table({"k": k, KEY_GROUP: pa.array(kg, pa.int32()), "n": n, "m": s, "__count_m": c})
    return Batch(None, table=table)


@pytest.mark.parametrize(("first", "second"), [("rocksdb", "rocksdb"), ("rocksdb", "memory"), ("memory", "rocksdb")])
def test_a_keyed_aggregate_restores_across_backends(tmp_path: Any, first: str, second: str) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    op = aggregate(tmp_path, first, "a")
    out = op.process(partials([("x", 1, 2, 3.0, 2), ("y", 2, 1, 5.0, 1)]))
    assert out is not None and out.table().to_pylist() == [{"k": "x", "n": 2, "m": 1.5}, {"k": "y", "n": 1, "m": 5.0}]
    snap = op.snapshot(1)
    restored = aggregate(tmp_path, second, "b")
    if snap.native is not None:
        h = snap.native.upload(storage.fs, storage.checkpoint_dir(1), storage.shared_dir(), "agg", 0, (0, MAXP - 1))
        if is_native(h):
            restored.restore(OperatorSnapshot(native=NativeRestore([h], FS, (0, MAXP - 1), None, str(tmp_path / "s"))))
        else:  # the memory backend's incremental checkpoint: a chain of Arrow files
            restored.restore(OperatorSnapshot(keyed=storage.read_keyed_state([h], (0, MAXP - 1))))
    else:
        restored.restore(OperatorSnapshot(keyed=snap.keyed))
    out = restored.process(partials([("x", 1, 1, 3.0, 1)]))
    assert out is not None and out.table().to_pylist() == [{"k": "x", "n": 3, "m": 2.0}]
    assert restored.snapshot_table().sort_by("k").to_pylist() == [
        {"k": "x", KEY_GROUP: 1, "n": 3, "m": 6.0, "__count_m": 3},
        {"k": "y", KEY_GROUP: 2, "n": 1, "m": 5.0, "__count_m": 1},
    ]
    op.dispose()
    restored.dispose()


def test_a_savepoint_copies_every_file_and_restores_from_its_own_directory(tmp_path: Any) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")
    db = backend(tmp_path)
    fill(db, 3000)
    db.notify_checkpoint_complete(0)
    h1 = upload(db, storage, 1, (0, MAXP - 1))
    db.notify_checkpoint_complete(1)
    fill(db, 30, value=5)
    h2 = upload(db, storage, 2, (0, MAXP - 1))
    checkpoint = {"job_id": "job", "checkpoint_id": 2, "timestamp_ms": 0, "tasks": {"c": {"0": {"keyed": {"agg": h2}}}}}
    env = StreamExecutionEnvironment()
    env.set_max_parallelism(MAXP)
    env.from_collection([{"k": "a"}]).key_by("k").count().uid("agg").print()
    plan = sp.plan(checkpoint, env.get_job_graph("j"))
    plan_files = [r for _src, r in plan.files]
    assert all(r.startswith("state/0/") for r in plan_files)
    assert len(plan_files) == len(h2["private"]) + len(h2["shared"])
    path = sp.write(plan, storage.fs, str(tmp_path / "savepoints"), "job")
    for f in h1["shared"].values():  # the checkpoint's shared files may go: the savepoint has its own copies
        os.remove(f)
    saved = sp.read(path)
    (handle,) = saved.metadata["operators"]["agg"]["keyed"]
    restore = sp._restore_handle(handle, saved.file_uri)
    assert restore["uri"].startswith(path) and restore["backend"] == "rocksdb"
    restored = backend(tmp_path, "from-savepoint")
    restored.restore([restore], FS, (0, MAXP - 1))
    assert entries(restored) == entries(db)
