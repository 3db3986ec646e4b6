"""SnapshotCache: a memory-backed keyed aggregate's checkpoint is the last snapshot patched with
the rows put since. Whatever the updates (a key changed in several batches, null keys), each
snapshot must hold exactly the state's entries, as a snapshot built whole would; it is built whole
when there is nothing to patch, the changes outgrew the state, or the new rows do not fit the last
table's types; and a snapshot taken is never changed later."""

from __future__ import annotations

import random

import pyarrow as pa

from taskmanager.operators.keyed_aggregate import KEY_GROUP, KeyedAggregate
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import StateBackendConfig
from taskmanager.state.snapshot_cache import SnapshotCache


def table_of(state: dict, key_columns: list[str], keys) -> pa.Table:
    """The snapshot rows of `keys` of `state` (key -> (key group, count)), as the operator builds them."""
    columns = {}
    if len(key_columns) == 1:
        columns[key_columns[0]] = pa.array(keys, pa.string())
    else:
        for i, name in enumerate(key_columns):
            columns[name] = pa.array([k[i] for k in keys], pa.string())
    columns[KEY_GROUP] = pa.array([state[k][0] for k in keys], pa.int32())
    columns["n"] = pa.array([state[k][1] for k in keys], pa.int64())
    return pa.table(columns)


def rows_of(state: dict, key_columns: list[str]):
    """A Rows function over `state`: every key's row."""
    return lambda: table_of(state, key_columns, list(state))


def put(cache: SnapshotCache, state: dict, key_columns: list[str], updates: dict) -> None:
    """One batch: `updates` (key -> (key group, count)) put into `state`, their rows given to the cache."""
    state.update(updates)
    cache.changed(table_of(state, key_columns, list(updates)), len(state))


def as_set(table: pa.Table) -> list:
    rows = [tuple(r.values()) for r in table.to_pylist()]
    assert len(rows) == len(set(rows)), "a key twice in a snapshot"
    return sorted(rows, key=repr)


def test_random_updates_snapshot_exactly_the_state_one_and_two_column_keys():
    rng = random.Random(7)
    for key_columns in (["url"], ["country", "device"]):
        state: dict = {}
        cache = SnapshotCache(key_columns)
        rows = rows_of(state, key_columns)
        for _checkpoint in range(40):
            for _batch in range(rng.choice([0, 1, 3])):  # batches between checkpoints, a key in several
                updates: dict = {}
                for _ in range(rng.choice([1, 3, 30])):
                    k = rng.randrange(60)
                    key = f"/u{k}" if len(key_columns) == 1 else (f"c{k % 7}", None if k == 13 else f"d{k % 5}")
                    old = updates.get(key, state.get(key, (k % 128, 0)))
                    updates[key] = (old[0], old[1] + 1)
                put(cache, state, key_columns, updates)
            assert as_set(cache.take(rows)) == as_set(rows())
        assert cache.incremental > 20  # most snapshots patched the last one, not built whole


def test_a_snapshot_is_built_whole_first_after_a_reset_and_when_the_changes_outgrow_the_state():
    state = {f"k{i}": (i, i) for i in range(10)}
    cache, rows = SnapshotCache(["url"]), rows_of(state, ["url"])
    cache.take(rows)
    assert (cache.whole, cache.incremental) == (1, 0)
    put(cache, state, ["url"], {"k1": (1, 100)})
    cache.take(rows)
    assert (cache.whole, cache.incremental) == (1, 1)
    for i in range(10):  # every key changed: patched all the same (no Python call per key)
        put(cache, state, ["url"], {f"k{i}": (i, 1000 + i)})
    assert as_set(cache.take(rows)) == as_set(rows()) and (cache.whole, cache.incremental) == (1, 2)
    for _ in range(3):  # 30 changed rows for 10 keys: over twice the state, dropped
        put(cache, state, ["url"], {f"k{i}": (i, state[f"k{i}"][1] + 1) for i in range(10)})
    assert not cache.tracking and cache.pending == []
    put(cache, state, ["url"], {"k1": (1, 7)})  # not kept: the next snapshot is built whole anyway
    assert as_set(cache.take(rows)) == as_set(rows()) and cache.whole == 2
    cache.reset()
    put(cache, state, ["url"], {"k1": (1, 8)})  # before the first snapshot after a reset: nothing to patch
    cache.take(rows)
    assert cache.whole == 3


def test_new_rows_of_other_types_than_the_last_snapshot_build_it_whole():
    state: dict = {"a": (1, None), "b": (2, None)}
    cache = SnapshotCache(["url"])

    def rows():  # the first snapshot's type of "n" inferred from nulls only
        return pa.table(
            {
                "url": list(state),
                KEY_GROUP: pa.array([v[0] for v in state.values()], pa.int32()),
                "n": [v[1] for v in state.values()],
            }
        )

    first = cache.take(rows)
    assert first.schema.field("n").type == pa.null()
    put(cache, state, ["url"], {"a": (1, 5)})
    second = cache.take(rows)
    assert cache.whole == 2 and second.schema.field("n").type == pa.int64()
    assert as_set(second) == as_set(rows())


def test_a_null_key_is_replaced_not_repeated():
    state = {None: (0, 1), "a": (1, 1), "b": (2, 1), "c": (3, 1)}
    cache, rows = SnapshotCache(["url"]), rows_of(state, ["url"])
    cache.take(rows)
    put(cache, state, ["url"], {None: (0, 2)})
    put(cache, state, ["url"], {None: (0, 3), "a": (1, 2)})
    assert as_set(cache.take(rows)) == as_set(rows())
    assert cache.incremental == 1


def test_the_operator_snapshot_is_patched_and_earlier_snapshots_stay_as_they_were():
    op = KeyedAggregate(  # checkpoints written whole (state.backend.incremental: false)
        {"key": "url", "aggs": {"n": ("count", "*")}}, "count by url", backend=StateBackendConfig("memory", False)
    )

    def feed(keys):
        table = pa.table(
            {
                "url": pa.array(keys, pa.string()),
                "n": pa.array([1] * len(keys), pa.int64()),
                KEY_GROUP: pa.array([len(k) % 128 for k in keys], pa.int32()),
            }
        )
        op.process(Batch(engine=None, table=table))

    feed([f"/p{i}" for i in range(100)])
    first = op.snapshot_table()
    feed(["/p1", "/p2", "/new"])
    second = op.snapshot_table()
    assert op.snapshots is not None and op.snapshots.incremental == 1
    assert as_set(second) == as_set(op._snapshot_rows())
    assert dict(zip(*(second.column(c).to_pylist() for c in ("url", "n")), strict=True))["/p1"] == 2
    assert first.num_rows == 100 and sum(first.column("n").to_pylist()) == 100  # unchanged
    op.restore_table(first)
    assert op.snapshot_table().num_rows == 100 and op.snapshots.whole == 2  # a restore starts over
