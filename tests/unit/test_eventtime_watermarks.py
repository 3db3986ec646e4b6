"""sluice/eventtime/watermarks.py: the strategy a job gives, a source subtask's generator, and the
valve that makes a task's input watermark the minimum over its active input channels."""

from __future__ import annotations

import pytest

from sluice.checkpoints.rescale import redistribute
from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.eventtime.watermarks import (
    EmitActive,
    EmitIdle,
    EmitWatermark,
    WatermarkGenerator,
    WatermarkStrategy,
    WatermarkValve,
)
from sluice.graph import OperatorKind

S = WatermarkStrategy


# -- strategy ----------------------------------------------------------------------------------
def test_a_strategy_round_trips_as_plain_data():
    s = S.for_bounded_out_of_orderness(5_000).with_timestamp_column("ts").with_idleness(30_000)
    assert s.to_config() == {"out_of_orderness_ms": 5_000, "timestamp_column": "ts", "idleness_ms": 30_000}
    assert S.from_config(s.to_config()) == s
    assert S.for_monotonous_timestamps().with_timestamp_column("ts").out_of_orderness_ms == 0


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: S.for_bounded_out_of_orderness(-1), ValueError, ">= 0 ms"),
        (lambda: S.for_bounded_out_of_orderness(1.5), TypeError, "whole number"),  # type: ignore[arg-type]  # a float on purpose
        (lambda: S.for_bounded_out_of_orderness(True), TypeError, "whole number"),
        (lambda: S.for_monotonous_timestamps().with_timestamp_column(""), ValueError, "column name"),
        (lambda: S.for_monotonous_timestamps().with_idleness(0), ValueError, "> 0 ms"),
        (lambda: S.for_monotonous_timestamps().check(), ValueError, "no timestamp column"),
    ],
)
def test_a_bad_strategy_says_what_to_fix(build, error, match):
    with pytest.raises(error, match=match):
        build()


# -- generator ---------------------------------------------------------------------------------
def test_the_watermark_trails_the_largest_timestamp_by_the_bound_and_never_goes_back():
    g = WatermarkGenerator(S.for_bounded_out_of_orderness(100).with_timestamp_column("ts"), now_ms=0)
    assert g.current() == MIN_WATERMARK
    assert g.on_batch(1_000, now_ms=1) == [EmitWatermark(899)]
    assert g.on_batch(950, now_ms=2) == []  # out of order, within the bound: nothing new
    assert g.on_batch(None, now_ms=3) == []  # a batch without timestamps
    assert g.on_batch(1_500, now_ms=4) == [EmitWatermark(1_399)]
    assert g.end_of_input() == [EmitWatermark(MAX_WATERMARK)]
    assert g.end_of_input() == []


def test_a_source_without_input_for_the_idleness_timeout_says_it_is_idle_then_active_again():
    g = WatermarkGenerator(S.for_monotonous_timestamps().with_timestamp_column("ts").with_idleness(500), now_ms=0)
    assert g.on_batch(10, now_ms=100) == [EmitWatermark(9)]
    assert not g.idle_due(599)
    assert g.on_tick(now_ms=599, has_pending_input=False) == []
    assert g.idle_due(600)
    assert g.on_tick(now_ms=600, has_pending_input=False) == [EmitIdle()]
    assert not g.idle_due(5_000)  # said once: the source is not asked again
    assert g.on_tick(now_ms=5_000, has_pending_input=False) == []
    assert g.on_batch(20, now_ms=5_001) == [EmitActive(), EmitWatermark(19)]


def test_a_source_with_pending_input_is_never_idle_however_long_it_emits_nothing():
    """An unread file or split, or one in progress, holds the watermark back: no idleness, and
    the watermark does not move either (docs/event-time.md, "Idleness")."""
    g = WatermarkGenerator(S.for_bounded_out_of_orderness(100).with_timestamp_column("ts").with_idleness(200), now_ms=0)
    assert g.on_batch(1_000, now_ms=50) == [EmitWatermark(899)]
    for now in range(250, 60_000, 250):  # a minute of ticks, each after the timeout: input pending
        assert g.idle_due(now)
        assert g.on_tick(now, has_pending_input=True) == []
        assert not g.idle and g.emitted == 899
    # a batch that took longer than the timeout: nothing ticked while it ran
    assert g.on_batch(2_000, now_ms=120_000) == [EmitWatermark(1_899)]
    # the input is read: idle once the timeout passed since the last input (the last batch)
    assert g.on_tick(120_199, has_pending_input=False) == []
    assert g.on_tick(120_200, has_pending_input=False) == [EmitIdle()]


def test_the_idleness_timeout_counts_from_the_last_input_not_the_last_batch():
    g = WatermarkGenerator(S.for_monotonous_timestamps().with_timestamp_column("ts").with_idleness(500), now_ms=0)
    assert g.on_tick(500, has_pending_input=True) == []  # a file was listed: input at 500
    assert not g.idle_due(999)
    assert g.on_tick(999, has_pending_input=False) == []
    assert g.on_tick(1_000, has_pending_input=False) == [EmitIdle()]


def test_an_idle_source_that_finds_input_is_active_again_before_its_records():
    g = WatermarkGenerator(S.for_bounded_out_of_orderness(10).with_timestamp_column("ts").with_idleness(100), now_ms=0)
    assert g.on_batch(500, now_ms=0) == [EmitWatermark(489)]
    assert g.on_tick(100, has_pending_input=False) == [EmitIdle()]
    assert g.on_tick(5_000, has_pending_input=True) == [EmitActive()]
    assert g.on_tick(5_050, has_pending_input=False) == []  # the timeout runs from 5_000 again
    assert g.on_batch(495, now_ms=5_060) == []  # within the bound of what it read before: no watermark
    assert g.on_batch(600, now_ms=5_070) == [EmitWatermark(589)]


def test_a_batch_without_timestamps_is_input_too():
    g = WatermarkGenerator(S.for_monotonous_timestamps().with_timestamp_column("ts").with_idleness(100), now_ms=0)
    assert g.on_batch(None, now_ms=90) == []
    assert g.on_tick(189, has_pending_input=False) == []
    assert g.on_tick(190, has_pending_input=False) == [EmitIdle()]
    assert g.on_batch(None, now_ms=300) == [EmitActive()]


def test_without_idleness_a_source_never_goes_idle():
    g = WatermarkGenerator(S.for_monotonous_timestamps().with_timestamp_column("ts"), now_ms=0)
    assert not g.idle_due(10**9)
    assert g.on_tick(now_ms=10**9, has_pending_input=False) == []


def test_a_restored_generator_does_not_send_an_older_watermark():
    g = WatermarkGenerator(S.for_bounded_out_of_orderness(10).with_timestamp_column("ts"), now_ms=0)
    g.on_batch(1_000, now_ms=0)
    again = WatermarkGenerator(S.for_bounded_out_of_orderness(10).with_timestamp_column("ts"), now_ms=0)
    again.restore(g.snapshot())
    assert again.on_batch(500, now_ms=1) == []
    assert again.on_batch(1_011, now_ms=2) == [EmitWatermark(1_000)]


def test_a_restored_subtask_with_input_is_not_idle_however_long_the_restore_took():
    strategy = S.for_bounded_out_of_orderness(10).with_timestamp_column("ts").with_idleness(200)
    g = WatermarkGenerator(strategy, now_ms=0)
    g.on_batch(1_000, now_ms=0)
    again = WatermarkGenerator(strategy, now_ms=10)  # deployed at 10, running at 60_000
    again.restore(g.snapshot())
    assert again.on_tick(60_000, has_pending_input=True) == []
    assert again.on_batch(995, now_ms=60_500) == []  # within the bound of what was read before it
    assert again.on_tick(60_700, has_pending_input=False) == [EmitIdle()]


def test_a_resume_at_another_parallelism_starts_every_subtask_at_the_smallest_old_watermark():
    """Files or splits move between subtasks: a new subtask may read what any old one had not
    read yet, so its restored watermark is the smallest old one (sluice/checkpoints/rescale.py)
    and none of those records is late by the move."""
    strategy = S.for_bounded_out_of_orderness(100).with_timestamp_column("ts").with_idleness(200)
    old = [WatermarkGenerator(strategy, now_ms=0) for _ in range(2)]
    old[0].on_batch(5_000, now_ms=0)  # ahead
    old[1].on_batch(2_000, now_ms=0)  # behind: its next records may be as old as 1_900
    states = redistribute(OperatorKind.TIMESTAMPS, "ts", [o.snapshot() for o in old], 3)
    for state in states:
        new = WatermarkGenerator(strategy, now_ms=0)
        new.restore(state or {})
        assert new.emitted == 1_899
        assert new.on_batch(1_950, now_ms=1) == []  # old subtask 1's record: not behind the watermark
        assert new.emitted < 1_950


# -- valve -------------------------------------------------------------------------------------
def test_the_input_watermark_is_the_minimum_over_the_channels():
    v = WatermarkValve(3)
    assert v.on_watermark(0, 100) == []
    assert v.on_watermark(1, 50) == []
    assert v.on_watermark(2, 70) == [EmitWatermark(50)]
    assert v.on_watermark(1, 200) == [EmitWatermark(70)]
    assert v.on_watermark(1, 150) == []  # a channel's watermark never goes back
    assert v.on_watermark(2, 300) == [EmitWatermark(100)]
    assert v.watermark == 100


def test_an_idle_channel_does_not_hold_the_watermark_back():
    v = WatermarkValve(2)
    v.on_watermark(0, 100)
    assert v.on_idle(1) == [EmitWatermark(100)]
    assert v.on_watermark(0, 200) == [EmitWatermark(200)]


def test_a_channel_active_again_behind_the_watermark_counts_once_it_caught_up():
    v = WatermarkValve(2)
    v.on_watermark(0, 100)
    v.on_idle(1)
    v.on_watermark(0, 500)
    assert v.watermark == 500
    assert v.on_watermark(1, 300) == []  # behind: does not pull the watermark back ...
    assert v.on_watermark(0, 900) == [EmitWatermark(900)]  # ... nor hold it
    assert v.on_watermark(1, 600) == []
    assert v.on_watermark(1, 1_000) == []  # caught up: counts again, so it holds the minimum now
    assert v.on_watermark(0, 2_000) == [EmitWatermark(1_000)]


def test_every_channel_idle_makes_the_task_idle_until_one_is_active():
    v = WatermarkValve(2)
    v.on_watermark(0, 10)
    v.on_watermark(1, 20)
    assert v.on_idle(0) == [EmitWatermark(20)]
    assert v.on_idle(1) == [EmitIdle()]
    assert v.on_idle(1) == []
    assert v.on_active(0) == [EmitActive()]
    assert v.on_watermark(0, 30) == [EmitWatermark(30)]


def test_ended_channels_leave_the_minimum_and_the_final_watermark_fires_everything():
    v = WatermarkValve(2)
    v.on_watermark(0, 10)
    v.on_watermark(1, 20)
    assert v.on_watermark(0, MAX_WATERMARK) == [EmitWatermark(20)]
    assert v.on_end(0) == []
    assert v.on_watermark(1, MAX_WATERMARK) == [EmitWatermark(MAX_WATERMARK)]
    assert v.on_end(1) == []
    assert v.channel_watermarks() == [None, None]


def test_protocol_violations_are_errors():
    v = WatermarkValve(1)
    with pytest.raises(ValueError, match="out of range"):
        v.on_watermark(1, 0)
    v.on_end(0)
    with pytest.raises(ValueError, match="already ended"):
        v.on_watermark(0, 5)
    with pytest.raises(ValueError, match="at least one"):
        WatermarkValve(0)
