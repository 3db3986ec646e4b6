"""Scripted event sequences against the TaskManager's pure BarrierAligner."""

import copy

import pytest

from sluice.states import IllegalTransition
from taskmanager.barrier_aligner import (
    AlignerState,
    AlignmentAborted,
    BarrierAligner,
    BarrierReceived,
    CheckpointAbortedNotice,
    EndOfPartition,
    Ignored,
    Snapshot,
    Unblock,
)


def B(channel, checkpoint_id):
    return BarrierReceived(channel, checkpoint_id)


def EOP(channel):
    return EndOfPartition(channel)


def state(a: BarrierAligner):
    return copy.deepcopy(a.__dict__)


def kinds(actions):
    return [type(x) for x in actions]


def blocked(a: BarrierAligner):
    return [c for c in range(a.channels) if a.is_blocked(c)]


# -- construction and protocol violations ----------------------------------------------
def test_needs_at_least_one_channel():
    with pytest.raises(ValueError):
        BarrierAligner(0)


def test_starts_idle_and_unblocked():
    a = BarrierAligner(3)
    assert a.state == AlignerState.IDLE and a.current is None
    assert blocked(a) == []


def test_unknown_channel_raises_and_leaves_state_unchanged():
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    before = state(a)
    with pytest.raises(ValueError, match="channel 2"):
        a.handle(B(2, 1))
    with pytest.raises(ValueError, match="channel -1"):
        a.handle(EOP(-1))
    assert state(a) == before


def test_barrier_on_ended_channel_raises_and_leaves_state_unchanged():
    a = BarrierAligner(2)
    a.handle(EOP(1))
    a.handle(B(0, 1))
    a.handle(B(0, 2))
    before = state(a)
    with pytest.raises(ValueError, match="already ended"):
        a.handle(B(1, 2))
    assert state(a) == before


def test_unknown_event_raises():
    with pytest.raises(TypeError):
        BarrierAligner(1).handle(Snapshot(1))  # type: ignore[arg-type]  # an action, not an event: the point


# -- one channel ------------------------------------------------------------------------
def test_single_channel_snapshots_on_first_barrier():
    a = BarrierAligner(1)
    assert a.handle(B(0, 1)) == [Snapshot(1), Unblock((0,))]
    assert a.state == AlignerState.IDLE and a.current is None and not a.is_blocked(0)
    assert a.handle(B(0, 2)) == [Snapshot(2), Unblock((0,))]


def test_single_channel_duplicate_and_outdated_barriers_are_ignored():
    a = BarrierAligner(1)
    a.handle(B(0, 5))
    [dup] = a.handle(B(0, 5))
    assert isinstance(dup, Ignored) and "outdated barrier 5" in dup.reason
    [old] = a.handle(B(0, 3))
    assert isinstance(old, Ignored) and "outdated barrier 3" in old.reason


def test_single_channel_skipped_ids_are_fine():
    a = BarrierAligner(1)
    assert a.handle(B(0, 1)) == [Snapshot(1), Unblock((0,))]
    assert a.handle(B(0, 4)) == [Snapshot(4), Unblock((0,))]


def test_single_channel_end_of_partition_outside_alignment():
    a = BarrierAligner(1)
    assert a.handle(EOP(0)) == []
    assert a.has_ended(0) and a.live_channels == ()
    [dup] = a.handle(EOP(0))
    assert isinstance(dup, Ignored) and "already ended" in dup.reason


# -- two channels -----------------------------------------------------------------------
def test_two_channels_normal_alignment():
    a = BarrierAligner(2)
    assert a.handle(B(0, 1)) == []
    assert a.state == AlignerState.ALIGNING and a.current == 1
    assert blocked(a) == [0]
    assert a.handle(B(1, 1)) == [Snapshot(1), Unblock((0, 1))]
    assert a.state == AlignerState.IDLE and a.current is None and blocked(a) == []


def test_two_channels_out_of_order_arrival():
    a = BarrierAligner(2)
    assert a.handle(B(1, 1)) == []
    assert blocked(a) == [1]
    assert a.handle(B(0, 1)) == [Snapshot(1), Unblock((0, 1))]


def test_two_channels_duplicate_barrier_on_blocked_channel():
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    before = state(a)
    [dup] = a.handle(B(0, 1))
    assert isinstance(dup, Ignored) and dup.reason == "duplicate barrier 1 on blocked channel 0"
    assert state(a) == before
    assert a.handle(B(1, 1)) == [Snapshot(1), Unblock((0, 1))]


def test_two_channels_newer_barrier_subsumes_alignment():
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    actions = a.handle(B(1, 2))
    assert kinds(actions) == [AlignmentAborted, Unblock]
    aborted = actions[0]
    assert isinstance(aborted, AlignmentAborted)
    assert aborted.checkpoint_id == 1 and "subsumed by barrier 2" in aborted.reason
    assert actions[1] == Unblock((0,))
    assert a.current == 2 and blocked(a) == [1]
    assert a.handle(B(0, 2)) == [Snapshot(2), Unblock((0, 1))]
    # the late barrier 1 (cannot really come after 2 on channel 0, but on a
    # reordering edge it must not restart alignment of 1)
    [late] = a.handle(B(1, 1))
    assert isinstance(late, Ignored) and "outdated barrier 1" in late.reason


def test_two_channels_outdated_barrier_during_newer_alignment():
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    a.handle(B(1, 3))  # subsumes 1, aligns 3 with channel 1 blocked
    [old] = a.handle(B(0, 2))
    assert isinstance(old, Ignored) and old.reason == "outdated barrier 2 on channel 0 (aligning 3)"
    assert a.current == 3 and blocked(a) == [1]


def test_two_channels_end_of_partition_completes_alignment():
    a = BarrierAligner(2)
    a.handle(B(0, 7))
    assert a.handle(EOP(1)) == [Snapshot(7), Unblock((0,))]
    assert a.state == AlignerState.IDLE
    # from now on the remaining channel alone aligns
    assert a.handle(B(0, 8)) == [Snapshot(8), Unblock((0,))]


def test_two_channels_end_of_partition_before_any_barrier():
    a = BarrierAligner(2)
    assert a.handle(EOP(0)) == []
    assert a.handle(B(1, 1)) == [Snapshot(1), Unblock((1,))]


def test_two_channels_blocked_channel_ends_is_not_waited_for_nor_unblocked():
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    assert a.handle(EOP(0)) == []
    assert not a.is_blocked(0) and a.has_ended(0)
    assert a.current == 1
    assert a.handle(B(1, 1)) == [Snapshot(1), Unblock((1,))]


def test_two_channels_all_channels_end_during_alignment_snapshots():
    # channel 1 ended: every record it ever sent precedes barrier 1, so the
    # snapshot is consistent; nothing is left to unblock.
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    a.handle(EOP(0))
    assert a.handle(EOP(1)) == [Snapshot(1)]
    assert a.state == AlignerState.IDLE


def test_two_channels_abort_notice_during_alignment():
    a = BarrierAligner(2)
    a.handle(B(1, 4))
    actions = a.handle(CheckpointAbortedNotice(4))
    assert actions == [AlignmentAborted(4, "aborted by the JobManager"), Unblock((1,))]
    assert a.state == AlignerState.IDLE and blocked(a) == []
    # the straggling barrier of the aborted checkpoint does not start it again
    [late] = a.handle(B(0, 4))
    assert isinstance(late, Ignored) and "outdated barrier 4" in late.reason
    assert blocked(a) == []
    assert a.handle(B(0, 5)) == []
    assert a.handle(B(1, 5)) == [Snapshot(5), Unblock((0, 1))]


def test_two_channels_abort_notice_for_other_checkpoints_is_ignored():
    a = BarrierAligner(2)
    a.handle(B(0, 1))
    a.handle(B(1, 1))
    a.handle(B(0, 2))
    before = state(a)
    [done] = a.handle(CheckpointAbortedNotice(1))
    assert isinstance(done, Ignored)
    assert state(a) == before


def test_two_channels_abort_notice_before_any_barrier_of_it():
    a = BarrierAligner(2)
    [noted] = a.handle(CheckpointAbortedNotice(3))
    assert isinstance(noted, Ignored) and "noted" in noted.reason
    [ign] = a.handle(B(0, 3))
    assert isinstance(ign, Ignored) and "aborted by the JobManager" in ign.reason
    assert a.state == AlignerState.IDLE and blocked(a) == []
    [ign2] = a.handle(B(1, 3))
    assert isinstance(ign2, Ignored)
    assert a.handle(B(1, 4)) == []
    assert a.handle(B(0, 4)) == [Snapshot(4), Unblock((0, 1))]


def test_aborted_ahead_barrier_still_subsumes_an_older_alignment():
    a = BarrierAligner(2)
    a.handle(CheckpointAbortedNotice(2))
    a.handle(B(0, 1))
    actions = a.handle(B(1, 2))
    assert kinds(actions) == [AlignmentAborted, Unblock, Ignored]
    aborted = actions[0]
    assert isinstance(aborted, AlignmentAborted) and aborted.checkpoint_id == 1 and actions[1] == Unblock((0,))
    assert a.state == AlignerState.IDLE and a.current is None


def test_two_channels_outdated_barrier_after_completion():
    a = BarrierAligner(2)
    a.handle(B(0, 2))
    a.handle(B(1, 2))
    before = state(a)
    for ev in (B(0, 2), B(1, 1), B(0, 0)):
        [ign] = a.handle(ev)
        assert isinstance(ign, Ignored) and "outdated" in ign.reason
    assert state(a) == before
    ign = a.handle(B(1, 2))[0]
    assert isinstance(ign, Ignored) and "alignment of 2 already done" in ign.reason


# -- three channels -----------------------------------------------------------------------
def test_three_channels_normal_alignment_blocks_progressively():
    a = BarrierAligner(3)
    assert a.handle(B(0, 1)) == []
    assert blocked(a) == [0]
    assert a.handle(B(1, 1)) == []
    assert blocked(a) == [0, 1]
    assert a.handle(B(2, 1)) == [Snapshot(1), Unblock((0, 1, 2))]
    assert blocked(a) == []


def test_three_channels_out_of_order_arrival():
    a = BarrierAligner(3)
    assert a.handle(B(2, 1)) == []
    assert a.handle(B(0, 1)) == []
    assert blocked(a) == [0, 2]
    assert a.handle(B(1, 1)) == [Snapshot(1), Unblock((0, 1, 2))]


def test_three_channels_duplicate_then_completion():
    a = BarrierAligner(3)
    a.handle(B(1, 1))
    a.handle(B(2, 1))
    assert kinds(a.handle(B(2, 1))) == [Ignored]
    assert kinds(a.handle(B(1, 1))) == [Ignored]
    assert a.handle(B(0, 1)) == [Snapshot(1), Unblock((0, 1, 2))]


def test_three_channels_newer_barrier_subsumes_and_restarts_alignment():
    a = BarrierAligner(3)
    a.handle(B(0, 1))
    a.handle(B(2, 1))
    actions = a.handle(B(1, 2))
    assert actions == [AlignmentAborted(1, "subsumed by barrier 2 on channel 1"), Unblock((0, 2))]
    assert a.current == 2 and blocked(a) == [1]
    assert a.handle(B(0, 2)) == []
    assert a.handle(B(2, 2)) == [Snapshot(2), Unblock((0, 1, 2))]


def test_three_channels_subsuming_barrier_that_completes_at_once():
    a = BarrierAligner(3)
    a.handle(B(0, 1))
    a.handle(B(1, 1))
    a.handle(EOP(0))  # blocked channels end: forgotten, not waited for
    a.handle(EOP(1))
    assert a.current == 1 and blocked(a) == []
    # the newer barrier on the only live channel subsumes 1 and aligns 2 at once
    assert a.handle(B(2, 2)) == [
        AlignmentAborted(1, "subsumed by barrier 2 on channel 2"),
        Snapshot(2),
        Unblock((2,)),
    ]


def test_three_channels_end_of_partition_completes_alignment():
    a = BarrierAligner(3)
    a.handle(B(0, 3))
    a.handle(B(2, 3))
    assert a.handle(EOP(1)) == [Snapshot(3), Unblock((0, 2))]
    assert a.live_channels == (0, 2)
    assert a.handle(B(2, 4)) == []
    assert a.handle(B(0, 4)) == [Snapshot(4), Unblock((0, 2))]


def test_three_channels_end_of_partition_that_does_not_complete():
    a = BarrierAligner(3)
    a.handle(B(0, 3))
    assert a.handle(EOP(1)) == []
    assert a.current == 3 and blocked(a) == [0]
    assert a.handle(B(2, 3)) == [Snapshot(3), Unblock((0, 2))]


def test_three_channels_abort_notice_then_next_checkpoint():
    a = BarrierAligner(3)
    a.handle(B(0, 6))
    a.handle(B(1, 6))
    assert a.handle(CheckpointAbortedNotice(6)) == [AlignmentAborted(6, "aborted by the JobManager"), Unblock((0, 1))]
    assert kinds(a.handle(B(2, 6))) == [Ignored]
    assert kinds(a.handle(CheckpointAbortedNotice(6))) == [Ignored]
    for ch in (2, 1):
        assert a.handle(B(ch, 7)) == []
    assert a.handle(B(0, 7)) == [Snapshot(7), Unblock((0, 1, 2))]


def test_three_channels_outdated_barrier_after_completion():
    a = BarrierAligner(3)
    for ch in range(3):
        a.handle(B(ch, 10))
    before = state(a)
    assert kinds(a.handle(B(1, 9))) == [Ignored]
    assert kinds(a.handle(B(1, 10))) == [Ignored]
    assert state(a) == before
    assert a.handle(B(1, 11)) == []


def test_a_transition_outside_the_table_raises_and_changes_nothing():
    a = BarrierAligner(2)
    before = state(a)
    with pytest.raises(IllegalTransition):
        a._set(AlignerState.IDLE)  # IDLE -> IDLE is not in TRANSITIONS
    assert state(a) == before
