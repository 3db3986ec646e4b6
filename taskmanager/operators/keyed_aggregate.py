"""Running keyed aggregates with state owned by the runtime.

Input batches arrive hash-partitioned by key group and already
pre-aggregated by the producers (a combiner, `PartialAggregates`: per key, the
batch's partial count/sum/min/max, and (sum, count) for an avg). This
operator merges the partials of a batch (Arrow group_by over every key
column, in C++), then folds them into its keyed state and emits the new value
of every key that changed: an update stream. Output: every key column in key
order, then one column per aggregate, named as the aggregate's output (see
sluice/api/datastream.py).

BATCH mode (`OperatorContext.batch`): the same state is folded, but nothing is
emitted per batch; at the end of the input (`end_input`) every key's final
value goes out once, one row per key, with the columns of the update stream.

State: key -> (key_group, (partial, ...)) in the job's state backend
(taskmanager/state/backend.py: memory or rocksdb), one partial per aggregate and two for
an avg (its sum and its count, so a mean is exact across the shuffle and a
restore). A one-column key is the plain value, a composite key the tuple of
its columns' values. It is partitioned by key group (sluice/key_groups.py) so
that snapshots can be written per key-group range, and restored at another
parallelism. A rocksdb snapshot is a RocksDB checkpoint (taskmanager/state/rocksdb_backend.py);
a memory snapshot is an Arrow table: one column per key column (named
as the key), `KEY_GROUP`, then one column per partial, named as the
aggregate's output, with `__count_<output>` after an avg's sum. A
one-column key without avg therefore snapshots exactly as before composite
keys and avg existed.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Self

import pyarrow as pa

from sluice.graph import OperatorKind, aggregate_keys
from sluice.key_groups import KEY_GROUP
from taskmanager.network.combiner import ROWS
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch
from taskmanager.state import backend as state_backend
from taskmanager.state import rocksdb_backend
from taskmanager.state.backend import KeyedValues, NativeRestore, StateBackendConfig
from taskmanager.state.changelog import KeyedChangelog
from taskmanager.state.changelog_upload import ChainUpload
from taskmanager.state.memory_backend import MemoryKeyedValues
from taskmanager.state.rocksdb_backend import RocksDBKeyedValues
from taskmanager.state.snapshot_cache import SnapshotCache

__all__ = [
    "KEY_GROUP",
    "Aggs",
    "KeyedAggregate",
    "PartialAggregates",
    "avg_count_column",
    "combine",
    "combiner_columns",
    "partial_columns",
]

Aggs = dict[str, tuple[str, str]]  # output column -> (function, input column)
_MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max", "avg": "sum"}


def avg_count_column(out: str) -> str:
    """The partial (and state) column that holds the count of avg `out`; its sum is in `out`."""
    return f"__count_{out}"


def partial_columns(aggs: Aggs) -> list[tuple[str, str]]:
    """(column, how partials of it merge) for every partial a combiner sends, in order."""
    cols = []
    for out, (fn, _col) in aggs.items():
        cols.append((out, _MERGE[fn]))
        if fn == "avg":
            cols.append((avg_count_column(out), "sum"))
    return cols


def _fold(fn: str, old: Any, new: Any) -> Any:
    if old is None:
        return new
    if new is None:
        return old
    if fn in ("count", "sum"):
        return old + new
    return min(old, new) if fn == "min" else max(old, new)


Changes = tuple[list[Any], list[int], list[tuple[Any, ...]]]  # the keys put, their key groups, their new values


def _fold_batch(
    olds: Sequence[tuple[Any, ...] | None],
    keys: Sequence[Any],
    kgs: Sequence[int],
    partials: Sequence[Sequence[Any]],
    merges: Sequence[str],
) -> Changes:
    """The new values of the keys whose value a batch's partials change, from their values read
    in one call (`olds`: a native backend crosses into C++ once to read, once to write)."""
    width = len(merges)
    put_keys: list[Any] = []
    put_kgs: list[int] = []
    put_values: list[tuple[Any, ...]] = []
    for i, old in enumerate(olds):
        if old is None:  # a new key: an update even when every partial is null
            new = tuple(partials[j][i] for j in range(width))
        else:
            new = tuple(_fold(merges[j], old[j], partials[j][i]) for j in range(width))
            if new == old:
                continue
        put_keys.append(keys[i])
        put_kgs.append(kgs[i])
        put_values.append(new)
    return put_keys, put_kgs, put_values


def _grouped(table: pa.Table, keys: list[str], specs: list[Any]) -> tuple[list[Any], list[Any]]:
    """Arrow group_by: (the key columns, the aggregated columns in `specs` order), by position
    (two specs may produce the same name, and Arrow versions differ in where keys go)."""
    merged = table.group_by(keys, use_threads=False).aggregate(specs)
    n = len(keys)
    if merged.column_names[:n] == keys:
        return merged.columns[:n], merged.columns[n:]
    return merged.columns[-n:], merged.columns[:-n]


def _partials_by_aggregate(aggs: Aggs) -> list[tuple[list[str], str]]:
    """For each aggregate, in order: the names of its partial columns and its function."""
    out = []
    for name, (fn, _col) in aggs.items():
        out.append(([name, avg_count_column(name)] if fn == "avg" else [name], fn))
    return out


def combiner_columns(aggs: Aggs) -> list[str]:
    """The value columns the producer-side partial aggregation reads."""
    return sorted({col for fn, col in aggs.values() if fn != "count"})


def combine(table: pa.Table, keys: Sequence[str], aggs: Aggs) -> pa.Table:
    """Producer-side partial aggregation (a combiner) of one batch: one row per
    (key, key group) with the partials, named as `partial_columns`."""
    specs: list[Any] = []
    for fn, col in aggs.values():
        if fn == "count":
            specs.append(([], "count_all"))
        elif fn == "avg":
            specs += [(col, "sum"), (col, "count")]  # count: the non-null values, as SQL's AVG
        else:
            specs.append((col, fn))
    group = [*keys, KEY_GROUP]
    key_cols, agg_cols = _grouped(table, group, specs)
    names = [c for c, _m in partial_columns(aggs)]
    return pa.Table.from_arrays([*key_cols, *agg_cols], names=[*group, *names])


class PartialAggregates:
    """The combiner of a keyed aggregate: a producer's partials per key and batch."""

    def __init__(self, aggs: Aggs) -> None:
        self.aggs = aggs

    def columns(self) -> list[str]:
        return combiner_columns(self.aggs)

    def combine(self, table: pa.Table, keys: Sequence[str]) -> pa.Table:
        return combine(table, keys, self.aggs)

    def combine_in_spark(self, df: Any, keys: Sequence[str]) -> Any:
        """The same partials computed by Spark before the rows leave it (a BATCH writer's large
        batches: millions of rows become one per key and key group), plus `ROWS` (the rows
        each group folds, for the writer's counts). `df` has the keys, `KEY_GROUP` and the
        value columns; the partials come out with the types `combine` gives them."""
        from pyspark.sql import functions as F

        partials: list[Any] = []
        for (name, _merge), (fn, col) in zip(_partials_by_aggregate(self.aggs), self.aggs.values(), strict=True):
            if fn == "count":
                partials.append(F.count(F.lit(1)).alias(name[0]))
            elif fn == "avg":
                partials += [F.sum(col).alias(name[0]), F.count(col).alias(name[1])]
            else:
                partials.append(getattr(F, fn)(col).alias(name[0]))
        return df.groupBy(*keys, KEY_GROUP).agg(*partials, F.count(F.lit(1)).alias(ROWS))


class KeyedAggregate(Operator):
    def __init__(
        self,
        payload: Payload,
        name: str,
        batch: bool = False,
        engine: Any = None,
        backend: StateBackendConfig | None = None,
        tag: str = "",
    ) -> None:
        self.name = name
        self.keys: list[str] = aggregate_keys(payload)
        self.aggs: Aggs = dict(payload["aggs"])
        self.partials = partial_columns(self.aggs)
        self.backend = backend
        self.tag = tag
        # key (a value, or a tuple of several) -> (key group, (partial, ...)), in the job's state backend
        self.state: KeyedValues = state_backend.create(backend, tag)
        # memory backend: a checkpoint costs the changes. Incremental (the default): each writes the
        # rows changed since the last completed one (KeyedChangelog); else the last snapshot is kept
        # and patched with them, and written whole (SnapshotCache)
        memory = isinstance(self.state, MemoryKeyedValues)
        incremental = backend is None or backend.incremental
        self.changelog = KeyedChangelog(self.keys) if memory and incremental and not batch else None
        self.snapshots = SnapshotCache(self.keys) if memory and not incremental else None
        self.batch = batch  # BATCH: emit every key's final value once, at end_input
        self.engine = engine
        # the Arrow types of the key columns and partials, from the batches seen (for end_input's rows)
        self._key_types: list[pa.DataType | None] | None = None
        self._partial_types: list[pa.DataType | None] | None = None

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one class per kind
        return cls(payload, ctx.name, batch=ctx.batch, engine=ctx.engine, backend=ctx.state_backend, tag=ctx.tag)

    @classmethod
    def combiner_for(cls, payload: Payload) -> PartialAggregates:
        return PartialAggregates(dict(payload["aggs"]))

    def _key_list(self, columns: Sequence[Any]) -> list[Any]:
        if len(self.keys) == 1:
            return list(columns[0].to_pylist())
        return list(zip(*(c.to_pylist() for c in columns), strict=True))

    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        key_cols, merged = _grouped(table, [*self.keys, KEY_GROUP], [(c, m) for c, m in self.partials])
        nk = len(self.keys)
        keys = self._key_list(key_cols[:nk])
        kgs = key_cols[nk].to_pylist()
        partials = [c.to_pylist() for c in merged]
        self.engine = self.engine if self.engine is not None else batch.engine
        self._key_types = [c.type for c in key_cols[:nk]]
        self._partial_types = [c.type for c in merged]
        merges = [m for _c, m in self.partials]
        if isinstance(self.state, MemoryKeyedValues) and len(merges) == 1 and merges[0] in ("count", "sum"):
            # one pass over the dict, no call per key (MemoryKeyedValues.add_many)
            put_keys, put_kgs, put_values = self.state.add_many(keys, kgs, partials[0])
        else:
            put_keys, put_kgs, put_values = _fold_batch(self.state.get_many(keys, kgs), keys, kgs, partials, merges)
            if put_keys:
                self.state.put_many(put_keys, put_kgs, put_values)
        if not put_keys:
            return None
        changes = self.changelog if self.changelog is not None else self.snapshots
        tracking = changes is not None and changes.tracking
        if self.batch and not tracking:
            return None
        key_arrays = self._key_arrays(put_keys, self._key_types)
        partial_arrays = self._partial_arrays(put_values, self._partial_types)
        if tracking:  # the next checkpoint writes or patches with these rows (KeyedChangelog, SnapshotCache)
            assert changes is not None and isinstance(self.state, MemoryKeyedValues)
            changed = self._snapshot_columns(key_arrays, pa.array(put_kgs, pa.int32()), partial_arrays)
            changes.changed(changed, len(self.state))
        if self.batch:
            return None
        # an update stream: only keys whose value changed
        return Batch(batch.engine, table=self._rows(key_arrays, partial_arrays, put_values))

    def end_input(self) -> Batch | None:
        """BATCH: every key's final value, once (streaming: nothing, the updates went out)."""
        if not self.batch or not self.state:
            return None
        keys: list[Any] = []
        entries: list[tuple[Any, ...]] = []
        for key, _kg, values in self.state.items():
            keys.append(key)
            entries.append(values)
        key_arrays = self._key_arrays(keys, self._key_types)
        return Batch(
            self.engine, table=self._rows(key_arrays, self._partial_arrays(entries, self._partial_types), entries)
        )

    def _key_arrays(self, keys: Sequence[Any], types: Sequence[pa.DataType | None] | None) -> list[pa.Array]:
        """One array per key column of `keys` (of `types`: the last batch's; None after a restore
        without input: Arrow infers them)."""
        return _arrays(self._key_columns(keys), types)

    def _key_columns(self, keys: Sequence[Any]) -> list[Sequence[Any]]:
        """`keys` (values, or tuples for a composite key) as one sequence per key column."""
        if len(self.keys) == 1:
            return [keys]
        return [list(map(operator.itemgetter(i), keys)) for i in range(len(self.keys))]

    def _partial_columns(self, entries: Sequence[Sequence[Any]]) -> list[list[Any]]:
        """`entries` (tuples of partials) as one list per partial column."""
        return [list(map(operator.itemgetter(j), entries)) for j in range(len(self.partials))]

    def _partial_arrays(
        self, entries: Sequence[Sequence[Any]], types: Sequence[pa.DataType | None] | None
    ) -> list[pa.Array]:
        """One array per partial column of `entries` (types as in `_key_arrays`)."""
        return _arrays(self._partial_columns(entries), types)

    def _rows(self, key_arrays: list[pa.Array], partials: list[pa.Array], entries: Sequence[Sequence[Any]]) -> pa.Table:
        """The output rows: the key columns, then one column per aggregate (a partial's own array,
        an avg the mean of its sum and count, from `entries`)."""
        columns: dict[str, Any] = dict(zip(self.keys, key_arrays, strict=True))
        j = 0
        for out, (fn, _c) in self.aggs.items():
            if fn == "avg":
                columns[out] = pa.array([_mean(e[j], e[j + 1]) for e in entries], pa.float64())
                j += 2
            else:
                columns[out] = partials[j]
                j += 1
        return pa.table(columns)

    def _snapshot_columns(self, key_arrays: list[pa.Array], kgs: pa.Array, partials: list[pa.Array]) -> pa.Table:
        """A snapshot's table: the key columns, the key group, one column per partial."""
        columns: dict[str, Any] = dict(zip(self.keys, key_arrays, strict=True))
        columns[KEY_GROUP] = kgs
        for (col, _m), array in zip(self.partials, partials, strict=True):
            columns[col] = array
        return pa.table(columns)

    # -- checkpoints ------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if isinstance(self.state, RocksDBKeyedValues):  # a RocksDB checkpoint, uploaded by the task
            return OperatorSnapshot(native=self.state.snapshot(checkpoint_id))
        if self.changelog is not None:  # a chain of files, the new one uploaded by the task
            assert isinstance(self.state, MemoryKeyedValues)
            write = self.changelog.take(checkpoint_id, len(self.state), self._snapshot_rows)
            return OperatorSnapshot(native=ChainUpload(write, self.tag))
        return OperatorSnapshot(keyed=self.snapshot_table())

    def restore(self, state: OperatorSnapshot) -> None:
        self.restore_table(state.keyed)
        native = state.native
        if not isinstance(native, NativeRestore) or not native.handles:
            return
        if isinstance(self.state, RocksDBKeyedValues):
            self.state.restore(native.handles, native.fs, native.key_groups, native.owned)
            return
        # rocksdb state into the memory backend: read the key range, decoded
        wanted = set(native.owned) if native.owned is not None else None
        keys: list[Any] = []
        kgs: list[int] = []
        values: list[tuple[Any, ...]] = []
        for key, kg, value in rocksdb_backend.read_entries(
            native.handles, native.fs, native.key_groups, native.scratch
        ):
            if wanted is None or kg in wanted:
                keys.append(key)
                kgs.append(kg)
                values.append(value)
        self.state.put_many(keys, kgs, values)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.state.notify_checkpoint_complete(checkpoint_id)
        if self.changelog is not None:
            self.changelog.confirm(checkpoint_id)

    def dispose(self) -> None:
        self.state.close()

    def snapshot_table(self) -> pa.Table:
        """A consistent copy of the state as rows (taken on the task thread; written elsewhere).
        The memory backend's is the last one patched with the rows put since (SnapshotCache)."""
        if self.snapshots is None or not isinstance(self.state, MemoryKeyedValues):
            return self._snapshot_rows()
        return self.snapshots.take(self._snapshot_rows)

    def _snapshot_rows(self) -> pa.Table:
        """The snapshot rows of every key, with the types of the batches seen (when there were any)."""
        if isinstance(self.state, MemoryKeyedValues):  # column by column, no Python statement per key
            keys, (kgs, *values) = self.state.columns(1 + len(self.partials))
        else:
            keys, kgs, entries = [], [], []
            for key, kg, entry in self.state.items():
                keys.append(key)
                kgs.append(kg)
                entries.append(entry)
            values = self._partial_columns(entries)
        key_columns = self._key_columns(keys)
        try:
            key_arrays, partials = _arrays(key_columns, self._key_types), _arrays(values, self._partial_types)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):  # values of other batches' types
            key_arrays, partials = _arrays(key_columns, None), _arrays(values, None)
        return self._snapshot_columns(key_arrays, pa.array(kgs, pa.int32()), partials)

    def restore_table(self, table: pa.Table | None) -> None:
        self.state.clear()
        if self.snapshots is not None:
            self.snapshots.reset()
        if self.changelog is not None:
            self.changelog.reset()
        if table is None:
            return
        keys = self._key_list([table.column(k) for k in self.keys])
        kgs = table.column(KEY_GROUP).to_pylist()
        values = [table.column(col).to_pylist() for col, _m in self.partials]
        self.state.put_many(keys, kgs, [tuple(v[i] for v in values) for i in range(len(keys))])


def _arrays(columns: Sequence[Sequence[Any]], types: Sequence[pa.DataType | None] | None) -> list[pa.Array]:
    """One Arrow array per column of plain values (of `types`: None, or a None in it, lets Arrow infer)."""
    types = types or [None] * len(columns)
    return [pa.array(c, type=t) for c, t in zip(columns, types, strict=True)]


def _mean(total: Any, count: Any) -> float | None:
    if total is None or not count:
        return None
    return float(total) / count
