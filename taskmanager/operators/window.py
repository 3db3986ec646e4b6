"""Keyed windows: `key_by(...).window(assigner)` with aggregates or `apply` (docs/event-time.md).

Tumbling and sliding windows are kept as *panes* (sluice/eventtime/windows.py):
per pane start, the Arrow tables of what arrived for it. With aggregates, the
producers pre-aggregate each batch per (key, pane) before the shuffle
(`WindowPartials`, the keyed aggregate's combiner with the pane as one more
grouping column and a hidden row count `__n`), so a record is folded once,
into its one pane, however many sliding windows hold it. A window fires when
the input watermark reaches its last millisecond (`end - 1`): the partials of
its panes are merged with one Arrow group_by and finished (an avg's sum over
its count); with `apply`, its rows go to the user's function per key as a
pandas DataFrame. Output: the key columns, `window_start`, `window_end` (ms,
end exclusive), then the results. A pane is dropped once the newest window
holding it is past its allowed lateness, so memory follows the open windows,
not the windows passed.

Lateness: a record whose every window is past `end - 1 + allowed_lateness` is
late: dropped and counted (`records_late_dropped`), or sent to the late-data
side output when the job asked for one (then producers send raw rows and this
operator pre-aggregates them itself). A record for a window that fired but is
within the allowed lateness updates it, and the window's row is emitted again
for that key (an update).

Session windows (`EventTimeSessionWindows`) keep, per key, its open sessions
with their partials (or rows, for apply); a batch's records merge with them on
arrival (`merge_sessions`). Processing-time tumbling windows assign each record
the task's clock when it arrives and fire on that clock.

State, per key-group range in checkpoints like the keyed aggregate's: every
pane's (or session's) rows with their key group, plus the watermark the
operator had reached (inline), so that a restored operator fires no window
twice: windows it had fired are not fired again, only updated by late records.

On the rocksdb state backend (docs/state-backends.md), tumbling and sliding
windows with aggregates keep their pane partials in the operator's RocksDB
database instead (taskmanager/state/rocksdb_panes.py): memory holds only the
pane starts and key groups that have entries, and a checkpoint is a RocksDB
checkpoint, incremental like the keyed aggregate's. `apply` windows and session
windows stay in memory on every backend.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.eventtime.timestamps import timestamps_ms
from sluice.eventtime.windows import EventTimeSessionWindows, PaneWindows, merge_sessions, window_from_config
from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from sluice.v1.common_pb2 import TaskCounters
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.operators.keyed_aggregate import Aggs, _grouped, _mean, combine, combiner_columns, partial_columns
from taskmanager.spark_engine import Batch
from taskmanager.state.backend import ROCKSDB, NativeRestore
from taskmanager.state.rocksdb_panes import PaneTable, RocksDBPanes, read_native

PANE = "__pane"  # pane start of a row (ms), in exchanged partials and in snapshots
COUNT = "__n"  # rows behind a partial row: the late-record count of a late partial
START, END = "__start", "__end"  # a session's interval, in snapshots
WINDOW_START, WINDOW_END = "window_start", "window_end"
COMPACT_AFTER = 8  # tables a pane may collect before they are merged into one


def with_count(aggs: Aggs) -> Aggs:
    return {**aggs, COUNT: ("count", "*")}


class WindowPartials:
    """The producers' combiner for pane windows with aggregates: partials per (key, pane)."""

    def __init__(self, assigner: PaneWindows, timestamp_column: str, aggs: Aggs) -> None:
        self.assigner, self.ts, self.aggs = assigner, timestamp_column, with_count(aggs)
        self.not_null = [timestamp_column]

    def columns(self) -> list[str]:
        return [self.ts, *[c for c in combiner_columns(self.aggs) if c != self.ts]]

    def combine(self, table: pa.Table, keys: Sequence[str]) -> pa.Table:
        ts = timestamps_ms(table.column(self.ts)).to_numpy(zero_copy_only=False)
        table = table.append_column(PANE, pa.array(self.assigner.pane_starts(ts), pa.int64()))
        return combine(table, [*keys, PANE], self.aggs)


class WindowOperator(Operator):
    uses_event_time = True

    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        self.name = ctx.name
        self.keys: list[str] = list(payload["keys"])
        self.assigner = window_from_config(payload["window"])
        self.ts: str | None = payload.get("timestamp_column")
        self.lateness = int(payload.get("allowed_lateness_ms") or 0)
        self.late_output = bool(payload.get("late_output"))
        self.apply_fn: Any = payload.get("apply")
        self.aggs: Aggs | None = dict(payload["aggs"]) if payload.get("aggs") else None
        self.partials = partial_columns(with_count(self.aggs)) if self.aggs else []
        self.side_output: Any = None  # set by the task: fn(table) for late rows when late_output
        self.watermark = MIN_WATERMARK  # the input watermark (processing-time windows: the clock) reached
        self.records_late_dropped = 0
        self.null_timestamps_dropped = 0
        self.panes: dict[int, list[pa.Table]] = collections.defaultdict(list)
        self.sessions: dict[Any, list[list[Any]]] = {}  # key -> [[start, end, kg, partials | [tables]], ...]
        self._key_types: list[pa.DataType] | None = None
        self.engine = ctx.engine
        # pane partials in RocksDB instead of self.panes: windows with aggregates on the rocksdb backend
        self.store: RocksDBPanes | None = None
        backend = ctx.state_backend
        if backend is not None and backend.kind == ROCKSDB and self.aggs is not None and not self.is_session:
            self.store = RocksDBPanes(backend, self.keys, self.partials, ctx.tag)

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    @classmethod
    def combiner_for(cls, payload: Payload) -> WindowPartials | None:
        assigner = window_from_config(payload["window"])
        if not payload.get("aggs") or payload.get("late_output") or not isinstance(assigner, PaneWindows):
            return None  # raw rows: apply, sessions, a late side output, processing time
        if assigner.processing_time:
            return None
        return WindowPartials(assigner, payload["timestamp_column"], dict(payload["aggs"]))

    @property
    def is_session(self) -> bool:
        return isinstance(self.assigner, EventTimeSessionWindows)

    # -- input ---------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        if self._key_types is None:
            self._key_types = [table.schema.field(k).type for k in self.keys]
        if self.is_session:
            return self._process_sessions(table)
        if PANE not in table.column_names:  # raw rows: assign panes here
            table = self._assign_panes(table)
            if table.num_rows == 0:
                return None
        assert isinstance(self.assigner, PaneWindows)
        table = self._drop_late(table, self._pane_last_end(table.column(PANE)))
        if table is None:
            return None
        if self.aggs is not None and COUNT not in table.column_names:  # raw rows: pre-aggregate here
            table = combine(table, [*self.keys, PANE], with_count(self.aggs))
        if self.store is not None:
            self.store.add(table)
        pane_values = table.column(PANE)
        updated: dict[int, pa.Table] = {}
        for pane in pc.unique(pane_values).to_pylist():
            part = table.filter(pc.equal(pane_values, pane))
            if self.store is None:
                self._add_to_pane(pane, part)
            updated[pane] = part
        return self._late_updates(updated)

    def _assign_panes(self, table: pa.Table) -> pa.Table:
        assert isinstance(self.assigner, PaneWindows)
        if self.assigner.processing_time:
            import time

            now = int(time.time() * 1000)
            ts = np.full(table.num_rows, now, dtype=np.int64)
        else:
            table, ts = self._event_times(table)
        return table.append_column(PANE, pa.array(self.assigner.pane_starts(ts), pa.int64()))

    def _event_times(self, table: pa.Table) -> tuple[pa.Table, np.ndarray]:
        """Rows with a timestamp (the others dropped and counted), and their timestamps in ms."""
        assert self.ts is not None
        ts = timestamps_ms(table.column(self.ts))
        if ts.null_count:
            self.null_timestamps_dropped += ts.null_count
            keep = pc.is_valid(ts)
            table, ts = table.filter(keep), ts.filter(keep)
        return table, ts.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    def _pane_last_end(self, panes: Any) -> np.ndarray:
        """For each row's pane, the end of the newest window holding it."""
        assert isinstance(self.assigner, PaneWindows)
        a = self.assigner
        p = panes.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        newest_start = p - np.mod(p - a.offset_ms, a.slide_ms)
        return newest_start + a.size_ms

    def _drop_late(self, table: pa.Table, last_end: np.ndarray) -> pa.Table | None:
        """`table` without the rows whose every window is past its allowed lateness (counted,
        or sent to the side output). None when nothing is left."""
        if self.watermark == MIN_WATERMARK:
            return table
        late = (last_end - 1 + self.lateness) <= self.watermark
        if not late.any():
            return table
        late_mask = pa.array(late)
        late_rows = table.filter(late_mask)
        if COUNT in late_rows.column_names:
            self.records_late_dropped += pc.sum(late_rows.column(COUNT)).as_py() or 0
        elif self.late_output and self.side_output is not None:
            drop = [c for c in (PANE, KEY_GROUP, START) if c in late_rows.column_names]
            self.side_output(late_rows.drop_columns(drop))
        else:
            self.records_late_dropped += late_rows.num_rows
        rest = table.filter(pc.invert(late_mask))
        return rest if rest.num_rows else None

    def _add_to_pane(self, pane: int, part: pa.Table) -> None:
        tables = self.panes[pane]
        tables.append(part)
        if len(tables) > COMPACT_AFTER and self.aggs is not None:
            self.panes[pane] = [self._merge([*tables], [*self.keys, KEY_GROUP, PANE])]

    def _merge(self, tables: list[pa.Table], group: list[str]) -> pa.Table:
        """Partials merged per `group` (the same columns out)."""
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        key_cols, merged = _grouped(table, group, list(self.partials))
        return pa.Table.from_arrays([*key_cols, *merged], names=[*group, *[c for c, _m in self.partials]])

    # -- firing --------------------------------------------------------------------------------
    def on_watermark(self, watermark: int) -> Batch | None:
        if self.assigner.processing_time and watermark != MAX_WATERMARK:
            return None  # processing-time windows follow the clock (end of input fires them all)
        return self._advance(watermark)

    def on_processing_time(self, now_ms: int) -> Batch | None:
        if not self.assigner.processing_time or now_ms <= self.watermark:
            return None
        return self._advance(now_ms)

    def _advance(self, watermark: int) -> Batch | None:
        if watermark <= self.watermark:
            return None
        old, self.watermark = self.watermark, watermark
        out = self._fire_sessions(old, watermark) if self.is_session else self._fire_panes(old, watermark)
        return self._batch(out)

    def _fire_panes(self, old: int, new: int) -> list[pa.Table]:
        assert isinstance(self.assigner, PaneWindows)
        pane_starts = list(self.store.panes if self.store is not None else self.panes)
        due: set[int] = set()
        for pane in pane_starts:
            for start in self.assigner.window_starts(pane):
                if old < start + self.assigner.size_ms - 1 <= new:
                    due.add(start)
        out = [t for start in sorted(due) if (t := self._window_rows(start)) is not None]
        for pane in pane_starts:  # past the lateness of its newest window: never needed again
            newest = pane - (pane - self.assigner.offset_ms) % self.assigner.slide_ms
            if newest + self.assigner.size_ms - 1 + self.lateness <= new:
                if self.store is not None:
                    self.store.drop(pane)
                else:
                    del self.panes[pane]
        return out

    def _window_rows(self, start: int, only: pa.Table | None = None) -> pa.Table | None:
        """The rows of window `start` (for the keys of `only`, when given)."""
        assert isinstance(self.assigner, PaneWindows)
        if self.store is not None:
            panes = self.assigner.window_panes(start)
            found = self.store.window_table(panes) if only is None else self.store.lookup(panes, only)
            return None if found is None else self._finish(found, start, start + self.assigner.size_ms)
        tables = [t for p in self.assigner.window_panes(start) for t in self.panes.get(p, ())]
        if not tables:
            return None
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        if only is not None:
            table = table.join(only.select(self.keys).group_by(self.keys).aggregate([]), self.keys, join_type="inner")
            if table.num_rows == 0:
                return None
        return self._finish(table, start, start + self.assigner.size_ms)

    def _late_updates(self, updated: dict[int, pa.Table]) -> Batch | None:
        """Windows that fired already and got rows within their allowed lateness: their new rows."""
        if self.watermark == MIN_WATERMARK or not self.lateness:
            return None
        assert isinstance(self.assigner, PaneWindows)
        out = []
        for pane, part in updated.items():
            for start in self.assigner.window_starts(pane):
                if start + self.assigner.size_ms - 1 <= self.watermark and (t := self._window_rows(start, part)):
                    out.append(t)
        return self._batch(out)

    def _finish(self, table: pa.Table, start: int, end: int) -> pa.Table | None:
        """One window's rows or partials -> its output rows."""
        n = table.num_rows
        if self.aggs is None:
            return self._apply(table, start, end)
        key_cols, merged = _grouped(table, [*self.keys, KEY_GROUP], list(self.partials))
        rows = len(key_cols[0])
        columns: dict[str, Any] = {k: key_cols[i] for i, k in enumerate(self.keys)}
        columns[WINDOW_START] = pa.array(np.full(rows, start, dtype=np.int64))
        columns[WINDOW_END] = pa.array(np.full(rows, end, dtype=np.int64))
        names = [c for c, _m in self.partials]
        for out, (fn, _c) in self.aggs.items():
            col = merged[names.index(out)]
            if fn == "avg":
                count = merged[names.index(f"__count_{out}")]
                col = pa.array([_mean(s, c) for s, c in zip(col.to_pylist(), count.to_pylist(), strict=True)])
            columns[out] = col
        return pa.table(columns) if n else None

    def _apply(self, table: pa.Table, start: int, end: int) -> pa.Table | None:
        import pandas as pd

        rows = table.drop_columns([c for c in (KEY_GROUP, PANE, START, END) if c in table.column_names])
        frame = rows.to_pandas()
        results = []
        for key, group in frame.groupby(self.keys if len(self.keys) > 1 else self.keys[0], sort=True):
            got = self.apply_fn(key, start, end, group.reset_index(drop=True))
            if got is None or len(got) == 0:
                continue
            if not isinstance(got, pd.DataFrame):
                raise TypeError(f"{self.name}: apply returned {type(got).__name__}; it must return a pandas DataFrame")
            got = got.copy()
            values = key if isinstance(key, tuple) else (key,)
            front = {k: v for k, v in zip(self.keys, values, strict=True) if k not in got.columns}
            front.update({c: v for c, v in ((WINDOW_START, start), (WINDOW_END, end)) if c not in got.columns})
            for i, (c, v) in enumerate(front.items()):
                got.insert(i, c, v)
            results.append(got)
        if not results:
            return None
        return pa.Table.from_pandas(pd.concat(results, ignore_index=True), preserve_index=False)

    def _batch(self, tables: list[pa.Table]) -> Batch | None:
        tables = [t for t in tables if t is not None and t.num_rows]
        if not tables:
            return None
        out = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        return Batch(self.engine, table=out)

    # -- sessions ------------------------------------------------------------------------------
    def _key_of(self, columns: Sequence[Any], i: int) -> Any:
        return columns[0][i] if len(columns) == 1 else tuple(c[i] for c in columns)

    def _process_sessions(self, table: pa.Table) -> Batch | None:
        assert isinstance(self.assigner, EventTimeSessionWindows)
        gap = self.assigner.gap_ms
        table, ts = self._event_times(table)
        table = self._drop_late(table, ts + gap) if table.num_rows else None
        if table is None:
            return None
        ts = timestamps_ms(table.column(self.ts)).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        keys = [table.column(k).to_pylist() for k in self.keys]
        kgs = table.column(KEY_GROUP).to_pylist()
        rows_of: dict[Any, list[int]] = collections.defaultdict(list)
        for i in range(table.num_rows):
            rows_of[self._key_of(keys, i)].append(i)
        session_of_row = np.zeros(table.num_rows, dtype=np.int64)
        touched: list[tuple[Any, list[Any]]] = []
        for key, rows in rows_of.items():
            old = self.sessions.get(key, [])
            merged = merge_sessions([(s[0], s[1]) for s in old], [int(ts[r]) for r in rows], gap)
            new_list = []
            for m in merged:
                absorbed = [old[i] for i in m.sessions]
                entry = [m.start, m.end, kgs[rows[0]], self._merge_session_values(absorbed)]
                for r in m.records:
                    session_of_row[rows[r]] = m.start
                new_list.append(entry)
                if m.records:
                    touched.append((key, entry))
            self.sessions[key] = new_list
        table = table.append_column(START, pa.array(session_of_row, pa.int64()))
        if self.aggs is not None:
            part = combine(table, [*self.keys, START], with_count(self.aggs))
            self._fold_session_partials(part)
        else:
            self._add_session_rows(table)
        if self.watermark == MIN_WATERMARK:
            return None
        return self._batch([self._session_row(k, e) for k, e in touched if e[1] - 1 <= self.watermark])

    def _merge_session_values(self, absorbed: list[list[Any]]) -> Any:
        if self.aggs is None:
            return [t for s in absorbed for t in s[3]]
        values = [s[3] for s in absorbed if s[3] is not None]
        if not values:
            return None
        merges = [m for _c, m in self.partials]
        out = list(values[0])
        for v in values[1:]:
            out = [_fold_partial(m, a, b) for m, a, b in zip(merges, out, v, strict=True)]
        return out

    def _fold_session_partials(self, part: pa.Table) -> None:
        keys = [part.column(k).to_pylist() for k in self.keys]
        starts = part.column(START).to_pylist()
        values = [part.column(c).to_pylist() for c, _m in self.partials]
        merges = [m for _c, m in self.partials]
        for i in range(part.num_rows):
            entry = self._session(self._key_of(keys, i), starts[i])
            new = [v[i] for v in values]
            entry[3] = (
                new
                if entry[3] is None
                else [_fold_partial(m, a, b) for m, a, b in zip(merges, entry[3], new, strict=True)]
            )

    def _add_session_rows(self, table: pa.Table) -> None:
        keys = [table.column(k).to_pylist() for k in self.keys]
        starts = table.column(START).to_pylist()
        groups: dict[tuple[Any, int], list[int]] = collections.defaultdict(list)
        for i in range(table.num_rows):
            groups[(self._key_of(keys, i), starts[i])].append(i)
        rows = table.drop_columns([START])
        for (key, start), idx in groups.items():
            self._session(key, start)[3].append(rows.take(pa.array(idx)))

    def _session(self, key: Any, start: int) -> list[Any]:
        for s in self.sessions[key]:
            if s[0] == start:
                return s
        raise KeyError(f"{self.name}: no session of key {key!r} starts at {start}")

    def _session_row(self, key: Any, entry: list[Any]) -> pa.Table | None:
        start, end, kg, value = entry
        values = key if isinstance(key, tuple) else (key,)
        assert self._key_types is not None
        head = {k: pa.array([v], t) for k, v, t in zip(self.keys, values, self._key_types, strict=True)}
        if self.aggs is None:
            if not value:
                return None
            return self._apply(pa.concat_tables(value, promote_options="default"), start, end)
        table = pa.table({**head, KEY_GROUP: pa.array([kg], pa.int32())})
        for (c, _m), v in zip(self.partials, value, strict=True):
            table = table.append_column(c, pa.array([v]))
        return self._finish(table, start, end)

    def _fire_sessions(self, old: int, new: int) -> list[pa.Table]:
        out = []
        for key in list(self.sessions):
            keep = []
            for entry in self.sessions[key]:
                if old < entry[1] - 1 <= new and (row := self._session_row(key, entry)) is not None:
                    out.append(row)
                if entry[1] - 1 + self.lateness > new:
                    keep.append(entry)
            if keep:
                self.sessions[key] = keep
            else:
                del self.sessions[key]
        return out

    def wire(self, has_outputs: bool, late_output: Callable[[pa.Table], None] | None) -> None:  # noqa: ARG002 — rows go down the chain either way
        # late rows go to the side output when the job reads it; else they are counted as dropped
        self.side_output = late_output

    def add_counters(self, counters: TaskCounters) -> None:
        counters.records_dropped += self.null_timestamps_dropped
        counters.records_late_dropped += self.records_late_dropped

    def end_input(self) -> Batch | None:
        return self._advance(MAX_WATERMARK)

    # -- checkpoints ---------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        inline: dict[str, Any] = {"watermark": self.watermark, "late_dropped": self.records_late_dropped}
        if self.store is not None:  # a RocksDB checkpoint, uploaded by the task
            inline["panes"] = sorted(self.store.panes)
            return OperatorSnapshot(inline=inline, native=self.store.snapshot(checkpoint_id))
        return OperatorSnapshot(inline=inline, keyed=self._state_table())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.store is not None:
            self.store.notify_checkpoint_complete(checkpoint_id)

    def dispose(self) -> None:
        if self.store is not None:
            self.store.close()

    def _state_table(self) -> pa.Table | None:
        if not self.is_session:
            tables = [t for ts in self.panes.values() for t in ts]
            return pa.concat_tables(tables, promote_options="default") if tables else None
        if self.aggs is None:
            tables = [
                t.append_column(START, pa.array([s[0]] * t.num_rows, pa.int64())).append_column(
                    END, pa.array([s[1]] * t.num_rows, pa.int64())
                )
                for ss in self.sessions.values()
                for s in ss
                for t in s[3]
            ]
            return pa.concat_tables(tables, promote_options="default") if tables else None
        rows = [(k, s) for k, ss in self.sessions.items() for s in ss]
        if not rows:
            return None
        assert self._key_types is not None
        columns: dict[str, Any] = {}
        for j, (k, t) in enumerate(zip(self.keys, self._key_types, strict=True)):
            columns[k] = pa.array([key[j] if len(self.keys) > 1 else key for key, _s in rows], t)
        columns[KEY_GROUP] = pa.array([s[2] for _k, s in rows], pa.int32())
        columns[START] = pa.array([s[0] for _k, s in rows], pa.int64())
        columns[END] = pa.array([s[1] for _k, s in rows], pa.int64())
        for j, (c, _m) in enumerate(self.partials):
            columns[c] = pa.array([s[3][j] for _k, s in rows])
        return pa.table(columns)

    def restore(self, state: OperatorSnapshot) -> None:
        inline = state.inline or {}
        self.watermark = int(inline.get("watermark", MIN_WATERMARK))
        self.records_late_dropped = int(inline.get("late_dropped", 0))
        self.panes.clear()
        self.sessions.clear()
        table = state.keyed
        native = state.native if isinstance(state.native, NativeRestore) and state.native.handles else None
        if self.store is not None:  # from a memory snapshot's table, then from rocksdb handles
            self.store.restore_table(table)
            if native is not None:
                self.store.restore_native(native)
            return
        if native is not None and self.aggs is not None and not self.is_session:  # rocksdb state, into memory
            table = read_native(native, PaneTable(self.keys, self.partials))
        if table is None or table.num_rows == 0:
            return
        self._key_types = [table.schema.field(k).type for k in self.keys]
        if not self.is_session:
            panes = table.column(PANE)
            for pane in pc.unique(panes).to_pylist():
                self.panes[pane] = [table.filter(pc.equal(panes, pane))]
            return
        keys = [table.column(k).to_pylist() for k in self.keys]
        starts, ends = table.column(START).to_pylist(), table.column(END).to_pylist()
        kgs = table.column(KEY_GROUP).to_pylist()
        if self.aggs is not None:
            values = [table.column(c).to_pylist() for c, _m in self.partials]
            for i in range(table.num_rows):
                entry = [starts[i], ends[i], kgs[i], [v[i] for v in values]]
                self.sessions.setdefault(self._key_of(keys, i), []).append(entry)
            return
        groups: dict[tuple[Any, int, int], list[int]] = collections.defaultdict(list)
        for i in range(table.num_rows):
            groups[(self._key_of(keys, i), starts[i], ends[i])].append(i)
        rows = table.drop_columns([START, END])
        for (key, start, end), idx in groups.items():
            kg = kgs[idx[0]]
            self.sessions.setdefault(key, []).append([start, end, kg, [rows.take(pa.array(idx))]])


def _fold_partial(merge: str, a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if merge == "sum":
        return a + b
    return min(a, b) if merge == "min" else max(a, b)
