"""assign_timestamps_and_watermarks: where a stream's event time starts (docs/event-time.md).

The operator reads the strategy's timestamp column and runs the subtask's
`WatermarkGenerator` (sluice/eventtime/watermarks.py). It adds no Spark call:
when the chain's outputs materialize a batch they take the timestamp column
along, drop rows whose timestamp is null (counted with the null keys) and
report the batch's largest timestamp (taskmanager/network/record_writer.py);
the task feeds that to `on_batch`. A batch that is already an Arrow table, or
a chain without outputs after this operator, is read here instead. Upstream
watermarks stop here: from this operator on, the stream's watermarks are its
generator's (as in Flink). The generator's progress is the operator's inline
state, so that a restored task never sends an older watermark.

Timestamps are epoch milliseconds: a bigint column as it is, a timestamp or
date column converted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

import pyarrow as pa
import pyarrow.compute as pc

from sluice.eventtime import MIN_WATERMARK
from sluice.eventtime.timestamps import timestamps_ms
from sluice.eventtime.watermarks import WatermarkAction, WatermarkGenerator, WatermarkStrategy
from sluice.graph import OperatorKind
from sluice.v1.common_pb2 import TaskCounters
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch


class TimestampAssigner(Operator):
    uses_event_time = True
    generates_watermarks = True

    def __init__(self, payload: Payload, ctx: OperatorContext, now_ms: int) -> None:
        self.name = ctx.name
        self.strategy = WatermarkStrategy.from_config(payload["strategy"])
        self.column: str = self.strategy.timestamp_column or ""
        self.generator = WatermarkGenerator(self.strategy, now_ms)
        self.deferred = False  # the chain's outputs observe the timestamps (set by the task)
        self.max_timestamp: int | None = None  # of the batches read here since the last take
        self.null_timestamps_dropped = 0

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        import time

        return cls(payload, ctx, int(time.time() * 1000))

    def process(self, batch: Batch) -> Batch | None:
        if self.deferred and not batch.is_table:
            return batch
        table = batch.table()
        if self.column not in table.column_names:
            raise KeyError(
                f"{self.name}: the timestamp column {self.column!r} is not in the stream "
                f"(columns: {', '.join(table.column_names)})"
            )
        ts = timestamps_ms(table.column(self.column))
        if ts.null_count:
            self.null_timestamps_dropped += ts.null_count
            keep = pc.is_valid(ts)
            table, ts = table.filter(keep), ts.filter(keep)
        high = pc.max(ts).as_py() if len(ts) else None
        if high is not None and (self.max_timestamp is None or high > self.max_timestamp):
            self.max_timestamp = high
        return Batch(batch.engine, table=table) if table.num_rows else None

    def wire(self, has_outputs: bool, late_output: Callable[[pa.Table], None] | None) -> None:  # noqa: ARG002 — no late rows here
        self.deferred = has_outputs  # the outputs read the timestamps as they materialize

    def end_input(self) -> Batch | None:
        self.generator.end_of_input()  # the task sends the final watermark itself
        return None

    def add_counters(self, counters: TaskCounters) -> None:
        counters.records_dropped += self.null_timestamps_dropped

    def after_batch(self, observed: int | None, now_ms: int) -> list[WatermarkAction]:
        """A batch went through the chain; `observed` is the largest timestamp its outputs saw."""
        high = self.max_timestamp
        self.max_timestamp = None
        if observed is not None and (high is None or observed > high):
            high = observed
        return self.generator.on_batch(high, now_ms)

    def idle_check(self, now_ms: int, has_pending_input: Callable[[], bool]) -> list[WatermarkAction]:
        """No batch now: the generator says when the subtask has been without input long enough.
        `has_pending_input` (the source's: it may list a directory or ask for splits) is asked
        only when the idleness timeout has passed (docs/event-time.md, "Idleness")."""
        pending = self.generator.idle_due(now_ms) and has_pending_input()
        return self.generator.on_tick(now_ms, pending)

    @property
    def current_watermark(self) -> int | None:
        return None if self.generator.emitted == MIN_WATERMARK else self.generator.emitted

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:  # noqa: ARG002 — not per checkpoint
        return OperatorSnapshot(inline=self.generator.snapshot())

    def restore(self, state: OperatorSnapshot) -> None:
        if state.inline:
            self.generator.restore(state.inline)
