"""KeyedAggregate fed Arrow batches of producer partials (no Spark): the running
update stream it emits, batch after batch, for one key column and for a composite
key with avg; its combiner; the producer dropping rows with a null key."""

import logging

import pyarrow as pa
import pytest

from sluice.graph import Partitioning
from taskmanager.network.partition import ResultPartition
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.keyed_aggregate import KEY_GROUP, KeyedAggregate, combine
from taskmanager.spark_engine import Batch

AGGS = {"n": ("count", "*"), "total": ("sum", "bytes"), "first": ("min", "ts"), "last": ("max", "ts")}


def state_of(op: KeyedAggregate) -> dict:
    """The operator's keyed state as key -> [key group, partial...]."""
    return {key: [kg, *values] for key, kg, values in op.state.items()}


def kg(key: str) -> int:
    """Any deterministic key group will do; the operator only carries it along."""
    return sum(map(ord, key)) % 128


def batch(rows, columns=("n", "total", "first", "last"), types=None) -> Batch:
    """rows: (key, partial, partial, ...) as a producer's combiner would send them."""
    types = types or {}
    data = {"url": pa.array([r[0] for r in rows], pa.string())}
    for j, col in enumerate(columns):
        data[col] = pa.array([r[j + 1] for r in rows], types.get(col, pa.int64()))
    data[KEY_GROUP] = pa.array([kg(r[0]) for r in rows], pa.int32())
    return Batch(engine=None, table=pa.table(data))


def updates(out: Batch | None) -> dict:
    """The emitted update stream as {key: (values...)}; each key at most once per batch."""
    if out is None:
        return {}
    table = out.table()
    keys = table.column("url").to_pylist()
    assert len(keys) == len(set(keys)), f"a key was emitted twice in one batch: {keys}"
    cols = [table.column(c).to_pylist() for c in table.column_names[1:]]
    return {k: tuple(c[i] for c in cols) for i, k in enumerate(keys)}


def new_op(aggs=None) -> KeyedAggregate:
    return KeyedAggregate({"key": "url", "aggs": dict(aggs or AGGS)}, "aggregate by url")


def test_output_schema_is_key_then_aggregates_without_key_group():
    op = new_op()
    out = op.process(batch([("/a", 1, 10, 5, 5)]))
    assert out is not None and out.is_table
    table = out.table()
    assert table.column_names == ["url", "n", "total", "first", "last"]
    assert KEY_GROUP not in table.column_names
    assert table.schema.field("n").type == pa.int64()
    assert updates(out) == {"/a": (1, 10, 5, 5)}


def test_running_updates_across_batches():
    op = new_op()
    assert updates(
        op.process(
            batch(
                [
                    ("/a", 2, 100, 10, 20),
                    ("/b", 1, 5, 7, 7),
                ]
            )
        )
    ) == {"/a": (2, 100, 10, 20), "/b": (1, 5, 7, 7)}

    assert updates(
        op.process(
            batch(
                [
                    ("/a", 3, 50, 4, 15),  # new min, max unchanged
                    ("/c", 1, 1, 1, 1),
                ]
            )
        )
    ) == {"/a": (5, 150, 4, 20), "/c": (1, 1, 1, 1)}

    assert updates(
        op.process(
            batch(
                [
                    ("/b", 4, 20, 8, 30),  # new max, min unchanged
                ]
            )
        )
    ) == {"/b": (5, 25, 7, 30)}

    assert updates(
        op.process(
            batch(
                [
                    ("/a", 1, 1, 3, 99),
                    ("/b", 1, 0, 1, 2),
                    ("/c", 2, 2, 0, 0),
                ]
            )
        )
    ) == {"/a": (6, 151, 3, 99), "/b": (6, 25, 1, 30), "/c": (3, 3, 0, 1)}


def test_repeated_keys_in_one_batch_are_merged_before_folding():
    """Partials for the same key from two producers arrive in one batch."""
    op = new_op()
    out = updates(
        op.process(
            batch(
                [
                    ("/a", 2, 10, 5, 9),  # producer 0
                    ("/b", 1, 1, 1, 1),
                    ("/a", 3, 30, 2, 7),  # producer 1
                    ("/a", 1, 1, 6, 12),  # producer 2
                ]
            )
        )
    )
    assert out == {"/a": (6, 41, 2, 12), "/b": (1, 1, 1, 1)}
    out = updates(
        op.process(
            batch(
                [
                    ("/a", 1, 1, 3, 3),
                    ("/a", 1, 1, 1, 4),
                ]
            )
        )
    )
    assert out == {"/a": (8, 43, 1, 12)}


def test_only_keys_in_the_batch_are_emitted():
    op = new_op({"n": ("count", "*")})
    cols = ("n",)
    op.process(batch([("/a", 1), ("/b", 1), ("/c", 1)], cols))
    assert updates(op.process(batch([("/b", 2)], cols))) == {"/b": (3,)}
    assert updates(op.process(batch([("/c", 1), ("/c", 1)], cols))) == {"/c": (3,)}
    assert updates(op.process(batch([("/d", 5)], cols))) == {"/d": (5,)}
    assert state_of(op)["/a"][1:] == [1]


def test_emitted_min_max_are_the_running_values_not_the_batch_partials():
    """Whatever else is emitted, a key's emitted row is its state after the batch:
    a batch partial that does not beat the running min/max must not leak out."""
    op = new_op({"lo": ("min", "v"), "hi": ("max", "v")})
    cols = ("lo", "hi")
    op.process(batch([("/a", 1, 9), ("/b", 5, 5)], cols))
    out = updates(op.process(batch([("/a", 4, 6), ("/b", 2, 8)], cols)))
    assert set(out) <= {"/a", "/b"}
    assert out["/b"] == (2, 8)
    if "/a" in out:  # unchanged key: may or may not be re-emitted, but never with 4/6
        assert out["/a"] == (1, 9)
    assert state_of(op)["/a"][1:] == [1, 9]


def test_empty_batch_emits_nothing_and_keeps_state():
    op = new_op()
    op.process(batch([("/a", 1, 10, 5, 5)]))
    assert op.process(batch([])) is None
    assert updates(op.process(batch([("/a", 1, 1, 1, 1)]))) == {"/a": (2, 11, 1, 5)}


def test_null_partials_do_not_disturb_the_state():
    """A producer whose rows all had NULL in the column sends NULL sum/min/max."""
    op = new_op({"total": ("sum", "v"), "hi": ("max", "v")})
    cols = ("total", "hi")
    assert updates(op.process(batch([("/a", None, None)], cols))) == {"/a": (None, None)}
    assert updates(op.process(batch([("/a", 3, 3)], cols))) == {"/a": (3, 3)}
    # /a did not change, so the update stream carries only /b
    assert updates(op.process(batch([("/a", None, None), ("/b", 1, 1)], cols))) == {"/b": (1, 1)}
    assert state_of(op)["/a"][1:] == [3, 3]


def test_only_changed_keys_are_emitted():
    op = new_op({"hi": ("max", "v")})
    assert updates(op.process(batch([("/a", 5), ("/b", 1)], ("hi",)))) == {"/a": (5,), "/b": (1,)}
    assert updates(op.process(batch([("/a", 4), ("/b", 2)], ("hi",)))) == {"/b": (2,)}
    assert op.process(batch([("/a", 5)], ("hi",))) is None


def test_float_sums_keep_their_type():
    op = new_op({"total": ("sum", "v")})
    out = op.process(batch([("/a", 0.5), ("/a", 0.25)], ("total",), types={"total": pa.float64()}))
    assert out is not None and out.table().schema.field("total").type == pa.float64()
    assert updates(out) == {"/a": (0.75,)}
    assert updates(op.process(batch([("/a", 1.0)], ("total",), types={"total": pa.float64()}))) == {"/a": (1.75,)}


def test_state_is_keyed_and_remembers_the_key_group():
    op = new_op({"n": ("count", "*")})
    op.process(batch([("/a", 1), ("/b", 2)], ("n",)))
    assert state_of(op) == {"/a": [kg("/a"), 1], "/b": [kg("/b"), 2]}


def test_end_input_emits_nothing():
    op = new_op()
    op.process(batch([("/a", 1, 1, 1, 1)]))
    assert op.end_input() is None


@pytest.mark.parametrize("n_batches", [1, 7])
def test_result_is_independent_of_batch_boundaries(n_batches):
    rows = [(f"/{i % 5}", 1, i, i, i) for i in range(35)]
    op = new_op()
    final = {}
    size = -(-len(rows) // n_batches)
    for start in range(0, len(rows), size):
        final.update(updates(op.process(batch(rows[start : start + size]))))
    expected: dict[str, tuple[int, int, int, int]] = {}
    for k, n, total, lo, hi in rows:
        e = expected.get(k, (0, 0, lo, hi))
        expected[k] = (e[0] + n, e[1] + total, min(e[2], lo), max(e[3], hi))
    assert final == expected


# -- checkpoints ---------------------------------------------------------------------------
def test_snapshot_and_restore_continue_the_same_update_stream():
    op = new_op()
    op.process(batch([("/a", 2, 100, 10, 20), ("/b", 1, 5, 7, 7)]))
    op.process(batch([("/a", 1, 1, 3, 30)]))
    snap = op.snapshot_table()
    assert snap.num_rows == 2
    assert KEY_GROUP in snap.column_names

    restored = new_op()
    restored.restore_table(snap)
    assert state_of(restored) == state_of(op)
    nxt = [("/a", 1, 1, 1, 1), ("/b", 1, 1, 9, 9), ("/c", 1, 1, 1, 1)]
    expected = {"/a": (4, 102, 1, 30), "/b": (2, 6, 7, 9), "/c": (1, 1, 1, 1)}
    assert updates(restored.process(batch(nxt))) == expected
    assert updates(op.process(batch(nxt))) == expected


def test_snapshot_is_a_copy_not_a_view_of_the_state():
    op = new_op({"n": ("count", "*")})
    op.process(batch([("/a", 1)], ("n",)))
    snap = op.snapshot_table()
    op.process(batch([("/a", 5)], ("n",)))
    assert snap.column("n").to_pylist() == [1]


def test_restore_without_a_snapshot_starts_empty():
    op = new_op({"n": ("count", "*")})
    op.process(batch([("/a", 1)], ("n",)))
    op.restore_table(None)
    assert state_of(op) == {}
    assert updates(op.process(batch([("/a", 2)], ("n",)))) == {"/a": (2,)}


def test_a_one_column_key_snapshots_in_the_same_format_as_before():
    """Checkpoints taken before composite keys and avg existed restore unchanged."""
    op = new_op({"n": ("count", "*"), "total": ("sum", "bytes")})
    op.process(batch([("/a", 2, 10)], ("n", "total")))
    snap = op.snapshot_table()
    assert snap.column_names == ["url", KEY_GROUP, "n", "total"]
    assert snap.to_pylist() == [{"url": "/a", KEY_GROUP: kg("/a"), "n": 2, "total": 10}]
    assert state_of(op) == {"/a": [kg("/a"), 2, 10]}  # keyed by the plain value


# -- composite keys and avg -------------------------------------------------------------------
KEYS = ("country", "device")
AGGS2 = {"n": ("count", "*"), "total": ("sum", "v"), "mean": ("avg", "v"), "hi": ("max", "v")}


def rows_table(rows) -> pa.Table:
    """Raw rows (country, device, v) as the producer's Spark projection hands them to the combiner."""
    return pa.table(
        {
            "country": pa.array([r[0] for r in rows], pa.string()),
            "device": pa.array([r[1] for r in rows], pa.string()),
            KEY_GROUP: pa.array([kg(r[0] + "|" + r[1]) for r in rows], pa.int32()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def two_key_op() -> KeyedAggregate:
    return KeyedAggregate({"keys": list(KEYS), "aggs": dict(AGGS2)}, "aggregate by country, device")


def partials(*rows_per_producer) -> Batch:
    """What the aggregate receives: each producer's combined batch, concatenated."""
    tables = [combine(rows_table(rows), KEYS, AGGS2) for rows in rows_per_producer]
    return Batch(engine=None, table=pa.concat_tables(tables))


def two_key_updates(out: Batch | None) -> dict:
    if out is None:
        return {}
    t = out.table()
    assert t.column_names == ["country", "device", "n", "total", "mean", "hi"]
    assert t.schema.field("mean").type == pa.float64()
    return {(r["country"], r["device"]): (r["n"], r["total"], r["mean"], r["hi"]) for r in t.to_pylist()}


def test_the_combiner_sends_avg_as_sum_and_count_per_key_tuple():
    combined = combine(
        rows_table([("DE", "phone", 1), ("DE", "phone", 4), ("DE", "tab", 2), ("FR", "phone", None)]), KEYS, AGGS2
    )
    assert combined.column_names == ["country", "device", KEY_GROUP, "n", "total", "mean", "__count_mean", "hi"]
    got = {
        (r["country"], r["device"]): (r["n"], r["total"], r["mean"], r["__count_mean"], r["hi"])
        for r in combined.to_pylist()
    }
    assert got == {
        ("DE", "phone"): (2, 5, 5, 2, 4),
        ("DE", "tab"): (1, 2, 2, 1, 2),
        ("FR", "phone"): (1, None, None, 0, None),  # avg counts non-null values, as SQL's AVG
    }


def test_two_keys_with_sum_and_avg_across_producers_and_batches():
    op = two_key_op()
    out = two_key_updates(op.process(partials([("DE", "phone", 1), ("DE", "tab", 2)], [("DE", "phone", 4)])))
    assert out == {("DE", "phone"): (2, 5, 2.5, 4), ("DE", "tab"): (1, 2, 2.0, 2)}
    out = two_key_updates(op.process(partials([("DE", "phone", 10), ("FR", "phone", None)])))
    assert out == {("DE", "phone"): (3, 15, 5.0, 10), ("FR", "phone"): (1, None, None, None)}
    assert state_of(op)[("DE", "phone")][1:] == [3, 15, 15, 3, 10]  # keyed by the tuple; avg as (sum, count)
    out = two_key_updates(op.process(partials([("FR", "phone", 3)])))
    assert out == {("FR", "phone"): (2, 3, 3.0, 3)}


def test_two_keys_and_avg_survive_a_snapshot_and_restore():
    op = two_key_op()
    op.process(partials([("DE", "phone", 1), ("DE", "tab", 2), ("DE", "phone", 2)]))
    snap = op.snapshot_table()
    assert snap.column_names == ["country", "device", KEY_GROUP, "n", "total", "mean", "__count_mean", "hi"]
    restored = two_key_op()
    restored.restore_table(snap)
    assert state_of(restored) == state_of(op)
    nxt = partials([("DE", "phone", 6), ("US", "tv", 1)])
    expected = {("DE", "phone"): (3, 9, 3.0, 6), ("US", "tv"): (1, 1, 1.0, 1)}
    assert two_key_updates(restored.process(nxt)) == expected
    assert two_key_updates(op.process(nxt)) == expected


def test_avg_is_exact_whatever_the_batching():
    rows = [(("DE", "FR")[i % 2], ("phone", "tab", "tv")[i % 3], i * 7 % 11) for i in range(60)]
    expected: dict = {}
    for c, d, v in rows:
        n, t, hi = expected.get((c, d), (0, 0, v))
        expected[(c, d)] = (n + 1, t + v, max(hi, v))
    for size in (1, 7, 60):
        op, final = two_key_op(), {}
        for start in range(0, len(rows), size):
            final.update(two_key_updates(op.process(partials(rows[start : start + size]))))
        assert {k: (n, t, hi) for k, (n, t, _m, hi) in final.items()} == expected
        assert all(m == t / n for n, t, m, _hi in final.values())


def test_the_same_column_under_two_aggregates():
    """Arrow names both partials v_sum; the operator tells them apart by position."""
    aggs = {"total": ("sum", "v"), "again": ("sum", "v"), "mean": ("avg", "v")}
    op = KeyedAggregate({"keys": list(KEYS), "aggs": aggs}, "agg")
    out = op.process(
        Batch(engine=None, table=combine(rows_table([("DE", "phone", 2), ("DE", "phone", 4)]), KEYS, aggs))
    )
    assert out is not None and out.table().to_pylist() == [
        {"country": "DE", "device": "phone", "total": 6, "again": 6, "mean": 3.0}
    ]


# -- the producer side: null keys ---------------------------------------------------------------
def test_rows_with_a_null_in_any_key_column_are_dropped_counted_and_logged(caplog):
    partition = ResultPartition("job/att/chain/0-p", 1, 2)
    writer = RecordWriter(partition, Partitioning.HASH, list(KEYS), 0, 128, None, lambda: False)
    table = pa.table({"country": ["DE", None, "FR", "DE"], "device": ["phone", "tab", None, "tab"], "v": [1, 2, 3, 4]})
    with caplog.at_level(logging.WARNING, logger="sluice.taskmanager.record_writer"):
        kept = writer._drop_nulls(table)
        assert kept.to_pylist() == [
            {"country": "DE", "device": "phone", "v": 1},
            {"country": "DE", "device": "tab", "v": 4},
        ]
        assert writer._drop_nulls(table.slice(1, 1)).num_rows == 0
        writer.barrier(7)
        writer.barrier(8)  # nothing more dropped: no line
        assert writer._drop_nulls(table.slice(0, 1)).num_rows == 1
        writer.end()
    assert writer.null_keys_dropped == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "partition job/att/chain/0-p: dropped 2 rows with a null in key (country, device); "
        "further drops are counted and logged at checkpoints and at the end",
        "partition job/att/chain/0-p: 3 rows with a null in key (country, device) dropped so far (checkpoint 7)",
        "partition job/att/chain/0-p: 3 rows with a null in key (country, device) were dropped in all",
    ]


def test_an_arrow_batch_is_routed_by_key_group_without_spark():
    """A keyed operator's output is an Arrow table: the hash writer computes its key groups in
    Python (`engine=None`: a Spark call would fail) and routes each key to the subtask owning
    its key group, as Spark's expression would."""
    from sluice.key_groups import key_group_of, owner

    partition = ResultPartition("job/att/chain/0-p", 3, 2)
    writer = RecordWriter(partition, Partitioning.HASH, ["url"], 0, 128, None, lambda: False)
    urls = [f"/page/{i}" for i in range(50)]
    writer.emit(Batch(engine=None, table=pa.table({"url": urls, "count": list(range(50))})))
    seen = {}
    for i, sub in enumerate(partition.subpartitions):
        while sub.backlog():
            item = sub.poll(1.0)
            assert item is not None
            _kind, table = item
            assert table.column_names == ["url", "count", KEY_GROUP]
            seen.update(dict.fromkeys(table.column("url").to_pylist(), i))
    assert seen == {u: owner(key_group_of([u], 128), 3, 128) for u in urls}
    assert writer.records_sent == 50
