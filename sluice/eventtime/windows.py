"""Window assigners and the arithmetic behind them (docs/event-time.md).

A window is `[start, end)` in milliseconds, end exclusive; its last timestamp is `end - 1`, and
with allowed lateness 0 it fires once the watermark reaches `end - 1`.

Tumbling and sliding windows are built from *panes*: aligned intervals of `pane_ms` (the size
for tumbling windows, `gcd(size, slide)` for sliding ones). A record is folded into its one
pane; a sliding window is the union of `size / pane` consecutive panes, so a record is
aggregated once, not `size / slide` times. Session windows start as `[ts, ts + gap)` per record
and merge with every session of the same key they overlap or touch.

Assigners are plain data: `to_config()` / `window_from_config()` carry them in a job graph.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # a job file that builds windows does not load numpy; the TaskManager does
    import numpy as np


def _positive_ms(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number of milliseconds, not {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be > 0 ms, got {value}")
    return value


def _offset(offset_ms: Any, period_ms: int, what: str) -> int:
    if isinstance(offset_ms, bool) or not isinstance(offset_ms, int):
        raise TypeError(f"{what} offset must be a whole number of milliseconds, not {offset_ms!r}")
    if not -period_ms < offset_ms < period_ms:
        raise ValueError(f"{what} offset must lie strictly between -{period_ms} and {period_ms} ms, got {offset_ms}")
    return offset_ms % period_ms


def pane_starts(timestamps: np.ndarray, pane_ms: int, offset_ms: int = 0) -> np.ndarray:
    """The start of each timestamp's pane (vectorized; negative timestamps too)."""
    import numpy as np

    ts = np.asarray(timestamps, dtype=np.int64)
    return ts - np.mod(ts - offset_ms, pane_ms)


@dataclasses.dataclass(frozen=True)
class PaneWindows:
    """Tumbling or sliding windows of `size_ms` every `slide_ms` (tumbling: slide = size)."""

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    kind: ClassVar[str] = ""
    processing_time: ClassVar[bool] = False

    @property
    def pane_ms(self) -> int:
        return math.gcd(self.size_ms, self.slide_ms)

    @property
    def panes_per_window(self) -> int:
        return self.size_ms // self.pane_ms

    def pane_starts(self, timestamps: np.ndarray) -> np.ndarray:
        return pane_starts(timestamps, self.pane_ms, self.offset_ms)

    def window_starts(self, pane_start: int) -> list[int]:
        """The starts of every window holding the pane that starts at `pane_start`, oldest first."""
        last = pane_start - (pane_start - self.offset_ms) % self.slide_ms  # the newest window holding it
        first = last - ((self.size_ms - 1) // self.slide_ms) * self.slide_ms
        return [s for s in range(first, last + 1, self.slide_ms) if s + self.size_ms > pane_start]

    def window_panes(self, window_start: int) -> list[int]:
        """The pane starts a window is made of."""
        return list(range(window_start, window_start + self.size_ms, self.pane_ms))

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "size_ms": self.size_ms, "slide_ms": self.slide_ms, "offset_ms": self.offset_ms}


@dataclasses.dataclass(frozen=True)
class TumblingEventTimeWindows(PaneWindows):
    kind: ClassVar[str] = "tumbling"

    @classmethod
    def of(cls, size_ms: int, offset_ms: int = 0) -> TumblingEventTimeWindows:
        """Windows of `size_ms`, back to back: each record in exactly one."""
        size = _positive_ms(size_ms, "the window size")
        return cls(size, size, _offset(offset_ms, size, "the window"))


@dataclasses.dataclass(frozen=True)
class SlidingEventTimeWindows(PaneWindows):
    kind: ClassVar[str] = "sliding"

    @classmethod
    def of(cls, size_ms: int, slide_ms: int, offset_ms: int = 0) -> SlidingEventTimeWindows:
        """Windows of `size_ms` starting every `slide_ms`: each record in size/slide of them."""
        size = _positive_ms(size_ms, "the window size")
        slide = _positive_ms(slide_ms, "the window slide")
        if slide > size:
            raise ValueError(
                f"the slide ({slide} ms) is larger than the window size ({size} ms): records between windows "
                "would belong to none; use a slide <= the size (equal: tumbling windows)"
            )
        return cls(size, slide, _offset(offset_ms, slide, "the window"))


@dataclasses.dataclass(frozen=True)
class TumblingProcessingTimeWindows(PaneWindows):
    """Tumbling windows over the time a task processes each record (its clock, not the data's)."""

    kind: ClassVar[str] = "tumbling-processing-time"
    processing_time: ClassVar[bool] = True

    @classmethod
    def of(cls, size_ms: int, offset_ms: int = 0) -> TumblingProcessingTimeWindows:
        size = _positive_ms(size_ms, "the window size")
        return cls(size, size, _offset(offset_ms, size, "the window"))


@dataclasses.dataclass(frozen=True)
class EventTimeSessionWindows:
    """Per key, records closer than `gap_ms` to each other form one session [first, last + gap)."""

    gap_ms: int
    kind: ClassVar[str] = "session"
    processing_time: ClassVar[bool] = False

    @classmethod
    def with_gap(cls, gap_ms: int) -> EventTimeSessionWindows:
        return cls(_positive_ms(gap_ms, "the session gap"))

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "gap_ms": self.gap_ms}


WindowAssigner = (
    TumblingEventTimeWindows | SlidingEventTimeWindows | TumblingProcessingTimeWindows | EventTimeSessionWindows
)
ASSIGNERS: dict[str, type] = {
    a.kind: a
    for a in (TumblingEventTimeWindows, SlidingEventTimeWindows, TumblingProcessingTimeWindows, EventTimeSessionWindows)
}


def _field(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise ValueError(f"the window configuration {config!r} has no {key!r}")
    return config[key]


def window_from_config(config: dict[str, Any]) -> WindowAssigner:
    """The assigner `to_config()` described; a ValueError naming what is wrong."""
    kind = config.get("kind")
    offset = config.get("offset_ms", 0)
    if kind == "session":
        return EventTimeSessionWindows.with_gap(_field(config, "gap_ms"))
    if kind == "sliding":
        return SlidingEventTimeWindows.of(_field(config, "size_ms"), _field(config, "slide_ms"), offset)
    if kind == "tumbling":
        return TumblingEventTimeWindows.of(_field(config, "size_ms"), offset)
    if kind == "tumbling-processing-time":
        return TumblingProcessingTimeWindows.of(_field(config, "size_ms"), offset)
    raise ValueError(f"unknown window kind {kind!r}; expected one of {', '.join(sorted(ASSIGNERS))}")


# -- sessions --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MergedSession:
    """One session after merging: its interval, the indices of the earlier sessions it absorbed
    and the positions of the new records it holds."""

    start: int
    end: int
    sessions: tuple[int, ...]
    records: tuple[int, ...]


def merge_sessions(sessions: Sequence[tuple[int, int]], timestamps: Sequence[int], gap_ms: int) -> list[MergedSession]:
    """One key's sessions (`[start, end)`, any order) merged with new records at `timestamps`:
    each record opens `[ts, ts + gap)`, and intervals that overlap or touch become one session.
    Returns every resulting session that absorbed a record or another session, plus the
    untouched ones, sorted by start."""
    items: list[tuple[int, int, int, int]] = []  # (start, end, 0=session/1=record, index)
    items += [(s, e, 0, i) for i, (s, e) in enumerate(sessions)]
    items += [(int(t), int(t) + gap_ms, 1, i) for i, t in enumerate(timestamps)]
    items.sort()
    out: list[MergedSession] = []
    cur_start = cur_end = 0
    olds: list[int] = []
    recs: list[int] = []
    for start, end, what, index in items:
        if olds or recs:
            if start <= cur_end:  # overlaps or touches the current session
                cur_end = max(cur_end, end)
                (olds if what == 0 else recs).append(index)
                continue
            out.append(MergedSession(cur_start, cur_end, tuple(olds), tuple(recs)))
        cur_start, cur_end = start, end
        olds, recs = ([index], []) if what == 0 else ([], [index])
    if olds or recs:
        out.append(MergedSession(cur_start, cur_end, tuple(olds), tuple(recs)))
    return out
