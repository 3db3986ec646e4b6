"""The run matrix of a benchmark (bench/README.md "Harness"): which system runs which item (a
workload, a configuration, a key count) in which round, in the order the runs are made. Pure.

Every suite alternates its systems run by run, so that a drift of the shared machine (another
process, a warmer cache, a throttled core) falls on both systems alike. The orders the suites use:

- `Order.SAME`: the same order every round (items, and within each item the systems as given);
- `Order.ROTATE` (systems): the systems' order turned by one for every round and item, so that
  each system goes first equally often (A B, B A, A B, ...);
- `Order.ALTERNATE` (systems): the systems' order turned by one every round, the same for every
  item of a round (round 1: A B at every item, round 2: B A at every item, ...);
- `Order.REVERSE` (items): the items forward in even rounds and backward in odd ones, so that a
  slow drift over a round does not always favour the first item.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
WARM_UP, MEASURED = "warm-up", "measured"


class Order(enum.StrEnum):
    SAME = "same"
    ROTATE = "rotate"
    ALTERNATE = "alternate"
    REVERSE = "reverse"


@dataclass(frozen=True)
class Cell(Generic[T]):
    """One run to make: `system` runs `item` in `round` (1-based; 0 for a warm-up)."""

    system: str
    item: T
    round: int
    phase: str = MEASURED


def _turned(seq: Sequence[Any], by: int) -> list[Any]:
    by %= len(seq) if seq else 1
    return [*seq[by:], *seq[:by]]


def matrix(
    systems: Sequence[str],
    items: Sequence[T],
    runs: int,
    *,
    items_order: Order = Order.SAME,
    systems_order: Order = Order.SAME,
) -> list[Cell[T]]:
    """The measured runs in order: `runs` rounds, each running every item on every system."""
    if items_order not in (Order.SAME, Order.REVERSE):
        raise ValueError(f"items are ordered {Order.SAME} or {Order.REVERSE}, not {items_order}")
    if systems_order not in (Order.SAME, Order.ROTATE, Order.ALTERNATE):
        raise ValueError(f"systems are ordered {Order.SAME}, {Order.ROTATE} or {Order.ALTERNATE}, not {systems_order}")
    cells: list[Cell[T]] = []
    for r in range(runs):
        order = list(items) if items_order is Order.SAME or r % 2 == 0 else list(reversed(items))
        for i, item in enumerate(order):
            turn = {Order.ROTATE: r + i, Order.ALTERNATE: r}.get(systems_order, 0)
            cells += [Cell(s, item, r + 1) for s in _turned(systems, turn)]
    return cells


def warm_ups(systems: Sequence[str], items: Sequence[T]) -> list[Cell[T]]:
    """One warm-up run per item and system (the first job on a fresh JVM loads and compiles)."""
    return [Cell(s, item, 0, WARM_UP) for item in items for s in systems]


def items_only(items: Sequence[T], runs: int, items_order: Order = Order.SAME) -> list[T]:
    """The items of a matrix whose items name their system themselves (a configuration of one
    system), in run order."""
    return [c.item for c in matrix([""], items, runs, items_order=items_order)]


def interleave(a: Sequence[T], b: Sequence[T]) -> list[T]:
    """The items of both lists, each in its own order, spread so that each list's runs fall evenly
    among the other's (two sweeps of different lengths run as one alternating sequence)."""
    out: list[T] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if j >= len(b) or (i < len(a) and (i + 0.5) / len(a) <= (j + 0.5) / len(b)):
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out


def by(
    runs: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]
) -> dict[Hashable, list[dict[str, Any]]]:
    """The measurements (run dicts) grouped by `key`, groups and runs in first-seen order."""
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(key(r), []).append(r)
    return groups
