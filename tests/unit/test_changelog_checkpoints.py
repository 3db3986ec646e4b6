"""Incremental memory-backend checkpoints of a keyed aggregate on real files: a checkpoint writes
the changed keys only, a restore merges the chain at any parallelism, savepoints and retained
checkpoints carry the chain, and the JobManager accepts a chain only inside the job's shared
directory."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pyarrow as pa
import pytest
from savepoint_jobs import page_views

from jobmanager.checkpoint import state_handles
from sluice import graph
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointStorage
from sluice.key_groups import KEY_GROUP, key_group_range
from taskmanager.operators.base import OperatorContext
from taskmanager.operators.keyed_aggregate import KeyedAggregate
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import StateBackendConfig
from taskmanager.state.changelog import Step

MAXP = 128


def aggregate() -> KeyedAggregate:
    ctx = OperatorContext("counts", 0, 1, "job-1", 0, True, state_backend=StateBackendConfig("memory", True))
    return KeyedAggregate.create(None, {"key": "k", "aggs": {"n": ("count", "*")}}, ctx)  # type: ignore[arg-type]  # the kind is unused


def feed(op: KeyedAggregate, counts: dict[str, int], first_group: int = -1) -> None:
    """One batch of partial counts; key i's key group is first_group + i (-1: a hash of the key)."""
    keys = sorted(counts)
    groups = [first_group + i if first_group >= 0 else sum(map(ord, k)) % MAXP for i, k in enumerate(keys)]
    table = pa.table(
        {
            "k": pa.array(keys, pa.string()),
            KEY_GROUP: pa.array(groups, pa.int32()),
            "n": pa.array([counts[k] for k in keys], pa.int64()),
        }
    )
    op.process(Batch(None, table=table))


def checkpoint(op: KeyedAggregate, storage: CheckpointStorage, n: int) -> dict[str, Any]:
    """What the checkpointer does: snapshot on the task thread, upload, then the confirmation."""
    snap = op.snapshot(n)
    handle = snap.native.upload(storage.fs, storage.checkpoint_dir(n), storage.shared_dir(), "counts", 0, (0, MAXP - 1))
    op.notify_checkpoint_complete(n)
    return handle


def as_dict(table: pa.Table | None) -> dict[str, int]:
    if table is None:
        return {}
    return dict(zip(table.column("k").to_pylist(), table.column("n").to_pylist(), strict=True))


def test_a_checkpoint_writes_the_changed_keys_and_a_restore_merges_the_chain(tmp_path: Any) -> None:
    storage = CheckpointStorage(str(tmp_path / "chk"), "job-1")
    op = aggregate()
    feed(op, {f"u{i}": 1 for i in range(2000)})
    first = checkpoint(op, storage, 1)
    assert len(first["chain"]) == 1 and first["rows"] == 2000
    feed(op, {"u1": 5, "u2": 1, "new": 1})
    second = checkpoint(op, storage, 2)
    assert len(second["chain"]) == 2 and second["chain"][0] == first["chain"][0]
    assert second["new"] == [os.path.basename(second["chain"][1])]
    assert second["size"] < first["size"] / 10  # three rows written, not 2,001
    expected = {**{f"u{i}": 1 for i in range(2000)}, "u1": 6, "u2": 2, "new": 1}
    assert as_dict(storage.read_keyed_state([second], (0, MAXP - 1))) == expected
    # rescaled to 3 subtasks: each reads its key groups of the merged chain, every key once
    parts = [as_dict(storage.read_keyed_state([second], key_group_range(s, 3, MAXP))) for s in range(3)]
    assert sum(len(p) for p in parts) == len(expected) and {k: v for p in parts for k, v in p.items()} == expected
    # restored: the next checkpoint is whole again, on no earlier file
    restored = aggregate()
    restored.restore_table(storage.read_keyed_state([second], (0, MAXP - 1)))
    feed(restored, {"u3": 1})
    third = checkpoint(restored, storage, 3)
    assert len(third["chain"]) == 1 and not set(third["chain"]) & set(second["chain"])
    assert as_dict(storage.read_keyed_state([third], (0, MAXP - 1))) == {**expected, "u3": 2}


def test_compaction_reads_the_chain_back_into_one_base(tmp_path: Any) -> None:
    storage = CheckpointStorage(str(tmp_path / "chk"), "job-1")
    op = aggregate()
    assert op.changelog is not None
    op.changelog.MAX_FILES = 3
    expected: dict[str, int] = {}
    handles = []
    for n in range(1, 8):
        batch = {f"u{(n * 13 + i) % 50}": 1 for i in range(10)}
        feed(op, batch)
        for k in batch:
            expected[k] = expected.get(k, 0) + 1
        handles.append(checkpoint(op, storage, n))
        assert as_dict(storage.read_keyed_state([handles[-1]], (0, MAXP - 1))) == expected
    # only the first checkpoint reads the whole dict; later new bases are merged from the files
    assert op.changelog.steps[Step.COMPACT] >= 1 and op.changelog.steps[Step.WHOLE] == 1
    assert max(len(h["chain"]) for h in handles) == 3


def chain_checkpoint(tmp_path: Any, job: Any) -> tuple[CheckpointStorage, dict[str, Any]]:
    """A completed checkpoint 2 of `job` (page views) whose counts are chains, with its `_metadata`."""
    storage = CheckpointStorage(str(tmp_path / "chk"), "job-1")
    tasks: dict[str, dict[str, Any]] = {}
    for chain in graph.build_chains(job):
        for s in range(chain.parallelism):
            handle: dict[str, Any] = {"operators": {}, "keyed": {}}
            if "counts" in chain.operator_ids:
                lo, hi = key_group_range(s, chain.parallelism, MAXP)
                op = aggregate()
                feed(op, {f"k{s}-{i}": 1 for i in range(5)}, first_group=lo)
                checkpoint(op, storage, 1)
                feed(op, {f"k{s}-0": 1}, first_group=lo)
                h = checkpoint(op, storage, 2)
                h["key_groups"] = [lo, hi]
                handle["keyed"]["counts"] = h
            tasks.setdefault(chain.id, {})[str(s)] = handle
    meta = {"job_id": "job-1", "checkpoint_id": 2, "final": False, "timestamp_ms": 1, "attempt": 0, "tasks": tasks}
    storage.write_metadata(2, meta)
    return storage, meta


def restored_counts(saved: sp.Savepoint, tmp_path: Any) -> dict[str, int]:
    job = page_views(parallelism=3)
    states = sp.restore_states(saved, job, graph.build_chains(job), allow_non_restored=True)
    chain = graph.chain_of(graph.build_chains(job))["counts"]
    reader = CheckpointStorage(str(tmp_path / "other"), "job-2")
    out: dict[str, int] = {}
    for s in range(3):
        handles = json.loads(states[(chain.id, s)])["keyed"]["counts"]
        part = as_dict(reader.read_keyed_state(handles, key_group_range(s, 3, MAXP)))
        assert not set(part) & set(out)
        out.update(part)
    return out


def test_a_savepoint_of_chains_is_self_contained_and_a_retained_checkpoint_restores(tmp_path: Any) -> None:
    job = page_views()
    storage, meta = chain_checkpoint(tmp_path, job)
    # rows were written under key groups of their own: every key is read back, whatever its group
    expected = as_dict(
        storage.read_keyed_state(
            [h["keyed"]["counts"] for t in meta["tasks"].values() for h in t.values() if h["keyed"]], (0, MAXP - 1)
        )
    )
    assert len(expected) == 10 and expected["k0-0"] == 2
    retained = restored_counts(sp.read(storage.checkpoint_dir(2)), tmp_path)
    assert retained == expected
    path = sp.write(sp.plan(meta, job), storage.fs, str(tmp_path / "sps"), "job-1")
    moved = tmp_path / "elsewhere"
    shutil.move(path, moved)
    shutil.rmtree(tmp_path / "chk")  # the savepoint holds every file of each chain
    assert restored_counts(sp.read(str(moved)), tmp_path) == retained


def test_the_jobmanager_accepts_a_chain_only_inside_the_jobs_shared_directory(tmp_path: Any) -> None:
    chk = str(tmp_path / "job-1" / "chk-3")
    shared = str(tmp_path / "job-1" / "shared" / "counts")
    os.makedirs(chk)
    os.makedirs(shared)

    def parse(h: dict[str, Any]) -> dict[str, Any]:
        return state_handles.parse(
            json.dumps({"keyed": {"counts": h}}).encode(), chk, {"counts"}, MAXP, os.path.realpath
        )

    good = {
        "chain": [f"{shared}/a.arrow", f"{shared}/b.arrow"],
        "key_columns": ["k"],
        "key_groups": [0, 127],
        "shared": {"a.arrow": f"{shared}/a.arrow", "b.arrow": f"{shared}/b.arrow"},
        "new": ["b.arrow"],
    }
    assert parse(good)["keyed"]["counts"]["chain"] == good["chain"]
    elsewhere = str(tmp_path / "job-2" / "shared" / "x.arrow")
    bad = [
        ({**good, "chain": [elsewhere], "shared": {"x.arrow": elsewhere}, "new": []}, "is not inside"),
        ({**good, "chain": [f"{shared}/c.arrow"]}, "every file must be one of its shared files"),
        ({**good, "chain": []}, "expected a list of 1 to"),
        ({**good, "chain": [["nested"]]}, "expected a list of 1 to"),
        ({**good, "key_columns": "k"}, "key_columns"),
        ({**good, "new": ["zzz.arrow"]}, "new"),
    ]
    for h, message in bad:
        with pytest.raises(state_handles.InvalidStateHandle, match=message):
            parse(h)


def test_a_batch_job_keeps_no_changes() -> None:
    """BATCH takes no checkpoints: the operator must not hold every batch's rows for one."""
    ctx = OperatorContext(
        "counts", 0, 1, "job-1", 0, True, batch=True, state_backend=StateBackendConfig("memory", True)
    )
    op = KeyedAggregate.create(None, {"key": "k", "aggs": {"n": ("count", "*")}}, ctx)  # type: ignore[arg-type]  # the kind is unused
    feed(op, {"a": 1, "b": 2})
    assert op.changelog is None and op.snapshots is None
    out = op.end_input()
    assert out is not None and as_dict(out.table()) == {"a": 1, "b": 2}


@pytest.mark.parametrize("keys", [["k"], ["k", "j"]])
def test_the_whole_state_built_column_by_column_is_every_entry(keys: list[str]) -> None:
    ctx = OperatorContext("counts", 0, 1, "job-1", 0, True, state_backend=StateBackendConfig("memory", True))
    payload = {"keys": keys, "aggs": {"n": ("count", "*"), "m": ("avg", "v")}}
    op = KeyedAggregate.create(None, payload, ctx)  # type: ignore[arg-type]  # the kind is unused
    rows = [(f"k{i % 7}", i % 3, i % 128, 1, float(i), 1) for i in range(50)]
    cols = list(zip(*rows, strict=True))
    data = {"k": cols[0], "j": cols[1], KEY_GROUP: pa.array(cols[2], pa.int32()), "n": cols[3], "m": cols[4]}
    table = pa.table({**{c: data[c] for c in keys}, KEY_GROUP: data[KEY_GROUP], "n": data["n"], "m": data["m"]})
    op.process(Batch(None, table=table.append_column("__count_m", pa.array(cols[5], pa.int64()))))
    got = op._snapshot_rows()
    expected = {}
    for key, kg, values in op.state.items():
        expected[key if isinstance(key, tuple) else (key,)] = (kg, *values)
    columns = [got.column(c).to_pylist() for c in [*keys, KEY_GROUP, "n", "m", "__count_m"]]
    assert {tuple(r[: len(keys)]): tuple(r[len(keys) :]) for r in zip(*columns, strict=True)} == expected
    assert got.num_rows == len(expected) == (7 if len(keys) == 1 else 21)
