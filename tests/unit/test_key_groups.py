"""sluice/key_groups.py: ranges partition 0..max_parallelism-1, and owner() agrees with them."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from sluice.key_groups import KEY_GROUP, key_group_range, owner, owners


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
