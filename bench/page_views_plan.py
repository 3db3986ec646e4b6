"""The run order of bench/page_views_bench.py (through bench/run_matrix.py). Pure.

- Warm-up runs: checkpoints on, off, on, ... (as many as asked, the last round cut short).
- Throughput runs: per round both modes, on, off | off, on | on, off ... (the modes reversed every
  other round, so that a drift, JIT warm-up or other load, favours neither mode).
- Recovery runs: per round one run per spare kind, in the order given (cold, warm | cold, warm ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from run_matrix import Cell, Order, items_only, matrix

ON_MS = 1000  # the checkpoint interval of the "on" runs
INTERVALS = (ON_MS, 0)  # checkpoints on, off


def warmup_intervals(runs: int) -> list[int]:
    """The checkpoint interval of each warm-up run."""
    return items_only(INTERVALS, -(-runs // len(INTERVALS)))[:runs]


def throughput_order(runs: int) -> list[Cell[int]]:
    """The measured throughput runs: Cell.item the checkpoint interval, Cell.round 1-based."""
    return matrix([""], INTERVALS, runs, items_order=Order.REVERSE)


def recovery_order(runs: int, spares: Sequence[str]) -> list[Cell[str]]:
    """The recovery runs: Cell.item the spare kind ("cold" or "warm"), Cell.round 1-based."""
    return matrix([""], spares, runs)
