"""Windowed join of two keyed streams (docs/user-state.md):
`a.join(b).where(col).equal_to(col).window(TumblingEventTimeWindows.of(ms))` emits every pair
of a left and a right row with the same key that fall in the same window, once per window they
share, with the window's `window_start` and `window_end`.

It is the interval join's operator (taskmanager/operators/interval_join.py) with another
pairing rule: both sides' rows are spread over their windows (one for tumbling windows,
size / slide for sliding ones) and merged on (key, window start); a pair is emitted when its
later row arrives, for the windows the watermark has not passed yet — the pairs a join that
fires each window at its end would emit, sooner. A row is late when the watermark passed all
its windows, and a buffered row is dropped once it passed its newest window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import numpy as np
import pyarrow as pa

from sluice.eventtime.timestamps import timestamps_ms
from sluice.eventtime.windows import PaneWindows, window_from_config
from sluice.graph import OperatorKind
from sluice.key_groups import KEY_GROUP
from taskmanager.operators.base import OperatorContext, Payload
from taskmanager.operators.interval_join import IntervalJoin

if TYPE_CHECKING:
    import pandas as pd  # imported where a join runs: a TaskManager without window joins starts ~0.3 s sooner

WINDOW_START, WINDOW_END = "window_start", "window_end"


class WindowJoin(IntervalJoin):
    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        super().__init__({**payload, "lower_ms": 0, "upper_ms": 0}, ctx)
        assigner = window_from_config(payload["window"])
        if not isinstance(assigner, PaneWindows) or assigner.processing_time:
            raise ValueError(f"{self.name}: a windowed join takes tumbling or sliding event-time windows")
        self.assigner = assigner
        self.right_keys: list[str] = list(payload.get("right_keys") or self.keys)

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    def _newest_end(self, ts: np.ndarray) -> np.ndarray:
        a = self.assigner
        return ts - np.mod(ts - a.offset_ms, a.slide_ms) + a.size_ms

    def _on_time(self, ts: pa.Array) -> pa.Array:
        ends = self._newest_end(ts.to_numpy(zero_copy_only=False).astype(np.int64))
        return pa.array(ends - 1 > self.watermark)

    def _alive(self, side: int, ts: pa.Array, watermark: int) -> pa.Array:  # noqa: ARG002 — same rule both sides
        ends = self._newest_end(ts.to_numpy(zero_copy_only=False).astype(np.int64))
        return pa.array(ends - 1 > watermark)

    def _spread(self, frame: pd.DataFrame, ts: np.ndarray) -> pd.DataFrame:
        """Each row once per window holding it, with that window's start."""
        import pandas as pd

        a = self.assigner
        newest = ts - np.mod(ts - a.offset_ms, a.slide_ms)
        count = -(-a.size_ms // a.slide_ms)
        parts = []
        for k in range(count):
            start = newest - k * a.slide_ms
            inside = start + a.size_ms > ts
            part = frame[inside].copy()
            part[WINDOW_START] = start[inside]
            parts.append(part)
        return pd.concat(parts, ignore_index=True)

    def _join(self, new: pa.Table, buffered: pa.Table, side: int) -> pa.Table | None:
        left, right = (new, buffered) if side == 0 else (buffered, new)
        lf = left.drop_columns([KEY_GROUP]).to_pandas()
        rf = right.drop_columns([KEY_GROUP]).to_pandas()
        rf = rf.rename(columns=dict(zip(self.right_keys, self.keys, strict=True)))  # where(...) / equal_to(...)
        rename = {c: c + self.suffix for c in rf.columns if c in lf.columns and c not in self.keys}
        rf = rf.rename(columns=rename)
        lts = timestamps_ms(left.column(self.ts[0])).to_numpy(zero_copy_only=False).astype(np.int64)
        rts = timestamps_ms(right.column(self.ts[1])).to_numpy(zero_copy_only=False).astype(np.int64)
        pairs = self._spread(lf, lts).merge(self._spread(rf, rts), on=[*self.keys, WINDOW_START], how="inner")
        pairs = pairs[pairs[WINDOW_START] + self.assigner.size_ms - 1 > self.watermark]  # not passed yet
        if pairs.empty:
            return None
        pairs[WINDOW_END] = pairs[WINDOW_START] + self.assigner.size_ms
        front = [*self.keys, WINDOW_START, WINDOW_END]
        columns = front + [c for c in pairs.columns if c not in front]
        return pa.Table.from_pandas(pairs[columns], preserve_index=False)
