"""The plan of bench/latency_suite.py: which rates each system runs, in which order (through
bench/run_matrix.py), and when the knee points are tested. Pure.

The fixed-rate points run at POINTS % of each system's own capacity, then the KNEE points; the systems
alternate run by run, the first system alternating too (Sluice first at the first point, the peer at
the second, ...), over the knee points as well. A knee point is tested while the system's last point
was counted and its p99 within max(BOUNDS). The sustained run is made by the slower system first.
"""

from __future__ import annotations

from collections.abc import Sequence

from latency_figures import BOUNDS, SYSTEMS, counted
from run_matrix import Cell, Order, matrix

POINTS = (25, 50, 75, 90)  # % of the system's own capacity
QUICK_POINTS = (25, 75)
KNEE = (100, 110)  # tested while the previous point's p99 was within max(BOUNDS)


def rates(quick: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the fixed-rate points, the knee points) in % of each system's capacity; quick: no knee."""
    return (QUICK_POINTS, ()) if quick else (POINTS, KNEE)


def point_order(points: Sequence[int], knee: Sequence[int]) -> list[Cell[int]]:
    """The fixed-rate runs in order: Cell.system the system, Cell.item the % of its capacity."""
    return matrix(SYSTEMS, [*points, *knee], 1, systems_order=Order.ROTATE)


def sustained_order(slower: str) -> list[str]:
    """The systems of the sustained run: the slower one (whose 50 % point it is) first."""
    return [slower, *[s for s in SYSTEMS if s != slower]]


def knee_next(points: Sequence[dict], bound: float = max(BOUNDS)) -> bool:
    """Test the next knee rate: the system's last point was counted and its p99 within `bound`."""
    return bool(points) and counted(points[-1]) and points[-1]["p99"] is not None and points[-1]["p99"] <= bound


def events_per_file(rate: float, file_rate: float) -> int:
    return max(1, round(rate / file_rate))
