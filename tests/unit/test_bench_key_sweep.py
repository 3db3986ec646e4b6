"""bench/key_sweep.py: the run order (every key count and system equally often, the systems and the
key counts alternating; the same order as before it was made with bench/run_matrix.py) and the
report's figures (bench/key_sweep_report.py: medians of kept runs only, the ratio, the growth per
doubling of the keys)."""

from __future__ import annotations

import os
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import key_sweep as ks
import key_sweep_report as ksr
import throughput_plan as ts

FACTS = {"commit": "x", "cores": 2, "cpu": "c", "ram": "r", "python": "3", "java": "j", "pyspark": "4", "load": "0"}


def test_the_plan_alternates_systems_and_key_order_and_runs_each_pair_equally():
    order = ks.plan([1, 2, 4], runs=3)
    assert Counter((k, c.system) for k, c in order) == {(k, s): 3 for k in (1, 2, 4) for s in (ts.SLUICE, ts.PEER)}
    firsts = [order[i][1].system for i in range(0, len(order), 2)]
    assert firsts.count(ts.SLUICE) in (4, 5) and firsts.count(ts.PEER) in (4, 5)  # who goes first alternates
    assert [k for k, _ in order[:6:2]] == [1, 2, 4] and [k for k, _ in order[6:12:2]] == [4, 2, 1]


def test_the_plan_is_the_order_of_before_the_run_matrix():
    S, P = ts.SLUICE, ts.PEER
    assert [(k, c.system) for k, c in ks.plan([1, 2, 4], runs=2)] == [
        (1, S), (1, P), (2, P), (2, S), (4, S), (4, P),
        (4, P), (4, S), (2, S), (2, P), (1, P), (1, S),
    ]  # fmt: skip
    assert {c for _, c in ks.plan([1], runs=1)} == {ts.MATCHED_SLUICE, ts.MATCHED_PEER}


def run(n, keys, system, window, ok=True, excluded=False):
    return {
        "n": n,
        "keys": keys,
        "system": system,
        "phase": f"keys {keys}",
        "window": window,
        "rate": 1.0,
        "ok": ok,
        "check_ok": ok,
        "excluded": excluded,
    }


def test_the_report_gives_medians_of_kept_runs_the_ratio_and_the_growth_per_doubling():
    runs = [
        {**run(0, 1000, ts.SLUICE, 99.0), "phase": "warm-up"},  # never counted
        run(1, 1000, ts.SLUICE, 2.0),
        run(2, 1000, ts.PEER, 1.0),
        run(3, 2000, ts.SLUICE, 3.0),
        run(4, 2000, ts.SLUICE, 50.0, ok=False),  # output wrong: left out
        run(5, 2000, ts.PEER, 1.5),
        run(6, 2000, ts.PEER, 40.0, excluded=True),  # the load rule: left out
    ]
    text = ksr.report(FACTS, "cmd", runs, [1000, 2000], 6000, [])
    rows = {
        line.split(" | ")[0]: line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| 1,000 |") or line.startswith("| 2,000 |")
    }
    first, second = rows["| 1,000"], rows["| 2,000"]
    assert first[1].startswith("2.00") and first[3].startswith("1.00") and first[5] == "0.50"
    assert second[1].startswith("3.00") and second[3].startswith("1.50") and second[5] == "0.50"
    assert second[6] == "1.50" and second[7].rstrip(" |") == "1.50"  # 3.0 / 2.0 and 1.5 / 1.0
