"""bench/hash_exchange_bench.py: its run order (the same as before it was made with bench/run_matrix.py)
and its section (bench/hash_exchange_report.py)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import hash_exchange_report as hxr

FACTS = {"commit": "x", "cores": 2, "cpu": "c", "ram": "r", "python": "3", "java": "j", "pyspark": "4", "load": "0"}


def test_the_routings_alternate_which_goes_first():
    import hash_exchange_bench as hx

    cells = hx.order(1000, 3)
    assert [c.system for c in cells] == ["spark", "arrow", "arrow", "spark", "spark", "arrow"]
    assert {c.item for c in cells} == {1000} and [c.round for c in cells] == [1, 1, 2, 2, 3, 3]


def test_the_section_gives_each_routings_median_and_rows_per_second():
    results = {
        (1000, "spark"): [0.05, 0.06, 0.055],
        (1000, "arrow"): [0.001],
        (20, "spark"): [1.0],
        (20, "arrow"): [2.0],
    }
    text = hxr.report(FACTS, "cmd", [1000, 20], 3, results, 3)
    lines = text.splitlines()
    assert lines[0].endswith(f"UTC — {hxr.TITLE}")
    assert "3 runs per system and size, alternating; 3 subpartitions; routings identical in every run." in lines
    assert "| 1,000 | 0.0550 [0.0500–0.0600] | 0.0010 (1 run, no interval) | 18,182 | 1,000,000 |" in lines
    assert lines[-1] == "| 20 | 1.0000 (1 run, no interval) | 2.0000 (1 run, no interval) | 20 | 10 |"
