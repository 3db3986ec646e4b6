"""Deduplicate fed Arrow batches and watermarks (no Spark): per key the first row, then each row
at least `within_ms` after the last one kept. In event time the result must equal a plain loop
over each key's rows in time order whatever the batching, the watermarks and a snapshot and
restore (also of two subtasks' snapshots into one) in between; late rows are dropped and
counted; keys are forgotten once nothing can be their duplicate. In processing time rows are
decided as they arrive."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from sluice.eventtime import MAX_WATERMARK
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import OperatorContext, OperatorSnapshot
from taskmanager.operators.deduplicate import Deduplicate, first_within
from taskmanager.spark_engine import Batch

WITHIN = 1_000


def ctx() -> OperatorContext:
    return OperatorContext(
        name="dedup", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True
    )


def new_op(keys=("user",), time="event", clock=None) -> Deduplicate:
    payload = {"keys": list(keys), "within_ms": WITHIN, "time": time, "timestamp": "ts"}
    return Deduplicate(payload, ctx(), **({"clock": clock} if clock else {}))


def batch(rows: list[tuple]) -> Batch:
    """rows: (user, ts, url)."""
    return Batch(
        engine=None,
        table=pa.table(
            {
                "user": pa.array([r[0] for r in rows], pa.int64()),
                "ts": pa.array([r[1] for r in rows], pa.int64()),
                "url": pa.array([r[2] for r in rows], pa.string()),
                KEY_GROUP: pa.array([r[0] % 128 for r in rows], pa.int32()),
            }
        ),
    )


def rows_of(out: Batch | None) -> list[tuple]:
    if out is None:
        return []
    table = out.table()
    assert KEY_GROUP not in table.column_names
    return list(zip(*(table.column(c).to_pylist() for c in ("user", "ts", "url")), strict=True))


def expected(rows: list[tuple]) -> list[tuple]:
    """The plain loop: per user, rows in (ts, url) order, one kept when the last kept one is at
    least WITHIN older."""
    kept: list[tuple] = []
    last: dict[int, int] = {}
    for user, ts, url in sorted(rows):
        if user not in last or ts >= last[user] + WITHIN:
            last[user] = ts
            kept.append((user, ts, url))
    return sorted(kept)


def random_input(seed: int, n: int = 3_000, disorder: int = 300) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        ts = 1_000_000 + i * 7 - rng.randrange(disorder)
        rows.append((rng.randrange(40), ts, f"/u{rng.randrange(5)}"))
    return rows


def run(op: Deduplicate, rows: list[tuple], rng: random.Random, restore_at: int | None = None) -> list[tuple]:
    """Feed `rows` in random batches, a watermark (the largest ts seen - 300) after each; at
    batch `restore_at` the operator is snapshotted and a fresh one restored from it."""
    out, i, seen, b = [], 0, -(2**62), 0
    while i < len(rows):
        size = rng.choice([1, 5, 50, 400])
        chunk, i = rows[i : i + size], i + size
        out += rows_of(op.process(batch(chunk)))
        seen = max(seen, max(r[1] for r in chunk))
        out += rows_of(op.on_watermark(seen - 300))
        b += 1
        if b == restore_at:
            snap = op.snapshot(7)
            op = new_op()
            op.restore(snap)
    out += rows_of(op.on_watermark(MAX_WATERMARK))
    return sorted(out)


@pytest.mark.parametrize("seed", range(6))
def test_event_time_equals_the_plain_loop_whatever_the_batching_and_a_restore(seed):
    rows = random_input(seed)
    want = expected(rows)
    assert run(new_op(), rows, random.Random(seed)) == want
    assert run(new_op(), rows, random.Random(seed + 100), restore_at=3 + seed) == want


def test_two_subtasks_snapshots_restore_into_one():
    rows = random_input(11)
    rng = random.Random(1)
    evens, odds = new_op(), new_op()
    out, seen = [], 0
    for i in range(0, 1_500, 100):  # the first half of the input, split by key like a hash edge
        chunk = rows[i : i + 100]
        seen = max(seen, max(r[1] for r in chunk))
        for op, part in ((evens, [r for r in chunk if r[0] % 2 == 0]), (odds, [r for r in chunk if r[0] % 2])):
            if part:
                out += rows_of(op.process(batch(part)))
            out += rows_of(op.on_watermark(seen - 300))
    a, b = evens.snapshot(1), odds.snapshot(1)
    assert a.inline is not None and b.inline is not None
    merged = new_op()
    merged.restore(
        OperatorSnapshot(
            inline={"watermark": min(a.inline["watermark"], b.inline["watermark"]), "late_dropped": 0},
            keyed=pa.concat_tables([t for t in (a.keyed, b.keyed) if t is not None], promote_options="default"),
        )
    )
    out += run(merged, rows[1_500:], rng)
    assert sorted(out) == expected(rows)


def test_late_rows_are_dropped_and_counted_and_keys_are_forgotten():
    op = new_op()
    assert op.process(batch([(1, 5_000, "/a"), (2, 5_500, "/b")])) is None  # they wait for the watermark
    assert rows_of(op.on_watermark(5_000)) == [(1, 5_000, "/a")]
    assert rows_of(op.process(batch([(1, 4_000, "/late"), (1, 5_000, "/late")]))) == []
    assert op.records_late_dropped == 2
    assert rows_of(op.on_watermark(6_400)) == [(2, 5_500, "/b")]
    assert set(op.last) == {2}  # user 1's last kept row (5,000) is WITHIN behind 6,400: forgotten
    op.process(batch([(2, 6_450, "/dup"), (2, 6_500, "/again"), (1, 6_600, "/back")]))
    assert rows_of(op.on_watermark(MAX_WATERMARK)) == [(1, 6_600, "/back"), (2, 6_500, "/again")]


def test_ties_go_by_the_other_columns_and_composite_keys_work():
    op = new_op(keys=("user", "url"))
    op.process(batch([(1, 100, "/b"), (1, 100, "/a"), (1, 100, "/a"), (1, 600, "/a"), (1, 1_100, "/a")]))
    assert rows_of(op.on_watermark(MAX_WATERMARK)) == [(1, 100, "/a"), (1, 1_100, "/a"), (1, 100, "/b")]
    single = new_op()
    single.process(batch([(1, 100, "/b"), (1, 100, "/a")]))
    assert rows_of(single.on_watermark(MAX_WATERMARK)) == [(1, 100, "/a")]


def test_processing_time_decides_rows_as_they_arrive():
    now = [10.0]
    op = new_op(time="processing", clock=lambda: now[0])
    assert rows_of(op.process(batch([(1, 0, "/first"), (1, 0, "/second"), (2, 0, "/x")]))) == [
        (1, 0, "/first"),
        (2, 0, "/x"),
    ]
    now[0] = 10.5
    assert rows_of(op.process(batch([(1, 0, "/dup")]))) == []
    now[0] = 11.0
    assert rows_of(op.process(batch([(1, 0, "/again"), (3, 0, "/y")]))) == [(1, 0, "/again"), (3, 0, "/y")]
    snap = op.snapshot(1)
    restored = new_op(time="processing", clock=lambda: now[0])
    restored.restore(snap)
    now[0] = 11.5
    assert rows_of(restored.process(batch([(1, 0, "/dup"), (2, 0, "/back")]))) == [(2, 0, "/back")]
    now[0] = 20.0
    restored.process(batch([(9, 0, "/z")]))
    assert set(restored.last) == {9}  # every other key's last kept row is WITHIN behind


def test_first_within_keeps_a_chain_per_key_in_rounds():
    times = np.array([0, 500, 1_000, 1_400, 2_100, 0, 10], dtype=np.int64)
    segments = np.array([0, 0, 0, 0, 0, 1, 1])
    base = np.array([-(2**62), 5], dtype=np.int64)
    kept = first_within(times, segments, base, 1_000)
    assert kept.tolist() == [True, False, True, False, True, False, False]
    assert base.tolist() == [2_100, 5]


def test_the_api_and_the_job_check_refuse_bad_settings_with_the_field_named():
    import json

    from sluice import graph
    from sluice.api import StreamExecutionEnvironment, WatermarkStrategy

    env = StreamExecutionEnvironment()
    events = env.from_collection([{"user": 1, "ts": 5}])
    with pytest.raises(ValueError, match="no event time"):
        events.deduplicate("user", within_ms=10)
    timed = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")
    )
    for within in (0, -1, True, 1.5, 2**53 + 1):
        with pytest.raises(ValueError, match="within_ms"):
            timed.deduplicate("user", within_ms=within)  # type: ignore[arg-type]  # 1.5: a float on purpose
    with pytest.raises(ValueError, match="'event' or 'processing'"):
        timed.deduplicate("user", within_ms=10, time="ingestion")
    timed.deduplicate(["user"], within_ms=10).print()
    job = env.get_job_graph("dedup")
    graph.validate(job)
    [i] = [n for n, op in enumerate(job.operators) if json.loads(op.config).get("within_ms") == 10]
    for bad, field in (({"within_ms": 2**60}, "within_ms"), ({"time": "ingestion"}, "time"), ({"keys": []}, "keys")):
        forged = env.get_job_graph("dedup")  # a client may send any config: the JobManager checks it again
        forged.operators[i].config = json.dumps({**json.loads(forged.operators[i].config), **bad})
        with pytest.raises(graph.JobValidationError, match=rf"^operators\[{i}\]\.config\.{field}: "):
            graph.validate(forged)
