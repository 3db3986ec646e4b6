"""Savepoint requests in the pure CheckpointCoordinator: when they trigger, what their actions
carry, how a stop ends triggering, and the refusals (docs/savepoints.md)."""

from __future__ import annotations

import pytest
from coordinator_scripts import ALL, SRC, ack_all, handles, make, state

from jobmanager.checkpoint.coordinator import (
    CheckpointPersisted,
    DiscardCheckpoint,
    FinalCheckpointRequested,
    NotifyAborted,
    NotifyComplete,
    PersistCheckpoint,
    SavepointRequested,
    TasksLost,
    Tick,
    TriggerCheckpoint,
)


def test_a_savepoint_triggers_at_once_ignoring_the_interval_and_persists_flagged():
    c = make(interval=100)
    assert c.handle(SavepointRequested(False, 1.0)) == [TriggerCheckpoint(1, 1.0, SRC, False, True, False)]
    assert ack_all(c, 1, 2.0)[-1] == PersistCheckpoint(1, handles(1), False, True)
    assert c.handle(CheckpointPersisted(1, 3.0)) == [NotifyComplete(1, ALL, False)]
    latest = c.latest_completed()
    assert latest is not None and latest.savepoint
    assert c.handle(Tick(101.0)) == [TriggerCheckpoint(2, 101.0, SRC, False)]  # periodic ones go on


def test_a_savepoint_requested_while_a_checkpoint_is_pending_waits_for_it():
    c = make(interval=10)
    [t] = c.handle(Tick(10.0))
    assert isinstance(t, TriggerCheckpoint)
    assert c.handle(SavepointRequested(False, 11.0)) == []
    assert c.savepoint_wanted
    assert c.handle(Tick(11.5)) == []  # the checkpoint is still pending
    ack_all(c, t.checkpoint_id, 12.0)
    c.handle(CheckpointPersisted(t.checkpoint_id, 12.5))
    # min_pause and the interval do not hold a savepoint back
    assert c.handle(Tick(12.6)) == [TriggerCheckpoint(2, 12.6, SRC, False, True, False)]
    assert not c.savepoint_wanted


def test_stop_with_savepoint_completes_final_and_nothing_triggers_after_it():
    c = make(interval=10)
    assert c.handle(SavepointRequested(True, 1.0)) == [TriggerCheckpoint(1, 1.0, SRC, False, True, True)]
    ack_all(c, 1, 2.0)
    assert c.handle(CheckpointPersisted(1, 3.0)) == [NotifyComplete(1, ALL, True)]  # tasks finish
    assert c.handle(Tick(100.0)) == []
    with pytest.raises(ValueError, match="ending"):
        c.handle(SavepointRequested(False, 101.0))


def test_an_aborted_savepoint_says_so_and_the_job_goes_on():
    c = make(interval=10, timeout=5, tolerable_failures=0)
    c.handle(SavepointRequested(True, 1.0))
    actions = c.handle(Tick(6.0))
    assert c.consecutive_failures == 0  # not a checkpoint failure: the job is not failed for it
    assert actions == [
        NotifyAborted(1, ALL, "checkpoint 1 expired after 5s (0/3 acks)", True),
        DiscardCheckpoint(1),
    ]
    assert c.handle(Tick(20.0)) == [TriggerCheckpoint(2, 20.0, SRC, False)]  # a plain checkpoint again


def test_one_savepoint_at_a_time_and_the_refusal_changes_nothing():
    c = make(interval=10)
    c.handle(SavepointRequested(False, 1.0))
    before = state(c)
    with pytest.raises(ValueError, match="already in progress"):
        c.handle(SavepointRequested(True, 1.5))
    assert state(c) == before


def test_a_final_checkpoint_supersedes_a_pending_savepoint():
    c = make(interval=10)
    c.handle(SavepointRequested(False, 1.0))
    actions = c.handle(FinalCheckpointRequested(2.0))
    assert actions[0] == NotifyAborted(1, ALL, "checkpoint 1 superseded by the final checkpoint", True, superseded=True)
    assert actions[-1] == TriggerCheckpoint(2, 2.0, ALL, True)  # the final one is no savepoint


def test_lost_tasks_drop_a_wanted_savepoint():
    c = make(interval=10)
    c.handle(Tick(10.0))
    c.handle(SavepointRequested(False, 10.5))
    c.handle(TasksLost("tm gone", 11.0))
    assert not c.savepoint_wanted
