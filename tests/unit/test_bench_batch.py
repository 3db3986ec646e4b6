"""bench/batch_bench.py, bench/failover_bench.py and bench/startup_bench.py: the order in which they
make their runs (through bench/run_matrix.py, the same order as the loops written out before) and
their reports (bench/batch_report.py, failover_report.py, startup_report.py) on synthetic runs."""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import batch_parts
import batch_report
import failover_report
import startup_bench
import startup_report
from batch_runs import failover_order, page_views_order, peer_tuning_order, speculation_order
from stats import Estimate

FACTS = {"commit": "abc1234", "cores": 2, "cpu": "cpu", "ram": "1 GiB", "python": "3", "java": "j", "pyspark": "4"}
FACTS["load"] = "0.00"


# ------------------------------------------------------------------------------------------------
# run order
# ------------------------------------------------------------------------------------------------
def test_page_views_alternate_who_goes_first_round_by_round():
    assert page_views_order(3) == ["Sluice", "peer", "peer", "Sluice", "Sluice", "peer"]
    # the loop it replaces: `for i in range(runs): for system in (S, P) if i % 2 == 0 else (P, S)`
    old = [s for i in range(5) for s in (("Sluice", "peer") if i % 2 == 0 else ("peer", "Sluice"))]
    assert page_views_order(5) == old


def test_the_peer_tunes_every_shuffle_candidate_once_a_round():
    assert peer_tuning_order([1, 2, 4], 2) == [1, 2, 4, 1, 2, 4]
    assert peer_tuning_order([2], 0) == []


def test_failover_strategies_reverse_every_other_round_and_the_victim_follows_the_round():
    assert failover_order(5) == [
        ("region", 0), ("full", 0), ("full", 1), ("region", 1), ("region", 2),
        ("full", 2), ("full", 3), ("region", 3), ("region", 0), ("full", 0),
    ]  # fmt: skip


def test_speculation_arms_turn_by_one_each_round():
    assert speculation_order(4) == [
        "off", "on", "none", "on", "none", "off", "none", "off", "on", "off", "on", "none",
    ]  # fmt: skip


def test_startup_conditions_rotate_each_round():
    names = ["archive", "archive off", "no bytecode"]
    assert startup_bench.run_order(names, 3) == [
        (1, "archive"), (1, "archive off"), (1, "no bytecode"),
        (2, "archive off"), (2, "no bytecode"), (2, "archive"),
        (3, "no bytecode"), (3, "archive"), (3, "archive off"),
    ]  # fmt: skip
    assert startup_bench.run_order(["a", "b"], 2) == [(1, "a"), (1, "b"), (2, "b"), (2, "a")]


class FakePeer:
    def __init__(self, *_args):
        self.started = self.stopped = False

    def spawn(self):
        return self

    def start(self):
        self.started = True

    def stop(self):
        self.stopped = True

    def roots(self):
        return []


def test_the_page_view_part_runs_warm_ups_tuning_and_the_measured_runs_in_the_former_order(monkeypatch):
    """The calls PageViews.run makes, for two configurations and two shuffle candidates, against the
    order the former nested loops made (written out)."""
    args = argparse.Namespace(
        data_dir="d",
        events=10,
        files=1,
        job_timeout=1,
        sluice_configs="1x2,2x1",
        peer_shuffle="1,2",
        tune_runs=2,
        runs=3,
    )
    b: Any = SimpleNamespace(args=args, work="w", runs=[], chosen={}, peer=None, stop_cluster=lambda c: None)
    monkeypatch.setattr(batch_parts, "cached_page_views", lambda *a: ("data", {}))
    monkeypatch.setattr(batch_parts, "BatchPeer", FakePeer)
    calls: list[tuple] = []
    times = {"1x2": 2.0, "2x1": 1.0, 1: 3.0, 2: 2.5}

    def sluice_run(self, phase):
        calls.append(("Sluice", phase, self.current))
        return {"ok": True, "time": times[self.current]}

    def peer_run(self, phase, shuffle):
        calls.append(("peer", phase, shuffle))
        return {"ok": True, "time": times[shuffle], "shuffle": shuffle}

    def use(self, config):
        self.cluster, self.current = config, config
        sluice_run(self, "warm-up")

    monkeypatch.setattr(batch_parts.PageViews, "sluice_run", sluice_run)
    monkeypatch.setattr(batch_parts.PageViews, "peer_run", peer_run)
    monkeypatch.setattr(batch_parts.PageViews, "use", use)
    batch_parts.PageViews(b).run()
    assert calls == [
        ("peer", "warm-up", 1),
        ("peer", "tuning", 1), ("peer", "tuning", 2), ("peer", "tuning", 1), ("peer", "tuning", 2),
        ("Sluice", "warm-up", "1x2"), ("Sluice", "tuning", "1x2"), ("Sluice", "tuning", "1x2"),
        ("Sluice", "warm-up", "2x1"), ("Sluice", "tuning", "2x1"), ("Sluice", "tuning", "2x1"),
        ("Sluice", "measured", "2x1"), ("peer", "measured", 2),
        ("peer", "measured", 2), ("Sluice", "measured", "2x1"),
        ("Sluice", "measured", "2x1"), ("peer", "measured", 2),
    ]  # fmt: skip
    assert b.chosen == {"shuffle": 2, "sluice": "2 TM x 1 slot, p=2"}


def test_the_speculation_part_warms_up_without_a_straggler_then_rotates_the_arms(monkeypatch):
    import generate_page_views

    args = argparse.Namespace(speculation_events=1, speculation_files=1, speculation_runs=2)
    b: Any = SimpleNamespace(args=args, work="w", start_cluster=lambda *a: "c", stop_cluster=lambda c: None)
    monkeypatch.setattr(generate_page_views, "generate", lambda *a, **k: {})
    made: list[tuple[str, str]] = []
    monkeypatch.setattr(batch_parts, "speculation_run", lambda b, c, arm, phase, d, e: made.append((arm, phase)))
    batch_parts.speculation(b)
    assert made == [("none", "warm-up"), ("off", "measured"), ("on", "measured"), ("none", "measured"),
                    ("on", "measured"), ("none", "measured"), ("off", "measured")]  # fmt: skip


# ------------------------------------------------------------------------------------------------
# reports
# ------------------------------------------------------------------------------------------------
def batch_args() -> argparse.Namespace:
    return argparse.Namespace(
        events=1000, files=2, data_dir="bench/data", failover_events=100, failover_files=2, failover_pause=0.1,
        kill_after=1.0, speculation_events=100, speculation_files=2, speculation_delay=0.2, straggle=5.0,
        max_foreign_cores=0.5,
    )  # fmt: skip


def run(n: int, part: str, arm: str, **fields) -> dict:
    r = {"n": n, "part": part, "arm": arm, "phase": "measured", "check_ok": True, "check": "exact", **fields}
    r["ok"] = "error" not in r and r["check_ok"]
    return r


def test_the_batch_report_has_a_table_per_part_and_escapes_a_cell_s_bar():
    runs = [
        run(1, "speculation", "off", time=20.0, jm_time=19.0, backups=0, straggled=True),
        run(2, "speculation", "on", time=10.0, jm_time=9.0, backups=1, backup_won=True, straggled=True),
        run(3, "speculation", "none", error="RunError: a | b"),
    ]
    b = SimpleNamespace(args=batch_args(), runs=runs, notes=["n1"], chosen={})
    text = batch_report.report(b, "python bench/batch_bench.py", FACTS, 12.0, when=0)
    assert "### 3. Speculative execution" in text and "### 1." not in text and "### 2." not in text
    assert (
        "| straggler, speculation on | 1/1/1 | 10.00 (1 run, no interval) | 9.00 (1 run, no interval) | 1 (won) |"
        in text
    )
    assert "| 2 | measured | on | 10.00 | 9.00 | 1 (won) | yes | — | exact |" in text
    assert "failed: RunError: a \\| b |" in text
    assert "**Speculation cuts the time by 50 %** (on / off 0.50 (1 run, no interval)" in text
    assert text.endswith("- n1\n- The invocation took 12 s.\n") and b.notes == ["n1"]


def test_the_failover_part_s_summary_row_lists_each_kept_run():
    rs = [run(i, "failover", "region", detect=0.5, recovery=2.0, redeploy=1.5, restarted=1, tasks=4, restarts=1,
              total=30.0) for i in (1, 2)]  # fmt: skip
    row = batch_report.failover_row("region", rs)
    assert row[0:2] == ["region", "2/2/2"] and row[5:8] == ["1/4, 1/4", "0/2", "1, 1"]
    assert row[8] == "30.0 [30.0–30.0]"


def test_ratio_of_medians_and_the_cut_it_makes():
    assert batch_report.ratio_ci([], [1.0]).median is None
    assert batch_report.ratio_ci([2.0], [4.0]) == Estimate(0.5, None, None, 1)
    assert batch_report.speculation_cut(Estimate(0.6, 0.5, 0.7, 3)) == ("40 % [30–50 %]", pytest.approx(0.4))
    assert batch_report.speculation_cut(Estimate(None, None, None, 0)) == ("—", None)


def test_the_failover_report_marks_a_time_not_reached_and_a_failed_check():
    check = SimpleNamespace(ok=False, describe=lambda: "VIOLATION: x")
    r = {"leader": 6.5, "output_check": check, "load_start": 0.5, "load_end": 1.0}
    assert failover_report.run_row(1, r) == [1, "6.50", "–", "–", "**NO**", "0.50→1.00"]
    assert failover_report.describe(r) == "leader 6.50s; output VIOLATION: x; load 0.50→1.00"
    from datetime import UTC, datetime

    text = failover_report.report([r], 1, 6.0, "Machine: x.", datetime(2024, 1, 2, 3, 4, tzinfo=UTC))
    assert "— 2024-01-02 03:04 UTC" in text and "missed (median — s)" in text
    assert "**OUTPUT CHECK FAILED**, run 1: VIOLATION: x" in text


def test_the_startup_report_has_a_row_per_condition_and_refuses_a_mixed_archive():
    r = {"cluster_start_s": 10.0, "cluster_start_cpu_s": 20.0, "taskmanager_ready_s": [5.0, 6.0], "first_job_s": 3.0}
    rows = {"archive": [{**r, "archive_mapped": True}], "archive off": [{**r, "archive_mapped": False}]}
    text = startup_report.report(rows, 1, 20_000, "python bench/startup_bench.py", FACTS, when=0)
    assert "| archive off | no | 10.00 (1 run, no interval) |" in text and "on 20,000 events" in text
    with pytest.raises(SystemExit):
        startup_report.condition_row("x", [{**r, "archive_mapped": True}, {**r, "archive_mapped": False}])
