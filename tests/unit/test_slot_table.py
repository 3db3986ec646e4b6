"""Scripted event sequences against the TaskManager's pure TaskSlotTable."""

import copy

import pytest

from sluice.states import IllegalTransition
from taskmanager.slot_table import (
    Accepted,
    CancelTasks,
    LeaderChanged,
    Rejected,
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


def test_leader_changed_cancels_all_tasks_and_frees_all_slots():
    t = TaskSlotTable(3)
    t.handle(TaskSubmitted(0, "job-a", "a/src/0"))
    t.handle(TaskSubmitted(0, "job-a", "a/sink/0"))
    t.handle(TaskSubmitted(1, "job-b", "b/src/0"))
    actions = t.handle(LeaderChanged())
    assert actions[0] == CancelTasks(("a/sink/0", "a/src/0", "b/src/0"))
    assert sorted(actions[1:], key=lambda a: a.slot_index) == [SlotFreed(0), SlotFreed(1)]
    assert len(actions) == 3
    assert slot_view(t) == [(SlotState.FREE, "", [])] * 3
    assert t.free_slots() == 3
    assert t._slot_of == {}
    # a late end of a cancelled task changes nothing; the slots are reusable
    assert t.handle(TaskEnded("a/src/0")) == []
    assert t.handle(TaskSubmitted(0, "job-c", "c/src/0")) == [Accepted("c/src/0")]


def test_leader_changed_with_no_tasks_does_nothing():
    t = TaskSlotTable(2)
    assert t.handle(LeaderChanged()) == []
    assert t.free_slots() == 2


def test_unknown_event_raises_type_error():
    with pytest.raises(TypeError):
        TaskSlotTable(1).handle("submit")


def test_a_transition_outside_the_table_raises_and_changes_nothing():
    t = TaskSlotTable(1)
    before = snapshot(t)
    with pytest.raises(IllegalTransition):
        t._set(t.slots[0], SlotState.FREE)  # FREE -> FREE is not in TRANSITIONS
    assert snapshot(t) == before
