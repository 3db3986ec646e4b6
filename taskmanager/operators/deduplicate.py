"""Deduplicate (docs/user-state.md#deduplicate): `stream.deduplicate(keys, within_ms, time=...)`
keeps, per key, the first row and then each row that comes at least `within_ms` after the last
one kept; the others are duplicates and dropped. Vectorized: a batch costs a few Arrow and
numpy passes and a dictionary lookup per distinct key, never a Python call per key or row.

Event time (`time="event"`, the stream's event-time column): rows wait until the watermark
passes them; then each key's rows are taken in time order (ties in the order of the other
columns), so what is kept does not depend on how the input was split into files, batches or
subtasks. A row at or behind the watermark when it arrives is late: dropped and counted
(`records_late_dropped`), as a window does. A key is forgotten once the watermark passes its
last kept row + `within_ms` (no later row can be its duplicate), so the state holds the keys
kept within the last `within_ms` and the rows the watermark has not passed yet.

Processing time (`time="processing"`): each row is decided when its batch arrives, in arrival
order; a batch's rows share its arrival time, so of a key's rows in one batch the first may be
kept. A key is forgotten `within_ms` after its last kept row.

State: one keyed table per key-group range (the waiting rows, and each remembered key's last
kept time in `LAST`), and the watermark and late count inline; restored at any parallelism.
Keys are remembered in dictionaries updated in bulk per batch and swept once per `within_ms`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.eventtime import MIN_WATERMARK, TimeDomain
from sluice.eventtime.timestamps import timestamps_ms
from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from sluice.v1.common_pb2 import TaskCounters
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch

LAST = "__dedup_last"  # a snapshot row's last kept time (null: a waiting row)
_TIME = "__dedup_time"
_NEVER = -(2**62)  # no row kept yet: any time is at least `within` after it


def first_within(times: np.ndarray, segments: np.ndarray, base: np.ndarray, within: int) -> np.ndarray:
    """Which rows are kept. Rows are sorted by segment (a key), then time; `base[s]` is segment
    s's last kept time before these rows (`_NEVER`: none). A row is kept when it comes at least
    `within` after its segment's last kept row; `base` is updated in place. Each round keeps
    at most one row per segment, so there are as many rounds as rows kept per key."""
    kept = np.zeros(times.size, dtype=bool)
    active = np.arange(times.size)
    while active.size:
        ok = times[active] >= base[segments[active]] + within
        candidates = active[ok]  # a row that fails now fails later too: its segment's base only grows
        if not candidates.size:
            break
        segs = segments[candidates]
        first = np.ones(candidates.size, dtype=bool)
        first[1:] = segs[1:] != segs[:-1]
        chosen = candidates[first]
        kept[chosen] = True
        base[segments[chosen]] = times[chosen]
        active = candidates[~first]
    return kept


class Deduplicate(Operator):
    uses_event_time = True

    def __init__(self, payload: Payload, ctx: OperatorContext, clock: Callable[[], float] = time.time) -> None:
        self.name = ctx.name
        self.keys: list[str] = list(payload["keys"])
        self.within = int(payload["within_ms"])
        self.event_time = payload.get("time", TimeDomain.EVENT_TIME) == TimeDomain.EVENT_TIME
        self.timestamp: str | None = payload.get("timestamp")
        self.clock = clock
        self.engine = ctx.engine
        self.watermark = MIN_WATERMARK
        self.records_late_dropped = 0
        self.waiting: pa.Table | None = None  # event time: rows the watermark has not passed
        self.last: dict[Hashable, int] = {}  # key -> its last kept row's time
        self.groups: dict[Hashable, int] = {}  # key -> its key group (for snapshots)
        self.swept = MIN_WATERMARK  # when the remembered keys were last swept (`_forget`)
        self._key_types: list[pa.DataType] | None = None

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    def add_counters(self, counters: TaskCounters) -> None:
        counters.records_late_dropped += self.records_late_dropped

    # -- rows -----------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        self.engine = self.engine if self.engine is not None else batch.engine
        self._key_types = [table.schema.field(k).type for k in self.keys]
        if not self.event_time:
            now = int(self.clock() * 1000)
            self._forget(now)
            times = pa.array(np.full(table.num_rows, now, dtype=np.int64))
            return self._emit(self._decide(table.append_column(_TIME, times), arrival_order=True))
        ts = timestamps_ms(table.column(self.timestamp))
        on_time = pc.and_(pc.is_valid(ts), pc.greater(ts, self.watermark))
        kept = pc.sum(on_time).as_py() or 0
        self.records_late_dropped += table.num_rows - kept
        if kept == 0:
            return None
        rows = table.append_column(_TIME, ts).filter(on_time)
        self.waiting = (
            rows if self.waiting is None else pa.concat_tables([self.waiting, rows], promote_options="default")
        )
        return None

    def on_watermark(self, watermark: int) -> Batch | None:
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        out = None
        if self.waiting is not None:
            due = pc.less_equal(self.waiting.column(_TIME), watermark)
            ready = self.waiting.filter(due)
            rest = self.waiting.filter(pc.invert(due))
            self.waiting = rest if rest.num_rows else None
            if ready.num_rows:
                out = self._emit(self._decide(ready, arrival_order=False))
        self._forget(watermark)
        return out

    def _decide(self, rows: pa.Table, arrival_order: bool) -> pa.Table:
        """The kept rows of `rows` (with `_TIME`), the remembered keys updated."""
        if arrival_order:
            order = [(k, "ascending") for k in self.keys] + [("__dedup_arrival", "ascending")]
            rows = rows.append_column("__dedup_arrival", pa.array(np.arange(rows.num_rows)))
        else:
            order = [(k, "ascending") for k in self.keys] + [(_TIME, "ascending")]
            order += [
                (c, "ascending") for c in rows.column_names if c not in (*self.keys, _TIME) and _sortable(rows, c)
            ]
        rows = rows.take(pc.sort_indices(rows, sort_keys=order))
        if arrival_order:
            rows = rows.drop_columns(["__dedup_arrival"])
        n = rows.num_rows
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for k in self.keys:
            column = rows.column(k)
            differs = pc.fill_null(pc.not_equal(column.slice(1), column.slice(0, n - 1)), True)
            change[1:] |= differs.to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(change)
        segments = np.cumsum(change) - 1
        keys = _keys_at(rows, self.keys, starts)
        get = self.last.get
        base = np.array([get(k, _NEVER) for k in keys], dtype=np.int64)
        times = rows.column(_TIME).to_numpy(zero_copy_only=False).astype(np.int64)
        before = base.copy()
        kept = first_within(times, segments, base, self.within)
        changed = np.flatnonzero(base != before)
        if changed.size:  # remembered in bulk: no Python statement per key
            changed_keys = [keys[s] for s in changed.tolist()]
            self.last.update(zip(changed_keys, base[changed].tolist(), strict=True))
            groups = rows.column(KEY_GROUP).take(pa.array(starts[changed])).to_pylist()
            self.groups.update(zip(changed_keys, groups, strict=True))
        return rows.filter(pa.array(kept))

    def _emit(self, kept: pa.Table) -> Batch | None:
        if kept.num_rows == 0:
            return None
        return Batch(self.engine, table=kept.drop_columns([_TIME, KEY_GROUP]))

    def _forget(self, now: int) -> None:
        """Drop the keys whose last kept row is `within` or more behind `now`: no later row can
        be their duplicate. A sweep looks at every remembered key, so it runs once per
        `within` of time; a key not swept yet still decides correctly (its rows are kept)."""
        if now - self.swept < self.within:
            return
        self.swept = now
        cutoff = now - self.within
        stale = [k for k, at in self.last.items() if at <= cutoff]
        for k in stale:
            del self.last[k]
            del self.groups[k]

    # -- checkpoints ----------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:  # noqa: ARG002 — keyed state is not per checkpoint
        inline = {"watermark": self.watermark, "late_dropped": self.records_late_dropped}
        parts = []
        if self.waiting is not None and self.waiting.num_rows:
            parts.append(self.waiting.drop_columns([_TIME]))
        if self.last:
            parts.append(self._last_table())
        keyed = pa.concat_tables(parts, promote_options="default") if parts else None
        return OperatorSnapshot(inline=inline, keyed=keyed)

    def _last_table(self) -> pa.Table:
        keys: list[Any] = list(self.last)
        times = list(self.last.values())
        columns: dict[str, Any] = {}
        types = self._key_types or [None] * len(self.keys)
        for i, name in enumerate(self.keys):
            values = keys if len(self.keys) == 1 else [k[i] for k in keys]
            columns[name] = pa.array(values, type=types[i])
        columns[KEY_GROUP] = pa.array([self.groups[k] for k in keys], pa.int32())
        columns[LAST] = pa.array(times, pa.int64())
        return pa.table(columns)

    def restore(self, state: OperatorSnapshot) -> None:
        inline = state.inline or {}
        self.watermark = int(inline.get("watermark", MIN_WATERMARK))
        self.records_late_dropped = int(inline.get("late_dropped", 0))
        self.waiting, self.last, self.groups, self.swept = None, {}, {}, MIN_WATERMARK
        table = state.keyed
        if table is None or table.num_rows == 0:
            return
        self._key_types = [table.schema.field(k).type for k in self.keys]
        remembered = pc.is_valid(table.column(LAST)) if LAST in table.column_names else None
        if remembered is not None:
            entries = table.filter(remembered)
            keys = _keys_at(entries, self.keys, np.arange(entries.num_rows))
            groups = entries.column(KEY_GROUP).to_pylist()
            self.last = dict(zip(keys, entries.column(LAST).to_pylist(), strict=True))
            self.groups = dict(zip(keys, groups, strict=True))
            table = table.filter(pc.invert(remembered)).drop_columns([LAST])
        if table.num_rows and self.event_time:
            self.waiting = table.append_column(_TIME, timestamps_ms(table.column(self.timestamp)))


def _keys_at(rows: pa.Table, keys: Sequence[str], at: np.ndarray) -> list[Hashable]:
    """The key (a value, or a tuple for several columns) of each row index in `at`."""
    picked = [rows.column(k).take(pa.array(at)).to_pylist() for k in keys]
    return picked[0] if len(keys) == 1 else list(zip(*picked, strict=True))


def _sortable(rows: pa.Table, column: str) -> bool:
    t = rows.schema.field(column).type
    return not (pa.types.is_nested(t) or pa.types.is_null(t) or pa.types.is_dictionary(t))
