"""The memory backend's one-pass add (`MemoryKeyedValues.add_many`, which a keyed count or sum uses)
writes and reports exactly what the generic read-fold-write path (`get_many`, the operator's
`_fold_batch`, then `put_many`) does: null partials and values, new keys, and sums that do not
change a value (zero, or a float too small to move a large one)."""

from __future__ import annotations

import random

import pytest

from taskmanager.operators.keyed_aggregate import _fold_batch
from taskmanager.state.memory_backend import MemoryKeyedValues

VALUES = [None, 0, 1, 2, -3, 0.0, 1e-30, 1e30, 2.5]


def backend(entries: dict) -> MemoryKeyedValues:
    state = MemoryKeyedValues()
    state.entries = dict(entries)
    return state


@pytest.mark.parametrize("merge", ["count", "sum"])
def test_the_one_pass_add_matches_the_generic_path(merge):
    rng = random.Random(7 if merge == "count" else 8)
    for _round in range(200):
        entries = {f"k{i}": (i % 7, rng.choice(VALUES)) for i in range(rng.randrange(0, 12))}
        keys = rng.sample([f"k{i}" for i in range(15)], rng.randrange(0, 15))
        kgs = [int(k[1:]) % 7 for k in keys]
        values = [rng.choice(VALUES) for _ in keys]
        generic = backend(entries)
        expected = _fold_batch(generic.get_many(keys, kgs), keys, kgs, [values], [merge])
        generic.put_many(*expected)
        fast = backend(entries)
        assert fast.add_many(keys, kgs, values) == expected
        assert fast.entries == generic.entries
