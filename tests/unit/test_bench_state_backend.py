"""bench/state_backend_bench.py's run order and its report (bench/state_backend_bench_report.py) on
hand-made runs; no cluster."""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from state_backend_bench import SYSTEMS, run_order
from state_backend_bench_report import report

FACTS = {"commit": "c", "cores": 2, "cpu": "x", "ram": "1 GiB", "python": "3", "java": "j", "pyspark": "4", "load": "0"}


def test_the_systems_alternate_run_by_run():
    order = [(c.system, c.round - 1) for c in run_order(["memory", "rocksdb-incremental", "rocksdb-full"], 2)]
    assert order == [
        ("memory", 0), ("rocksdb-incremental", 0), ("rocksdb-full", 0),
        ("memory", 1), ("rocksdb-incremental", 1), ("rocksdb-full", 1),
    ]  # fmt: skip
    assert [(c.system, c.round - 1) for c in run_order(["rocksdb-full", "memory"], 1)] == [
        ("rocksdb-full", 0),
        ("memory", 0),
    ]


def run(system: str, i: int, **more) -> dict:
    r = {
        "system": system,
        "job_id": f"j{i}",
        "exact": True,
        "wall": 100.0,
        "load_rate": 50_000.0 + i,
        "update_rate": 30_000.0,
        "peak_rss": 500 * 2**20,
        "ckpt_sizes": [10_000, 30_000],
        "ckpt_durations": [0.5, 0.7],
        "max_ckpt_size": 3 * 2**20,
        "checkpoints": 7,
        "restore": 1.5,
        "recovery": 4.25,
        "updates_per_checkpoint": [0.011, 0.0123],
    }
    return r | more


def test_report_rows_in_the_systems_order_and_the_ratios():
    args = argparse.Namespace(keys=200_000, updates_pct=20, interval_ms=2000, batch=50_000, kill=True)
    runs = [
        run("rocksdb-full", 0, ckpt_sizes=[40_000]),
        run("memory", 0, exact=False),
        run("rocksdb-incremental", 0),
        run("memory", 1),
    ]
    text = report(args, "python bench/state_backend_bench.py", FACTS, runs, list(SYSTEMS))
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| system")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| memory", "| rocksdb-incremental", "| rocksdb-full"]
    assert rows[1].startswith("| memory | 2 (1) | 50,000 [50,000–50,001] | 30,000 [30,000–30,000] | 500 MiB [")
    assert rows[3] == (
        "| rocksdb-full | 1 (1) | 50,000 (1 run, no interval) | 30,000 (1 run, no interval) | 500 MiB (1 run) | "
        "39 KiB (1 run) | 0.60 (1 run, no interval) | 3 MiB (1 run) | 1.50 (1 run, no interval) | "
        "4.2 (1 run, no interval) |"
    )
    assert "- memory job j0: WRONG, wall 100 s, 7 checkpoints, update-phase sizes ['10 KiB', '29 KiB']" in text
    assert "median 50.0%, mean 50.0%" in text  # incremental 20,000 against full 40,000
    assert "kill -9 of the keyed count TaskManager half way through the updates." in text
