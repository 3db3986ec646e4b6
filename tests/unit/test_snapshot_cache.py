"""SnapshotCache: a memory-backed keyed aggregate's checkpoint is the last snapshot patched with
the keys put since. Whatever the updates, each snapshot must hold exactly the state's entries, as a
snapshot built whole would; it is built whole when there is nothing to patch, most keys changed,
or the new rows do not fit the last table's types; and a snapshot taken is never changed later."""

from __future__ import annotations

import random

import pyarrow as pa

from taskmanager.operators.keyed_aggregate import KEY_GROUP, KeyedAggregate
from taskmanager.spark_engine import Batch
from taskmanager.state.snapshot_cache import SnapshotCache


def rows_of(state: dict, key_columns: list[str]):
    """A Rows function over `state` (key -> (key group, count)), as the operator builds them."""

    def rows(only):
        keys = list(state) if only is None else [k for k in only if k in state]
        columns = {}
        if len(key_columns) == 1:
            columns[key_columns[0]] = keys
        else:
            for i, name in enumerate(key_columns):
                columns[name] = [k[i] for k in keys]
        columns[KEY_GROUP] = pa.array([state[k][0] for k in keys], pa.int32())
        columns["n"] = [state[k][1] for k in keys]
        return pa.table(columns)

    return rows


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
            for _ in range(rng.choice([0, 3, 30])):  # a few updates, or none, between checkpoints
                k = rng.randrange(60)
                key = f"/u{k}" if len(key_columns) == 1 else (f"c{k % 7}", None if k == 13 else f"d{k % 5}")
                old = state.get(key, (k % 128, 0))
                state[key] = (old[0], old[1] + 1)
                cache.changed([key])
            assert as_set(cache.take(rows, len(state))) == as_set(rows(None))
        assert cache.incremental > 20  # most snapshots patched the last one, not built whole


def test_a_snapshot_is_built_whole_first_after_a_reset_and_when_most_keys_changed():
    state = {f"k{i}": (i, i) for i in range(10)}
    cache, rows = SnapshotCache(["url"]), rows_of(state, ["url"])
    cache.take(rows, len(state))
    assert (cache.whole, cache.incremental) == (1, 0)
    state["k1"] = (1, 100)
    cache.changed(["k1"])
    cache.take(rows, len(state))
    assert (cache.whole, cache.incremental) == (1, 1)
    for i in range(6):  # 6 of 10 keys changed: built whole
        cache.changed([f"k{i}"])
    cache.take(rows, len(state))
    assert cache.whole == 2
    cache.reset()
    cache.changed(["k1"])  # before the first snapshot after a reset: nothing to patch
    cache.take(rows, len(state))
    assert cache.whole == 3


def test_new_rows_of_other_types_than_the_last_snapshot_build_it_whole():
    state: dict = {"a": (1, None), "b": (2, None)}
    cache, rows = SnapshotCache(["url"]), rows_of(state, ["url"])
    first = cache.take(rows, len(state))
    assert first.schema.field("n").type == pa.null()
    state["a"] = (1, 5)
    cache.changed(["a"])
    state.update({f"x{i}": (i, None) for i in range(10)})
    second = cache.take(rows, len(state))
    assert cache.whole == 2 and second.schema.field("n").type == pa.int64()
    assert as_set(second) == as_set(rows(None))


def test_a_null_key_is_replaced_not_repeated():
    state = {None: (0, 1), "a": (1, 1), "b": (2, 1), "c": (3, 1)}
    cache, rows = SnapshotCache(["url"]), rows_of(state, ["url"])
    cache.take(rows, len(state))
    state[None] = (0, 2)
    cache.changed([None])
    assert as_set(cache.take(rows, len(state))) == as_set(rows(None))
    assert cache.incremental == 1


def test_the_operator_snapshot_is_patched_and_earlier_snapshots_stay_as_they_were():
    op = KeyedAggregate({"key": "url", "aggs": {"n": ("count", "*")}}, "count by url")

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
    assert as_set(second) == as_set(op._snapshot_rows(None))
    assert dict(zip(*(second.column(c).to_pylist() for c in ("url", "n")), strict=True))["/p1"] == 2
    assert first.num_rows == 100 and sum(first.column("n").to_pylist()) == 100  # unchanged
    op.restore_table(first)
    assert op.snapshot_table().num_rows == 100 and op.snapshots.whole == 2  # a restore starts over
