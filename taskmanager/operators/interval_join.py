"""Interval join of two keyed streams on event time (docs/user-state.md):
`a.key_by(k).interval_join(b.key_by(k)).between(lower_ms, upper_ms)` emits every pair of a
left row `l` and a right row `r` with the same key and `l.ts + lower <= r.ts <= l.ts + upper`.

A two-input operator: the task hands it each input's rows apart (`process_input`, side 0 =
left, 1 = right). Each side's rows are buffered as an Arrow table; a new batch of one side is
joined with the other side's buffer (pandas merge on the key, then the interval), then added
to its own buffer, so each pair is emitted once, when its later row arrives. Rows behind the
input watermark are late (as in Flink): dropped and counted in `records_late_dropped`. The
input watermark — the minimum over both inputs' channels — cleans the buffers: a left row can
match no future right row once `l.ts + upper <= watermark`, a right row no future left row
once `r.ts - lower <= watermark`. Barriers are aligned across both inputs like any task's.

Output: the key columns, the left side's other columns, then the right side's (a right
column whose name the left side has gets the suffix `right_suffix`). State: both buffers, in
one keyed table per key-group range (columns prefixed `l.` / `r.`), and the watermark.
"""

from __future__ import annotations

from typing import Self

import pyarrow as pa
import pyarrow.compute as pc

from sluice.eventtime import MIN_WATERMARK
from sluice.eventtime.timestamps import timestamps_ms
from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from sluice.v1.common_pb2 import TaskCounters
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch

SIDE = "__side"
PREFIX = ("l.", "r.")


class IntervalJoin(Operator):
    two_inputs = True

    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        self.name = ctx.name
        self.keys: list[str] = list(payload["keys"])
        self.lower, self.upper = int(payload["lower_ms"]), int(payload["upper_ms"])
        self.ts: tuple[str, str] = (payload["left_timestamp"], payload["right_timestamp"])
        self.suffix: str = payload.get("right_suffix") or "_right"
        self.left_input: str = payload["left"]  # the left input's operator id (the task maps gates to sides)
        self.buffers: list[pa.Table | None] = [None, None]
        self.watermark = MIN_WATERMARK
        self.records_late_dropped = 0
        self.engine = ctx.engine

    def add_counters(self, counters: TaskCounters) -> None:
        counters.records_late_dropped += self.records_late_dropped

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    def process(self, batch: Batch) -> Batch | None:  # noqa: ARG002 — the task calls process_input
        raise RuntimeError(f"{self.name}: an interval join takes each input apart (process_input)")

    def process_input(self, batch: Batch, side: int) -> Batch | None:
        table = batch.table()
        ts = timestamps_ms(table.column(self.ts[side]))
        keep = pc.is_valid(ts)
        if self.watermark != MIN_WATERMARK:
            on_time = self._on_time(ts)
            self.records_late_dropped += table.num_rows - (pc.sum(pc.and_(keep, on_time)).as_py() or 0)
            keep = pc.and_(keep, on_time)
        table = table.filter(keep)
        if table.num_rows == 0:
            return None
        other = self.buffers[1 - side]
        joined = self._join(table, other, side) if other is not None and other.num_rows else None
        own = self.buffers[side]
        self.buffers[side] = table if own is None else pa.concat_tables([own, table], promote_options="default")
        return Batch(self.engine, table=joined) if joined is not None and joined.num_rows else None

    def _on_time(self, ts: pa.Array) -> pa.Array:
        """Which rows are not late: after the watermark."""
        return pc.greater(ts, self.watermark)

    def _alive(self, side: int, ts: pa.Array, watermark: int) -> pa.Array:
        """Which buffered rows of `side` may still meet a future row of the other side."""
        bound = self.upper if side == 0 else -self.lower
        return pc.greater(pc.add(ts, bound), watermark)

    def _join(self, new: pa.Table, buffered: pa.Table, side: int) -> pa.Table | None:
        left, right = (new, buffered) if side == 0 else (buffered, new)
        lf = left.drop_columns([KEY_GROUP]).to_pandas()
        rf = right.drop_columns([KEY_GROUP]).to_pandas()
        lts = "__lts"
        rts = "__rts"
        lf[lts] = timestamps_ms(left.column(self.ts[0])).to_numpy(zero_copy_only=False)
        rf[rts] = timestamps_ms(right.column(self.ts[1])).to_numpy(zero_copy_only=False)
        rename = {c: c + self.suffix for c in rf.columns if c in lf.columns and c not in self.keys}
        rf = rf.rename(columns=rename)
        pairs = lf.merge(rf, on=self.keys, how="inner")
        if pairs.empty:
            return None
        inside = (pairs[rts] >= pairs[lts] + self.lower) & (pairs[rts] <= pairs[lts] + self.upper)
        pairs = pairs[inside].drop(columns=[lts, rts])
        if pairs.empty:
            return None
        columns = self.keys + [c for c in pairs.columns if c not in self.keys]
        return pa.Table.from_pandas(pairs[columns], preserve_index=False)

    def on_watermark(self, watermark: int) -> Batch | None:
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        for side in (0, 1):
            table = self.buffers[side]
            if table is None:
                continue
            kept = table.filter(self._alive(side, timestamps_ms(table.column(self.ts[side])), watermark))
            self.buffers[side] = kept if kept.num_rows else None
        return None

    # -- checkpoints ---------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:  # noqa: ARG002 — keyed state is not per checkpoint
        parts = []
        for side, table in enumerate(self.buffers):
            if table is None:
                continue
            names = [c if c == KEY_GROUP else PREFIX[side] + c for c in table.column_names]
            renamed = table.rename_columns(names)
            parts.append(renamed.append_column(SIDE, pa.array([side] * table.num_rows, pa.int8())))
        keyed = pa.concat_tables(parts, promote_options="default") if parts else None
        columns = [None if t is None else t.column_names for t in self.buffers]
        return OperatorSnapshot(inline={"watermark": self.watermark, "columns": columns}, keyed=keyed)

    def restore(self, state: OperatorSnapshot) -> None:
        inline = state.inline or {}
        self.watermark = int(inline.get("watermark", MIN_WATERMARK))
        self.buffers = [None, None]
        table = state.keyed
        if table is None or table.num_rows == 0:
            return
        sides = table.column(SIDE)
        for side in (0, 1):
            rows = table.filter(pc.equal(sides, side))
            if rows.num_rows == 0:
                continue
            names = inline["columns"][side] or []
            picked = rows.select([c if c == KEY_GROUP else PREFIX[side] + c for c in names])
            self.buffers[side] = picked.rename_columns(names)
