"""bench/run_matrix.py: the order in which the suites make their runs."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from run_matrix import MEASURED, WARM_UP, Cell, Order, by, interleave, items_only, matrix, warm_ups


def order(cells):
    return [(c.round, c.item, c.system) for c in cells]


def test_the_same_order_runs_every_item_on_every_system_each_round():
    cells = matrix(["S", "P"], ["a", "b"], 2)
    assert order(cells) == [(1, "a", "S"), (1, "a", "P"), (1, "b", "S"), (1, "b", "P"),
                            (2, "a", "S"), (2, "a", "P"), (2, "b", "S"), (2, "b", "P")]  # fmt: skip
    assert {c.phase for c in cells} == {MEASURED}


def test_rotated_systems_go_first_equally_often_and_reversed_items_run_backwards_every_other_round():
    cells = matrix(["S", "P"], [1, 2], 2, items_order=Order.REVERSE, systems_order=Order.ROTATE)
    assert order(cells) == [(1, 1, "S"), (1, 1, "P"), (1, 2, "P"), (1, 2, "S"),
                            (2, 2, "P"), (2, 2, "S"), (2, 1, "S"), (2, 1, "P")]  # fmt: skip
    firsts = [cells[i].system for i in range(0, len(cells), 2)]
    assert firsts.count("S") == firsts.count("P")


def test_alternated_systems_turn_every_round_but_keep_one_order_within_a_round():
    cells = matrix(["S", "P"], ["a", "b"], 2, systems_order=Order.ALTERNATE)
    assert order(cells) == [(1, "a", "S"), (1, "a", "P"), (1, "b", "S"), (1, "b", "P"),
                            (2, "a", "P"), (2, "a", "S"), (2, "b", "P"), (2, "b", "S")]  # fmt: skip


def test_three_systems_rotate_through_every_first_place():
    cells = matrix(["A", "B", "C"], ["x"], 3, systems_order=Order.ROTATE)
    assert [c.system for c in cells] == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]


@pytest.mark.parametrize("bad", [{"items_order": Order.ROTATE}, {"systems_order": Order.REVERSE}])
def test_an_order_that_does_not_apply_is_refused(bad):
    with pytest.raises(ValueError):
        matrix(["S"], [1], 1, **bad)


def test_warm_ups_run_each_item_once_per_system_in_round_zero():
    assert warm_ups(["S", "P"], ["a"]) == [Cell("S", "a", 0, WARM_UP), Cell("P", "a", 0, WARM_UP)]


def test_items_alone_run_forward_and_back():
    assert items_only(["a", "b", "c"], 3, Order.REVERSE) == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]


def test_interleave_spreads_the_shorter_list_evenly_and_keeps_both_orders():
    assert interleave([1, 2, 3, 4], ["x", "y"]) == [1, "x", 2, 3, "y", 4]
    assert interleave([], ["x"]) == ["x"] and interleave([1], []) == [1]


def test_measurements_group_in_first_seen_order():
    runs = [{"s": "P", "v": 1}, {"s": "S", "v": 2}, {"s": "P", "v": 3}]
    assert by(runs, lambda r: r["s"]) == {"P": [runs[0], runs[2]], "S": [runs[1]]}
