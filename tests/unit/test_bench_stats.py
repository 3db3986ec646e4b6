"""bench/stats.py: medians with a percentile-bootstrap 95 % interval, reproducible from the runs,
and the load rule that leaves runs out of them by rule."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import stats


@pytest.mark.parametrize("n", [2, 3, 4, 5, 10, 25])
def test_the_interval_contains_the_median_and_lies_within_the_runs(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        xs = list(rng.lognormal(12, 0.2, size=n))
        e = stats.median_ci(xs)
        assert e.n == n and e.median == pytest.approx(float(np.median(xs)))
        assert e.low is not None and e.median is not None and e.high is not None
        assert min(xs) <= e.low <= e.median <= e.high <= max(xs)


def test_the_interval_is_reproducible_and_follows_the_seed():
    xs = [154_440.0, 148_020.0, 160_310.0, 151_000.0, 157_500.0, 149_900.0]
    assert stats.median_ci(xs) == stats.median_ci(list(xs))
    assert stats.median_ci(xs, seed=1) == stats.median_ci(xs, seed=1)
    wide, narrow = stats.median_ci(xs, confidence=0.95), stats.median_ci(xs, confidence=0.5)
    assert wide.low is not None and narrow.low is not None and narrow.high is not None and wide.high is not None
    assert wide.low <= narrow.low <= narrow.high <= wide.high


def test_more_runs_of_the_same_spread_narrow_the_interval():
    rng = np.random.default_rng(3)
    few, many = stats.median_ci(rng.normal(100, 5, 5)), stats.median_ci(rng.normal(100, 5, 200))
    assert many.high is not None and many.low is not None and few.high is not None and few.low is not None
    assert many.high - many.low < few.high - few.low


def test_the_formatter():
    e = stats.Estimate(154_440.0, 148_020.0, 160_310.0, 5)
    assert stats.fmt_estimate(e) == "154,440 [148,020–160,310]"
    assert stats.fmt_estimate(stats.Estimate(1.904, 1.8, 2.04, 3), ".2f") == "1.90 [1.80–2.04]"


def test_one_run_has_no_interval():
    e = stats.median_ci([154_440.0, None])
    assert (e.median, e.low, e.high, e.n) == (154_440.0, None, None, 1)
    assert stats.fmt_estimate(e) == "154,440 (1 run, no interval)"


def test_no_runs_and_all_runs_excluded_say_so():
    assert stats.fmt_estimate(stats.median_ci([])) == "—"  # nothing was run
    runs = [{"x": 1.0, "load_start": 5.0, "load_end": 1.0}, {"x": 2.0, "load_start": 1.0, "load_end": 4.0}]
    assert stats.apply_load_rule(runs, threshold=3.0) == []
    e = stats.estimate(runs, "x")
    assert (e.median, e.n, e.excluded) == (None, 0, 2)
    assert stats.fmt_estimate(e) == "no valid runs (2 left out by the load rule)"


def test_the_load_rule_marks_and_leaves_out_runs_above_the_threshold_at_start_or_end():
    runs = [
        {"x": 10.0, "load_start": 1.0, "load_end": 2.9},
        {"x": 99.0, "load_start": 3.1, "load_end": 1.0},  # loaded at its start
        {"x": 20.0, "load_start": 2.0, "load_end": 3.0},  # at the threshold: kept
        {"x": 30.0},  # load not recorded: kept
    ]
    kept = stats.apply_load_rule(runs, threshold=3.0)
    assert [r["x"] for r in kept] == [10.0, 20.0, 30.0]
    assert [r["excluded"] for r in runs] == [False, True, False, False]
    e = stats.estimate(runs, "x")
    assert (e.median, e.n, e.excluded) == (20.0, 3, 1)
    assert stats.fmt_load(runs[1]) == "3.10→1.00 (excluded)" and stats.fmt_load(runs[3]) == "—→—"
    text = stats.load_rule_text(3.0, [("Sluice", runs), ("peer", [{"excluded": False}])])
    assert "exceeded 3" in text and "Sluice 1 of 4 left out" in text and "peer" not in text
    assert "no run exceeded it" in stats.load_rule_text(3.0, [("peer", [{"excluded": False}])])
    assert stats.apply_load_rule(runs, threshold=None) == runs  # rule off


def test_the_default_threshold_scales_with_the_cores():
    assert stats.default_load_threshold(2) == 2 * stats.LOAD_FACTOR
    assert stats.default_load_threshold() == (os.cpu_count() or 1) * stats.LOAD_FACTOR
    assert isinstance(stats.load1(), float)


def test_with_three_runs_the_interval_is_their_range():
    # a resampled median of 3 values is one of them, each end with probability 7/27 (bench/README.md)
    e = stats.median_ci([3.0, 1.0, 2.0])
    assert (e.low, e.median, e.high) == (1.0, 2.0, 3.0)
