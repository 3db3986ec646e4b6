"""Scripted event sequences against the TaskManager's pure TaskSlotTable."""

import copy

import pytest

from sluice.states import IllegalTransition
from taskmanager.slot_table import (
    Accepted,
    CancelRequested,
    CancelTasks,
    LeaderChanged,
    Rejected,
    Remembered,
    SlotFreed,
    SlotState,
    TaskEnded,
    TaskSlotTable,
    TaskSubmitted,
)


def snapshot(t: TaskSlotTable):
    return copy.deepcopy((t.slots, t._slot_of))


def slot_view(t: TaskSlotTable):
    return [(s.state, s.job_id, sorted(s.executions)) for s in t.slots]


def test_needs_at_least_one_slot():
    with pytest.raises(ValueError):
        TaskSlotTable(0)


def test_starts_all_free():
    t = TaskSlotTable(3)
    assert t.free_slots() == 3
    assert slot_view(t) == [(SlotState.FREE, "", [])] * 3


def test_accept_into_free_slot_allocates_it_to_the_job():
    t = TaskSlotTable(2)
    assert t.handle(TaskSubmitted(1, "job-a", "a/src/1")) == [Accepted("a/src/1")]
    assert slot_view(t) == [(SlotState.FREE, "", []), (SlotState.ALLOCATED, "job-a", ["a/src/1"])]
    assert t.free_slots() == 1


def test_slot_sharing_for_the_same_job():
    t = TaskSlotTable(1)
    assert t.handle(TaskSubmitted(0, "job-a", "a/src/0")) == [Accepted("a/src/0")]
    assert t.handle(TaskSubmitted(0, "job-a", "a/agg/0")) == [Accepted("a/agg/0")]
    assert t.handle(TaskSubmitted(0, "job-a", "a/sink/0")) == [Accepted("a/sink/0")]
    assert slot_view(t) == [(SlotState.ALLOCATED, "job-a", ["a/agg/0", "a/sink/0", "a/src/0"])]
    assert t.free_slots() == 0


def test_reject_task_of_another_job_in_an_allocated_slot():
    t = TaskSlotTable(2)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    before = snapshot(t)
    [action] = t.handle(TaskSubmitted(0, "job-b", "b/src/0"))
    assert isinstance(action, Rejected) and action.execution_id == "b/src/0"
    assert "job-a" in action.reason
    assert snapshot(t) == before
    # the other job can still use the free slot
    assert t.handle(TaskSubmitted(1, "job-b", "b/src/0")) == [Accepted("b/src/0")]


@pytest.mark.parametrize("index", [-1, 2, 99])
def test_reject_nonexistent_slot(index):
    t = TaskSlotTable(2)
    before = snapshot(t)
    [action] = t.handle(TaskSubmitted(index, "job-a", "a/src/0"))
    assert isinstance(action, Rejected) and action.execution_id == "a/src/0"
    assert "does not exist" in action.reason
    assert snapshot(t) == before


def test_reject_duplicate_execution_even_in_another_slot():
    t = TaskSlotTable(2)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    before = snapshot(t)
    for index in (0, 1):
        [action] = t.handle(TaskSubmitted(index, "job-a", "a/src/0"))
        assert isinstance(action, Rejected) and action.execution_id == "a/src/0"
        assert "already" in action.reason
    assert snapshot(t) == before


def test_slot_freed_only_after_its_last_task_ends():
    t = TaskSlotTable(2)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    t.handle(TaskSubmitted(0, "job-a", "a/sink/0"))
    t.handle(TaskSubmitted(1, "job-a", "a/src/1"))
    assert t.handle(TaskEnded("a/src/0")) == []
    assert slot_view(t)[0] == (SlotState.ALLOCATED, "job-a", ["a/sink/0"])
    assert t.handle(TaskEnded("a/sink/0")) == [SlotFreed(0)]
    assert slot_view(t) == [(SlotState.FREE, "", []), (SlotState.ALLOCATED, "job-a", ["a/src/1"])]
    assert t.free_slots() == 1
    # a freed slot can go to another job
    assert t.handle(TaskSubmitted(0, "job-b", "b/src/0")) == [Accepted("b/src/0")]
    assert slot_view(t)[0] == (SlotState.ALLOCATED, "job-b", ["b/src/0"])


def test_ending_an_unknown_or_already_ended_task_is_a_no_op():
    t = TaskSlotTable(1)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    assert t.handle(TaskEnded("a/src/0")) == [SlotFreed(0)]
    before = snapshot(t)
    assert t.handle(TaskEnded("a/src/0")) == []
    assert t.handle(TaskEnded("nope")) == []
    assert snapshot(t) == before


def test_an_ended_execution_id_may_be_submitted_again():
    t = TaskSlotTable(1)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    t.handle(TaskEnded("a/src/0"))
    assert t.handle(TaskSubmitted(0, "job-a", "a/src/0")) == [Accepted("a/src/0")]


def test_leader_changed_cancels_all_tasks_and_frees_each_slot_only_when_its_tasks_ended():
    t = TaskSlotTable(3)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    t.handle(TaskSubmitted(0, "job-a", "a/sink/0"))
    t.handle(TaskSubmitted(1, "job-b", "b/src/0"))
    assert t.handle(LeaderChanged()) == [CancelTasks(("a/sink/0", "a/src/0", "b/src/0"))]
    assert t.free_slots() == 1  # cancelled is not ended: the tasks may still run
    assert t.handle(TaskSubmitted(1, "job-c", "c/src/0")) == [Rejected("c/src/0", "slot 1 is held by job job-b")]
    assert t.handle(TaskEnded("a/src/0")) == []
    assert t.handle(TaskEnded("a/sink/0")) == [SlotFreed(0)]
    assert t.handle(TaskEnded("b/src/0")) == [SlotFreed(1)]
    assert slot_view(t) == [(SlotState.FREE, "", [])] * 3
    assert t.handle(TaskSubmitted(1, "job-c", "c/src/0")) == [Accepted("c/src/0")]


def test_cancel_of_a_running_task_asks_to_cancel_it_and_keeps_its_slot():
    t = TaskSlotTable(1)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    assert t.handle(CancelRequested("a/src/0")) == [CancelTasks(("a/src/0",))]
    assert slot_view(t) == [(SlotState.ALLOCATED, "job-a", ["a/src/0"])]
    assert t.handle(TaskEnded("a/src/0")) == [SlotFreed(0)]


def test_a_cancel_that_overtook_its_deployment_refuses_the_late_deployment():
    t = TaskSlotTable(1)
    assert t.handle(CancelRequested("a/src/0")) == [Remembered("a/src/0")]
    before = snapshot(t)
    [action] = t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    assert isinstance(action, Rejected) and "cancelled before it was deployed" in action.reason
    assert snapshot(t) == before and t.free_slots() == 1
    assert t.handle(TaskSubmitted(0, "job-a", "a/src/1")) == [Accepted("a/src/1")]  # other ids are not affected


def test_tombstones_are_bounded_oldest_forgotten_first():
    t = TaskSlotTable(1, max_tombstones=3)
    for i in range(5):
        t.handle(CancelRequested(f"x/{i}"))
    assert [t.tombstoned(f"x/{i}") for i in range(5)] == [False, False, True, True, True]
    assert len(t._tombstones) == 3
    assert t.handle(TaskSubmitted(0, "job-x", "x/0")) == [Accepted("x/0")]
    with pytest.raises(ValueError):
        TaskSlotTable(1, max_tombstones=0)


def test_slot_report_says_which_job_holds_each_slot():
    t = TaskSlotTable(2)
    t.handle(TaskSubmitted(1, "job-a", "a/src/0"))
    t.handle(TaskSubmitted(1, "job-a", "a/sink/0"))
    assert t.slot_report() == [(0, "", ()), (1, "job-a", ("a/sink/0", "a/src/0"))]


def test_leader_changed_with_no_tasks_does_nothing():
    t = TaskSlotTable(2)
    assert t.handle(LeaderChanged()) == []
    assert t.free_slots() == 2


def test_unknown_event_raises_type_error():
    with pytest.raises(TypeError):
        TaskSlotTable(1).handle("submit")  # type: ignore[arg-type]  # not an event: the point of the test


def test_a_transition_outside_the_table_raises_and_changes_nothing():
    t = TaskSlotTable(1)
    before = snapshot(t)
    with pytest.raises(IllegalTransition):
        t._set(t.slots[0], SlotState.FREE)  # FREE -> FREE is not in TRANSITIONS
    assert snapshot(t) == before
