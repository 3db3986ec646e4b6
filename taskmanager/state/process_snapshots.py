"""Incremental snapshots of a keyed process function's memory state (docs/user-state.md).

A memory snapshot is one Arrow table: a row per live state entry (key group,
"state:<kind>:<ttl>:<name>", key, value, expiry) and a row per pending timer (key group,
"timer:<domain>", key, no value, timestamp), keys and values pickled (`state_bytes`). Built whole
it pickles every entry and timer at every barrier: at 200k users about a second of the task
thread per checkpoint, growing with the state rather than with the work. `ProcessSnapshots`
keeps the last snapshot's two parts and builds the next one from what changed since:

- state rows: the last ones without the rows of every key given to the function since (in
  `process` or `on_timer`: a function reads and writes the state of its call's keys only, and
  may change in place a value it was handed) or whose entries the TTL cleanup removed
  (`KeyedStateStore.cleaned_up`), plus those keys' live entries, pickled anew;
- timer rows: the last ones without the timers fired or deleted since (an anti-join on domain,
  key and timestamp), plus the timers registered since (`TimerService.changes`, a difference of
  the pending timers' sets, so that registering and firing a timer cost nothing more).

A key's bytes are pickled once and kept while the key has state or timers, so that the
anti-joins find the same bytes for the same key (pickle may write two equal keys differently).
The next snapshot is built whole after a restore, when taking the changes would pickle at least
half of what a whole snapshot pickles (the anti-joins then cost more than they save), and once
as many keys changed since the last whole one as there are keys: a whole snapshot also forgets
the keys left without state or timers, which the changes alone cannot tell. Rows of an
entry that expired without being touched stay until the TTL cleanup removes the entry (which
touches its key); a restored entry that has expired is invisible all the same.

Pure: the state store, the timers and the key groups in, an Arrow table out; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.key_groups import KEY_GROUP
from taskmanager.state.keyed_state import KeyedStateStore, StateDescriptor, state_bytes
from taskmanager.state.timer_service import Changes, TimerService

WHAT, KEY, VALUE, TIME = "__what", "__key", "__value", "__time"  # the snapshot's columns
STATE_PREFIX, TIMER_PREFIX = "state:", "timer:"
SCHEMA = pa.schema(
    [(KEY_GROUP, pa.int32()), (WHAT, pa.string()), (KEY, pa.binary()), (VALUE, pa.binary()), (TIME, pa.int64())]
)


def state_what(descriptor: StateDescriptor) -> str:
    return f"{STATE_PREFIX}{descriptor.kind}:{descriptor.ttl_ms or ''}:{descriptor.name}"


class ProcessSnapshots:
    # a snapshot is built whole when taking the changes would pickle at least this share of
    # what a whole one pickles: the anti-joins and the kept rows then cost more than they save
    WHOLE_SHARE = 0.5
    MAX_CHUNKS = 16  # a part's chunks are merged beyond this, so that its anti-join scans few

    def __init__(self) -> None:
        self.states: pa.Table | None = None  # the last snapshot's state rows
        self.timers: pa.Table | None = None  # and its timer rows
        self.key_bytes: dict[Hashable, bytes] = {}
        self.changed_keys = 0  # keys changed (with repeats) since the last whole snapshot
        self.whole = 0  # snapshots built whole and from the changes (for tests and benchmarks)
        self.incremental = 0

    def reset(self) -> None:
        """The state was replaced (a restore): the next snapshot is built whole."""
        self.states = self.timers = None
        self.key_bytes = {}

    def take(
        self,
        store: KeyedStateStore,
        timers: TimerService,
        key_groups: dict[Hashable, int],
        seen: set[Hashable],
        now: int,
    ) -> pa.Table:
        """The snapshot of `store` and `timers` (both tracking changes) at `now` (ms); `seen`
        (every key given to the function since the last snapshot) is emptied. A whole snapshot also
        drops the keys without state or timers from `key_groups`; it comes at least once per
        as many changed keys as there are keys, so that such keys never pile up."""
        assert store.cleaned_up is not None and timers.track_changes, "the store and timers must track changes"
        touched = store.cleaned_up | seen  # the keys whose entries may have changed
        store.cleaned_up = set()
        seen.clear()
        added, removed = timers.changes()
        n_added, n_removed = sum(map(len, added.values())), sum(map(len, removed.values()))
        self.changed_keys += len(touched) + n_removed
        entries = store.size()
        work = len(touched) * entries / max(len(key_groups), 1) + n_added  # about what the changes pickle
        if (
            self.states is None
            or self.timers is None
            or work >= self.WHOLE_SHARE * (entries + timers.pending())
            or self.changed_keys > len(key_groups)
        ):
            return self._whole(store, timers, key_groups, now)
        self.incremental += 1
        states, timer_rows = self.states, self.timers
        stale = [b for key in touched if (b := self.key_bytes.get(key)) is not None]
        if stale:
            present = pc.is_in(states.column(KEY), value_set=pa.array(stale, pa.binary()))
            states = states.filter(pc.invert(present))
        if n_removed:  # every removed timer was in the last snapshot: its key is pickled and grouped
            gone = self._timer_rows(removed, key_groups).select([WHAT, KEY, TIME])
            timer_rows = timer_rows.join(gone, keys=[WHAT, KEY, TIME], join_type="left anti").select(SCHEMA.names)
        self._known(touched)
        for pairs in added.values():
            self._known(key for _ts, key in pairs)
        fresh_states = self._state_rows(store.entries_of(touched, now), key_groups)
        fresh_timers = self._timer_rows(added, key_groups)
        self.states = _merged(states, fresh_states, self.MAX_CHUNKS)
        self.timers = _merged(timer_rows, fresh_timers, self.MAX_CHUNKS)
        return pa.concat_tables([self.states, self.timers])

    def _whole(
        self, store: KeyedStateStore, timers: TimerService, key_groups: dict[Hashable, int], now: int
    ) -> pa.Table:
        self.whole += 1
        self.changed_keys = 0
        live = store.keys() | timers.keys()
        for key in [k for k in key_groups if k not in live]:
            del key_groups[key]
        self.key_bytes = {k: state_bytes(k) for k in live}  # pickled once per key, not per row
        self.states = self._state_rows(store.snapshot(now), key_groups)
        self.timers = self._timer_rows(timers.pending_pairs(), key_groups)
        return pa.concat_tables([self.states, self.timers])

    def _known(self, keys: Any) -> None:
        """Pickle the keys not pickled yet (every key of a row must be)."""
        known = self.key_bytes
        for key in keys:
            if key not in known:
                known[key] = state_bytes(key)

    def _state_rows(self, entries: Any, key_groups: dict[Hashable, int]) -> pa.Table:
        kgs: list[int] = []
        whats: list[str] = []
        keys: list[bytes] = []
        values: list[bytes] = []
        times: list[int | None] = []
        what_of: dict[StateDescriptor, str] = {}
        known = self.key_bytes
        for descriptor, key, value, expires in entries:
            what = what_of.get(descriptor)
            if what is None:
                what = what_of[descriptor] = state_what(descriptor)
            kgs.append(key_groups[key])
            whats.append(what)
            keys.append(known[key])
            values.append(state_bytes(value))
            times.append(expires)
        return _table(kgs, whats, keys, values, times)

    def _timer_rows(self, pending: Changes, key_groups: dict[Hashable, int]) -> pa.Table:
        kgs: list[int] = []
        whats: list[str] = []
        keys: list[bytes] = []
        times: list[int] = []
        known = self.key_bytes
        for d, pairs in pending.items():
            what = f"{TIMER_PREFIX}{d}"
            for ts, key in sorted(pairs, key=_timestamp):
                kgs.append(key_groups[key])
                whats.append(what)
                keys.append(known[key])
                times.append(ts)
        return _table(kgs, whats, keys, [None] * len(keys), times)


def _timestamp(pair: tuple[int, Hashable]) -> int:
    return pair[0]


def _table(kgs: list[int], whats: list[str], keys: list[bytes], values: list[Any], times: list[Any]) -> pa.Table:
    return pa.Table.from_arrays(
        [
            pa.array(kgs, pa.int32()),
            pa.array(whats, pa.string()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(times, pa.int64()),
        ],
        schema=SCHEMA,
    )


def _merged(kept: pa.Table, fresh: pa.Table, max_chunks: int) -> pa.Table:
    table = pa.concat_tables([kept, fresh]) if fresh.num_rows else kept
    return table.combine_chunks() if table.column(0).num_chunks > max_chunks else table
