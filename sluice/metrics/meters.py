"""Rates and time shares with time as an input (no clock is read here).

:class:`Meter` is a count and its rate over a sliding span, sampled once per
`interval` as Flink's MeterView does (60 s span, here 5 s samples by default, so
a rate settles within a minute and moves every few seconds).

:class:`TimeShare` measures how a thread spends its time: the caller says when
it starts and stops being idle or backpressured; the shares are the ms per
second of each state over the last `span` seconds, busy being the rest — what
Flink calls busyTimeMsPerSecond, idleTimeMsPerSecond and
backPressuredTimeMsPerSecond.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

RATE_SPAN_S = 60.0
RATE_INTERVAL_S = 5.0
SHARE_SPAN_S = 5.0


@dataclass
class Meter:
    """A monotonically growing count with its recent rate (per second)."""

    span: float = RATE_SPAN_S
    interval: float = RATE_INTERVAL_S
    count: int = 0
    _samples: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def mark(self, n: int, now: float) -> None:
        self.count += n
        self.sample(now)

    def set_count(self, count: int, now: float) -> None:
        """For a count kept elsewhere (e.g. a writer's rows produced)."""
        self.count = count
        self.sample(now)

    def sample(self, now: float) -> None:
        s = self._samples
        if not s or now - s[-1][0] >= self.interval:
            s.append((now, self.count))
        while len(s) > 2 and now - s[1][0] >= self.span:
            s.popleft()

    def rate(self, now: float) -> float:
        """Events per second since the oldest sample inside the span (0 before two samples
        at least `interval`/5 apart)."""
        self.sample(now)
        if not self._samples:
            return 0.0
        t0, c0 = self._samples[0]
        elapsed = now - t0
        if elapsed < self.interval / 5:
            return 0.0
        return max(0.0, (self.count - c0) / elapsed)


IDLE = "idle"
BACKPRESSURED = "backpressured"
BUSY = "busy"


@dataclass
class TimeShare:
    """Ms per second spent idle, backpressured and busy over the last `span` seconds.

    Closed intervals are kept (at most `max_intervals`, adjacent ones of a state merged);
    an open one counts up to `now` when read."""

    span: float = SHARE_SPAN_S
    max_intervals: int = 4096
    _intervals: collections.deque[tuple[str, float, float]] = field(default_factory=collections.deque)
    _open: dict[str, float] = field(default_factory=dict)  # state -> since
    _first: float | None = None

    def begin(self, now: float) -> None:
        """Measuring starts: time not reported idle or backpressured from here on is busy."""
        if self._first is None:
            self._first = now

    def start(self, state: str, now: float) -> None:
        if self._first is None:
            self._first = now
        self._open.setdefault(state, now)

    def stop(self, state: str, now: float) -> None:
        since = self._open.pop(state, None)
        if since is not None:
            self._add(state, since, now)

    def add(self, state: str, seconds: float, now: float) -> None:
        """A span of `seconds` in `state` that ended at `now` (measured by the caller)."""
        if seconds <= 0:
            return
        if self._first is None:
            self._first = now - seconds
        self._add(state, now - seconds, now)

    def _add(self, state: str, start: float, end: float) -> None:
        iv = self._intervals
        if iv and iv[-1][0] == state and start - iv[-1][2] < 0.001:
            iv[-1] = (state, iv[-1][1], end)
        else:
            iv.append((state, start, end))
        while iv and (iv[0][2] < end - self.span or len(iv) > self.max_intervals):
            iv.popleft()

    def ms_per_second(self, now: float) -> dict[str, float]:
        """{"idle", "backpressured", "busy"} in ms per second, each 0..1000; all 0 before
        anything was measured."""
        zero = {IDLE: 0.0, BACKPRESSURED: 0.0, BUSY: 0.0}
        if self._first is None:
            return zero
        window_start = max(self._first, now - self.span)
        window = now - window_start
        if window <= 0:
            return zero
        totals = {IDLE: 0.0, BACKPRESSURED: 0.0}
        for state, start, end in self._intervals:
            totals[state] = totals.get(state, 0.0) + max(0.0, min(end, now) - max(start, window_start))
        for state, since in self._open.items():
            totals[state] = totals.get(state, 0.0) + max(0.0, now - max(since, window_start))
        out = {state: min(1000.0, 1000.0 * seconds / window) for state, seconds in totals.items()}
        out[BUSY] = max(0.0, 1000.0 - out[IDLE] - out[BACKPRESSURED])
        return out
