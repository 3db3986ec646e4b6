"""bench/external_spark_bench.py and its report: the run order and the section (no cluster, no Spark)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import external_spark_bench as eb
import external_spark_report as er

FACTS = dict.fromkeys(("commit", "cores", "cpu", "ram", "python", "java", "pyspark", "load"), "x")  # machine facts


def test_run_order_rotates_who_goes_first_every_round():
    order = [(c.round, c.system) for c in eb.run_order(["local", "standalone", "connect"], 4)]
    assert order == [
        (1, "local"),
        (1, "standalone"),
        (1, "connect"),
        (2, "standalone"),
        (2, "connect"),
        (2, "local"),
        (3, "connect"),
        (3, "local"),
        (3, "standalone"),
        (4, "local"),
        (4, "standalone"),
        (4, "connect"),
    ]
    assert [(c.round, c.system) for c in eb.run_order(["connect", "local"], 3)] == [
        (1, "connect"),
        (1, "local"),
        (2, "local"),
        (2, "connect"),
        (3, "connect"),
        (3, "local"),
    ]


def test_parse_args():
    q = eb.parse_args(["--quick", "--systems", "local, connect"])
    assert (q.runs, q.events, q.files, q.systems) == (2, 100_000, 20, ["local", "connect"])
    with pytest.raises(SystemExit):
        eb.parse_args(["--systems", "local,yarn"])


def run(rnd: int, system: str, seconds: float, **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"round": rnd, "system": system, "submit_to_end": seconds, "throughput": 100_000 / seconds}
    r.update(cpu_s=20.25, foreign_cores=0.1, excluded=False, restarts=0, counts_ok=True)
    r.update(extra)
    return r


def args(systems: list[str], limit: float = 0.3) -> argparse.Namespace:
    return argparse.Namespace(events=100_000, files=20, interval=1000, runs=2, max_foreign_cores=limit, systems=systems)


def test_report_rows_ratios_and_every_run():
    runs = [run(1, "local", 10.0), run(1, "connect", 12.5), run(2, "connect", 8.0, counts_ok=False, restarts=1)]
    runs += [run(2, "local", 8.0, excluded=True)]
    text = er.report(args(["local", "connect"]), "cmd", FACTS, runs, ["a note"])
    assert "| local | 10,000 (1 run, no interval) | 10.00 (1 run, no interval) | 20.2 (1 run, no interval) " in text
    assert "| 1 / 2 | 2 of 2 | 11,250 [10,000–12,500] |" in text
    assert "| connect | 8,000 (1 run, no interval) |" in text and "| 1 / 2 | 1 of 2 |" in text
    assert "- connect / local throughput, ratio of medians over runs the load rule kept: 0.80" in text
    assert "- connect / local throughput, ratio of medians over every exact run: 0.71" in text
    assert "| 2 | connect | 8.00 | 12,500 | 20.2 | 0.10 | 1 | NO |" in text
    assert "| 2 | local | 8.00 | 12,500 | 20.2 | 0.10 (excluded) | 0 | yes |" in text
    assert "more than 0.3 foreign cores" in text and text.endswith("- a note\n\n")


def test_report_without_local_has_no_ratios():
    text = er.report(args(["connect"], limit=0), "cmd", FACTS, [run(1, "connect", 10.0)], [])
    assert "ratio of medians" not in text and "more than no limit foreign cores" in text
    assert text.endswith("| 1 | connect | 10.00 | 10,000 | 20.2 | 0.10 | 0 | yes |\n\n")
