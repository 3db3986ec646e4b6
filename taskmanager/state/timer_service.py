"""Timers of a keyed process function (pure: time is an argument).

A timer is (time domain, timestamp, key); registering it twice keeps one, as in Flink. Event-
time timers fire when the watermark reaches their timestamp, processing-time timers when the
task's clock does; `due` pops every timer at or before a time, oldest first (ties in the order
they were registered), and skips timers deleted meanwhile. A timer registered for a time that
has passed fires at the next `due` call. The timers are part of the operator's keyed snapshot
(`snapshot` / `restore`), so a restored task fires each pending timer once.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable

from sluice.eventtime import TimeDomain

__all__ = ["TimeDomain", "TimerService"]


Changes = dict[TimeDomain, set[tuple[int, Hashable]]]  # (timestamp, key) pairs by domain


class TimerService:
    def __init__(self, track_changes: bool = False) -> None:
        self._heaps: dict[TimeDomain, list[tuple[int, int, Hashable]]] = {d: [] for d in TimeDomain}
        self._live: dict[TimeDomain, set[tuple[int, Hashable]]] = {d: set() for d in TimeDomain}
        self._seq = itertools.count()
        self.track_changes = track_changes
        # `track_changes`: the pending timers when the caller last took `changes()` (an
        # incremental snapshot's, taskmanager/state/process_snapshots.py), compared then with
        # the pending ones: a set difference in C at each snapshot, nothing per timer
        self._taken: dict[TimeDomain, set[tuple[int, Hashable]]] = {d: set() for d in TimeDomain}

    def register(self, domain: TimeDomain, key: Hashable, timestamp: int) -> bool:
        """Add a timer; False when the same one is already pending."""
        entry = (int(timestamp), key)
        if entry in self._live[domain]:
            return False
        self._live[domain].add(entry)
        heapq.heappush(self._heaps[domain], (entry[0], next(self._seq), key))
        return True

    def delete(self, domain: TimeDomain, key: Hashable, timestamp: int) -> bool:
        """Remove a pending timer; False when there was none."""
        entry = (int(timestamp), key)
        if entry not in self._live[domain]:
            return False
        self._live[domain].discard(entry)  # its heap entry is skipped when it comes up
        return True

    def due(self, domain: TimeDomain, time: int) -> list[tuple[int, Hashable]]:
        """Pop the pending timers with a timestamp <= `time`, oldest first."""
        heap, live, out = self._heaps[domain], self._live[domain], []
        while heap and heap[0][0] <= time:
            ts, _seq, key = heapq.heappop(heap)
            if (ts, key) in live:
                live.discard((ts, key))
                out.append((ts, key))
        return out

    def changes(self) -> tuple[Changes, Changes]:
        """(added, removed), each (timestamp, key) pairs by domain: the timers pending now that
        were not at the last call, and those pending then that are not now (track_changes
        only). Set differences of the pairs already held: no new object per timer."""
        added: Changes = {}
        removed: Changes = {}
        for d in TimeDomain:
            live, taken = self._live[d], self._taken[d]
            added[d], removed[d] = live - taken, taken - live
            self._taken[d] = set(live)
        return added, removed

    def pending(self, domain: TimeDomain | None = None) -> int:
        """Pending timers of `domain` (None: of both)."""
        return sum(len(self._live[d]) for d in TimeDomain) if domain is None else len(self._live[domain])

    def keys(self) -> set[Hashable]:
        """The keys with a pending timer."""
        return {key for live in self._live.values() for _ts, key in live}

    def pending_pairs(self) -> Changes:
        """The pending timers' (timestamp, key) pairs by domain (the sets themselves: read only)."""
        return dict(self._live)

    def snapshot(self) -> list[tuple[TimeDomain, int, Hashable]]:
        return [(d, ts, key) for d in TimeDomain for ts, key in sorted(self._live[d], key=lambda e: e[0])]

    def restore(self, timers: Iterable[tuple[TimeDomain | str, int, Hashable]]) -> None:
        self.__init__(self.track_changes)  # type: ignore[misc]  # restore only from the snapshot
        for domain, ts, key in timers:
            self.register(TimeDomain(domain), key, ts)
