"""bench/profile_hot_path.py's pure pieces: py-spy's raw samples into buckets
(bench/profile_hot_path_samples.py) and the report's rows (bench/profile_hot_path_report.py)."""

from __future__ import annotations

import os
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import profile_hot_path_report as report
import profile_hot_path_samples as samples

RAW = (
    "thread (0x1): MainThread;<module> (main.py:1);wait (threading.py:10) 100\n"
    "thread (0x2): task-a-0;Task._run (taskmanager/task.py:5);Task._run_source (taskmanager/task.py:9);"
    "FileSource.next_batch (taskmanager/source.py:3) 30\n"
    "thread (0x3): task-a-1;Task._run (taskmanager/task.py:5);InputGate.poll_all (taskmanager/gate.py:7) 50\n"
    "thread (0x4): input;RemoteInputChannel.run (taskmanager/exchange.py:1);"
    "ipc_to_table (taskmanager/exchange.py:2) 20\n"
    "thread (0x5): heartbeat;beat (taskmanager/hb.py:1) 10\n"
)


def test_raw_samples_go_to_their_buckets_in_seconds(tmp_path):
    path = tmp_path / "raw.txt"
    path.write_text(RAW)
    rows = samples.parse_raw(str(path))
    assert rows[1][0] == "task-a-0" and rows[1][1][0] == ("Task._run", "taskmanager/task.py") and rows[1][2] == 30
    res = samples.classify([(str(path), 2.0)])  # 100 MainThread samples in 2 s: 0.02 s a sample
    assert res["rate"] == pytest.approx(50.0)
    assert res["task"]["Spark: spark.read.json plan, py4j (FileSource.next_batch)"] == pytest.approx(0.6)
    assert res["task"]["idle: input gate wait (InputGate.poll_all)"] == pytest.approx(1.0)
    assert res["source"] == pytest.approx(0.6)
    assert res["exchange"]["receive: Arrow IPC decode (ipc_to_table in RemoteInputChannel.run)"] == pytest.approx(0.4)
    assert res["other"] == pytest.approx(2.2)  # MainThread and the heartbeat thread


def test_report_rows():
    r = {"submit_to_end": 20.123, "throughput": 99382.1, "counts_ok": False}
    assert report.run_row("reference 1", "no", r) == ["reference 1", "no", "20.12", "99,382", "NO"]
    assert report.run_row("**profiled**", "x", r, strong=True)[2:4] == ["**20.12**", "**99,382**"]
    assert report.task_row("b", 1.0, 4.0, lambda s: None) == ["b", "1.00", "25.0 %", "—"]
    assert report.task_row("busy", 2.0, 4.0, lambda s: s * 10, strong=True) == [
        "**busy**",
        "**2.00**",
        "**50.0 %**",
        "**20**",
    ]
    assert report.leaf_row("f (m.py)", "g (taskmanager/t.py)", 1.0, 4.0) == [
        "`f (m.py)`",
        "`g (taskmanager/t.py)`",
        "1.00",
        "25.0 %",
    ]


def test_report_section_has_every_table():
    args = types.SimpleNamespace(events=10, files=1, urls=5, rate=100, blocking=False)
    facts = {"cores": 2, "cpu": "c", "ram": "1 GiB", "python": "3", "pyspark": "3.5", "java": "j", "load": "0"}
    run = {"submit_to_end": 1.0, "throughput": 10.0, "counts_ok": True}
    res = {"task": {"idle: x": 1.0, "Spark: y": 3.0}, "exchange": {"send: z": 0.5}, "other": 0.1, "source": 2.0}
    res |= {"leaves": {("f (m.py)", ""): 1.0}, "rate": 99.0}
    spy = types.SimpleNamespace(behind=0, errors="0 of 10")
    text = report.report(args, facts, "cmd", run, [run], run, res, 4, 2.0, [spy])
    for head in ("| run | py-spy |", "### Task threads", "### Data-exchange", "### Top 15 leaf frames"):
        assert head in text
    assert "| **busy (not idle)** | **3.00** | **75.0 %** | **750** |" in text
