"""sluice/eventtime/watermarks.py: the strategy a job gives, a source subtask's generator, and the
valve that makes a task's input watermark the minimum over its active input channels."""

from __future__ import annotations

import pytest

from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.eventtime.watermarks import (
    EmitActive,
    EmitIdle,
    EmitWatermark,
    WatermarkGenerator,
    WatermarkStrategy,
    WatermarkValve,
)

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
        (lambda: S.for_bounded_out_of_orderness(1.5), TypeError, "whole number"),
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


def test_a_source_without_records_for_the_idleness_timeout_says_it_is_idle_then_active_again():
    g = WatermarkGenerator(S.for_monotonous_timestamps().with_timestamp_column("ts").with_idleness(500), now_ms=0)
    assert g.on_batch(10, now_ms=100) == [EmitWatermark(9)]
    assert g.on_tick(now_ms=599) == []
    assert g.on_tick(now_ms=600) == [EmitIdle()]
    assert g.on_tick(now_ms=5_000) == []  # said once
    assert g.on_batch(20, now_ms=5_001) == [EmitActive(), EmitWatermark(19)]


def test_without_idleness_a_source_never_goes_idle():
    g = WatermarkGenerator(S.for_monotonous_timestamps().with_timestamp_column("ts"), now_ms=0)
    assert g.on_tick(now_ms=10**9) == []


def test_a_restored_generator_does_not_send_an_older_watermark():
    g = WatermarkGenerator(S.for_bounded_out_of_orderness(10).with_timestamp_column("ts"), now_ms=0)
    g.on_batch(1_000, now_ms=0)
    again = WatermarkGenerator(S.for_bounded_out_of_orderness(10).with_timestamp_column("ts"), now_ms=0)
    again.restore(g.snapshot())
    assert again.on_batch(500, now_ms=1) == []
    assert again.on_batch(1_011, now_ms=2) == [EmitWatermark(1_000)]


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
