"""Running keyed aggregates with state owned by the runtime.

Input batches arrive hash-partitioned by key group and already
pre-aggregated by the producers (a combiner in Spark: per key, the batch's
partial count/sum/min/max). This operator merges the partials of a batch
(Arrow group_by, in C++), then folds them into its keyed state and emits the
new value of every key that changed: an update stream.

State: key -> [key_group, value per aggregate]. It is partitioned by key
group (sluice/key_groups.py) so that snapshots can be written per key-group
range, and restored at another parallelism.
"""

from __future__ import annotations

from typing import Any, Self

import pyarrow as pa

from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch

__all__ = ["KEY_GROUP", "Aggs", "KeyedAggregate", "PartialAggregates", "combine", "combiner_columns"]

Aggs = dict[str, tuple[str, str]]  # output column -> (function, input column)
_MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}


def _fold(fn: str, old: Any, new: Any) -> Any:
    if old is None:
        return new
    if new is None:
        return old
    if fn in ("count", "sum"):
        return old + new
    return min(old, new) if fn == "min" else max(old, new)


def combiner_columns(aggs: Aggs) -> list[str]:
    """The value columns the producer-side partial aggregation reads."""
    return sorted({col for fn, col in aggs.values() if fn != "count"})


def combine(table: pa.Table, key: str, aggs: Aggs) -> pa.Table:
    """Producer-side partial aggregation (a combiner) of one batch: one row per
    (key, key group) with the partial count/sum/min/max, named as the outputs."""
    specs, names = [], []
    for out, (fn, col) in aggs.items():
        specs.append(([], "count_all") if fn == "count" else (col, fn))
        names.append(out)
    merged = table.group_by([key, KEY_GROUP], use_threads=False).aggregate(specs)
    produced = [("count_all" if fn == "count" else f"{col}_{fn}") for fn, col in aggs.values()]
    return pa.table(
        {
            key: merged.column(key),
            KEY_GROUP: merged.column(KEY_GROUP),
            **{n: merged.column(p) for n, p in zip(names, produced, strict=True)},
        }
    )


class PartialAggregates:
    """The combiner of a keyed aggregate: a producer's partial count/sum/min/max per key and batch."""

    def __init__(self, aggs: Aggs) -> None:
        self.aggs = aggs

    def columns(self) -> list[str]:
        return combiner_columns(self.aggs)

    def combine(self, table: pa.Table, key: str) -> pa.Table:
        return combine(table, key, self.aggs)


class KeyedAggregate(Operator):
    def __init__(self, payload: Payload, name: str) -> None:
        self.name = name
        self.key: str = payload["key"]
        self.aggs: Aggs = dict(payload["aggs"])
        self.state: dict[Any, list[Any]] = {}

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one class per kind
        return cls(payload, ctx.name)

    @classmethod
    def combiner_for(cls, payload: Payload) -> PartialAggregates:
        return PartialAggregates(dict(payload["aggs"]))

    def process(self, batch: Batch) -> Batch | None:
        table = batch.table()
        if table.num_rows == 0:
            return None
        merged = table.group_by([self.key, KEY_GROUP]).aggregate(
            [(out, _MERGE[fn]) for out, (fn, _c) in self.aggs.items()]
        )
        keys = merged.column(self.key).to_pylist()
        kgs = merged.column(KEY_GROUP).to_pylist()
        partials = [merged.column(f"{out}_{_MERGE[fn]}").to_pylist() for out, (fn, _c) in self.aggs.items()]
        fns = [fn for fn, _c in self.aggs.values()]
        out_keys: list[Any] = []
        out_cols: list[list[Any]] = [[] for _ in self.aggs]
        state = self.state
        for i, key in enumerate(keys):
            entry = state.get(key)
            if entry is None:
                entry = state[key] = [kgs[i]] + [None] * len(fns)
                changed = True
            else:
                changed = False
            for j, fn in enumerate(fns):
                new = _fold(fn, entry[j + 1], partials[j][i])
                changed = changed or new != entry[j + 1]
                entry[j + 1] = new
            if changed:  # an update stream: only keys whose value changed
                out_keys.append(key)
                for j in range(len(fns)):
                    out_cols[j].append(entry[j + 1])
        if not out_keys:
            return None
        columns = {self.key: pa.array(out_keys, type=merged.column(self.key).type)}
        for j, out in enumerate(self.aggs):
            columns[out] = pa.array(out_cols[j], type=merged.column(f"{out}_{_MERGE[fns[j]]}").type)
        return Batch(batch.engine, table=pa.table(columns))

    # -- checkpoints ------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:  # noqa: ARG002 — keyed state is not per checkpoint
        return OperatorSnapshot(keyed=self.snapshot_table())

    def restore(self, state: OperatorSnapshot) -> None:
        self.restore_table(state.keyed)

    def snapshot_table(self) -> pa.Table:
        """A consistent copy of the state (taken on the task thread; written elsewhere)."""
        keys = list(self.state)
        entries = list(self.state.values())
        columns = {self.key: keys, KEY_GROUP: pa.array([e[0] for e in entries], pa.int32())}
        for j, out in enumerate(self.aggs):
            columns[out] = [e[j + 1] for e in entries]
        return pa.table(columns)

    def restore_table(self, table: pa.Table | None) -> None:
        self.state = {}
        if table is None:
            return
        keys = table.column(self.key).to_pylist()
        kgs = table.column(KEY_GROUP).to_pylist()
        values = [table.column(out).to_pylist() for out in self.aggs]
        for i, key in enumerate(keys):
            self.state[key] = [kgs[i]] + [v[i] for v in values]
