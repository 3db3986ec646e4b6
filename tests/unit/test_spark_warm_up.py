"""The Spark warm-up's input file: fixed, shared, and never left half-written or in a
per-process directory that a killed TaskManager would leave behind."""

from __future__ import annotations

import json
import os

from taskmanager.spark_engine import warm_up_input


def test_one_file_reused_and_nothing_else_left(tmp_path):
    first = warm_up_input(str(tmp_path))
    again = warm_up_input(str(tmp_path))
    assert first == again
    assert os.listdir(tmp_path) == [os.path.basename(first)]
    rows = [json.loads(line) for line in open(first)]
    assert len(rows) == 200 and {r["k"] for r in rows} == {f"k{i}" for i in range(7)}


def test_a_damaged_file_is_rewritten(tmp_path):
    path = warm_up_input(str(tmp_path))
    with open(path, "w") as f:
        f.write('{"k": "k0", "v"')  # cut short, as by a crash of an older writer
    assert warm_up_input(str(tmp_path)) == path
    assert sum(1 for _ in open(path)) == 200
    assert os.listdir(tmp_path) == [os.path.basename(path)]
