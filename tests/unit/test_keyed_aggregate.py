"""KeyedAggregate fed Arrow batches of producer partials (no Spark): the running
update stream it emits, batch after batch."""

import pyarrow as pa
import pytest

from taskmanager.operators.keyed_aggregate import KEY_GROUP, KeyedAggregate
from taskmanager.spark_engine import Batch

AGGS = {"n": ("count", "*"), "total": ("sum", "bytes"), "first": ("min", "ts"), "last": ("max", "ts")}


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
    assert out.is_table
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
    assert op.state["/a"][1:] == [1]


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
    assert op.state["/a"][1:] == [1, 9]


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
    assert op.state["/a"][1:] == [3, 3]


def test_only_changed_keys_are_emitted():
    op = new_op({"hi": ("max", "v")})
    assert updates(op.process(batch([("/a", 5), ("/b", 1)], ("hi",)))) == {"/a": (5,), "/b": (1,)}
    assert updates(op.process(batch([("/a", 4), ("/b", 2)], ("hi",)))) == {"/b": (2,)}
    assert op.process(batch([("/a", 5)], ("hi",))) is None


def test_float_sums_keep_their_type():
    op = new_op({"total": ("sum", "v")})
    out = op.process(batch([("/a", 0.5), ("/a", 0.25)], ("total",), types={"total": pa.float64()}))
    assert out.table().schema.field("total").type == pa.float64()
    assert updates(out) == {"/a": (0.75,)}
    assert updates(op.process(batch([("/a", 1.0)], ("total",), types={"total": pa.float64()}))) == {"/a": (1.75,)}


def test_state_is_keyed_and_remembers_the_key_group():
    op = new_op({"n": ("count", "*")})
    op.process(batch([("/a", 1), ("/b", 2)], ("n",)))
    assert op.state == {"/a": [kg("/a"), 1], "/b": [kg("/b"), 2]}


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
    expected = {}
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
    assert restored.state == op.state
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
    assert op.state == {}
    assert updates(op.process(batch([("/a", 2)], ("n",)))) == {"/a": (2,)}
