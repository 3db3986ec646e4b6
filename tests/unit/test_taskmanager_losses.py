"""Which TaskManager losses count against a job (jobmanager/scheduler/taskmanager_losses.py):
scripted loss and checkpoint events, and the outcome and verdict expected of each."""

from __future__ import annotations

import pytest

from jobmanager.scheduler.taskmanager_losses import (
    Attributed,
    CheckpointCompleted,
    Exhausted,
    LostTask,
    NotAttributed,
    Reset,
    TaskManagerLosses,
    TaskManagerLost,
)
from sluice.states import ExecutionState

RUNNING, DEPLOYING, CANCELING = ExecutionState.RUNNING, ExecutionState.DEPLOYING, ExecutionState.CANCELING


def task(subtask: int, state: ExecutionState = RUNNING, chain: str = "c1") -> LostTask:
    return LostTask(chain, subtask, f"{chain} ({subtask + 1}/4)", state)


def lost(tm: str, *tasks: LostTask, failing: bool = False) -> TaskManagerLost:
    return TaskManagerLost(tm, tasks, failing)


def test_the_same_task_lost_twice_exhausts_the_limit():
    """A poison body: its task dies wherever it goes."""
    losses = TaskManagerLosses(2)
    assert losses.handle(lost("tm-a", task(0), task(1))) == Attributed("tm-a", ("c1 (1/4)", "c1 (2/4)"), 1)
    assert losses.exhausted() is None
    assert losses.handle(lost("tm-b", task(0))) == Attributed("tm-b", ("c1 (1/4)",), 2)
    assert losses.exhausted() == Exhausted("c1 (1/4)", 2, 2)


def test_losses_spread_over_different_tasks_never_exhaust_it():
    losses = TaskManagerLosses(2)
    for i in range(4):  # four TaskManagers, each under another task
        assert isinstance(losses.handle(lost(f"tm-{i}", task(i))), Attributed)
    assert losses.exhausted() is None


def test_a_host_with_two_taskmanagers_rebooting_costs_one_restart():
    """The first loss fails the attempt; the second comes while it winds down: not counted."""
    losses = TaskManagerLosses(2)
    losses.handle(lost("tm-a", task(0), task(1)))
    outcome = losses.handle(lost("tm-b", task(2, CANCELING), task(3, CANCELING), failing=True))
    assert outcome == NotAttributed("tm-b", "the attempt was already failing or being cancelled")
    assert [losses.count("c1", s) for s in range(4)] == [1, 1, 0, 0]
    assert losses.exhausted() is None


def test_a_loss_while_the_task_starts_or_restores_counts():
    """A body (or its state) that kills the TaskManager while restoring, before RUNNING."""
    losses = TaskManagerLosses(2)
    losses.handle(lost("tm-a", task(0, DEPLOYING)))
    losses.handle(lost("tm-b", task(0, DEPLOYING)))
    assert losses.exhausted() == Exhausted("c1 (1/4)", 2, 2)


def test_tasks_being_cancelled_are_not_the_cause():
    losses = TaskManagerLosses(1)
    assert losses.handle(lost("tm-a", task(0, CANCELING))) == NotAttributed(
        "tm-a", "no task of the job was starting or running there"
    )
    assert losses.exhausted() is None


def test_a_completed_checkpoint_starts_the_counts_again():
    losses = TaskManagerLosses(2)
    losses.handle(lost("tm-a", task(0)))
    assert losses.handle(CheckpointCompleted(7)) == Reset(7)
    losses.handle(lost("tm-b", task(0)))
    assert losses.exhausted() is None and losses.count("c1", 0) == 1


def test_the_same_subtask_of_another_chain_is_another_task():
    losses = TaskManagerLosses(2)
    losses.handle(lost("tm-a", task(0, chain="c1")))
    losses.handle(lost("tm-b", task(0, chain="c2")))
    assert losses.exhausted() is None


def test_a_limit_of_one_fails_at_the_first_attributed_loss():
    losses = TaskManagerLosses(1)
    losses.handle(lost("tm-a", task(3)))
    assert losses.exhausted() == Exhausted("c1 (4/4)", 1, 1)


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "2"])
def test_a_bad_limit_is_refused(limit):
    with pytest.raises(ValueError, match="max-per-job must be an int >= 1"):
        TaskManagerLosses(limit)


@pytest.mark.parametrize(
    "event",
    [lost("tm-a", task(0), task(0)), lost("tm-a", task(-1))],
)
def test_illegal_input_is_refused_with_the_counts_unchanged(event):
    losses = TaskManagerLosses(2)
    losses.handle(lost("tm-0", task(1)))
    with pytest.raises(ValueError, match="distinct subtasks >= 0"):
        losses.handle(event)
    assert losses.count("c1", 0) == 0 and losses.count("c1", 1) == 1
    with pytest.raises(TypeError):
        losses.handle("tm-a")  # type: ignore[arg-type]  # not an event: the point of the test
