"""Keyed process functions: `key_by(...).process(fn, output_schema=...)` (docs/user-state.md).

Vectorized: per batch, the rows are grouped by key once (pandas) and the user's function is
called once per key present, `fn(key, rows: pandas.DataFrame, ctx) -> DataFrame | None` —
one Python call per key and batch, never per record. `ctx` is bound to the current key:
named keyed state (`value_state`, `list_state`, `map_state`, each with an optional
`ttl_ms`), timers (`register_event_time_timer`, `register_processing_time_timer`,
`delete_*`), `current_watermark`, `current_processing_time` and `current_key`. A timer
calls `on_timer(key, timestamp, ctx)`: when the watermark reaches an event-time timer, when
the task's clock reaches a processing-time one; at the end of the input every event-time
timer fires (the final watermark), processing-time ones are dropped, as in Flink.

The state and timers are the pure cores in taskmanager/state/; on the memory backend they
are snapshotted as one keyed Arrow table per key-group range like every keyed operator's (a
row per state entry or timer: its key group, what it is, the key and value pickled, its
expiry or timestamp), so the operator restores at any parallelism's key-group split. On the
rocksdb backend (`state.backend: rocksdb`) the entries and a copy of the timers live in the
operator's RocksDB database instead (taskmanager/state/rocksdb_user_state.py), snapshotted as
a RocksDB checkpoint; a snapshot of either backend restores into the other. What the function
returns is converted to Arrow with `output_schema` when the job declared one, so every batch
has the same columns and types.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from typing import Any, Self, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch
from taskmanager.state import rocksdb_backend
from taskmanager.state.backend import ROCKSDB, NativeRestore
from taskmanager.state.keyed_state import MISSING, KeyedStateStore, StateDescriptor
from taskmanager.state.process_snapshots import KEY, STATE_PREFIX, TIME, TIMER_PREFIX, VALUE, WHAT, ProcessSnapshots
from taskmanager.state.rocksdb_user_state import RocksDBUserState, decode
from taskmanager.state.timer_service import TimeDomain, TimerService

CLEANUP_BUDGET = 1000  # expired state entries removed per batch, at most (incremental TTL cleanup)
MAX_TIMER_ROUNDS = 100  # timers registering due timers: the rest fire at the next watermark or tick


_ARROW_TYPES = {  # the declared output's Spark types as Arrow's (others: as pandas gives them)
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "smallint": pa.int16(),
    "tinyint": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "binary": pa.binary(),
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def sorted_by_key(table: pa.Table, keys: list[str]) -> tuple[Any, list[np.ndarray], np.ndarray, np.ndarray]:
    """A batch sorted by its key columns once (cheaper than iterating a groupby): as pandas
    without the key group, its key columns as numpy arrays, each row's key group, and the first
    row of each key's run (one key group per run: it is the key's hash)."""
    table = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys]))
    kgs = table.column(KEY_GROUP).to_numpy(zero_copy_only=False)
    frame = table.drop_columns([KEY_GROUP]).to_pandas()
    key_arrays = [frame[k].to_numpy() for k in keys]
    change = np.zeros(len(frame), dtype=bool)
    change[0] = True
    for arr in key_arrays:
        change[1:] |= arr[1:] != arr[:-1]
    return frame, key_arrays, kgs, np.flatnonzero(change)


class KeyedProcess(Operator):
    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        self.name = ctx.name
        self.keys: list[str] = list(payload["keys"])
        fn = payload["process"]
        self.process_fn: Any = getattr(fn, "process", fn)
        self.on_timer_fn: Any = payload.get("on_timer") or getattr(fn, "on_timer", None)
        if not callable(self.process_fn):
            raise TypeError(f"{self.name}: process needs a function (key, rows, ctx) or an object with process()")
        self.columns: list[tuple[str, pa.DataType | None]] | None = None  # the declared output, if any
        if payload.get("output_schema"):
            from sluice import schema as schemas

            declared = schemas.parse(payload["output_schema"])
            self.columns = [(f.name, _ARROW_TYPES.get(f.type)) for f in declared.fields]
        # rocksdb: the state entries and a copy of the timers in RocksDB (`store` stays empty)
        backend = ctx.state_backend
        self.native = (
            RocksDBUserState(backend, ctx.tag, payload.get("state_ttl_ms"))
            if backend is not None and backend.kind == ROCKSDB
            else None
        )
        memory = self.native is None  # memory snapshots are built from the changes (ProcessSnapshots)
        self.store = KeyedStateStore(payload.get("state_ttl_ms"), track_changes=memory)
        self.timers = TimerService(track_changes=memory)
        self.snapshots = ProcessSnapshots()
        # key -> its key group: every key with state or timers on memory (for snapshots), the keys
        # with pending timers on rocksdb (for on_timer's state)
        self.key_groups: dict[Hashable, int] = {}
        # memory: the keys given to the function since the last snapshot, in process or on_timer:
        # the only keys whose state it can have changed (ProcessSnapshots)
        self.seen: set[Hashable] = set()
        self.watermark = MIN_WATERMARK
        self.context = ProcessContext(self)
        self.engine = ctx.engine
        self.python_calls = 0  # calls into the user's code, for the benchmark's calls per event

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        if payload.get("batch") and cls is KeyedProcess:  # `process_batch`: one call per batch
            from taskmanager.operators.keyed_process_batch import BatchKeyedProcess

            return cast(Self, BatchKeyedProcess(payload, ctx))
        return cls(payload, ctx)

    # -- input and timers ----------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        frame, key_arrays, kgs, runs = sorted_by_key(table, self.keys)
        starts = runs.tolist() + [len(frame)]
        out = []
        ctx = self.context
        single = len(self.keys) == 1
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            key = key_arrays[0][a] if single else tuple(arr[a] for arr in key_arrays)
            key = key.item() if hasattr(key, "item") else key  # a plain Python value, as state keys
            kg = int(kgs[a])
            if self.native is None:
                self.key_groups[key] = kg
                self.seen.add(key)
            ctx.current_key, ctx.current_kg = key, kg
            self.python_calls += 1
            got = self.process_fn(key, frame.iloc[a:b], ctx)
            if got is not None and len(got):
                out.append(got)
        ctx.current_key = None
        self._clean_up_expired()
        return self._batch(out)

    def _clean_up_expired(self) -> None:
        """Remove up to CLEANUP_BUDGET expired state entries (incremental TTL cleanup)."""
        if self.native is not None:
            self.native.cleanup(_now_ms(), CLEANUP_BUDGET)
        else:
            self.store.cleanup(_now_ms(), CLEANUP_BUDGET)

    def on_watermark(self, watermark: int) -> Batch | None:
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        return self._fire(TimeDomain.EVENT_TIME, watermark)

    def on_processing_time(self, now_ms: int) -> Batch | None:
        if not self.timers.pending(TimeDomain.PROCESSING_TIME):
            return None
        return self._fire(TimeDomain.PROCESSING_TIME, now_ms)

    def end_input(self) -> Batch | None:
        return self.on_watermark(MAX_WATERMARK)

    def _fire(self, domain: TimeDomain, time_ms: int) -> Batch | None:
        out = []
        ctx = self.context
        for _round in range(MAX_TIMER_ROUNDS):  # a timer may register another one that is due already
            due = self.timers.due(domain, time_ms)
            if not due:
                break
            for ts, key in due:
                kg = self.key_groups.get(key, 0)
                if self.native is not None:
                    self.native.delete_timer(kg, domain, ts, key)
                if self.on_timer_fn is None:
                    continue
                if self.native is None:
                    self.seen.add(key)
                ctx.current_key, ctx.current_kg, ctx.timer_domain = key, kg, domain
                self.python_calls += 1
                got = self.on_timer_fn(key, ts, ctx)
                if got is not None and len(got):
                    out.append(got)
        ctx.current_key, ctx.timer_domain = None, None
        return self._batch(out)

    def _batch(self, frames: list[Any]) -> Batch | None:
        if not frames:
            return None
        import pandas as pd

        records = [r for f in frames if isinstance(f, list) for r in f]  # rows as dicts: cheapest to return
        tables = [f for f in frames if isinstance(f, pd.DataFrame)]
        for f in frames:
            if not isinstance(f, (pd.DataFrame, list)) or (
                isinstance(f, list) and not all(isinstance(r, dict) for r in f)
            ):
                raise TypeError(
                    f"{self.name}: the process function returned {type(f).__name__}; "
                    "it must return a pandas DataFrame, a list of row dicts, or None"
                )
        if records:
            tables.append(pd.DataFrame.from_records(records))
        frame = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
        if self.columns is None:
            return Batch(self.engine, table=pa.Table.from_pandas(frame, preserve_index=False))
        names = [n for n, _t in self.columns]
        missing = [n for n in names if n not in frame.columns]
        if missing:
            raise ValueError(
                f"{self.name}: the process function's rows lack {', '.join(missing)} of its output_schema "
                f"({', '.join(names)}); they have {', '.join(map(str, frame.columns))}"
            )
        table = pa.Table.from_pandas(frame[names], preserve_index=False)
        for i, (name, arrow_type) in enumerate(self.columns):
            if arrow_type is not None and table.column(i).type != arrow_type:
                table = table.set_column(i, name, table.column(i).cast(arrow_type))
        return Batch(self.engine, table=table)

    # -- checkpoints ---------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self.native is not None:  # a RocksDB checkpoint, uploaded by the task
            timed = self.timers.keys()
            self.key_groups = {k: g for k, g in self.key_groups.items() if k in timed}
            states = {d.name: [d.kind, d.ttl_ms] for d in self.native.descriptors.values()}
            inline = {"watermark": self.watermark, "states": states}
            return OperatorSnapshot(inline=inline, native=self.native.snapshot(checkpoint_id))
        table = self.snapshots.take(self.store, self.timers, self.key_groups, self.seen, _now_ms())
        return OperatorSnapshot(inline={"watermark": self.watermark}, keyed=table)

    def restore(self, state: OperatorSnapshot) -> None:
        inline = state.inline or {}
        self.watermark = int(inline.get("watermark", MIN_WATERMARK))
        declared = {
            name: StateDescriptor(name, kind, ttl) for name, (kind, ttl) in (inline.get("states") or {}).items()
        }
        self.key_groups = {}
        self.snapshots.reset()
        self.seen.clear()
        native = state.native if isinstance(state.native, NativeRestore) and state.native.handles else None
        if self.native is not None and native is not None:  # rocksdb into rocksdb: the databases
            self.native.values.restore(native.handles, native.fs, native.key_groups, native.owned)
            timers = list(self.native.timers(native.key_groups))
            self.native.restored(declared, may_expire=any(d.ttl_ms for d in declared.values()))
            self._restore_timers(timers)
            return
        if native is not None:  # rocksdb into memory: the key range, decoded
            entries, timers = _decoded(native, declared)
        else:
            entries, timers = _rows(state.keyed)
        if self.native is not None:  # memory into rocksdb
            self.native.values.clear()
            self.native.restored(declared, may_expire=False)
            self.native.write_entries(iter(entries), iter(timers))
        else:
            self.store.restore((d, key, value, expires) for d, key, _kg, value, expires in entries)
            self.key_groups = {key: kg for _d, key, kg, _v, _e in entries}
        self._restore_timers(timers)

    def _restore_timers(self, timers: list[tuple[int, TimeDomain, int, Hashable]]) -> None:
        self.timers.restore((domain, ts, key) for _kg, domain, ts, key in timers)
        self.key_groups.update((key, kg) for kg, _d, _ts, key in timers)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.native is not None:
            self.native.notify_checkpoint_complete(checkpoint_id)

    def dispose(self) -> None:
        if self.native is not None:
            self.native.close()

    # -- state access (ProcessContext's views) ------------------------------------------------------
    def state_get(self, name: str, key: Hashable, kg: int) -> Any:
        if self.native is not None:
            return self.native.get(name, key, kg, _now_ms())
        return self.store.get(name, key, _now_ms())

    def state_put(self, name: str, key: Hashable, kg: int, value: Any) -> None:
        if self.native is not None:
            self.native.put(name, key, kg, value, _now_ms())
        else:
            self.store.put(name, key, value, _now_ms())

    def state_clear(self, name: str, key: Hashable, kg: int) -> None:
        if self.native is not None:
            self.native.clear(name, key, kg)
        else:
            self.store.clear(name, key)

    def declare(self, name: str, kind: str, ttl_ms: int | None) -> StateDescriptor:
        return (self.native or self.store).declare(name, kind, ttl_ms)

    def register_timer(self, domain: TimeDomain, key: Hashable, kg: int, timestamp: int) -> None:
        if self.timers.register(domain, key, timestamp):
            self.key_groups[key] = kg
            if self.native is None:
                self.seen.add(key)
            else:
                self.native.put_timer(kg, domain, timestamp, key)

    def delete_timer(self, domain: TimeDomain, key: Hashable, kg: int, timestamp: int) -> None:
        if self.timers.delete(domain, key, timestamp) and self.native is not None:
            self.native.delete_timer(kg, domain, timestamp, key)


Entry = tuple[StateDescriptor, Hashable, int, Any, "int | None"]  # (state, key, key group, value, expires)
Timer = tuple[int, TimeDomain, int, Hashable]  # (key group, domain, timestamp, key)


def _rows(table: pa.Table | None) -> tuple[list[Entry], list[Timer]]:
    """A memory-backend snapshot's rows: its state entries and timers."""
    import pickle

    entries: list[Entry] = []
    timers: list[Timer] = []
    if table is None:
        return entries, timers
    for row in table.to_pylist():
        key = pickle.loads(row[KEY])  # our own snapshot, written by KeyedProcess.snapshot
        what: str = row[WHAT]
        if what.startswith(TIMER_PREFIX):
            timers.append((row[KEY_GROUP], TimeDomain(what[len(TIMER_PREFIX) :]), row[TIME], key))
            continue
        kind, ttl, name = what[len(STATE_PREFIX) :].split(":", 2)
        descriptor = StateDescriptor(name, kind, int(ttl) if ttl else None)
        entries.append((descriptor, key, row[KEY_GROUP], pickle.loads(row[VALUE]), row[TIME]))
    return entries, timers


def _decoded(native: NativeRestore, declared: dict[str, StateDescriptor]) -> tuple[list[Entry], list[Timer]]:
    """A rocksdb snapshot's entries and timers in this subtask's key groups, decoded."""
    wanted = set(native.owned) if native.owned is not None else None
    entries: list[Entry] = []
    timers: list[Timer] = []
    now = _now_ms()
    for k, v in rocksdb_backend.read_range(native.handles, native.fs, native.key_groups, native.scratch):
        what, kg, fields = decode(k, v)
        if wanted is not None and kg not in wanted:
            continue
        if what == "timer":
            domain, ts, key = fields
            timers.append((kg, domain, ts, key))
            continue
        name, key, value, expires = fields
        if expires is not None and expires <= now:
            continue
        descriptor = declared.get(name) or StateDescriptor(name, "value", None)
        entries.append((descriptor, key, kg, value, expires))
    return entries, timers


class Clocks:
    """The times a process function's `ctx` tells, in either form (`_op`: its operator)."""

    _op: KeyedProcess

    @property
    def current_watermark(self) -> int | None:
        """The operator's input watermark (ms), None before the first."""
        return None if self._op.watermark == MIN_WATERMARK else self._op.watermark

    @property
    def current_processing_time(self) -> int:
        return _now_ms()


class ProcessContext(Clocks):
    """What the user's function gets as `ctx`: state and timers of the current key."""

    def __init__(self, op: KeyedProcess) -> None:
        self._op = op
        self.current_key: Any = None
        self.current_kg = 0  # the current key's key group
        self.timer_domain: TimeDomain | None = None  # in on_timer: which kind of timer fired

    def _key(self) -> Hashable:
        if self.current_key is None:
            raise RuntimeError("keyed state and timers are only available inside process() and on_timer()")
        key: Hashable = self.current_key
        return key

    # state
    def value_state(self, name: str, ttl_ms: int | None = None) -> ValueState:
        return ValueState(self, self._op.declare(name, "value", ttl_ms))

    def list_state(self, name: str, ttl_ms: int | None = None) -> ListState:
        return ListState(self, self._op.declare(name, "list", ttl_ms))

    def map_state(self, name: str, ttl_ms: int | None = None) -> MapState:
        return MapState(self, self._op.declare(name, "map", ttl_ms))

    # timers
    def register_event_time_timer(self, timestamp: int) -> None:
        self._op.register_timer(TimeDomain.EVENT_TIME, self._key(), self.current_kg, int(timestamp))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._op.register_timer(TimeDomain.PROCESSING_TIME, self._key(), self.current_kg, int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._op.delete_timer(TimeDomain.EVENT_TIME, self._key(), self.current_kg, int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._op.delete_timer(TimeDomain.PROCESSING_TIME, self._key(), self.current_kg, int(timestamp))


class _View:
    def __init__(self, ctx: ProcessContext, descriptor: StateDescriptor) -> None:
        self._ctx, self._op, self._name = ctx, ctx._op, descriptor.name

    def _get(self) -> Any:
        return self._op.state_get(self._name, self._ctx._key(), self._ctx.current_kg)

    def _put(self, value: Any) -> None:
        self._op.state_put(self._name, self._ctx._key(), self._ctx.current_kg, value)

    def clear(self) -> None:
        self._op.state_clear(self._name, self._ctx._key(), self._ctx.current_kg)


class ValueState(_View):
    """One value per key: `.value` (None when unset or expired), `.update(v)`, `.clear()`."""

    @property
    def value(self) -> Any:
        v = self._get()
        return None if v is MISSING else v

    def update(self, value: Any) -> None:
        self._put(value)


class ListState(_View):
    """A list per key: `.get()` (a copy), `.add(v)`, `.add_all(vs)`, `.update(list)`, `.clear()`."""

    def get(self) -> list[Any]:
        v = self._get()
        return [] if v is MISSING else list(v)

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: list[Any]) -> None:
        v = self._get()
        self._put(([] if v is MISSING else list(v)) + list(values))

    def update(self, values: list[Any]) -> None:
        self._put(list(values))


class MapState(_View):
    """A dict per key: `state[k]`, `state[k] = v`, `del state[k]`, `k in state`, `.get`, `.keys()`,
    `.values()`, `.items()`, `len()`, iteration, `.clear()`."""

    def _map(self) -> dict[Any, Any]:
        v = self._get()
        return {} if v is MISSING else v

    def __getitem__(self, k: Any) -> Any:
        return self._map()[k]

    def __setitem__(self, k: Any, v: Any) -> None:
        m = self._map()
        m[k] = v
        self._put(m)  # the same dict, in place: a write (its TTL starts again)

    def __delitem__(self, k: Any) -> None:
        m = self._map()
        del m[k]
        if m:
            self._put(m)
        else:
            self.clear()

    def __contains__(self, k: Any) -> bool:
        return k in self._map()

    def __len__(self) -> int:
        return len(self._map())

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._map()))

    def get(self, k: Any, default: Any = None) -> Any:
        return self._map().get(k, default)

    def keys(self) -> list[Any]:
        return list(self._map().keys())

    def values(self) -> list[Any]:
        return list(self._map().values())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._map().items())
