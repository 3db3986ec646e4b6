"""Watermarks: what a job asks for, what a source subtask emits, what a task's inputs add up to.

A watermark `w` says: no record with a timestamp <= w is expected any more on this stream. It
travels on the data exchange as its own message between batches, like a barrier. Three pieces,
all pure (time is an argument, in ms):

- `WatermarkStrategy` — the job's choice, as plain data (`to_config`/`from_config`), built with
  `for_bounded_out_of_orderness(ms)` or `for_monotonous_timestamps()`, then
  `.with_timestamp_column(col)` and optionally `.with_idleness(ms)`.
- `WatermarkGenerator` — one per source subtask: fed the largest timestamp of every batch, it
  says which watermark to send (max timestamp − out-of-orderness − 1, never going back) and
  when the subtask has been idle long enough to say so instead. Idle means no input available
  (docs/event-time.md, "Idleness"): whether the source has input pending is one of its inputs,
  and a subtask with pending input is never idle, however long it emits nothing.
- `WatermarkValve` — one per task with input channels: each channel's watermark and idleness in,
  the task's input watermark out: the minimum over the channels that are active and have not
  ended. An idle channel does not hold it back; a channel that becomes active again behind the
  current watermark counts again only once it has caught up, so the watermark never goes back.
  When every channel is idle the task is idle too, and says so downstream.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeAlias

from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK

USAGE = (
    "use WatermarkStrategy.for_bounded_out_of_orderness(ms).with_timestamp_column(col) "
    "or WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column(col)"
)


def _non_negative_ms(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number of milliseconds, not {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0 ms, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class WatermarkStrategy:
    """How a stream's event time is read and how far its watermark trails the largest timestamp
    seen. Immutable: each `with_*` returns a new strategy."""

    out_of_orderness_ms: int = 0
    timestamp_column: str | None = None
    idleness_ms: int | None = None  # no input available this long: the source subtask is idle

    @classmethod
    def for_bounded_out_of_orderness(cls, max_out_of_orderness_ms: int) -> WatermarkStrategy:
        """Records may arrive up to `max_out_of_orderness_ms` behind the largest timestamp seen."""
        return cls(_non_negative_ms(max_out_of_orderness_ms, "the out-of-orderness bound"))

    @classmethod
    def for_monotonous_timestamps(cls) -> WatermarkStrategy:
        """Timestamps never decrease within a source subtask."""
        return cls(0)

    def with_timestamp_column(self, column: str) -> WatermarkStrategy:
        """The column holding each record's event time: epoch milliseconds (a bigint) or a
        timestamp."""
        if not isinstance(column, str) or not column.strip():
            raise ValueError(f"with_timestamp_column() needs a column name, got {column!r}")
        return dataclasses.replace(self, timestamp_column=column)

    def with_idleness(self, idleness_ms: int) -> WatermarkStrategy:
        """A source subtask without input for `idleness_ms` (nothing read, nothing left to read:
        no unread file or split, none in progress) is idle: it stops holding back the watermark
        downstream until its next record."""
        if _non_negative_ms(idleness_ms, "the idleness timeout") == 0:
            raise ValueError("the idleness timeout must be > 0 ms")
        return dataclasses.replace(self, idleness_ms=idleness_ms)

    def check(self) -> WatermarkStrategy:
        """This strategy, if complete; a ValueError saying what is missing otherwise."""
        if self.timestamp_column is None:
            raise ValueError(f"the watermark strategy has no timestamp column; {USAGE}")
        return self

    def to_config(self) -> dict[str, Any]:
        return {
            "out_of_orderness_ms": self.out_of_orderness_ms,
            "timestamp_column": self.timestamp_column,
            "idleness_ms": self.idleness_ms,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> WatermarkStrategy:
        strategy = cls.for_bounded_out_of_orderness(config.get("out_of_orderness_ms", 0))
        strategy = strategy.with_timestamp_column(config.get("timestamp_column") or "")
        idleness = config.get("idleness_ms")
        return strategy.with_idleness(idleness) if idleness is not None else strategy


# -- a source subtask's generator --------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EmitWatermark:
    timestamp: int


@dataclasses.dataclass(frozen=True)
class EmitIdle:
    """The stream is idle (no records, no watermark progress) until its next record or watermark."""


@dataclasses.dataclass(frozen=True)
class EmitActive:
    """The stream, idle until now, is active again."""


WatermarkAction: TypeAlias = EmitWatermark | EmitIdle | EmitActive


class WatermarkGenerator:
    """Bounded out-of-orderness for one source subtask. `on_batch(max_ts, now)` after each batch,
    `on_tick(now, has_pending_input)` while there are none; `end_of_input()` at the end of
    bounded input. Each returns what to send downstream (at most one action besides EmitActive):
    a watermark only when it advances.

    Idleness means no input available, not "no rows emitted for a while" (docs/event-time.md,
    "Idleness"): a batch, or a tick with input pending (a file or split assigned and not read
    yet, or one in progress), is input at `now`; the subtask is idle once `idleness_ms` passed
    since its last input. While a batch runs the task does not tick, so a long batch never makes
    its subtask idle. `idle_due(now)` says when the answer to "is input pending?" matters, so
    that the task asks its source (which may list a directory) only then."""

    def __init__(self, strategy: WatermarkStrategy, now_ms: int):
        self.out_of_orderness = strategy.out_of_orderness_ms
        self.idleness = strategy.idleness_ms
        self.max_timestamp: int | None = None
        self.emitted = MIN_WATERMARK
        self.idle = False
        self.last_input_ms = now_ms  # the last batch, or the last tick with input pending

    def current(self) -> int:
        if self.max_timestamp is None:
            return MIN_WATERMARK
        return max(MIN_WATERMARK, self.max_timestamp - self.out_of_orderness - 1)

    def _input_at(self, now_ms: int) -> list[WatermarkAction]:
        self.last_input_ms = max(self.last_input_ms, now_ms)
        if self.idle:
            self.idle = False
            return [EmitActive()]
        return []

    def on_batch(self, max_timestamp: int | None, now_ms: int) -> list[WatermarkAction]:
        """A batch was read and went through the chain; `max_timestamp` is its largest timestamp
        (None: no row of it had one). Either way the subtask had input."""
        out = self._input_at(now_ms)
        if max_timestamp is not None and (self.max_timestamp is None or max_timestamp > self.max_timestamp):
            self.max_timestamp = max_timestamp
        return out + self._advance()

    def idle_due(self, now_ms: int) -> bool:
        """Whether `on_tick(now_ms, False)` would make the subtask idle: ask the source whether it
        has input pending only when this is True."""
        return self.idleness is not None and not self.idle and now_ms - self.last_input_ms >= self.idleness

    def on_tick(self, now_ms: int, has_pending_input: bool) -> list[WatermarkAction]:
        """No batch now. `has_pending_input`: the source has input it has not read yet (it is not
        idle then, and becomes active again if it was); without any, the subtask goes idle once
        the idleness timeout passed since its last input."""
        if has_pending_input:
            return self._input_at(now_ms)
        if self.idle_due(now_ms):
            self.idle = True
            return [EmitIdle()]
        return []

    def end_of_input(self) -> list[WatermarkAction]:
        """Bounded input ended: every window downstream may fire."""
        if self.emitted == MAX_WATERMARK:
            return []
        self.emitted = MAX_WATERMARK
        self.idle = False
        return [EmitWatermark(MAX_WATERMARK)]

    def _advance(self) -> list[WatermarkAction]:
        wm = self.current()
        if wm > self.emitted:
            self.emitted = wm
            return [EmitWatermark(wm)]
        return []

    # a snapshot: the watermark must not go back after a restore
    def snapshot(self) -> dict[str, Any]:
        return {"max_timestamp": self.max_timestamp, "emitted": self.emitted}

    def restore(self, state: dict[str, Any]) -> None:
        self.max_timestamp = state.get("max_timestamp")
        self.emitted = int(state.get("emitted", MIN_WATERMARK))


# -- a task's input channels --------------------------------------------------------------------
@dataclasses.dataclass
class _Channel:
    watermark: int = MIN_WATERMARK
    idle: bool = False
    aligned: bool = True  # counts toward the minimum (False: active again, still behind)
    ended: bool = False


class WatermarkValve:
    """The input watermark of a task with `channels` input channels (numbered across its input
    gates). Each method takes one event from a channel and returns what the task forwards: its
    new input watermark (only when it advances) or that it became idle / active."""

    def __init__(self, channels: int):
        if channels < 1:
            raise ValueError("a valve needs at least one input channel")
        self._channels = [_Channel() for _ in range(channels)]
        self.watermark = MIN_WATERMARK
        self.idle = False

    def _channel(self, channel: int) -> _Channel:
        if not 0 <= channel < len(self._channels):
            raise ValueError(f"channel {channel} out of range 0..{len(self._channels) - 1}")
        ch = self._channels[channel]
        if ch.ended:
            raise ValueError(f"channel {channel} already ended")
        return ch

    def on_watermark(self, channel: int, timestamp: int) -> list[WatermarkAction]:
        ch = self._channel(channel)
        out: list[WatermarkAction] = []
        if ch.idle:  # a watermark means the channel is active again
            ch.idle = False
            ch.aligned = False
        if timestamp > ch.watermark:
            ch.watermark = timestamp
        if not ch.aligned and ch.watermark >= self.watermark:
            ch.aligned = True
        if self.idle:
            self.idle = False
            out.append(EmitActive())
        return out + self._advance()

    def on_idle(self, channel: int) -> list[WatermarkAction]:
        ch = self._channel(channel)
        if ch.idle:
            return []
        ch.idle = True
        ch.aligned = False
        return self._after_removal()

    def on_active(self, channel: int) -> list[WatermarkAction]:
        """Records arrived on an idle channel (before any watermark from it)."""
        ch = self._channel(channel)
        out: list[WatermarkAction] = []
        if ch.idle:
            ch.idle = False
            ch.aligned = ch.watermark >= self.watermark
        if self.idle:
            self.idle = False
            out.append(EmitActive())
        return out

    def on_end(self, channel: int) -> list[WatermarkAction]:
        """The channel ended (its producer sent the final watermark first, if it had one)."""
        ch = self._channel(channel)
        ch.ended = True
        ch.aligned = False
        return self._after_removal()

    def _after_removal(self) -> list[WatermarkAction]:
        live = [c for c in self._channels if not c.ended]
        if live and all(c.idle for c in live):
            if self.idle:
                return []
            self.idle = True
            return [EmitIdle()]
        return self._advance()

    def _advance(self) -> list[WatermarkAction]:
        counted = [c.watermark for c in self._channels if c.aligned and not c.idle and not c.ended]
        if not counted:
            return []
        wm = min(counted)
        if wm > self.watermark:
            self.watermark = wm
            for c in self._channels:  # channels that caught up count again
                if not c.ended and not c.idle and not c.aligned and c.watermark >= wm:
                    c.aligned = True
            return [EmitWatermark(wm)]
        return []

    def channel_watermarks(self) -> list[int | None]:
        """Each channel's last watermark (None: ended), for status and debugging."""
        return [None if c.ended else c.watermark for c in self._channels]
