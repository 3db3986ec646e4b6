"""Named keyed state of a process function, with time-to-live (pure: time is an argument).

Each state a function declares (`ctx.value_state("seen", ttl_ms=...)`) is a map key -> entry
here; the views in taskmanager/operators/keyed_process.py give it value, list or map
semantics. With a TTL an entry expires `ttl_ms` after it was last written (Flink's
OnCreateAndWrite): from then on it is invisible at once (`get` answers MISSING and drops it),
`cleanup` removes expired entries incrementally — a bounded number per call, oldest first,
from a queue of writes in time order — and `snapshot` leaves them out, so memory and
checkpoint size stay flat for a stream of fresh keys. Time is processing time in ms, given by
the caller.
"""

from __future__ import annotations

import collections
import dataclasses
import pickle
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

MISSING: Any = object()  # what `get` answers for a key without a live entry
KINDS = ("value", "list", "map")


@dataclasses.dataclass(frozen=True)
class StateDescriptor:
    name: str
    kind: str  # value | list | map
    ttl_ms: int | None


def check_declaration(
    declared: StateDescriptor | None, name: str, kind: str, ttl_ms: int | None, default_ttl_ms: int | None
) -> StateDescriptor:
    """The descriptor of a state a function declares (`declared`: the one the same name has
    already, if any): a name keeps one kind and TTL; bad names, kinds and TTLs are refused."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a state needs a non-empty name, got {name!r}")
    if kind not in KINDS:
        raise ValueError(f"unknown state kind {kind!r}; known: {', '.join(KINDS)}")
    if ttl_ms is not None and (isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0):
        raise ValueError(f"state {name!r}: ttl_ms must be a whole number of ms > 0, got {ttl_ms!r}")
    if declared is None:
        return StateDescriptor(name, kind, ttl_ms if ttl_ms is not None else default_ttl_ms)
    if declared.kind != kind or (ttl_ms is not None and declared.ttl_ms != ttl_ms):
        raise ValueError(
            f"state {name!r} is a {declared.kind} state with ttl_ms={declared.ttl_ms}; it cannot be used as a "
            f"{kind} state with ttl_ms={ttl_ms}: give each state one name"
        )
    return declared


_ABSENT = (MISSING, None)  # get_many's entry for a key without one


class _State:
    def __init__(self, descriptor: StateDescriptor) -> None:
        self.descriptor = descriptor
        self.entries: dict[Hashable, tuple[Any, int | None]] = {}  # key -> (value, expires at)
        self.writes: collections.deque[tuple[int, Hashable]] = collections.deque()  # TTL: (expires, key)


class KeyedStateStore:
    def __init__(self, default_ttl_ms: int | None = None, track_changes: bool = False) -> None:
        self.default_ttl_ms = default_ttl_ms
        self._states: dict[str, _State] = {}
        # `track_changes`: the keys whose entries `cleanup` removed since the caller last emptied
        # this set. An incremental snapshot takes these keys again, with every key its function
        # was given, the only ones it can have changed (taskmanager/state/process_snapshots.py).
        self.cleaned_up: set[Hashable] | None = set() if track_changes else None

    def declare(self, name: str, kind: str, ttl_ms: int | None = None) -> StateDescriptor:
        """The state `name` of `kind`; declaring it again with another kind or TTL is an error."""
        state = self._states.get(name)
        descriptor = check_declaration(state.descriptor if state else None, name, kind, ttl_ms, self.default_ttl_ms)
        if state is None:
            self._states[name] = _State(descriptor)
        return descriptor

    def get(self, name: str, key: Hashable, now: int) -> Any:
        state = self._states[name]
        entry = state.entries.get(key)
        if entry is None:
            return MISSING
        if entry[1] is not None and entry[1] <= now:
            del state.entries[key]
            return MISSING
        return entry[0]

    def put(self, name: str, key: Hashable, value: Any, now: int) -> None:
        state = self._states[name]
        ttl = state.descriptor.ttl_ms
        expires = now + ttl if ttl is not None else None
        state.entries[key] = (value, expires)
        if expires is not None:
            state.writes.append((expires, key))

    def clear(self, name: str, key: Hashable) -> None:
        self._states[name].entries.pop(key, None)

    # -- many keys at once (the batch form of process functions): as get/put/clear per key
    def get_many(self, name: str, keys: list[Hashable], now: int) -> list[Any]:
        state = self._states[name]
        if state.descriptor.ttl_ms is None:  # nothing expires: a lookup per key
            get = state.entries.get
            return [get(k, _ABSENT)[0] for k in keys]
        return [self.get(name, k, now) for k in keys]

    def put_many(self, name: str, keys: list[Hashable], values: list[Any], now: int) -> None:
        state = self._states[name]
        ttl = state.descriptor.ttl_ms
        if ttl is None:
            state.entries.update(zip(keys, [(v, None) for v in values], strict=True))
            return
        expires = now + ttl
        state.entries.update(zip(keys, [(v, expires) for v in values], strict=True))
        state.writes.extend((expires, k) for k in keys)

    def clear_many(self, name: str, keys: list[Hashable]) -> None:
        pop = self._states[name].entries.pop
        for k in keys:
            pop(k, None)

    def cleanup(self, now: int, budget: int = 1000) -> int:
        """Remove up to about `budget` expired entries, oldest writes first; how many went."""
        removed = 0
        for state in self._states.values():
            writes, entries = state.writes, state.entries
            while writes and writes[0][0] <= now and budget > 0:
                expires, key = writes.popleft()
                budget -= 1
                entry = entries.get(key)
                if entry is not None and entry[1] == expires:  # not written again since
                    del entries[key]
                    removed += 1
                    if self.cleaned_up is not None:
                        self.cleaned_up.add(key)
        return removed

    def size(self, name: str | None = None) -> int:
        """Entries held (expired ones not cleaned up yet included)."""
        states = [self._states[name]] if name is not None else list(self._states.values())
        return sum(len(s.entries) for s in states)

    def keys(self) -> set[Hashable]:
        return {key for s in self._states.values() for key in s.entries}

    def entries_of(
        self, keys: Iterable[Hashable], now: int
    ) -> Iterator[tuple[StateDescriptor, Hashable, Any, int | None]]:
        """The live entries of `keys`, as `snapshot` gives them."""
        states = list(self._states.values())
        for key in keys:
            for state in states:
                entry = state.entries.get(key)
                if entry is not None and (entry[1] is None or entry[1] > now):
                    yield state.descriptor, key, entry[0], entry[1]

    def snapshot(self, now: int) -> Iterator[tuple[StateDescriptor, Hashable, Any, int | None]]:
        """Every live entry: (its state, key, value, expires at)."""
        for state in self._states.values():
            for key, (value, expires) in state.entries.items():
                if expires is None or expires > now:
                    yield state.descriptor, key, value, expires

    def restore(self, entries: Iterator[tuple[StateDescriptor, Hashable, Any, int | None]]) -> None:
        self._states = {}
        if self.cleaned_up is not None:
            self.cleaned_up = set()
        for descriptor, key, value, expires in entries:
            state = self._states.get(descriptor.name)
            if state is None:
                state = self._states[descriptor.name] = _State(descriptor)
            state.entries[key] = (value, expires)
        for state in self._states.values():
            timed = [(e[1], k) for k, e in state.entries.items() if e[1] is not None]
            state.writes = collections.deque(sorted(timed, key=lambda w: w[0]))


def state_bytes(obj: Any) -> bytes:
    """`obj` (a key, or a value with its expiry) as snapshot bytes: plain pickle, whose C pickler
    writes a small value about ten times faster than cloudpickle, which takes what plain pickle
    cannot write (a lambda, an instance of a class defined in the job file); pickle.loads reads
    either."""
    try:
        return pickle.dumps(obj, protocol=5)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle

        data: bytes = cloudpickle.dumps(obj, protocol=5)
        return data
