"""bench/before_after.py's pure parts (bench/before_after_report.py): the order its runs are made in
and its section, from runs made up here."""

from __future__ import annotations

import os
import sys
from argparse import Namespace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from before_after_report import run_order, section
from run_matrix import MEASURED, WARM_UP

AFTER, BEFORE = "after (abc1234)", "before (01234567)"
FACTS = {"commit": "abc1234", "cores": 2, "cpu": "x", "ram": "1 GiB", "python": "3", "java": "17", "pyspark": "4"}
FACTS["load"] = "1 1 1"


def test_the_run_order_flips_the_clusters_every_round_and_keeps_it_for_every_input_of_a_round():
    cells = run_order([AFTER, BEFORE], [12500, 50000], 3)
    a, b = AFTER, BEFORE
    assert [(c.round, c.item, c.system) for c in cells] == [
        (0, 12500, a), (0, 12500, b), (0, 50000, a), (0, 50000, b),
        (1, 12500, b), (1, 12500, a), (1, 50000, b), (1, 50000, a),
        (2, 12500, a), (2, 12500, b), (2, 50000, a), (2, 50000, b),
        (3, 12500, b), (3, 12500, a), (3, 50000, b), (3, 50000, a),
    ]  # fmt: skip
    assert [c.phase for c in cells] == [WARM_UP] * 4 + [MEASURED] * 12


def test_the_run_order_is_the_loop_it_replaced():
    names, items, runs = [AFTER, BEFORE], [12500, 50000, 100000], 4
    old = []
    for r in range(runs + 1):  # round 0: the uncounted warm-up job of each cluster
        order = names if r % 2 == 0 else names[::-1]
        for per_file in items:
            for name in order:
                old.append((r, per_file, name))
    assert [(c.round, c.item, c.system) for c in run_order(names, items, runs)] == old


def args(**kw) -> Namespace:
    base = dict(events=1_000_000, urls=10_000, taskmanagers=1, slots=2, checkpoint_interval=1000, runs=3)
    return Namespace(**(base | {"title": "page views: this commit against an earlier one"} | kw))


def test_the_section_gives_each_inputs_medians_the_ratio_and_the_memory():
    inputs = {12500: ("/in-12500", {"/a": 1, "/b": 2}), 50000: ("/in-50000", {"/a": 3, "/b": 0})}
    runs = {
        (AFTER, 12500): [{"submit_to_end": 5.0, "counts_ok": True}, {"submit_to_end": 4.0, "counts_ok": False}],
        (BEFORE, 12500): [{"submit_to_end": 8.0, "counts_ok": True}],
        (AFTER, 50000): [{"submit_to_end": 6.0, "counts_ok": True}],
    }
    memory = {AFTER: (700 * 2**20, 600 * 2**20), BEFORE: None}
    text = section(args(), "cmd", FACTS, (BEFORE, AFTER), inputs, runs, memory, failed=True)
    lines = text.splitlines()
    assert lines[0].endswith(" UTC — page views: this commit against an earlier one")
    assert "on 1,000,000 events (2 distinct urls of 10,000), 1 TaskManager(s) x 2 slots per cluster" in text
    i = lines.index("| input | condition | seconds | events/s | runs (output exact) |")
    assert lines[i + 2 : i + 7] == [
        "| 12,500 events/file | before (01234567) | 8.00 (1 run, no interval) | 125,000 | 1 of 1 |",
        "| 12,500 events/file | after (abc1234) | 5.00 (1 run, no interval) | 200,000 | 1 of 2 |",
        "| 12,500 events/file | after / before (time) | 0.62 |  |  |",
        "| 50,000 events/file | before (01234567) | — | — | 0 of 0 |",
        "| 50,000 events/file | after (abc1234) | 6.00 (1 run, no interval) | 166,667 | 1 of 1 |",
    ]
    assert lines[i + 7] == ""  # no ratio without a median of both
    j = lines.index("| condition | peak RSS | RSS after the last job |")
    assert lines[j + 2 : j + 4] == ["| before (01234567) | — | — |", "| after (abc1234) | 700 MiB | 600 MiB |"]
    assert text.endswith("The run stopped early (see the log); the figures above are the runs it finished.\n")


def test_a_finished_run_has_no_early_stop_line():
    text = section(args(), "cmd", FACTS, (BEFORE, AFTER), {}, {}, {}, failed=False)
    assert "stopped early" not in text and text.endswith("| after (abc1234) | — | — |\n")
