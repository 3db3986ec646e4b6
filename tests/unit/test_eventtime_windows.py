"""sluice/eventtime/windows.py: window assigners as plain data, panes, the windows of a pane, and
session merging — checked against brute force over many cases."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sluice.eventtime.windows import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    merge_sessions,
    window_from_config,
)


def brute_windows(ts: int, size: int, slide: int, offset: int) -> list[int]:
    """Starts of every window [s, s + size), s = offset + k * slide, holding ts."""
    return [s for s in range(ts - size - slide, ts + slide + 1) if (s - offset) % slide == 0 and s <= ts < s + size]


@pytest.mark.parametrize(
    "assigner",
    [
        TumblingEventTimeWindows.of(10),
        TumblingEventTimeWindows.of(10, offset_ms=3),
        SlidingEventTimeWindows.of(60, 10),
        SlidingEventTimeWindows.of(25, 10),
        SlidingEventTimeWindows.of(10, 4, offset_ms=-1),
        TumblingProcessingTimeWindows.of(7),
    ],
)
def test_each_record_lands_in_its_pane_and_the_panes_windows_are_exactly_its_windows(assigner):
    rng = random.Random(7)
    ts = np.array([rng.randrange(-500, 500) for _ in range(400)], dtype=np.int64)
    panes = assigner.pane_starts(ts)
    for t, p in zip(ts.tolist(), panes.tolist(), strict=True):
        assert p <= t < p + assigner.pane_ms
        assert (p - assigner.offset_ms) % assigner.pane_ms == 0
        assert assigner.window_starts(p) == brute_windows(t, assigner.size_ms, assigner.slide_ms, assigner.offset_ms)
        for start in assigner.window_starts(p):
            assert p in assigner.window_panes(start)


def test_a_sliding_window_is_built_from_gcd_panes():
    w = SlidingEventTimeWindows.of(60_000, 10_000)
    assert w.pane_ms == 10_000 and w.panes_per_window == 6
    assert SlidingEventTimeWindows.of(25, 10).pane_ms == 5
    assert w.window_panes(0) == [0, 10_000, 20_000, 30_000, 40_000, 50_000]


@pytest.mark.parametrize(
    "assigner",
    [
        TumblingEventTimeWindows.of(1_000, 250),
        SlidingEventTimeWindows.of(60_000, 10_000),
        TumblingProcessingTimeWindows.of(5_000),
        EventTimeSessionWindows.with_gap(30_000),
    ],
)
def test_assigners_round_trip_as_plain_data(assigner):
    assert window_from_config(assigner.to_config()) == assigner


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: TumblingEventTimeWindows.of(0), ValueError, "size must be > 0"),
        (lambda: TumblingEventTimeWindows.of(-5), ValueError, "size must be > 0"),
        (lambda: TumblingEventTimeWindows.of(2.5), TypeError, "whole number"),  # type: ignore[arg-type]  # a float on purpose
        (lambda: SlidingEventTimeWindows.of(10, 20), ValueError, "larger than the window size"),
        (lambda: SlidingEventTimeWindows.of(10, 0), ValueError, "slide must be > 0"),
        (lambda: TumblingEventTimeWindows.of(10, offset_ms=10), ValueError, "offset"),
        (lambda: EventTimeSessionWindows.with_gap(0), ValueError, "gap must be > 0"),
        (lambda: window_from_config({"kind": "hopping"}), ValueError, "unknown window kind"),
    ],
)
def test_a_bad_window_says_what_to_fix(build, error, match):
    with pytest.raises(error, match=match):
        build()


def brute_sessions(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def test_sessions_merge_records_and_earlier_sessions_that_overlap_or_touch():
    out = merge_sessions([(0, 10), (50, 60)], [12, 9, 40, 100], gap_ms=10)
    # 9 -> [9,19) joins [0,10) and 12's [12,22); 40 -> [40,50) touches [50,60); 100 alone
    assert [(m.start, m.end) for m in out] == [(0, 22), (40, 60), (100, 110)]
    assert [(m.sessions, sorted(m.records)) for m in out] == [((0,), [0, 1]), ((1,), [2]), ((), [3])]


def test_session_merging_matches_brute_force():
    rng = random.Random(3)
    for _ in range(300):
        gap = rng.randrange(1, 20)
        old = brute_sessions([(t, t + gap) for t in (rng.randrange(0, 200) for _ in range(rng.randrange(0, 6)))])
        new = [rng.randrange(0, 200) for _ in range(rng.randrange(0, 8))]
        out = merge_sessions(old, new, gap)
        assert [(m.start, m.end) for m in out] == brute_sessions(old + [(t, t + gap) for t in new])
        assert sorted(i for m in out for i in m.sessions) == list(range(len(old)))  # each kept once
        assert sorted(i for m in out for i in m.records) == list(range(len(new)))
        for m in out:
            assert all(m.start <= new[i] < m.end for i in m.records)
            assert all(m.start <= old[i][0] and old[i][1] <= m.end for i in m.sessions)
