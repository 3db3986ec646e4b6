"""The batch form of keyed process functions: `key_by(...).process_batch(fn, output_schema=...)`
(docs/user-state.md#the-batch-form).

One Python call per batch instead of one per key: `fn(rows: pandas.DataFrame, ctx)` gets every
row of the batch, sorted by key, with `ctx.keys` (the batch's distinct keys, in that order) and
`ctx.offsets` (where each key's rows start, and the end). State is read and written as columns,
a value per key of a list of keys: `ctx.value_state(name).get(keys)` /
`.update(keys, values)` / `.clear(keys)`, and `ctx.list_state(name)` with `get`, `add_all`,
`update` and `clear` the same way; timers are registered and deleted for lists of keys and
timestamps. A timer round calls `on_timer(timers: pandas.DataFrame, ctx)` once with every due
timer (the key columns and `timestamp`; `ctx.keys` are the timers' keys).

State lives in the same store, timers in the same service and snapshots have the same format
as the per-key form's (taskmanager/operators/keyed_process.py), on both state backends: a job
may switch between the two forms across a savepoint. A function touches the state of the keys
of its rows (in `on_timer`, of the keys whose timers fired); another key is an error naming it,
as Flink allows state of the current key only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, cast

import numpy as np

from taskmanager.operators.base import OperatorContext, Payload
from taskmanager.operators.keyed_process import MAX_TIMER_ROUNDS, Clocks, KeyedProcess, _now_ms, sorted_by_key
from taskmanager.spark_engine import Batch
from taskmanager.state.keyed_state import MISSING, StateDescriptor
from taskmanager.state.timer_service import TimeDomain

TIMESTAMP = "timestamp"  # the timers frame's time column


class BatchKeyedProcess(KeyedProcess):
    """The keyed process operator calling its function once per batch (module docstring)."""

    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        super().__init__(payload, ctx)
        self.batch_context = BatchContext(self)

    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        frame, key_arrays, kgs, starts = sorted_by_key(table, self.keys)
        keys = _keys(key_arrays, starts)
        groups = dict(zip(keys, kgs[starts].tolist(), strict=True))
        if self.native is None:
            self.key_groups.update(groups)
            self.seen.update(keys)
        ctx = self.batch_context
        ctx.enter(keys, groups, np.append(starts, len(frame)), None)
        try:
            self.python_calls += 1
            got = self.process_fn(frame, ctx)
        finally:
            ctx.leave()
        self._clean_up_expired()
        return self._batch([got] if got is not None and len(got) else [])

    def _fire(self, domain: TimeDomain, time_ms: int) -> Batch | None:
        import pandas as pd

        out = []
        ctx = self.batch_context
        for _round in range(MAX_TIMER_ROUNDS):  # a timer may register another one that is due already
            due = self.timers.due(domain, time_ms)
            if not due:
                break
            groups = {key: self.key_groups.get(key, 0) for _ts, key in due}
            if self.native is not None:
                for ts, key in due:
                    self.native.delete_timer(groups[key], domain, ts, key)
            if self.on_timer_fn is None:
                continue
            keys = [key for _ts, key in due]
            if self.native is None:
                self.seen.update(keys)
            columns: dict[str, Any] = {self.keys[0]: keys}
            if len(self.keys) > 1:  # composite keys are tuples: a column each
                columns = dict(
                    zip(self.keys, map(list, zip(*cast(list[tuple[Any, ...]], keys), strict=True)), strict=True)
                )
            columns[TIMESTAMP] = [ts for ts, _key in due]
            ctx.enter(keys, groups, np.arange(len(keys) + 1), domain)
            try:
                self.python_calls += 1
                got = self.on_timer_fn(pd.DataFrame(columns), ctx)
            finally:
                ctx.leave()
            if got is not None and len(got):
                out.append(got)
        return self._batch(out)


def _keys(key_arrays: list[np.ndarray], starts: np.ndarray) -> list[Hashable]:
    """The key at each start row as plain Python values (tuples for several key columns), the
    same values the per-key form uses as state keys."""
    columns = [arr[starts].tolist() for arr in key_arrays]
    return columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))


class BatchContext(Clocks):
    """What a batch function gets as `ctx`: the batch's keys, state as columns, timers."""

    def __init__(self, op: BatchKeyedProcess) -> None:
        self._op = op
        self.keys: list[Hashable] = []  # the distinct keys of the rows (in on_timer: of the timers), in order
        self.offsets = np.zeros(1, dtype=np.int64)  # key i's rows: rows.iloc[offsets[i]:offsets[i + 1]]
        self.timer_domain: TimeDomain | None = None  # in on_timer: which kind of timer fired
        self._groups: dict[Hashable, int] | None = None  # key -> key group while a call runs

    def enter(
        self, keys: list[Hashable], groups: dict[Hashable, int], offsets: np.ndarray, domain: TimeDomain | None
    ) -> None:
        self.keys, self._groups, self.offsets, self.timer_domain = keys, groups, offsets, domain

    def leave(self) -> None:
        self.keys, self._groups, self.timer_domain = [], None, None

    def checked(self, keys: Any) -> list[Hashable]:
        """`keys` as a list of state keys; an error for a key that is not this call's."""
        groups = self._groups
        if groups is None:
            raise RuntimeError("keyed state and timers are only available inside process() and on_timer()")
        if keys is self.keys:
            return self.keys
        listed = _key_list(keys)
        for k in listed:
            if k not in groups:
                raise KeyError(
                    f"{self._op.name}: key {k!r} is not in this call's "
                    f"{'timers' if self.timer_domain else 'rows'}; a batch function reads and writes the state "
                    "and timers of the keys in ctx.keys only"
                )
        return listed

    def groups_of(self, keys: list[Hashable]) -> list[int]:
        """The key group of each of `keys` (checked ones)."""
        groups = cast(dict[Hashable, int], self._groups)
        return [groups[k] for k in keys]

    # state
    def value_state(self, name: str, ttl_ms: int | None = None) -> ValueColumns:
        return ValueColumns(self, self._op.declare(name, "value", ttl_ms))

    def list_state(self, name: str, ttl_ms: int | None = None) -> ListColumns:
        return ListColumns(self, self._op.declare(name, "list", ttl_ms))

    # timers
    def register_event_time_timers(self, keys: Any, timestamps: Any) -> None:
        self._timers(keys, timestamps, TimeDomain.EVENT_TIME, register=True)

    def register_processing_time_timers(self, keys: Any, timestamps: Any) -> None:
        self._timers(keys, timestamps, TimeDomain.PROCESSING_TIME, register=True)

    def delete_event_time_timers(self, keys: Any, timestamps: Any) -> None:
        self._timers(keys, timestamps, TimeDomain.EVENT_TIME, register=False)

    def delete_processing_time_timers(self, keys: Any, timestamps: Any) -> None:
        self._timers(keys, timestamps, TimeDomain.PROCESSING_TIME, register=False)

    def _timers(self, keys: Any, timestamps: Any, domain: TimeDomain, register: bool) -> None:
        listed = self.checked(keys)
        times = _aligned(timestamps, len(listed), "timestamps")
        op = self._op
        if op.native is None:  # memory: every key of the call has its key group recorded already
            act = op.timers.register if register else op.timers.delete
            for key, ts in zip(listed, times, strict=True):
                act(domain, key, int(ts))
            return
        act_kg = op.register_timer if register else op.delete_timer
        for key, kg, ts in zip(listed, self.groups_of(listed), times, strict=True):
            act_kg(domain, key, kg, int(ts))


class _Columns:
    def __init__(self, ctx: BatchContext, descriptor: StateDescriptor) -> None:
        self._ctx, self._op, self._name = ctx, ctx._op, descriptor.name

    def _get_all(self, keys: Any) -> list[Any]:
        listed = self._ctx.checked(keys)
        op, name, now = self._op, self._name, _now_ms()
        if op.native is None:
            return op.store.get_many(name, listed, now)
        groups = self._ctx.groups_of(listed)
        return [op.native.get(name, k, kg, now) for k, kg in zip(listed, groups, strict=True)]

    def _put_all(self, keys: Any, values: Any) -> None:
        listed = self._ctx.checked(keys)
        aligned = _aligned(values, len(listed), "values", broadcast=False)
        op, name, now = self._op, self._name, _now_ms()
        if op.native is None:
            op.store.put_many(name, listed, aligned, now)
            return
        for k, kg, v in zip(listed, self._ctx.groups_of(listed), aligned, strict=True):
            op.native.put(name, k, kg, v, now)

    def clear(self, keys: Any) -> None:
        listed = self._ctx.checked(keys)
        op = self._op
        if op.native is None:
            op.store.clear_many(self._name, listed)
            return
        for k, kg in zip(listed, self._ctx.groups_of(listed), strict=True):
            op.native.clear(self._name, k, kg)


class ValueColumns(_Columns):
    """One value per key: `.get(keys)` (a list, None where unset or expired),
    `.update(keys, values)`, `.clear(keys)`."""

    def get(self, keys: Any) -> list[Any]:
        return [None if v is MISSING else v for v in self._get_all(keys)]

    def update(self, keys: Any, values: Any) -> None:
        self._put_all(keys, values)


class ListColumns(_Columns):
    """A list per key: `.get(keys)` (a list of lists), `.add_all(keys, lists)` (each key's
    values appended), `.update(keys, lists)`, `.clear(keys)`."""

    def get(self, keys: Any) -> list[list[Any]]:
        return [[] if v is MISSING else list(v) for v in self._get_all(keys)]

    def add_all(self, keys: Any, lists: Any) -> None:
        listed = self._ctx.checked(keys)
        added = _aligned(lists, len(listed), "lists", broadcast=False)
        op = self._op
        if op.native is None:  # memory: extend the stored lists in place (get hands out copies)
            now = _now_ms()
            merged = [
                list(new) if old is MISSING else _extended(old, new)
                for old, new in zip(op.store.get_many(self._name, listed, now), added, strict=True)
            ]
            op.store.put_many(self._name, listed, merged, now)  # written again: a TTL starts anew
            return
        merged = [old + list(new) for old, new in zip(self.get(listed), added, strict=True)]
        self._put_all(listed, merged)

    def update(self, keys: Any, lists: Any) -> None:
        listed = self._ctx.checked(keys)
        self._put_all(listed, [list(v) for v in _aligned(lists, len(listed), "lists", broadcast=False)])


def _extended(stored: list[Any], new: Any) -> list[Any]:
    stored.extend(new)
    return stored


def _key_list(keys: Any) -> list[Hashable]:
    """Keys given as a list, tuple, numpy array, pandas Series or Index, or (several key
    columns) a DataFrame of the key columns or a sequence of tuples, as plain Python values."""
    if hasattr(keys, "itertuples"):  # a DataFrame: one tuple per row
        return list(keys.itertuples(index=False, name=None))
    if type(keys) is list and not (keys and isinstance(keys[0], (list, np.generic))):
        return keys  # plain values already (ctx.keys, or a part of it)
    if hasattr(keys, "tolist"):
        listed: list[Hashable] = keys.tolist()
        return [tuple(k) if isinstance(k, list) else k for k in listed]
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError(f"keys must be a list of keys (ctx.keys, or a part of it), got {type(keys).__name__}")
    return [tuple(k) if isinstance(k, list) else k.item() if isinstance(k, np.generic) else k for k in keys]


def _aligned(values: Any, n: int, what: str, broadcast: bool = True) -> list[Any]:
    """`values` as a list of `n` (one per key); a scalar is repeated when `broadcast`."""
    if hasattr(values, "tolist") and not isinstance(values, np.generic):
        values = values.tolist()
    elif broadcast and (isinstance(values, (int, np.integer)) or not isinstance(values, Sequence)):
        return [values] * n
    if not isinstance(values, list):
        values = list(values)
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} given for {n} keys; give one per key, in the keys' order")
    return values
