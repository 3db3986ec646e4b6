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

The state and timers are the pure cores in taskmanager/state/; here they are snapshotted
as one keyed Arrow table per key-group range like every keyed operator's (a row per state
entry or timer: its key group, what it is, the key and value cloudpickled, its expiry or
timestamp), so the operator restores at any parallelism's key-group split. What the function
returns is converted to Arrow with `output_schema` when the job declared one, so every batch
has the same columns and types.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from typing import Any, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch
from taskmanager.state.keyed_state import MISSING, KeyedStateStore, StateDescriptor
from taskmanager.state.timer_service import TimeDomain, TimerService

WHAT, KEY, VALUE, TIME = "__what", "__key", "__value", "__time"  # snapshot columns
STATE_PREFIX, TIMER_PREFIX = "state:", "timer:"
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
        self.store = KeyedStateStore(payload.get("state_ttl_ms"))
        self.timers = TimerService()
        self.key_groups: dict[Hashable, int] = {}  # key -> its key group, for snapshots
        self.watermark = MIN_WATERMARK
        self.context = ProcessContext(self)
        self.engine = ctx.engine
        self.python_calls = 0  # calls into the user's code, for the benchmark's calls per event

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    # -- input and timers ----------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        kgs = table.column(KEY_GROUP)
        # Sort by key once and hand each key its slice: cheaper than iterating a groupby, and
        # the key group of each key comes from the same sort (one per key: it is the key's hash)
        order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in self.keys])
        table = table.take(order)
        kgs = table.column(KEY_GROUP).to_numpy(zero_copy_only=False)
        frame = table.drop_columns([KEY_GROUP]).to_pandas()
        key_arrays = [frame[k].to_numpy() for k in self.keys]
        n = len(frame)
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for arr in key_arrays:
            change[1:] |= arr[1:] != arr[:-1]
        starts = np.flatnonzero(change).tolist() + [n]
        out = []
        ctx = self.context
        single = len(self.keys) == 1
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            key = key_arrays[0][a] if single else tuple(arr[a] for arr in key_arrays)
            key = key.item() if hasattr(key, "item") else key  # a plain Python value, as state keys
            self.key_groups[key] = int(kgs[a])
            ctx.current_key = key
            self.python_calls += 1
            got = self.process_fn(key, frame.iloc[a:b], ctx)
            if got is not None and len(got):
                out.append(got)
        ctx.current_key = None
        self.store.cleanup(_now_ms(), CLEANUP_BUDGET)
        return self._batch(out)

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
                if self.on_timer_fn is None:
                    continue
                ctx.current_key, ctx.timer_domain = key, domain
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
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:  # noqa: ARG002 — keyed state is not per checkpoint
        import cloudpickle

        now = _now_ms()
        whats: list[str] = []
        keys: list[bytes] = []
        values: list[bytes | None] = []
        times: list[int | None] = []
        kgs: list[int] = []
        live = self.store.keys() | self.timers.keys()
        self.key_groups = {k: g for k, g in self.key_groups.items() if k in live}
        for descriptor, key, value, expires in self.store.snapshot(now):
            whats.append(f"{STATE_PREFIX}{descriptor.kind}:{descriptor.ttl_ms or ''}:{descriptor.name}")
            keys.append(cloudpickle.dumps(key))
            values.append(cloudpickle.dumps(value))
            times.append(expires)
            kgs.append(self.key_groups[key])
        for domain, ts, key in self.timers.snapshot():
            whats.append(f"{TIMER_PREFIX}{domain}")
            keys.append(cloudpickle.dumps(key))
            values.append(None)
            times.append(ts)
            kgs.append(self.key_groups[key])
        table = pa.table(
            {
                KEY_GROUP: pa.array(kgs, pa.int32()),
                WHAT: pa.array(whats, pa.string()),
                KEY: pa.array(keys, pa.binary()),
                VALUE: pa.array(values, pa.binary()),
                TIME: pa.array(times, pa.int64()),
            }
        )
        return OperatorSnapshot(inline={"watermark": self.watermark}, keyed=table)

    def restore(self, state: OperatorSnapshot) -> None:
        import pickle

        self.watermark = int((state.inline or {}).get("watermark", MIN_WATERMARK))
        table = state.keyed
        self.key_groups = {}
        if table is None or table.num_rows == 0:
            self.store.restore(iter(()))
            self.timers.restore(())
            return
        rows = table.to_pylist()
        entries: list[tuple[StateDescriptor, Hashable, Any, int | None]] = []
        timers: list[tuple[str, int, Hashable]] = []
        for row in rows:
            key = pickle.loads(row[KEY])
            self.key_groups[key] = row[KEY_GROUP]
            what: str = row[WHAT]
            if what.startswith(TIMER_PREFIX):
                timers.append((what[len(TIMER_PREFIX) :], row[TIME], key))
                continue
            kind, ttl, name = what[len(STATE_PREFIX) :].split(":", 2)
            entries.append(
                (StateDescriptor(name, kind, int(ttl) if ttl else None), key, pickle.loads(row[VALUE]), row[TIME])
            )
        self.store.restore(iter(entries))
        self.timers.restore(timers)


class ProcessContext:
    """What the user's function gets as `ctx`: state and timers of the current key."""

    def __init__(self, op: KeyedProcess) -> None:
        self._op = op
        self.current_key: Any = None
        self.timer_domain: TimeDomain | None = None  # in on_timer: which kind of timer fired

    def _key(self) -> Hashable:
        if self.current_key is None:
            raise RuntimeError("keyed state and timers are only available inside process() and on_timer()")
        key: Hashable = self.current_key
        return key

    # state
    def value_state(self, name: str, ttl_ms: int | None = None) -> ValueState:
        return ValueState(self, self._op.store.declare(name, "value", ttl_ms))

    def list_state(self, name: str, ttl_ms: int | None = None) -> ListState:
        return ListState(self, self._op.store.declare(name, "list", ttl_ms))

    def map_state(self, name: str, ttl_ms: int | None = None) -> MapState:
        return MapState(self, self._op.store.declare(name, "map", ttl_ms))

    # timers
    def register_event_time_timer(self, timestamp: int) -> None:
        self._op.timers.register(TimeDomain.EVENT_TIME, self._key(), int(timestamp))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._op.timers.register(TimeDomain.PROCESSING_TIME, self._key(), int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._op.timers.delete(TimeDomain.EVENT_TIME, self._key(), int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._op.timers.delete(TimeDomain.PROCESSING_TIME, self._key(), int(timestamp))

    @property
    def current_watermark(self) -> int | None:
        """The operator's input watermark (ms), None before the first."""
        return None if self._op.watermark == MIN_WATERMARK else self._op.watermark

    @property
    def current_processing_time(self) -> int:
        return _now_ms()


class _View:
    def __init__(self, ctx: ProcessContext, descriptor: StateDescriptor) -> None:
        self._ctx, self._store, self._name = ctx, ctx._op.store, descriptor.name

    def _get(self) -> Any:
        return self._store.get(self._name, self._ctx._key(), _now_ms())

    def _put(self, value: Any) -> None:
        self._store.put(self._name, self._ctx._key(), value, _now_ms())

    def clear(self) -> None:
        self._store.clear(self._name, self._ctx._key())


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
