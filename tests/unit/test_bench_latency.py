"""bench/latency_suite.py and its pieces: the figures of the fixed-rate runs (latencies after the warm
files, block bootstrap of p50, per-minute summaries, capacity from a drain, maximum sustainable rate),
the plan (the knee rule, events per file, the run order), the file contents and their expected counts,
the marker watcher, and the report's process names."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import latency_figures as lf
import latency_plan as lp
import latency_report as lr
import latency_workload as lw


def test_latencies_skip_the_warm_files_and_unseen_markers():
    arrival = [10.0, 10.5, 11.0, 11.5]
    seen = {0: 10.2, 1: 11.0, 3: 12.0}
    assert lf.latencies(arrival, seen, warm=1) == [(0.5, 0.5), (1.5, 0.5)]
    assert lf.latencies([], {}, 0) == []


def test_block_bootstrap_interval_contains_the_percentile_and_is_reproducible():
    rng = np.random.default_rng(3)
    xs = list(rng.uniform(0.1, 1.1, size=400))
    e = lf.block_bootstrap_ci(xs, block=40, resamples=500)
    assert e.n == 400 and e.median == pytest.approx(float(np.percentile(xs, 50)))
    assert e.low is not None and e.median is not None and e.high is not None
    assert e.low <= e.median <= e.high and e.high - e.low < 0.3
    assert lf.block_bootstrap_ci(xs, block=40, resamples=500) == e
    one = lf.block_bootstrap_ci([1.0, 2.0, 3.0], block=10)
    assert one.median == 2.0 and one.low is None
    assert lf.block_bootstrap_ci([], block=5).n == 0


def test_blocks_make_the_interval_wider_for_correlated_samples():
    # a saw-tooth (like a checkpoint interval's): neighbours are alike, so small blocks understate the spread
    saw = [((i % 25) / 25) + 0.3 * (i // 100) for i in range(400)]
    narrow = lf.block_bootstrap_ci(saw, block=1, resamples=500)
    wide = lf.block_bootstrap_ci(saw, block=100, resamples=500)
    assert wide.high is not None and wide.low is not None and narrow.high is not None and narrow.low is not None
    assert (wide.high - wide.low) > (narrow.high - narrow.low)


def test_per_minute_groups_by_arrival():
    series = [(5.0, 0.5), (30.0, 1.5), (61.0, 2.0), (130.0, 0.1)]
    rows = lf.per_minute(series)
    assert [(r["minute"], r["n"]) for r in rows] == [(1, 2), (2, 1), (3, 1)]
    assert rows[0]["p50"] == pytest.approx(1.0) and rows[0]["max"] == 1.5


def test_drain_rate_needs_every_marker():
    assert lf.drain_rate([1.0, 1.01], {0: 3.0, 1: 5.0}, 400) == pytest.approx(100.0)
    assert lf.drain_rate([1.0, 1.01], {0: 3.0}, 400) is None
    assert lf.drain_rate([], {}, 0) is None


def _r(rate, p99, ok=True, excluded=False):
    return {"rate": rate, "p99": p99, "ok": ok, "excluded": excluded}


def test_max_sustainable_is_the_highest_counted_rate_within_the_bound():
    runs = [_r(100, 0.5), _r(200, 0.9), _r(300, 1.5), _r(400, 0.8, ok=False), _r(350, 1.0, excluded=True), _r(500, 3)]
    assert (best := lf.max_sustainable(runs, 1.0)) is not None and best["rate"] == 200
    assert (best := lf.max_sustainable(runs, 2.0)) is not None and best["rate"] == 300
    assert lf.max_sustainable([_r(100, 1.2)], 1.0) is None


def test_knee_points_only_while_the_last_point_was_within_the_bound():
    assert lp.knee_next([_r(100, 0.5), _r(200, 1.9)])
    assert not lp.knee_next([_r(100, 0.5), _r(200, 2.5)])
    assert not lp.knee_next([_r(100, 0.5), _r(200, 1.0, ok=False)])
    assert not lp.knee_next([])


def test_events_per_file():
    assert lp.events_per_file(250_000, 25) == 10_000
    assert lp.events_per_file(1, 25) == 1


def test_contents_and_expected_counts_match_the_files_written(tmp_path):
    c = lw.Contents(str(tmp_path), events=50, urls=100, seed=1)
    counted: Counter = Counter()
    for i in range(20):
        lines = c.content(i, 30).decode().splitlines()
        assert len(lines) == 31 and json.loads(lines[-1])["url"] == lw.marker_name(i)
        for line in lines:
            counted[json.loads(line)["url"]] += 1
    assert dict(counted) == c.expected(20, 30)


def test_watcher_reads_markers_from_committed_files_only(tmp_path):
    w = lw.Watcher(str(tmp_path))
    (tmp_path / "part-1").write_text("/page/1,3\n/marker/00007,1\n/page/2,1\n/marker/00012,1\n")
    (tmp_path / ".part-2.inprogress").write_text("/marker/00099,1\n")
    w.scan()
    assert set(w.seen) == {7, 12}
    (tmp_path / "batch-000003.csv").write_text("/marker/00013,1\n")
    w.scan()
    assert set(w.seen) == {7, 12, 13}


def test_process_rss_names_sluice_processes_by_role():
    from procstat import Usage

    u = Usage(
        1.0,
        {},
        {lf.SLUICE: {"zookeeper 11": 100 << 20, "taskmanager 12": 200 << 20, "java 13": 50 << 20, "? 14": 0}},
        0.0,
        0.0,
    )
    r = {"system": lf.SLUICE, "usage": u, "roles": {11: "taskmanager", 12: "spark-jvm"}}
    assert lr.process_rss(r) == [("java 13", 50 << 20), ("spark-jvm 12", 200 << 20), ("taskmanager 11", 100 << 20)]
    assert lr.process_rss({"system": lf.PEER}) == []


# -- the run order (bench/latency_plan.py through bench/run_matrix.py) ------------------------------
S, P = lf.SLUICE, lf.PEER


def test_point_order_alternates_the_first_system_point_by_point_over_the_knee_too():
    full = [(c.system, c.item) for c in lp.point_order(*lp.rates(quick=False))]
    # the order of the loops it replaced: points k = 0.. with (S, P) for even k, (P, S) for odd k,
    # then the knee points continuing the count (k = len(points) + j)
    assert full == [
        (S, 25), (P, 25), (P, 50), (S, 50), (S, 75), (P, 75), (P, 90), (S, 90),
        (S, 100), (P, 100), (P, 110), (S, 110),
    ]  # fmt: skip
    quick = [(c.system, c.item) for c in lp.point_order(*lp.rates(quick=True))]
    assert quick == [(S, 25), (P, 25), (P, 75), (S, 75)]


def test_sustained_order_puts_the_slower_system_first():
    assert lp.sustained_order(P) == [P, S]
    assert lp.sustained_order(S) == [S, P]


def _fake_run(system: str, label: str, p99: float) -> dict:
    from output_check import OutputCheck

    return {
        "system": system, "label": label, "rate": 1.0, "n": 1, "p50": 0.1, "p99": p99, "max": p99,
        "missing": 0, "check": OutputCheck(), "ok": True, "excluded": False,
    }  # fmt: skip


def _suite_calls(quick: bool, sustained_s: float, p99: dict[str, float]) -> list[tuple[str, str]]:
    """The (system, label) of every fixed-rate and sustained run latency_suite makes, with runners that
    return at once (the peer the slower system, its p99 `p99[system]`)."""
    import argparse
    from typing import Any, cast

    import latency_suite as suite

    args = argparse.Namespace(quick=quick, sustained_s=sustained_s, file_rate=25.0, warm_files=1, samples=2)
    run = suite.Invocation(args, "/nonexistent", cast(Any, None))
    calls: list[tuple[str, str]] = []

    def runner(system: str):
        def one(label: str, events: int, files: int, backlog: bool = False) -> dict:
            calls.append((system, label))
            return _fake_run(system, label, p99[system])

        return one

    runners = {S: runner(S), P: runner(P)}
    suite.fixed_rates(run, runners, {S: 1000.0, P: 500.0}, P)
    if sustained_s:
        suite.sustained(run, runners, 250.0, P)
        assert [r["system"] for r in run.res["sustained"]] == [S, P]  # the report's order
    return calls


def test_the_suite_skips_the_slower_systems_50_point_and_a_knee_after_a_slow_point():
    # the order the hand-written loops made: S 25, P 25 | (P 50 skipped: the sustained run) S 50 | S 75,
    # P 75 | P 90, S 90 | knee 100: S (P's 90 % point was over the bound) | knee 110: S | sustained P, S
    assert _suite_calls(False, 300.0, {S: 0.5, P: 3.0}) == [
        (S, "25 %"), (P, "25 %"), (S, "50 %"), (S, "75 %"), (P, "75 %"), (P, "90 %"), (S, "90 %"),
        (S, "100 %"), (S, "110 %"), (P, "sustained, 50 %"), (S, "sustained"),
    ]  # fmt: skip
    assert _suite_calls(False, 0.0, {S: 3.0, P: 0.5}) == [
        (S, "25 %"), (P, "25 %"), (P, "50 %"), (S, "50 %"), (S, "75 %"), (P, "75 %"), (P, "90 %"), (S, "90 %"),
        (P, "100 %"), (P, "110 %"),
    ]  # fmt: skip
    assert _suite_calls(True, 0.0, {S: 0.5, P: 0.5}) == [(S, "25 %"), (P, "25 %"), (P, "75 %"), (S, "75 %")]
