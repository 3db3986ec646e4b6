"""bench/page_views_bench.py and its pieces: the run order (bench/page_views_plan.py through
bench/run_matrix.py, and the order the script makes its runs in, each compared with the order its
hand-written loops made, written out) and the
report's tables (bench/page_views_report.py)."""

from __future__ import annotations

import argparse
import os
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import page_views_bench as pvb
import page_views_plan as plan
import page_views_report as report
from output_check import OutputCheck


def test_warmup_runs_alternate_on_and_off():
    assert plan.warmup_intervals(0) == []
    assert plan.warmup_intervals(1) == [1000]
    assert plan.warmup_intervals(2) == [1000, 0]
    assert plan.warmup_intervals(3) == [1000, 0, 1000]


def test_throughput_runs_reverse_the_modes_every_other_round():
    # on, off | off, on | on, off
    order = [(c.round, c.item) for c in plan.throughput_order(3)]
    assert order == [(1, 1000), (1, 0), (2, 0), (2, 1000), (3, 1000), (3, 0)]
    assert plan.throughput_order(0) == []


def test_recovery_runs_take_the_spares_in_turn():
    order = [(c.round, c.item) for c in plan.recovery_order(2, ["cold", "warm"])]
    assert order == [(1, "cold"), (1, "warm"), (2, "cold"), (2, "warm")]
    assert [(c.round, c.item) for c in plan.recovery_order(2, ["warm"])] == [(1, "warm"), (2, "warm")]


class _FakeCluster:
    made: list[str] = []

    def __init__(self, directory: str, taskmanagers: int, slots: int):
        self.dir = directory
        _FakeCluster.made.append(os.path.basename(directory))

    def start(self):
        return self

    def stop(self) -> list[int]:
        return []


def _invocation(tmp_path, **kw) -> pvb.Invocation:
    args = argparse.Namespace(
        events=10, files=1, runs=2, warmup_runs=3, recovery_runs=2, recovery_events=10, recovery_files=1,
        spare="both", job_timeout=1.0, **kw,
    )  # fmt: skip
    return pvb.Invocation(args, str(tmp_path))


def test_the_throughput_part_runs_in_the_order_of_the_loops_it_replaced(tmp_path, monkeypatch):
    calls: list[tuple[str, int]] = []

    def fake_run(cluster, data, out, interval, events, expected, timeout) -> dict:
        calls.append((os.path.basename(out), interval))
        return {
            "mode": "on" if interval else "off", "job_id": "j", "submit_to_end": 1.0, "throughput": 10.0,
            "running_to_end": 0.5, "checkpoints": [], "counts_ok": True, "restarts": 0,
        }  # fmt: skip

    monkeypatch.setattr(pvb, "generate", lambda *a, **k: {"/page/1": 1})
    monkeypatch.setattr(pvb, "Cluster", _FakeCluster)
    monkeypatch.setattr(pvb, "throughput_run", fake_run)
    run = _invocation(tmp_path)
    pvb.throughput_part(run)
    # warm-ups w = 0.. with 1000 if w is even else 0; then rounds i with (1000, 0) if i is even else (0, 1000)
    assert calls == [
        ("out-warmup-0", 1000), ("out-warmup-1", 0), ("out-warmup-2", 1000),
        ("out-0-1000", 1000), ("out-0-0", 0), ("out-1-0", 0), ("out-1-1000", 1000),
    ]  # fmt: skip
    assert len(run.warmup) == 3 and [r["mode"] for r in run.tput] == ["on", "off", "off", "on"]


def test_the_recovery_part_runs_in_the_order_of_the_loops_it_replaced(tmp_path, monkeypatch):
    calls: list[str] = []
    _FakeCluster.made = []

    def fake_recovery(cluster, data, out, timeout) -> dict:
        calls.append(os.path.basename(out))
        return {
            "job_id": "j", "first_checkpoint": 1.0, "detected": 0.1, "running": 1.0, "checkpoint_after": 1.5,
            "first_written_file": 2.0, "first_written_file_name": "f", "first_file": 1.9, "first_file_name": "f",
            "states": [], "end_state": None,
        }  # fmt: skip

    monkeypatch.setattr(pvb, "generate", lambda *a, **k: {})
    monkeypatch.setattr(pvb, "Cluster", _FakeCluster)
    monkeypatch.setattr(pvb, "warm_all_taskmanagers", lambda *a: "3/3")
    monkeypatch.setattr(pvb, "recovery_run", fake_recovery)
    monkeypatch.setattr(pvb, "check_sluice_output", lambda out, expected: OutputCheck())
    run = _invocation(tmp_path)
    pvb.recovery_part(run)
    # for i in rounds: for spare in (cold, warm): n += 1
    assert calls == ["out-recovery-1", "out-recovery-2", "out-recovery-3", "out-recovery-4"]
    assert _FakeCluster.made == [f"cluster-recovery-{n}" for n in (1, 2, 3, 4)]
    assert [r["spare"] for r in run.recovery] == ["cold", "warm", "cold", "warm"]
    assert not run.failed and not run.notes


def test_report_rows_keep_their_cells():
    r = {
        "mode": "on", "throughput": 150000.0, "submit_to_end": 6.666, "wall": 7.77, "running_to_end": None,
        "checkpoints": [{"duration_ms": 120, "size_bytes": 2 << 20}], "counts_ok": False, "load_start": 0.5,
        "load_end": 0.7,
    }  # fmt: skip
    assert report.throughput_row(1, r) == [1, "1000 ms", "150,000", "6.67", "7.77", "—", 1, "**NO**", "0.50→0.70"]
    assert report.overhead_row("throughput", "events/s", True, [r], [{**r, "throughput": 160000.0}]) == [
        "events/s",
        "150,000",
        "160,000",
        "+6.7 %",
    ]
    assert report.overhead_row("wall", "wall s", False, [r], [{**r, "wall": None}])[3] == "— %"
    rec = {
        "spare": "cold", "first_checkpoint": 3.2, "detected": 0.3, "running": 2.1, "checkpoint_after": 2.6,
        "first_written_file": None, "first_file": 2.7, "restored": 5, "checkpoint_before": 5,
        "states": [(0.31, "RESTARTING"), (2.1, "RUNNING")], "output_check": OutputCheck(),
    }  # fmt: skip
    assert report.recovery_row(1, rec)[2:] == [
        "3.2", "0.30", "2.10", "2.60", "—", "2.70", "5 / 5", "RESTARTING@0.31 → RUNNING@2.1", "yes", "—→—",
    ]  # fmt: skip
    assert report.recovery_median_row("cold", [rec]) == [
        "**median**",
        "cold",
        "3.2",
        "0.30",
        "**2.10**",
        "2.60",
        "**—**",
        "2.70",
    ]


def test_report_sections():
    args = types.SimpleNamespace(events=1000, files=2, recovery_events=2000, recovery_files=4)
    facts = dict.fromkeys(report.MACHINE, "x")
    text = report.report(args, facts, "cmd", [], [], [], ["a note"], 0.1)
    assert "| load average at start | x |" in text and "### Throughput" not in text and "- a note" in text
