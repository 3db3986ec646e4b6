"""Broadcast state: `keyed.connect(rules.broadcast()).process(fn, output_schema=...)`
(docs/user-state.md).

A keyed process function (taskmanager/operators/keyed_process.py) with a second input: a
low-volume stream broadcast to every subtask. `fn.process_broadcast(rows, ctx)` is called
once per batch of that stream on every subtask and may change the broadcast state
(`ctx.broadcast_state(name)`, a dict per name); `fn.process(key, rows, ctx)` and
`fn.on_timer(key, ts, ctx)` read it (a read-only view) beside their keyed state and timers.
Every subtask sees the same broadcast rows, so every subtask's broadcast state is the same as
long as `process_broadcast` depends on its rows and the state only. Of one poll of the inputs,
the broadcast side's rows are handled first. As in Flink there is no order between the two
inputs otherwise: a job that must see every rule before an event waits for it, e.g. with an
event-time timer.

The broadcast state is part of each subtask's inline snapshot (cloudpickled); keyed state and
timers are snapshotted per key-group range as the keyed process function's.
"""

from __future__ import annotations

import base64
import dataclasses
import types
from typing import Any, Self

from sluice.graph import OperatorKind
from taskmanager.operators.base import OperatorContext, OperatorSnapshot, Payload
from taskmanager.operators.keyed_process import KeyedProcess, ProcessContext
from taskmanager.spark_engine import Batch

KEYED, BROADCAST = 0, 1  # input sides


class BroadcastProcess(KeyedProcess):
    two_inputs = True
    input_order = (BROADCAST, KEYED)

    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        super().__init__(payload, ctx)
        fn = payload["process"]
        self.broadcast_fn: Any = payload.get("process_broadcast") or getattr(fn, "process_broadcast", None)
        if not callable(self.broadcast_fn):
            raise TypeError(
                f"{self.name}: connect(...).process needs process_broadcast(rows, ctx) for the broadcast side"
            )
        self.left_input: str = payload["left"]
        self.broadcast: dict[str, dict[Any, Any]] = {}
        self.context: BroadcastContext = BroadcastContext(self)

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    def process_input(self, batch: Batch, side: int) -> Batch | None:
        if side == KEYED:
            return self.process(batch)
        table = batch.table()
        if table.num_rows == 0:
            return None
        ctx = self.context
        ctx.writable = True
        try:
            self.python_calls += 1
            got = self.broadcast_fn(table.to_pandas(), ctx)
        finally:
            ctx.writable = False
        return self._batch([got]) if got is not None and len(got) else None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        import cloudpickle

        snap = super().snapshot(checkpoint_id)
        inline = dict(snap.inline or {})
        inline["broadcast"] = base64.b64encode(cloudpickle.dumps(self.broadcast)).decode("ascii")
        return dataclasses.replace(snap, inline=inline)  # the keyed state as it is (a table, or RocksDB's)

    def restore(self, state: OperatorSnapshot) -> None:
        import pickle

        super().restore(state)
        encoded = (state.inline or {}).get("broadcast")
        self.broadcast = pickle.loads(base64.b64decode(encoded)) if encoded else {}


class BroadcastContext(ProcessContext):
    def __init__(self, op: BroadcastProcess) -> None:
        super().__init__(op)
        self._broadcast_op = op
        self.writable = False  # in process_broadcast only

    def broadcast_state(self, name: str) -> Any:
        """The broadcast state `name`: a dict in process_broadcast, a read-only view elsewhere."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a broadcast state needs a non-empty name, got {name!r}")
        state = self._broadcast_op.broadcast.setdefault(name, {})
        return state if self.writable else types.MappingProxyType(state)
