"""What bench/windowed_bench.py and bench/state_bench.py share (bench/paired_runs.py, bench/spark_peer.py,
and bench/stats.py's run filters): the CSV reader in both modes, the report's rows and cells, the peer's
shuffle text, the abort rule. Small hand-checked cases; no Spark, no cluster."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))

import paired_runs
from bench_common import aborted, write_atomically
from paired_report import run_cells, summary_groups
from paired_runs import PEER, SLUICE, read_rows, shuffle_text
from stats import est, kept, median_ci, valid


def run(n, system, item, rate, phase="measured", ok=True, excluded=False, **more):
    return {"n": n, "phase": phase, "system": system, "item": item, "rate": rate, "ok": ok, "excluded": excluded} | more


def test_read_rows_strict_refuses_other_field_counts(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("x,1\ny,2")
    got, per = read_rows([str(p)], ["k", "v"], strict=True)
    assert got.values.tolist() == [["x", "1"], ["y", "2"]] and per == {str(p): 2}
    with pytest.raises(ValueError, match="lines of 2 fields; expected 3"):
        read_rows([str(p)], ["k", "v", "w"], strict=True)
    loose, _ = read_rows([str(p)], ["k", "v", "w"])  # the missing field left to the check
    assert loose.values.tolist() == [["x", "1", ""], ["y", "2", ""]]


def test_valid_kept_and_est():
    runs = [run(1, SLUICE, "a", 10), run(2, SLUICE, "a", 30, excluded=True), run(3, SLUICE, "a", 99, ok=False)]
    assert [r["n"] for r in valid(runs)] == [1, 2] and [r["n"] for r in kept(runs)] == [1]
    assert est(runs, "rate") == median_ci([10], excluded=1)


def test_summary_groups_pair_the_systems_per_item():
    runs = [
        run(1, SLUICE, "a", 200),
        run(2, PEER, "a", 100),
        run(3, SLUICE, "b", 50),
        run(4, PEER, "b", 70, phase="warm-up"),  # not measured: b has no peer row
    ]
    rows = [(i, s, r.median, ratio) for i, s, _rs, r, ratio in summary_groups(runs, "item", ["a", "b"])]
    assert rows == [("a", SLUICE, 200, 2.0), ("a", PEER, 100, 2.0), ("b", SLUICE, 50, None)]


def test_run_cells():
    r = {"system": PEER, "check_ok": False, "check": "VIOLATION: " + "x" * 50, "state_peak": None, "shuffle": 200}
    cfg, state, out = run_cells(r, 10, 15)
    assert cfg == "local[2], shuffle 200" and state == "memory —, disk —" and out == "**NO**: VIOLATION: xxxx"
    cfg, _state, out = run_cells({"system": SLUICE, "check_ok": False, "error": "RunError: boom"}, 8, 15)
    assert cfg == "1 TM x 2 slots, p=2" and out == "failed: RunError"


def test_shuffle_text():
    class Bench:
        item_key = "item"
        runs = [
            run(1, PEER, "a", 1000.4, phase="tuning", shuffle=2),
            run(2, PEER, "a", 900, phase="tuning", shuffle=200),
        ]
        shuffle = {"a": 2}

    assert shuffle_text(Bench(), [2, 200], str.upper) == (  # type: ignore[arg-type]  # a fake bench: the fields read
        "A: 2, the fastest of 2, 200 in one tuning run each (A at 2: 1,000 events/s; A at 200: 900 events/s)"
    )
    Bench.runs, Bench.shuffle = [], {}
    assert shuffle_text(Bench(), [2], str.upper) == "2 (not tuned)"  # type: ignore[arg-type]  # a fake bench


def test_aborted_marks_failures_but_not_interrupts():
    class Run:
        failed = False
        notes: list[str] = []

    said: list[str] = []
    r = Run()
    assert aborted(r, KeyboardInterrupt("signal 15"), "it", said.append) and not r.failed
    assert not aborted(r, RuntimeError("bad\nmore"), "it", said.append) and r.failed
    assert r.notes == ["aborted: RuntimeError: bad"]
    assert said[0] == "interrupted (signal 15): stopping it"


def test_write_atomically(tmp_path):
    p = tmp_path / "go-0000.json"
    write_atomically(str(p), "{}")
    assert p.read_text() == "{}" and os.listdir(tmp_path) == ["go-0000.json"]


def test_the_peer_sides_run_their_own_script():
    import spark_peer
    import state_bench
    import windowed_bench

    assert windowed_bench.PeerSide.script.endswith("windowed_bench.py")
    assert state_bench.PeerSide.script.endswith("state_bench.py")
    assert issubclass(state_bench.PeerSide, spark_peer.PeerSide)
    assert issubclass(windowed_bench.SluiceSide, paired_runs.SluiceSide)
    assert not windowed_bench.SluiceSide.command_in_errors and state_bench.SluiceSide.command_in_errors


def test_conduct_runs_warm_ups_tuning_and_alternating_rounds_in_the_suites_order(tmp_path):
    """windowed_bench.py's and state_bench.py's order (`conduct`, in bench/run_matrix.py's terms):
    written out for 2 items, 2 rounds and 2 shuffle candidates."""
    import argparse
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Item:
        name: str

    class Side:
        def __init__(self, *args):
            pass

        def spawn(self):
            return self

        def start(self):
            return self

        def stop(self):
            pass

    made: list[tuple] = []

    class Bench(paired_runs.PairedBench):
        def run(self, system, item, phase, shuffle=None, **extra):
            made.append((phase, item.name, system, shuffle))
            return {"rate": 100.0 if shuffle == 2 else 50.0, "ok": True}

    args = argparse.Namespace(job_timeout=1.0, out="-", keep_workdir=False)
    bench = Bench(args, str(tmp_path))
    code = paired_runs.conduct(
        bench,
        [SLUICE, PEER],
        (Side, Side),  # type: ignore[arg-type]  # stand-ins for the two sides: nothing starts
        [Item("a"), Item("b")],
        2,
        [2, 200],
        noun="item",
        plan={},
        label=str,
        report=lambda: "",
        after_warmup=lambda: made.append(("after warm-up",)),
        temp=False,
        t_begin=0.0,
    )
    assert code == 0 and bench.shuffle == {"a": 2, "b": 2}
    S, P = SLUICE, PEER
    assert made == [
        ("warm-up", "a", S, None), ("warm-up", "a", P, 2), ("warm-up", "b", S, None), ("warm-up", "b", P, 2),
        ("after warm-up",),
        ("tuning", "a", P, 2), ("tuning", "a", P, 200), ("tuning", "b", P, 2), ("tuning", "b", P, 200),
        ("measured", "a", S, None), ("measured", "a", P, None), ("measured", "b", S, None), ("measured", "b", P, None),
        ("measured", "a", S, None), ("measured", "a", P, None), ("measured", "b", S, None), ("measured", "b", P, None),
    ]  # fmt: skip
