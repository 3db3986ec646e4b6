"""The section bench/hash_exchange_bench.py appends to bench/RESULTS.md, pure: per batch size the median
seconds per batch of each routing (spark, arrow) with its bootstrap interval, and rows/s at the medians."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from markdown import paragraph, section, table
from stats import fmt_estimate, median_ci

ROUTINGS = ("spark", "arrow")  # the key groups computed by Spark; in Python on the Arrow table
TITLE = "hash exchange of an Arrow batch: key groups by Spark or in Python"
HEADER = ("rows per batch", "spark: s per batch", "arrow: s per batch", "spark rows/s", "arrow rows/s")


def size_row(rows: int, spark: Sequence[float], arrow: Sequence[float]) -> list[str]:
    """A batch size's row from each routing's seconds per batch."""
    s, a = median_ci(spark), median_ci(arrow)
    assert s.median is not None and a.median is not None, "every size has at least one run"
    return [
        f"{rows:,}",
        fmt_estimate(s, ".4f"),
        fmt_estimate(a, ".4f"),
        f"{rows / s.median:,.0f}",
        f"{rows / a.median:,.0f}",
    ]


def report(
    facts: dict,
    command: str,
    sizes: Sequence[int],
    runs: int,
    results: Mapping[tuple[int, str], Sequence[float]],
    subtasks: int,
    when: float | None = None,
) -> str:
    """The section from `results`: (rows, routing) -> seconds per batch of each run, into `subtasks`
    subpartitions."""
    return section(
        TITLE,
        command,
        facts,
        [
            paragraph(
                f"{runs} runs per system and size, alternating; {subtasks} subpartitions; routings identical in "
                "every run."
            ),
            table(HEADER, [size_row(n, results[(n, "spark")], results[(n, "arrow")]) for n in sizes]),
        ],
        when=when,
    )
