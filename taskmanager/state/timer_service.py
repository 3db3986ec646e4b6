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


Timer = tuple[TimeDomain, int, Hashable]  # (domain, timestamp, key)


class TimerService:
    def __init__(self, track_changes: bool = False) -> None:
        self._heaps: dict[TimeDomain, list[tuple[int, int, Hashable]]] = {d: [] for d in TimeDomain}
        self._live: dict[TimeDomain, set[tuple[int, Hashable]]] = {d: set() for d in TimeDomain}
        self._seq = itertools.count()
        self.track_changes = track_changes
        # `track_changes`: what changed since the caller last took `changes()` (an incremental
        # snapshot's, taskmanager/state/process_snapshots.py): timers pending now that were not
        # then, timers pending then that are not now, and each key's number of pending timers
        self.added: set[Timer] = set()
        self.removed: set[Timer] = set()
        self._per_key: dict[Hashable, int] = {}

    def register(self, domain: TimeDomain, key: Hashable, timestamp: int) -> bool:
        """Add a timer; False when the same one is already pending."""
        entry = (int(timestamp), key)
        if entry in self._live[domain]:
            return False
        self._live[domain].add(entry)
        heapq.heappush(self._heaps[domain], (entry[0], next(self._seq), key))
        if self.track_changes:
            self._per_key[key] = self._per_key.get(key, 0) + 1
            timer = (domain, entry[0], key)
            if timer in self.removed:
                self.removed.discard(timer)
            else:
                self.added.add(timer)
        return True

    def delete(self, domain: TimeDomain, key: Hashable, timestamp: int) -> bool:
        """Remove a pending timer; False when there was none."""
        entry = (int(timestamp), key)
        if entry not in self._live[domain]:
            return False
        self._live[domain].discard(entry)  # its heap entry is skipped when it comes up
        if self.track_changes:
            self._gone(domain, entry[0], key)
        return True

    def due(self, domain: TimeDomain, time: int) -> list[tuple[int, Hashable]]:
        """Pop the pending timers with a timestamp <= `time`, oldest first."""
        heap, live, out = self._heaps[domain], self._live[domain], []
        while heap and heap[0][0] <= time:
            ts, _seq, key = heapq.heappop(heap)
            if (ts, key) in live:
                live.discard((ts, key))
                out.append((ts, key))
        if self.track_changes:
            for ts, key in out:
                self._gone(domain, ts, key)
        return out

    def _gone(self, domain: TimeDomain, ts: int, key: Hashable) -> None:
        left = self._per_key[key] - 1
        if left:
            self._per_key[key] = left
        else:
            del self._per_key[key]
        timer = (domain, ts, key)
        if timer in self.added:
            self.added.discard(timer)
        else:
            self.removed.add(timer)

    def has(self, key: Hashable) -> bool:
        """Whether `key` has a pending timer (track_changes only)."""
        return key in self._per_key

    def changes(self) -> tuple[set[Timer], set[Timer]]:
        """(added, removed) since the last call, emptied (track_changes only)."""
        changed = self.added, self.removed
        self.added, self.removed = set(), set()
        return changed

    def pending(self, domain: TimeDomain) -> int:
        return len(self._live[domain])

    def keys(self) -> set[Hashable]:
        """The keys with a pending timer."""
        return {key for live in self._live.values() for _ts, key in live}

    def snapshot(self) -> list[tuple[TimeDomain, int, Hashable]]:
        return [(d, ts, key) for d in TimeDomain for ts, key in sorted(self._live[d], key=lambda e: e[0])]

    def restore(self, timers: Iterable[tuple[TimeDomain | str, int, Hashable]]) -> None:
        self.__init__(self.track_changes)  # type: ignore[misc]  # restore only from the snapshot
        for domain, ts, key in timers:
            self.register(TimeDomain(domain), key, ts)
