"""The memory backend's one-pass fold (`_fold_into`, into its dict of key -> (key group, *values))
writes and reports exactly what the generic read-fold-write path (`_fold_batch`, then `put_many`)
does, for every aggregate function, null partials and values, new keys, and sums that do not change
a value (zero, or a float too small to move a large one)."""

from __future__ import annotations

import random

import pytest

from taskmanager.operators.keyed_aggregate import _fold_batch, _fold_into

VALUES = [None, 0, 1, 2, -3, 0.0, 1e-30, 1e30, 2.5]


@pytest.mark.parametrize("merges", [["count"], ["sum"], ["min"], ["max"], ["sum", "count"], ["min", "sum"]])
def test_the_one_pass_fold_matches_the_generic_path(merges):
    rng = random.Random(hash(tuple(merges)) & 0xFFFF)
    for _round in range(200):
        state = {f"k{i}": (i % 7, *(rng.choice(VALUES) for _ in merges)) for i in range(rng.randrange(0, 12))}
        keys = rng.sample([f"k{i}" for i in range(15)], rng.randrange(0, 15))
        kgs = [int(k[1:]) % 7 for k in keys]
        partials = [[rng.choice(VALUES) for _ in keys] for _ in merges]
        generic = dict(state)
        olds = [None if (e := generic.get(k)) is None else e[1:] for k in keys]
        expected = _fold_batch(olds, keys, kgs, partials, merges)
        for key, kg, value in zip(*expected, strict=True):
            generic[key] = (kg, *value)
        fast = dict(state)
        assert _fold_into(fast, keys, kgs, partials, merges) == expected
        assert fast == generic
