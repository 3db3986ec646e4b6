"""The batch form of keyed process functions without Spark: one Python call per batch and per
timer round, the same results as the per-key form on both state backends, snapshots that either
form restores, split by key group on a rescale, composite keys, and errors that name what to fix."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

from sluice.checkpoints.storage import CheckpointStorage
from sluice.eventtime import MAX_WATERMARK
from sluice.key_groups import KEY_GROUP, key_group_range
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.keyed_process import KeyedProcess
from taskmanager.operators.keyed_process_batch import BatchKeyedProcess
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import NativeRestore, StateBackendConfig

MAXP = 128


def rows(*events: tuple[int, int]) -> pa.Table:
    return pa.table(
        {
            "user": pa.array([u for u, _t in events], pa.int64()),
            "ts": pa.array([t for _u, t in events], pa.int64()),
            KEY_GROUP: pa.array([u % MAXP for u, _t in events], pa.int32()),
        }
    )


class FirstPerUser:
    """The per-key form: the first event per user; later ones are listed; the user is
    forgotten 100 ms (event time) after the first, reporting how many came later."""

    def process(self, key: Any, frame: pd.DataFrame, ctx: Any) -> pd.DataFrame | None:
        seen = ctx.value_state("seen")
        if seen.value is not None:
            ctx.list_state("later").add(int(frame["ts"].min()))
            return None
        first = int(frame["ts"].min())
        seen.update(first)
        ctx.register_event_time_timer(first + 100)
        return pd.DataFrame({"user": [key], "ts": [first]})

    def on_timer(self, key: Any, ts: int, ctx: Any) -> pd.DataFrame:
        later = ctx.list_state("later").get()
        ctx.value_state("seen").clear()
        ctx.list_state("later").clear()
        return pd.DataFrame({"user": [key], "ts": [-ts - len(later)]})


class FirstPerUserBatch:
    """The same rule in the batch form: state read and written for the batch's keys at once."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    def process(self, frame: pd.DataFrame, ctx: Any) -> pd.DataFrame | None:
        self.calls.append(list(ctx.keys))
        firsts = np.minimum.reduceat(frame["ts"].to_numpy(), ctx.offsets[:-1]).tolist()
        seen = ctx.value_state("seen").get(ctx.keys)
        old = [(k, t) for k, t, s in zip(ctx.keys, firsts, seen, strict=True) if s is not None]
        new = [(k, t) for k, t, s in zip(ctx.keys, firsts, seen, strict=True) if s is None]
        if old:
            ctx.list_state("later").add_all([k for k, _t in old], [[t] for _k, t in old])
        if not new:
            return None
        keys, times = [k for k, _t in new], [t for _k, t in new]
        ctx.value_state("seen").update(keys, times)
        ctx.register_event_time_timers(keys, np.array(times) + 100)
        return pd.DataFrame({"user": keys, "ts": times})

    def on_timer(self, timers: pd.DataFrame, ctx: Any) -> pd.DataFrame:
        assert list(timers["user"]) == ctx.keys and ctx.timer_domain == "event"
        later = ctx.list_state("later").get(ctx.keys)
        ctx.value_state("seen").clear(ctx.keys)
        ctx.list_state("later").clear(timers["user"])  # a Series of keys works too
        return pd.DataFrame(
            {"user": ctx.keys, "ts": [-t - len(v) for t, v in zip(timers["timestamp"], later, strict=True)]}
        )


class Operators:
    """Operators of either form on either backend, their databases under one directory."""

    def __init__(self, tmp_path: Any) -> None:
        self.tmp, self.n = tmp_path, 0
        self.storage = CheckpointStorage(str(tmp_path / "ckpt"), "job")

    def make(self, backend: str, fn: Any, subtask: int = 0, parallelism: int = 1, **payload: Any) -> KeyedProcess:
        self.n += 1
        config = None if backend == "memory" else StateBackendConfig("rocksdb", True, str(self.tmp / f"op{self.n}"))
        ctx = OperatorContext(
            name="p",
            subtask=subtask,
            parallelism=parallelism,
            job_id="j",
            restore_checkpoint_id=0,
            checkpointing=True,
            state_backend=config,
        )
        settings = {"keys": ["user"], "process": fn, "output_schema": "user bigint, ts bigint", **payload}
        if isinstance(fn, FirstPerUserBatch):
            settings["batch"] = True
        return _create(settings, ctx)

    def checkpoint(self, op: KeyedProcess, cid: int) -> OperatorSnapshot:
        """`op`'s snapshot as a task writes it and restores it (RocksDB's uploaded)."""
        snap = op.snapshot(cid)
        if snap.native is None:
            return snap
        kgs = (0, MAXP - 1)
        handle = snap.native.upload(
            self.storage.fs, self.storage.checkpoint_dir(cid), self.storage.shared_dir(), "p", 0, kgs
        )
        op.notify_checkpoint_complete(cid)
        self.n += 1
        native = NativeRestore([handle], pafs.LocalFileSystem(), kgs, None, str(self.tmp / f"scratch{self.n}"))
        return OperatorSnapshot(inline=snap.inline, native=native)


def _create(settings: dict[str, Any], ctx: OperatorContext) -> KeyedProcess:
    from sluice.graph import OperatorKind

    return KeyedProcess.create(OperatorKind.PROCESS, settings, ctx)


def out(batch: Batch | None) -> list[dict[str, Any]]:
    return [] if batch is None else batch.table().to_pylist()


def scenario(op: KeyedProcess, batches: list[list[tuple[int, int]]], watermarks: list[int]) -> list[Any]:
    results = []
    for events, watermark in zip(batches, watermarks, strict=True):
        results.append(out(op.process(Batch(None, table=rows(*events)))))
        results.append(out(op.on_watermark(watermark)))
    results.append(out(op.end_input()))
    return results


def random_scenario(seed: int) -> tuple[list[list[tuple[int, int]]], list[int]]:
    rng = random.Random(seed)
    batches, watermarks, now = [], [], 0
    for _ in range(12):
        batches.append([(rng.randrange(60), now + rng.randrange(80)) for _ in range(rng.randrange(1, 40))])
        now += rng.randrange(10, 60)
        watermarks.append(now)
    return batches, watermarks


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_the_batch_form_gives_the_per_key_forms_results_with_one_call_per_batch(tmp_path: Any, backend: str) -> None:
    ops = Operators(tmp_path)
    for seed in range(3):
        batches, watermarks = random_scenario(seed)
        keyed, fn = ops.make(backend, FirstPerUser()), FirstPerUserBatch()
        batched = ops.make(backend, fn)
        assert isinstance(batched, BatchKeyedProcess) and not isinstance(keyed, BatchKeyedProcess)
        expected = scenario(keyed, batches, watermarks)
        assert sum(len(r) for r in expected) > 50  # rows and timers on most steps
        assert scenario(batched, batches, watermarks) == expected
        assert len(fn.calls) == len(batches)  # one call per batch...
        assert batched.python_calls < keyed.python_calls / 5  # ...and one per timer round, not per key
        assert [sorted(set(c)) == c for c in fn.calls] == [True] * len(batches)  # each key once, in order
        keyed.dispose()
        batched.dispose()


@pytest.mark.parametrize(("first", "second"), [("batch", "key"), ("key", "batch")])
@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_either_form_restores_the_others_snapshot_and_fires_each_pending_timer_once(
    tmp_path: Any, backend: str, first: str, second: str
) -> None:
    ops = Operators(tmp_path)

    def fn(form: str) -> Any:
        return FirstPerUserBatch() if form == "batch" else FirstPerUser()

    op = ops.make(backend, fn(first))
    op.process(Batch(None, table=rows((1, 10), (300, 40), (7, 70))))
    op.process(Batch(None, table=rows((300, 45))))
    assert out(op.on_watermark(115)) == [{"user": 1, "ts": -110}]
    snap = ops.checkpoint(op, 1)
    restored = ops.make(backend, fn(second))
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
    ops = Operators(tmp_path)
    op = ops.make("memory", FirstPerUserBatch())
    users = list(range(0, 400, 3))
    op.process(Batch(None, table=rows(*[(u, 1000 + u) for u in users])))
    snap = op.snapshot(1)
    assert snap.keyed is not None
    fired: dict[int, int] = {}
    for subtask in range(2):
        lo, hi = key_group_range(subtask, 2, MAXP)
        kg = snap.keyed.column(KEY_GROUP)
        part = ops.make("memory", FirstPerUserBatch(), subtask=subtask, parallelism=2)
        mine = pc.and_(pc.greater_equal(kg, lo), pc.less_equal(kg, hi))
        part.restore(OperatorSnapshot(inline=snap.inline, keyed=snap.keyed.filter(mine)))
        for row in out(part.on_watermark(MAX_WATERMARK)):
            assert lo <= row["user"] % MAXP <= hi  # only its own key groups
            fired[row["user"]] = row["ts"]
    assert fired == {u: -(1100 + u) for u in users}  # every timer fired once, on one subtask


def test_composite_keys_come_as_tuples_and_timers_as_one_column_per_key_part(tmp_path: Any) -> None:
    seen: list[Any] = []

    def count(frame: pd.DataFrame, ctx: Any) -> None:
        counts = ctx.value_state("n").get(ctx.keys)
        sizes = np.diff(ctx.offsets).tolist()
        ctx.value_state("n").update(ctx.keys, [(c or 0) + s for c, s in zip(counts, sizes, strict=True)])
        ctx.register_event_time_timers(frame[["country", "device"]].drop_duplicates(), 50)  # a DataFrame of keys
        ctx.value_state("seen").update([list(k) for k in ctx.keys], [True] * len(ctx.keys))  # lists as keys, too

    def report(timers: pd.DataFrame, ctx: Any) -> pd.DataFrame:
        seen.append(list(ctx.keys))
        return timers.assign(n=ctx.value_state("n").get(ctx.keys))

    ctx = OperatorContext(name="p", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True)
    op = _create({"keys": ["country", "device"], "process": count, "on_timer": report, "batch": True}, ctx)
    table = pa.table(
        {
            "country": ["de", "fr", "de", "de"],
            "device": ["tv", "tv", "tv", "pc"],
            KEY_GROUP: pa.array([1, 2, 1, 3], pa.int32()),
        }
    )
    op.process(Batch(None, table=table))
    op.process(Batch(None, table=table.slice(0, 1)))
    got = out(op.on_watermark(60))
    assert seen == [[("de", "pc"), ("de", "tv"), ("fr", "tv")]]  # one round, every due timer
    assert got == [
        {"country": "de", "device": "pc", "timestamp": 50, "n": 1},
        {"country": "de", "device": "tv", "timestamp": 50, "n": 3},
        {"country": "fr", "device": "tv", "timestamp": 50, "n": 1},
    ]


def test_state_of_another_key_and_misaligned_values_are_errors_naming_what_to_fix(tmp_path: Any) -> None:
    ops = Operators(tmp_path)
    op = ops.make("memory", lambda frame, ctx: ctx.value_state("v").update([999], [1]), batch=True)
    with pytest.raises(KeyError, match=r"key 999 is not in this call's rows.*ctx.keys"):
        op.process(Batch(None, table=rows((1, 10))))
    op = ops.make("memory", lambda frame, ctx: ctx.value_state("v").update(ctx.keys, [1, 2]), batch=True)
    with pytest.raises(ValueError, match="values: 2 given for 1 keys"):
        op.process(Batch(None, table=rows((1, 10))))
    op = ops.make("memory", lambda frame, ctx: ctx.register_event_time_timers(ctx.keys, [1, 2, 3]), batch=True)
    with pytest.raises(ValueError, match="timestamps: 3 given for 2 keys"):
        op.process(Batch(None, table=rows((1, 10), (2, 10))))
    kept: list[Any] = []
    op = ops.make("memory", lambda frame, ctx: kept.append(ctx), batch=True)
    op.process(Batch(None, table=rows((1, 10))))
    with pytest.raises(RuntimeError, match="only available inside process"):
        kept[0].value_state("v").get([1])  # a context kept past its call


def test_the_api_builds_a_batch_process_operator_and_the_job_check_refuses_a_forged_setting() -> None:
    from sluice import graph
    from sluice.api import StreamExecutionEnvironment

    env = StreamExecutionEnvironment()
    keyed = env.from_collection([{"user": 1, "ts": 5}]).key_by("user")
    with pytest.raises(TypeError, match=r"process_batch\(\) takes a function \(rows, ctx\)"):
        keyed.process_batch(42)
    with pytest.raises(TypeError, match=r"process_batch\(on_timer=...\) takes a function \(timers, ctx\)"):
        keyed.process_batch(lambda rows, ctx: None, on_timer="later")  # type: ignore[arg-type]  # a str on purpose
    keyed.process_batch(lambda rows, ctx: None, output_schema="user bigint").print()
    job = env.get_job_graph("batch")
    graph.validate(job)
    [i] = [n for n, op in enumerate(job.operators) if json.loads(op.config).get("batch") is True]
    assert job.operators[i].name == "process batches by user"
    forged = env.get_job_graph("batch")
    forged.operators[i].config = json.dumps({**json.loads(forged.operators[i].config), "batch": "yes"})
    with pytest.raises(graph.JobValidationError, match=rf"^operators\[{i}\]\.config\.batch: must be true or false"):
        graph.validate(forged)


def test_examples_dedup_keeps_the_same_events_in_both_forms() -> None:
    """examples/dedup.py's process function and its batch form (`--batch-form`), on the same
    disordered batches and watermarks: the same rows in the same order, far fewer calls."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    from dedup import FirstWithinTtl, FirstWithinTtlBatch

    rng = random.Random(3)
    batches, now = [], 0
    for _ in range(30):
        events = [(rng.randrange(200), now + rng.randrange(-400, 400)) for _ in range(rng.randrange(1, 300))]
        batches.append(
            pa.table(
                {
                    "user": pa.array([u for u, _t in events], pa.int64()),
                    "ts": pa.array([t for _u, t in events], pa.int64()),
                    "url": [f"/page/{rng.randrange(9)}" for _ in events],
                    KEY_GROUP: pa.array([u % MAXP for u, _t in events], pa.int32()),
                }
            )
        )
        now += 250
    results = []
    for fn in (FirstWithinTtl(1_000), FirstWithinTtlBatch(1_000)):
        ctx = OperatorContext(
            name="p", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True
        )
        settings = {"keys": ["user"], "process": fn, "output_schema": "user bigint, ts bigint, url string"}
        op = _create({**settings, "batch": isinstance(fn, FirstWithinTtlBatch)}, ctx)
        got = []
        for i, table in enumerate(batches):
            got += out(op.process(Batch(None, table=table)))
            got += out(op.on_watermark(i * 250 - 400))
        got += out(op.end_input())
        results.append((got, op.python_calls))
    (keyed, keyed_calls), (batched, batch_calls) = results
    assert len(keyed) > 300 and batched == keyed
    assert batch_calls * 5 < keyed_calls
