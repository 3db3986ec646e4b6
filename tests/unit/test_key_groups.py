"""sluice/key_groups.py: ranges partition 0..max_parallelism-1, and owner() agrees with them;
the pure-Python key group agrees with what Spark computed, for one key column and several."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from sluice.key_groups import KEY_GROUP, key_group_of, key_group_range, owner, owners, xxhash64


@pytest.mark.parametrize("max_parallelism", [1, 2, 7, 128, 1000])
def test_ranges_cover_every_key_group_exactly_once_in_subtask_order(max_parallelism):
    candidates = {1, 2, 3, 5, max_parallelism // 2 or 1, max_parallelism - 1 or 1, max_parallelism}
    for p in sorted(c for c in candidates if c <= max_parallelism):
        ranges = [key_group_range(i, p, max_parallelism) for i in range(p)]
        covered = [kg for lo, hi in ranges for kg in range(lo, hi + 1)]
        assert covered == list(range(max_parallelism)), (p, ranges)
        assert all(lo <= hi for lo, hi in ranges), (p, ranges)  # no subtask without key groups
        sizes = [hi - lo + 1 for lo, hi in ranges]
        assert max(sizes) - min(sizes) <= 1, (p, sizes)


@pytest.mark.parametrize(("parallelism", "max_parallelism"), [(1, 1), (3, 128), (4, 128), (7, 128), (5, 7), (10, 1000)])
def test_owner_agrees_with_the_ranges(parallelism, max_parallelism):
    for subtask in range(parallelism):
        lo, hi = key_group_range(subtask, parallelism, max_parallelism)
        assert {owner(kg, parallelism, max_parallelism) for kg in range(lo, hi + 1)} == {subtask}


def test_owners_of_an_arrow_column_agree_with_owner():
    kgs = pa.array(list(range(128)), pa.int32())
    assert owners(kgs, 3, 128).to_pylist() == [owner(kg, 3, 128) for kg in range(128)]


def test_ranges_for_128_over_3():
    assert [key_group_range(i, 3, 128) for i in range(3)] == [(0, 42), (43, 85), (86, 127)]


@pytest.mark.parametrize(
    ("subtask", "parallelism", "max_parallelism"), [(3, 3, 128), (-1, 3, 128), (0, 0, 128), (0, 129, 128)]
)
def test_out_of_range_arguments_are_refused(subtask, parallelism, max_parallelism):
    with pytest.raises(ValueError):
        key_group_range(subtask, parallelism, max_parallelism)


def test_importing_it_loads_neither_pyspark_nor_pyarrow():
    """The JobManager imports it: no Spark (and no Arrow) until an expression is built."""
    probe = (
        "import sys, sluice.key_groups as k; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'pyarrow', 'py4j'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
    assert KEY_GROUP == "__kg"  # the column name keyed state on disk already carries


# Computed with Spark (pyspark 4.3.0) before composite keys existed, from the expression the
# runtime used then and still uses for one column: pmod(xxhash64(col(key)), lit(128)).
# (string key, its key group of 128) -- one-column keys must keep these key groups.
SINGLE_KEY_GROUPS_128 = [
    ("/a", 50),
    ("", 4),
    ("DE", 85),
    ("h\u00e9llo w\u00f6rld \u65e5\u672c", 120),
    ("a-much-longer-string-more-than-thirty-two-bytes-long!", 42),
]

# Spark's xxhash64 of one row, by column type; several columns hash in order, each hash seeding
# the next, a null leaving it unchanged. (values, types, Spark's xxhash64(...))
SPARK_XXHASH64: list[tuple[list[Any], list[str], int]] = [
    (["/a"], ["string"], -9169123223703377614),
    ([1], ["bigint"], -7001672635703045582),
    ([1], ["int"], -6698625589789238999),
    ([0.5], ["double"], 3031145945194818975),
    ([True], ["boolean"], -6698625589789238999),
    ([-0.0], ["double"], -5252525462095825812),  # Spark hashes -0.0 as 0.0
    ([None], ["string"], 42),  # the seed
    ([-7], ["bigint"], -1663473129717591079),
    ([2**40], ["bigint"], 1821704621099523357),
    ([2**31 - 1], ["int"], 1508894993788531228),
    (["/a", 1], ["string", "bigint"], -5911734481909092453),
    ([1, "/a"], ["bigint", "string"], -6826108612776814651),
    (["/a", 1, True], ["string", "int", "boolean"], 2859747021067111900),
    (["", 0, False], ["string", "int", "boolean"], -1470396166893023684),
    (["DE", -7], ["string", "bigint"], -11397324328535741),
    (["h\u00e9llo w\u00f6rld \u65e5\u672c", 2**40], ["string", "bigint"], 1088443856437410955),
    (["a-much-longer-string-more-than-thirty-two-bytes-long!", None], ["string", "bigint"], 2993468915693872170),
    ([None, 5], ["string", "bigint"], 6251837290343458373),
    ([None, 5, True], ["string", "int", "boolean"], 1906077883424555237),
]


@pytest.mark.parametrize(("key", "expected"), SINGLE_KEY_GROUPS_128)
def test_a_one_column_key_keeps_its_key_group(key, expected):
    assert key_group_of([key], 128) == expected
    assert key_group_of([key], 128, ["string"]) == expected


@pytest.mark.parametrize(("values", "types", "expected"), SPARK_XXHASH64)
def test_xxhash64_agrees_with_spark(values, types, expected):
    assert xxhash64(values, types) == expected


def test_a_composite_key_hashes_its_tuple():
    assert key_group_of(["/a", 1], 128) == (-5911734481909092453) % 128 == 27  # Spark: pmod(..., 128) = 27
    assert key_group_of(["/a", 1], 128) != key_group_of([1, "/a"], 128)  # the order of the columns counts
    assert key_group_of(["DE", "phone"], 128) == key_group_of(("DE", "phone"), 128)


def test_the_same_key_tuple_has_the_same_key_group_in_every_process():
    """Nothing depends on the interpreter's string hashing (PYTHONHASHSEED) or the process."""
    keys = [["DE", "phone", 3], ["FR", "tablet", -1], ["h\u00e9", "", 2**40]]
    probe = (
        "import json, sys; from sluice.key_groups import key_group_of; "
        "print(json.dumps([key_group_of(k, 128) for k in json.loads(sys.argv[1])]))"
    )
    here = [key_group_of(k, 128) for k in keys]
    for seed in ("0", "1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", probe, json.dumps(keys)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        )
        assert json.loads(out.stdout) == here


def test_values_it_cannot_hash_are_refused():
    with pytest.raises(ValueError, match="cannot hash"):
        key_group_of([object()], 128)
    with pytest.raises(ValueError, match="2 values but 1 types"):
        xxhash64(["a", "b"], ["string"])


def test_arrow_key_groups_agree_with_spark_for_every_type_hashed_in_python():
    from sluice.key_groups import arrow_key_groups

    rows = [v for v in SPARK_XXHASH64 if len(v[0]) == 1 and v[0][0] is not None]
    arrow_types = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "boolean": pa.bool_()}
    arrow_types["double"] = pa.float64()
    for values, types, expected in rows:
        table = pa.table({"k": pa.array(values, arrow_types[types[0]])})
        assert arrow_key_groups(table, ["k"], 128).to_pylist() == [expected % 128], (values, types)
    composite = pa.table({"a": ["/a", "", None], "b": pa.array([1, 0, 5], pa.int64())})
    assert arrow_key_groups(composite, ["a", "b"], 128).to_pylist() == [
        -5911734481909092453 % 128,
        key_group_of(["", 0], 128, ["string", "bigint"]),
        6251837290343458373 % 128,  # a null leaves the hash unchanged
    ]
    keys = pa.table({"url": [s for s, _ in SINGLE_KEY_GROUPS_128]})
    assert arrow_key_groups(keys, ["url"], 128).to_pylist() == [kg for _, kg in SINGLE_KEY_GROUPS_128]


def test_arrow_key_groups_leave_other_types_to_spark():
    from sluice.key_groups import arrow_key_groups

    table = pa.table({"t": pa.array([0], pa.timestamp("ms")), "s": ["x"]})
    assert arrow_key_groups(table, ["s", "t"], 128) is None
    assert arrow_key_groups(table, [], 128) is None
