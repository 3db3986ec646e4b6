"""Key groups: the one place that maps keys to key groups and key groups to
subtasks (Flink's KeyGroupRangeAssignment).

A key belongs to key group ``pmod(xxhash64(k1, k2, ...), max_parallelism)``,
computed inside Spark so that every process and run agrees. A composite key
hashes its tuple with Spark's several-column xxhash64 (the hash of each column
seeds the next; a null column leaves the running hash as it is), so a
one-column key hashes exactly as before composite keys existed.
``key_group_of`` is the same function in pure Python (for tests and tools; the
runtime uses the Spark expression); tests/unit/test_key_groups.py pins both to
values Spark computed. Key group ``kg`` belongs to
operator subtask ``kg * parallelism // max_parallelism``, so each subtask owns
one contiguous range of key groups (``key_group_range``). Keyed state is
written with its key group per row (column ``KEY_GROUP``) and tagged with the
writer's range, so a restore at another parallelism reads the overlapping
ranges (sluice/checkpoints/storage.py).

Writers and readers of keys and keyed state use this module only: the
producer side of a hash exchange (taskmanager/network/record_writer.py), the
keyed operators (taskmanager/operators/keyed_aggregate.py), the task that
writes and restores their state (taskmanager/checkpointer.py,
taskmanager/operator_chain.py) and checkpoint storage.
It imports neither pyspark nor pyarrow at module import (both are taken inside
the functions that need them), so the JobManager can use it too.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

KEY_GROUP = "__kg"  # column holding a row's key group (int32), in exchanged batches and keyed state


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> tuple[int, int]:
    """The contiguous key groups ``[lo, hi]`` owned by `subtask` of `parallelism` (inclusive)."""
    _check(parallelism, max_parallelism)
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} out of range for parallelism {parallelism}")
    lo = (subtask * max_parallelism + parallelism - 1) // parallelism
    hi = ((subtask + 1) * max_parallelism + parallelism - 1) // parallelism - 1
    return lo, hi


def is_range(groups: object, max_parallelism: int) -> bool:
    """Whether `groups` is a key-group range ``[lo, hi]`` as state handles carry it: two ints
    with ``0 <= lo <= hi < max_parallelism`` (checked before a checkpoint or savepoint is trusted)."""
    return (
        isinstance(groups, list)
        and len(groups) == 2
        and all(isinstance(g, int) and not isinstance(g, bool) for g in groups)
        and 0 <= groups[0] <= groups[1] < max_parallelism
    )


def owner(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The subtask (operator index) that owns `key_group`."""
    return key_group * parallelism // max_parallelism


def owners(key_groups: Any, parallelism: int, max_parallelism: int, table: Sequence[int] = ()) -> Any:
    """``owner`` of each key group of an Arrow array or column (an int64 array); with `table`
    (the subtask of each key group, as a live rebalance sets it), the table's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table:
        return pc.take(pa.array(table, pa.int64()), key_groups.cast(pa.int64()))
    return pc.divide(pc.multiply(key_groups.cast(pa.int64()), parallelism), max_parallelism)


def owned_key_groups(subtask: int, parallelism: int, max_parallelism: int, table: Sequence[int] = ()) -> list[int]:
    """The key groups `subtask` owns: its contiguous range, or those `table` gives it."""
    if table:
        return [kg for kg, s in enumerate(table) if s == subtask]
    lo, hi = key_group_range(subtask, parallelism, max_parallelism)
    return list(range(lo, hi + 1))


def default_table(parallelism: int, max_parallelism: int) -> list[int]:
    """The owner of every key group with contiguous ranges (what a rebalance starts from)."""
    return [owner(kg, parallelism, max_parallelism) for kg in range(max_parallelism)]


def spark_key_group(key_columns: str | Sequence[str], max_parallelism: int) -> Any:
    """The Spark column computing the key group of the key `key_columns` (a column name, or
    one or more names in key order), named ``KEY_GROUP`` (int)."""
    from pyspark.sql import functions as F

    columns = [key_columns] if isinstance(key_columns, str) else list(key_columns)
    if not columns:
        raise ValueError("a key needs at least one column")
    hashed = F.xxhash64(*[F.col(c) for c in columns])
    return F.pmod(hashed, F.lit(max_parallelism)).cast("int").alias(KEY_GROUP)


# -- the same function in pure Python -----------------------------------------------------------
SEED = 42  # Spark's XxHash64 seed
_M = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (
    0x9E3779B185EBCA87,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5,
)


def key_group_of(key: Sequence[Any], max_parallelism: int, types: Sequence[str] | None = None) -> int:
    """The key group of one key tuple (one value per key column, in key order), as
    ``spark_key_group`` computes it. `types` names each column's Spark type (string,
    int, bigint, smallint, tinyint, boolean, double, float, date); by default it is
    taken from the Python value: str -> string, bool -> boolean, int -> bigint,
    float -> double."""
    return xxhash64(key, types) % max_parallelism


def xxhash64(values: Sequence[Any], types: Sequence[str] | None = None, seed: int = SEED) -> int:
    """Spark's ``xxhash64(c1, c2, ...)`` of one row (a signed 64-bit int)."""
    if types is not None and len(types) != len(values):
        raise ValueError(f"{len(values)} values but {len(types)} types")
    h = seed & _M
    for i, v in enumerate(values):
        if v is None:
            continue  # Spark: a null column leaves the hash unchanged
        h = _xxh64(_bytes_of(v, types[i] if types is not None else None), h)
    return h - (1 << 64) if h >= 1 << 63 else h


# Arrow types whose values `_bytes_of` hashes exactly as Spark hashes the column (temporal,
# decimal and nested types are left to Spark)
_SPARK_TYPE_OF_ARROW = {
    "string": "string",
    "large_string": "string",
    "int64": "bigint",
    "int32": "int",
    "int16": "smallint",
    "int8": "tinyint",
    "bool": "boolean",
    "double": "double",
    "float": "float",
}


def arrow_key_groups(table: Any, key_columns: Sequence[str], max_parallelism: int) -> Any:
    """The key group of each row of the Arrow `table` (an int32 array, as `spark_key_group`
    computes it), or None when a key column's type is not one hashed here (Spark must
    compute it then). A null in a key column leaves the hash unchanged, as in Spark."""
    import pyarrow as pa  # local: the JobManager imports this module without pyarrow's weight

    found = [_SPARK_TYPE_OF_ARROW.get(str(table.schema.field(c).type)) for c in key_columns]
    types = [t for t in found if t is not None]
    if not key_columns or len(types) != len(found):
        return None
    columns = [table.column(c).to_pylist() for c in key_columns]
    rows = zip(*columns, strict=True)
    return pa.array([key_group_of(row, max_parallelism, types) for row in rows], pa.int32())


def _bytes_of(v: Any, type_: str | None) -> bytes:
    """The bytes Spark hashes for a value of `type_`: 4 bytes for int-sized types, 8 for
    bigint and double, the UTF-8 bytes of a string."""
    t = type_ or (
        "string"
        if isinstance(v, str)
        else "boolean"
        if isinstance(v, bool)
        else "bigint"
        if isinstance(v, int)
        else "double"
        if isinstance(v, float)
        else ""
    )
    if t == "string":
        return str(v).encode("utf-8")
    if t == "boolean":
        return struct.pack("<i", 1 if v else 0)
    if t in ("int", "integer", "smallint", "short", "tinyint", "byte", "date"):
        return struct.pack("<i", v.toordinal() - 719163 if t == "date" else int(v))
    if t in ("bigint", "long"):
        return struct.pack("<q", int(v))
    if t == "double":
        d = float(v)
        return struct.pack("<d", 0.0 if d == 0.0 else (math.nan if math.isnan(d) else d))
    if t == "float":
        f = float(v)
        return struct.pack("<f", 0.0 if f == 0.0 else (math.nan if math.isnan(f) else f))
    raise ValueError(f"key_group_of: cannot hash {v!r} as {type_ or type(v).__name__}")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _xxh64(data: bytes, seed: int) -> int:
    """XXH64 of `data` (unsigned), as Spark's XXH64.hashUnsafeBytes / hashInt / hashLong."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        while i <= n - 32:
            for j in range(4):
                v[j] = _round(v[j], int.from_bytes(data[i + 8 * j : i + 8 * j + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i : i + 8], "little")), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[i : i + 4], "little") * _P1 & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5 & _M), 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def _check(parallelism: int, max_parallelism: int) -> None:
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism {parallelism} must be in 1..{max_parallelism} (max_parallelism)")
