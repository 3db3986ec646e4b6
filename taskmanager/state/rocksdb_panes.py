"""Window panes in RocksDB: the pane partials of a window operator on the rocksdb backend.

A tumbling or sliding window with aggregates (taskmanager/operators/window.py) keeps, per
pane start and key, the merged partials of what arrived for it (the aggregates' partial
columns and the hidden row count `__n`). On the rocksdb backend they live in the operator's
own database (taskmanager/state/rocksdb_backend.py `RocksDBKeyedValues`, raw bytes) as keyed
state with the pane as namespace:

    key   = key group (2 bytes, big-endian) + PANE_TAG + pane start (8 bytes, big-endian,
            sign bit flipped so that negative starts sort first) + the key's bytes as the
            backend encodes a key after its key group (rocksdb_backend.encode_key: a type
            byte, then 8 bytes for a 64-bit int, UTF-8 for a str, a pickle otherwise)
    value = pickle of the tuple of partials, in `partial_columns` order

so the entries of one (key group, pane) are one contiguous range, and a key-group range is
one contiguous range of the database as the backend's snapshots and restores expect
(docs/state-backends.md). `PANE_TAG` keeps the layout apart from the keyed aggregate's key
encoding (tags 0x00-0x02) and from user state's (0x10, 0x11).

What stays in memory does not grow with the keys: the set of pane starts that hold
entries and the set of key groups seen (at most the job's max parallelism). Folding a batch
is one multi-get and one WriteBatch; firing a window seeks to each (key group, pane) prefix;
dropping a pane deletes its range in every key group.
"""

from __future__ import annotations

import logging
import pickle
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import rocksdict

from sluice.key_groups import KEY_GROUP
from taskmanager.state import rocksdb_backend
from taskmanager.state.backend import NativeRestore, StateBackendConfig
from taskmanager.state.rocksdb_backend import (
    SIGN_FLIP,
    RocksDBKeyedValues,
    RocksDBSnapshot,
    decode_key,
    encode_key,
    from_sortable_ms,
    sortable_ms,
)

log = logging.getLogger("sluice.taskmanager")

PANE_TAG = 0x20
PANE = "__pane"  # the pane start column of the tables this store takes and gives
_PREFIX = struct.Struct(">HBQ")
_KG = struct.Struct(">H")


# -- encoding (pure) ------------------------------------------------------------------------
def pane_prefix(kg: int, pane: int) -> bytes:
    """The first 11 bytes of every entry of pane `pane` in key group `kg`."""
    return _PREFIX.pack(kg, PANE_TAG, sortable_ms(pane))


def key_bytes(key: Any) -> bytes:
    """The bytes of a key after the (key group, pane) prefix."""
    return encode_key(0, key)[_KG.size :]


def key_of(raw: bytes) -> Any:
    """The key of `key_bytes`."""
    return decode_key(bytes(_KG.size) + raw)[1]


def encode(kg: int, pane: int, key: Any) -> bytes:
    return pane_prefix(kg, pane) + key_bytes(key)


def decode(raw: bytes) -> tuple[int, int, Any]:
    """(key group, pane start, key) of an entry written by `encode`."""
    kg, tag, flipped = _PREFIX.unpack_from(raw)
    if tag != PANE_TAG:
        raise ValueError(f"not a window pane entry (tag {tag:#04x})")
    return kg, from_sortable_ms(flipped), key_of(raw[_PREFIX.size :])


def fold(merges: Sequence[str], old: Sequence[Any] | None, new: Sequence[Any]) -> tuple[Any, ...]:
    """Two partial tuples merged column by column (`sum`, `min` or `max`; a null yields)."""
    if old is None:
        return tuple(new)
    out = []
    for m, a, b in zip(merges, old, new, strict=True):
        if a is None:
            out.append(b)
        elif b is None:
            out.append(a)
        elif m == "sum":
            out.append(a + b)
        else:
            out.append(min(a, b) if m == "min" else max(a, b))
    return tuple(out)


_WHOLE_KEY = np.dtype([("kg", ">u2"), ("tag", "u1"), ("pane", ">u8"), ("type", "u1"), ("key", ">i8")])
_PREFIX_ONLY = np.dtype([("kg", ">u2"), ("tag", "u1"), ("pane", ">u8")])


def encode_many(kgs: np.ndarray, panes: np.ndarray, table: pa.Table, keys: Sequence[str]) -> list[bytes]:
    """`encode` of every row of `table`: the (key group, pane) prefixes packed by numpy, and
    the whole entry key so when the key is one integer column without nulls."""
    n = len(kgs)
    flipped = panes.astype(np.int64).view(np.uint64) ^ np.uint64(SIGN_FLIP)  # sortable_ms, for a whole column
    column = table.column(keys[0]) if len(keys) == 1 else None
    whole_key = column is not None and column.null_count == 0 and _small_int(column.type)
    if whole_key:
        assert column is not None
        rec = np.empty(n, dtype=_WHOLE_KEY)
        rec["type"], rec["key"] = 1, column.to_numpy(zero_copy_only=False)  # encode_key's int form
    else:
        rec = np.empty(n, dtype=_PREFIX_ONLY)
    rec["kg"], rec["tag"], rec["pane"] = kgs, PANE_TAG, flipped
    size, buf = rec.dtype.itemsize, rec.tobytes()
    whole = [buf[i : i + size] for i in range(0, n * size, size)]
    if whole_key:
        return whole
    rows = (
        column.to_pylist()
        if column is not None
        else list(zip(*(table.column(k).to_pylist() for k in keys), strict=True))
    )
    return [p + key_bytes(k) for p, k in zip(whole, rows, strict=True)]


def _small_int(t: pa.DataType) -> bool:
    """An integer type whose every value fits a signed 64-bit int."""
    return bool(pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32()))


class PaneTable:
    """Arrow tables of pane entries: key columns, `KEY_GROUP`, `PANE`, then the partials,
    typed as the batches that brought them (inferred when none was seen, after a restore)."""

    def __init__(self, keys: Sequence[str], partials: Sequence[tuple[str, str]]) -> None:
        self.keys = list(keys)
        self.names = [c for c, _m in partials]
        self.key_types: list[pa.DataType | None] = [None] * len(self.keys)
        self.partial_types: list[pa.DataType | None] = [None] * len(self.names)

    def learn(self, table: pa.Table) -> None:
        """Remember the column types of a table of entries (a null-typed column teaches nothing)."""
        for i, k in enumerate(self.keys):
            t = table.schema.field(k).type
            if not pa.types.is_null(t):
                self.key_types[i] = t
        for i, c in enumerate(self.names):
            t = table.schema.field(c).type
            if not pa.types.is_null(t):
                self.partial_types[i] = t

    def key_list(self, table: pa.Table) -> list[Any]:
        """Each row's key: the value of a one-column key, the tuple of a composite one."""
        if len(self.keys) == 1:
            return list(table.column(self.keys[0]).to_pylist())
        return list(zip(*(table.column(k).to_pylist() for k in self.keys), strict=True))

    def build(self, entries: Sequence[tuple[int, int, Any, Sequence[Any]]]) -> pa.Table:
        """(key group, pane, key, partials) entries as a table."""
        columns: dict[str, Any] = {}
        for i, (name, t) in enumerate(zip(self.keys, self.key_types, strict=True)):
            values = [e[2] for e in entries] if len(self.keys) == 1 else [e[2][i] for e in entries]
            columns[name] = pa.array(values, type=t)
        columns[KEY_GROUP] = pa.array([e[0] for e in entries], pa.int32())
        columns[PANE] = pa.array([e[1] for e in entries], pa.int64())
        for i, (name, t) in enumerate(zip(self.names, self.partial_types, strict=True)):
            columns[name] = pa.array([e[3][i] for e in entries], type=t)
        return pa.table(columns)


# -- the store (RocksDB) --------------------------------------------------------------------
class RocksDBPanes:
    """One window operator's pane partials in its RocksDB database."""

    def __init__(
        self, config: StateBackendConfig, keys: Sequence[str], partials: Sequence[tuple[str, str]], tag: str = ""
    ) -> None:
        self.state = RocksDBKeyedValues(config, tag)
        self.tag = tag
        self.merges = [m for _c, m in partials]
        self.tables = PaneTable(keys, partials)
        self.panes: set[int] = set()  # pane starts with entries
        self.key_groups: set[int] = set()  # key groups with entries (bounded by the max parallelism)

    @property
    def db(self) -> rocksdict.Rdict:
        return self.state.db

    # -- writes ---------------------------------------------------------------------------------
    def add(self, table: pa.Table) -> None:
        """Fold a table of partials (key columns, KEY_GROUP, PANE, partial columns; several rows
        of one key and pane allowed) into the database: one multi-get, one write."""
        if table.num_rows == 0:
            return
        self.tables.learn(table)
        table = self._merged(table)  # one row per (key, key group, pane), merged in C++
        kgs = table.column(KEY_GROUP).to_numpy(zero_copy_only=False)
        panes = table.column(PANE).to_numpy(zero_copy_only=False)
        raws: list[Any] = encode_many(kgs, panes, table, self.tables.keys)
        values = list(zip(*(table.column(c).to_pylist() for c in self.tables.names), strict=True))
        for kg, pane in set(zip(kgs.tolist(), panes.tolist(), strict=True)):
            self.panes.add(pane)
            self.key_groups.add(kg)
        olds = cast(list[bytes | None], self.db.get(raws))
        dumps, loads, merges = pickle.dumps, pickle.loads, self.merges
        batch = rocksdict.WriteBatch(raw_mode=True)
        for raw, old, value in zip(raws, olds, values, strict=True):
            batch.put(raw, dumps(value if old is None else fold(merges, loads(old), value), protocol=5))
        self.db.write(batch)

    def _merged(self, table: pa.Table) -> pa.Table:
        group = [*self.tables.keys, KEY_GROUP, PANE]
        specs = [(c, m) for c, m in zip(self.tables.names, self.merges, strict=True)]
        out = table.group_by(group, use_threads=False).aggregate(specs)
        n = len(group)  # Arrow versions differ in where the keys go: by position
        cols = (
            [*out.columns[:n], *out.columns[n:]]
            if out.column_names[:n] == group
            else [
                *out.columns[-n:],
                *out.columns[:-n],
            ]
        )
        return pa.Table.from_arrays(cols, names=[*group, *self.tables.names])

    def drop(self, pane: int) -> None:
        """Delete every entry of `pane`."""
        if pane not in self.panes:
            return
        batch = rocksdict.WriteBatch(raw_mode=True)
        for kg in sorted(self.key_groups):
            batch.delete_range(pane_prefix(kg, pane), pane_prefix(kg, pane + 1))
        self.db.write(batch)
        self.panes.discard(pane)

    # -- reads ----------------------------------------------------------------------------------
    def entries(self, panes: Iterable[int]) -> Iterator[tuple[int, int, Any, tuple[Any, ...]]]:
        """(key group, pane, key, partials) of every entry of `panes`, by key group then pane."""
        wanted = sorted(p for p in set(panes) if p in self.panes)
        if not wanted:
            return
        it = self.db.iter()
        try:
            for kg in sorted(self.key_groups):
                for pane in wanted:
                    prefix = pane_prefix(kg, pane)
                    it.seek(prefix)
                    while it.valid():
                        raw = cast(bytes, it.key())
                        if not raw.startswith(prefix):
                            break
                        yield kg, pane, key_of(raw[len(prefix) :]), tuple(pickle.loads(cast(bytes, it.value())))
                        it.next()
        finally:
            del it

    def window_table(self, panes: Iterable[int]) -> pa.Table | None:
        """Every entry of `panes` as a table (None: no entry)."""
        entries = list(self.entries(panes))
        return self.tables.build(entries) if entries else None

    def lookup(self, panes: Iterable[int], keys: pa.Table) -> pa.Table | None:
        """The entries of `panes` for the (key, key group) rows of `keys` only (a multi-get)."""
        wanted = sorted(p for p in set(panes) if p in self.panes)
        if not wanted or keys.num_rows == 0:
            return None
        pairs = dict.fromkeys(zip(self.tables.key_list(keys), keys.column(KEY_GROUP).to_pylist(), strict=True))
        asked = [(kg, pane, key) for key, kg in pairs for pane in wanted]
        got = cast(list[bytes | None], self.db.get([encode(kg, pane, key) for kg, pane, key in asked]))
        entries = [
            (kg, pane, key, tuple(pickle.loads(v)))
            for (kg, pane, key), v in zip(asked, got, strict=True)
            if v is not None
        ]
        return self.tables.build(entries) if entries else None

    def __len__(self) -> int:
        return sum(1 for _e in self.entries(self.panes))

    # -- checkpoints ----------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> RocksDBSnapshot:
        return self.state.snapshot(checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.state.notify_checkpoint_complete(checkpoint_id)

    def restore_table(self, table: pa.Table | None) -> None:
        """Start again from a memory backend's snapshot table (or empty)."""
        self.state.clear()
        self.panes.clear()
        self.key_groups.clear()
        if table is not None and table.num_rows:
            self.add(table)

    def restore_native(self, native: NativeRestore) -> None:
        """Start again from rocksdb handles (a checkpoint or savepoint of this operator)."""
        self.state.restore(native.handles, native.fs, native.key_groups, native.owned)
        self._scan()
        log.info("%s window panes restored: %d panes in %d key groups", self.tag, len(self.panes), len(self.key_groups))

    def _scan(self) -> None:
        """Rebuild the pane and key-group sets from the database: one seek per (key group, pane)."""
        self.panes.clear()
        self.key_groups.clear()
        it = self.db.iter()
        try:
            it.seek_to_first()
            while it.valid():
                raw = cast(bytes, it.key())
                kg, tag = raw[0] << 8 | raw[1], raw[2]
                if tag < PANE_TAG:
                    it.seek(_KG.pack(kg) + bytes([PANE_TAG]))
                    continue
                if tag > PANE_TAG or len(raw) < _PREFIX.size:
                    if kg + 1 >= 1 << 16:
                        break
                    it.seek(_KG.pack(kg + 1))
                    continue
                _kg, pane, _key = decode(raw)
                self.panes.add(pane)
                self.key_groups.add(kg)
                it.seek(pane_prefix(kg, pane + 1))
        finally:
            del it

    def close(self) -> None:
        self.state.close()


def read_native(native: NativeRestore, tables: PaneTable) -> pa.Table | None:
    """A rocksdb snapshot of window panes as the memory backend's snapshot table (key
    columns, KEY_GROUP, PANE, partials): a memory job restoring a rocksdb job's state."""
    wanted = set(native.owned) if native.owned is not None else None
    entries = []
    for raw, value in rocksdb_backend.read_range(native.handles, native.fs, native.key_groups, native.scratch):
        if len(raw) < _PREFIX.size or raw[2] != PANE_TAG:
            continue
        kg, pane, key = decode(raw)
        if wanted is None or kg in wanted:
            entries.append((kg, pane, key, tuple(pickle.loads(value))))
    return tables.build(entries) if entries else None
