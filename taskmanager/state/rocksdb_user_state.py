"""Process functions' named keyed state and timers in RocksDB (docs/state-backends.md).

With `state.backend: rocksdb`, a keyed process function's `value_state` / `list_state` /
`map_state` entries and its timers live in the operator's RocksDB database
(taskmanager/state/rocksdb_backend.py `RocksDBKeyedValues`: its snapshots, incremental
uploads and key-group-range restores are the aggregates'). Only what does not grow with the
number of keys stays on the heap — except the timers: like Flink's heap timer service
beside its RocksDB backend, pending timers are also indexed in memory
(taskmanager/state/timer_service.py), which a restore rebuilds from the database.

Layout, under the 2-byte big-endian key-group prefix every state key has:

* state entry: `\\x11` + pickle((state name, key)) -> pickle((value, expires at ms | None));
  a value plain pickle cannot write (a lambda, a local class) is written with cloudpickle;
* timer: `\\x10` + domain byte (`e` event time, `p` processing time) + timestamp (8 bytes
  big-endian, sign bit flipped, so timers sort by time) + pickle(key) -> empty.

Keys are plain Python values (numpy scalars of a composite key are turned into Python ones),
so the same key always has the same bytes. An entry with a time-to-live is invisible once
expired (a read deletes it); `cleanup` walks the database from where it last stopped, a
bounded number of entries per call, and deletes expired ones, so a stream of fresh keys with
a TTL keeps the database flat, as the memory backend's queue of writes does.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Hashable, Iterator
from typing import Any, cast

import rocksdict

from taskmanager.state.backend import StateBackendConfig
from taskmanager.state.keyed_state import MISSING, StateDescriptor, check_declaration, state_bytes
from taskmanager.state.rocksdb_backend import (
    RocksDBKeyedValues,
    RocksDBSnapshot,
    from_sortable_ms,
    range_bounds,
    sortable_ms,
)
from taskmanager.state.timer_service import TimeDomain

TIMER_TAG, STATE_TAG = 0x10, 0x11
_KG = struct.Struct(">H")
_TS = struct.Struct(">Q")
_DOMAIN_BYTES = {TimeDomain.EVENT_TIME: b"e", TimeDomain.PROCESSING_TIME: b"p"}
_DOMAINS = {v[0]: k for k, v in _DOMAIN_BYTES.items()}


def _plain(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(k.item() if hasattr(k, "item") else k for k in key)
    return key.item() if hasattr(key, "item") else key


def state_key(kg: int, name: str, key: Hashable) -> bytes:
    return _KG.pack(kg) + bytes((STATE_TAG,)) + pickle.dumps((name, _plain(key)), protocol=5)


def timer_key(kg: int, domain: TimeDomain, timestamp: int, key: Hashable) -> bytes:
    head = _KG.pack(kg) + bytes((TIMER_TAG,)) + _DOMAIN_BYTES[domain] + _TS.pack(sortable_ms(timestamp))
    return head + pickle.dumps(_plain(key), protocol=5)


def encode_entry(value: Any, expires: int | None) -> bytes:
    return state_bytes((value, expires))


def decode(raw_key: bytes, raw_value: bytes) -> tuple[str, int, Any]:
    """One database entry: ("state", kg, (name, key, value, expires)) or
    ("timer", kg, (domain, timestamp, key)); our own files, written by the functions above."""
    kg, tag = raw_key[0] << 8 | raw_key[1], raw_key[2]
    if tag == STATE_TAG:
        name, key = pickle.loads(raw_key[3:])
        value, expires = pickle.loads(raw_value)
        return "state", kg, (name, key, value, expires)
    if tag == TIMER_TAG:
        domain = _DOMAINS[raw_key[3]]
        ts = from_sortable_ms(_TS.unpack_from(raw_key, 4)[0])
        return "timer", kg, (domain, ts, pickle.loads(raw_key[12:]))
    raise ValueError(f"not a process function's state entry (tag {tag:#x}): was the job's operator changed?")


class RocksDBUserState:
    """Named keyed state (and the persistent copy of the timers) of one process function."""

    def __init__(self, config: StateBackendConfig, tag: str = "", default_ttl_ms: int | None = None) -> None:
        self.values = RocksDBKeyedValues(config, tag)  # the database, its snapshots and restores
        self.default_ttl_ms = default_ttl_ms
        self.descriptors: dict[str, StateDescriptor] = {}
        self._may_expire = False  # an entry with a TTL was written or restored: cleanup walks
        self._cursor = b""  # where the next cleanup walk starts

    @property
    def db(self) -> rocksdict.Rdict:
        return self.values.db

    # -- state ------------------------------------------------------------------------------------
    def declare(self, name: str, kind: str, ttl_ms: int | None = None) -> StateDescriptor:
        descriptor = check_declaration(self.descriptors.get(name), name, kind, ttl_ms, self.default_ttl_ms)
        self.descriptors[name] = descriptor
        return descriptor

    def get(self, name: str, key: Hashable, kg: int, now: int) -> Any:
        k = state_key(kg, name, key)
        raw = self.db.get(k)
        if raw is None:
            return MISSING
        value, expires = pickle.loads(cast(bytes, raw))
        if expires is not None and expires <= now:
            self.db.delete(k)
            return MISSING
        return value

    def put(self, name: str, key: Hashable, kg: int, value: Any, now: int) -> None:
        ttl = self.descriptors[name].ttl_ms
        expires = now + ttl if ttl is not None else None
        self._may_expire = self._may_expire or expires is not None
        self.db.put(state_key(kg, name, key), encode_entry(value, expires))

    def clear(self, name: str, key: Hashable, kg: int) -> None:
        self.db.delete(state_key(kg, name, key))

    def cleanup(self, now: int, budget: int = 1000) -> int:
        """Look at up to `budget` entries from where the last call stopped and delete the
        expired ones; how many went."""
        if not self._may_expire:
            return 0
        it = self.db.iter()
        it.seek(self._cursor)
        expired = rocksdict.WriteBatch(raw_mode=True)
        removed = 0
        for _ in range(budget):
            if not it.valid():
                self._cursor = b""  # the end: the next walk starts again from the first entry
                break
            k = cast(bytes, it.key())
            if k[2] == STATE_TAG:
                _value, expires = pickle.loads(cast(bytes, it.value()))
                if expires is not None and expires <= now:
                    expired.delete(k)
                    removed += 1
            self._cursor = k + b"\x00"  # the next key after this one
            it.next()
        del it
        if removed:
            self.db.write(expired)
        return removed

    def size(self) -> int:
        """State entries held (expired ones not cleaned up yet included); walks the database."""
        it = self.db.iter()
        it.seek_to_first()
        n = 0
        while it.valid():
            n += cast(bytes, it.key())[2] == STATE_TAG
            it.next()
        return n

    # -- timers (the database's copy; the operator's TimerService is the index) -------------------
    def put_timer(self, kg: int, domain: TimeDomain, timestamp: int, key: Hashable) -> None:
        self.db.put(timer_key(kg, domain, timestamp, key), b"")

    def delete_timer(self, kg: int, domain: TimeDomain, timestamp: int, key: Hashable) -> None:
        self.db.delete(timer_key(kg, domain, timestamp, key))

    def timers(self, key_groups: tuple[int, int]) -> Iterator[tuple[int, TimeDomain, int, Hashable]]:
        """Every timer in the database: (key group, domain, timestamp, key), one seek per key group."""
        lo, hi = key_groups
        _first, end = range_bounds(lo, hi)
        it = self.db.iter()
        for kg in range(lo, hi + 1):
            prefix = _KG.pack(kg) + bytes((TIMER_TAG,))
            it.seek(prefix)
            while it.valid():
                k = cast(bytes, it.key())
                if not k.startswith(prefix) or k >= end:
                    break
                _what, group, (domain, ts, key) = decode(k, b"")
                yield group, domain, ts, key
                it.next()
        del it

    # -- checkpoints --------------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> RocksDBSnapshot:
        return self.values.snapshot(checkpoint_id)

    def write_entries(
        self,
        entries: Iterator[tuple[StateDescriptor, Hashable, int, Any, int | None]],
        timers: Iterator[tuple[int, TimeDomain, int, Hashable]],
    ) -> None:
        """Fill the (empty) database from another backend's snapshot: state entries
        (descriptor, key, key group, value, expires) and timers (key group, domain, ts, key)."""
        batch, n = rocksdict.WriteBatch(raw_mode=True), 0
        for descriptor, key, kg, value, expires in entries:
            self.descriptors.setdefault(descriptor.name, descriptor)
            self._may_expire = self._may_expire or expires is not None
            batch.put(state_key(kg, descriptor.name, key), encode_entry(value, expires))
            n += 1
        for kg, domain, ts, key in timers:
            batch.put(timer_key(kg, domain, ts, key), b"")
            n += 1
        if n:
            self.db.write(batch)

    def restored(self, descriptors: dict[str, StateDescriptor], may_expire: bool) -> None:
        """After the database was replaced by a restore: what the snapshot said was declared."""
        self.descriptors = dict(descriptors)
        self._may_expire = may_expire
        self._cursor = b""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.values.notify_checkpoint_complete(checkpoint_id)

    def close(self) -> None:
        self.values.close()
