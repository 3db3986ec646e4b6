"""Scripted event sequences against the pure ExecutionGraph; exact actions asserted."""

import copy
from collections.abc import Mapping
from typing import TypeVar

import pytest
from execution_graph_scripts import AGG0, AGG1, ALL, JOB, SINK0, SLOTS, SRC0, SRC1, TIMEOUT, new_graph, running_graph

from jobmanager.scheduler.execution_graph import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    CancelExecutions,
    CancelRequested,
    ChainInfo,
    DeployExecutions,
    DeploymentFailed,
    ExecutionGraph,
    GlobalFailure,
    Ignored,
    JobStatusChanged,
    JobTerminated,
    RootCause,
    SlotsAssigned,
    TaskManagerLost,
    TaskStateReported,
    Tick,
)
from jobmanager.scheduler.slot_pool import SlotId
from sluice.states import ExecutionState, FailureCause, IllegalTransition, JobStatus

S = TypeVar("S")  # a transition table's state type

# slot 0 lives on tm-a, slot 1 on tm-b


TRACEBACK = 'Traceback (most recent call last):\n  File "job.py", line 3, in body\nZeroDivisionError: division by zero'


def snapshot(g: ExecutionGraph):
    return copy.deepcopy((g.state, g.failure, g.root_cause, g._ending_since, g.executions))


def task_states(g: ExecutionGraph) -> dict:
    return {eid: ex.state for eid, ex in g.executions.items()}


def terminations(actions) -> list:
    return [a for a in actions if isinstance(a, JobTerminated)]


# -- construction ---------------------------------------------------------------
def test_execution_ids_are_unique_and_follow_the_chains():
    g = new_graph()
    assert tuple(g.executions) == ALL
    assert len(set(g.executions)) == 5
    assert g.slots_required == 2
    assert g.state == JobStatus.CREATED
    assert all(ex.state == "CREATED" and ex.slot is None for ex in g.executions.values())
    # a new attempt gets fresh ids that cannot collide with the old attempt's
    g2 = ExecutionGraph(JOB, [ChainInfo("src", "s", 2)], attempt=1)
    assert tuple(g2.executions) == ("job1/1/src/0", "job1/1/src/1")


# -- deployment -----------------------------------------------------------------
def test_slots_assigned_deploys_every_execution_and_runs():
    g = new_graph()
    actions = g.handle(SlotsAssigned(SLOTS, 0.0))
    assert actions == [JobStatusChanged(JobStatus.CREATED, JobStatus.RUNNING), DeployExecutions(ALL)]
    assert g.state == JobStatus.RUNNING
    assert set(task_states(g).values()) == {"DEPLOYING"}


def test_subtask_i_goes_to_slot_i_for_every_chain():
    g = new_graph()
    g.handle(SlotsAssigned(SLOTS, 0.0))
    assert g.slot_of("src", 0) == g.slot_of("agg", 0) == g.slot_of("sink", 0) == SLOTS[0]
    assert g.slot_of("src", 1) == g.slot_of("agg", 1) == SLOTS[1]


def test_too_few_slots_raise_before_touching_state():
    g = new_graph()
    before = snapshot(g)
    with pytest.raises(ValueError, match="need 2 slots, got 1"):
        g.handle(SlotsAssigned(SLOTS[:1], 0.0))
    assert snapshot(g) == before


def test_second_slots_assigned_is_ignored():
    g = running_graph()
    before = snapshot(g)
    actions = g.handle(SlotsAssigned((SlotId("tm-c", 0), SlotId("tm-c", 1)), 2.0))
    assert len(actions) == 1 and isinstance(actions[0], Ignored)
    assert snapshot(g) == before


def test_unknown_event_type_raises_type_error():
    with pytest.raises(TypeError):
        new_graph().handle(object())  # type: ignore[arg-type]  # not an event: the point of the test


# -- finishing ------------------------------------------------------------------
def test_all_tasks_finished_terminates_the_job_exactly_once():
    g = running_graph()
    for eid in ALL[:-1]:
        assert g.handle(TaskStateReported(eid, "FINISHED", now=2.0)) == []
        assert g.state == JobStatus.RUNNING
    actions = g.handle(TaskStateReported(SINK0, "FINISHED", now=3.0))
    assert actions == [JobStatusChanged(JobStatus.RUNNING, JobStatus.FINISHED), JobTerminated(JobStatus.FINISHED, "")]
    assert g.state == JobStatus.FINISHED
    # nothing afterwards terminates it again
    later = []
    for eid in ALL:
        later += g.handle(TaskStateReported(eid, "FINISHED", now=4.0))
        later += g.handle(TaskStateReported(eid, "FAILED", "late", now=4.0))
    later += g.handle(Tick(100.0))
    later += g.handle(CancelRequested(5.0))
    assert terminations(later) == []
    assert all(isinstance(a, Ignored) for a in later)
    assert g.state == JobStatus.FINISHED and g.failure == ""


def test_tasks_may_finish_straight_from_deploying():
    g = new_graph()
    g.handle(SlotsAssigned(SLOTS, 0.0))
    actions = []
    for eid in ALL:
        actions += g.handle(TaskStateReported(eid, "FINISHED", now=1.0))
    assert actions == [JobStatusChanged(JobStatus.RUNNING, JobStatus.FINISHED), JobTerminated(JobStatus.FINISHED, "")]


# -- failure --------------------------------------------------------------------
def test_one_failed_task_cancels_exactly_the_others_then_fails_with_root_cause():
    g = running_graph()
    g.handle(TaskStateReported(SINK0, "FINISHED", now=1.5))  # already done: must not be cancelled
    actions = g.handle(TaskStateReported(AGG1, "FAILED", TRACEBACK, now=2.0))
    assert actions == [JobStatusChanged(JobStatus.RUNNING, JobStatus.FAILING), CancelExecutions((SRC0, SRC1, AGG0))]
    assert g.state == JobStatus.FAILING
    assert task_states(g) == {
        SRC0: "CANCELING",
        SRC1: "CANCELING",
        AGG0: "CANCELING",
        AGG1: "FAILED",
        SINK0: "FINISHED",
    }
    assert g.executions[AGG1].error == TRACEBACK

    assert g.handle(TaskStateReported(SRC0, "CANCELED", now=3.0)) == []
    assert g.handle(TaskStateReported(SRC1, "CANCELED", now=3.0)) == []
    actions = g.handle(TaskStateReported(AGG0, "CANCELED", now=3.0))
    assert len(actions) == 2
    assert actions[0] == JobStatusChanged(JobStatus.FAILING, JobStatus.FAILED)
    assert isinstance(actions[1], JobTerminated) and actions[1].state == JobStatus.FAILED
    failure = actions[1].failure
    assert TRACEBACK in failure
    assert "aggregate" in failure and "(2/2)" in failure  # which task, 1-based subtask of parallelism
    assert g.state == JobStatus.FAILED and g.failure == failure


def test_first_failure_stays_the_root_cause():
    g = running_graph()
    g.handle(TaskStateReported(SRC0, "FAILED", "first boom", now=2.0))
    # a cancelled task may fail on its way down instead of reporting CANCELED
    assert g.handle(TaskStateReported(SRC1, "FAILED", "second boom", now=2.5)) == []
    g.handle(TaskStateReported(AGG0, "CANCELED", now=3.0))
    g.handle(TaskStateReported(AGG1, "FINISHED", now=3.0))  # CANCELING -> FINISHED is a legal race
    actions = g.handle(TaskStateReported(SINK0, "CANCELED", now=3.0))
    [term] = terminations(actions)
    assert term.state == JobStatus.FAILED
    assert "first boom" in term.failure and "second boom" not in term.failure


def test_root_cause_names_the_first_failure_its_task_and_reported_cause():
    g = running_graph()
    assert g.root_cause is None
    g.handle(TaskStateReported(AGG1, "FAILED", TRACEBACK, now=2.0, cause=FailureCause.NON_RECOVERABLE))
    g.handle(TaskStateReported(SRC0, "FAILED", "second boom", now=2.5, cause=FailureCause.TASK_ERROR))
    assert g.root_cause == RootCause("aggregate (2/2)", "agg", TRACEBACK, FailureCause.NON_RECOVERABLE)


@pytest.mark.parametrize(
    ("event", "root"),
    [
        (
            TaskManagerLost("tm-b", "no heartbeat", 2.0, "10.0.0.7:6122"),
            RootCause(
                "source -> map (2/2)",
                "src",
                "TaskManager tm-b (10.0.0.7:6122) was lost while running task source -> map (2/2), aggregate (2/2): "
                "no heartbeat",
                None,
                "tm-b",
            ),
        ),
        (GlobalFailure("checkpointing failed: x", 2.0), RootCause("", "", "checkpointing failed: x")),
        (DeploymentFailed(SRC1, "refused", 2.0), RootCause("source -> map (2/2)", "src", "deployment failed: refused")),
        (
            TaskStateReported(SRC1, "CANCELED", "killed", 2.0),
            RootCause("source -> map (2/2)", "src", "task source -> map (2/2) was cancelled unexpectedly: killed"),
        ),
    ],
)
def test_root_cause_of_failures_no_task_reported(event, root):
    g = running_graph()
    g.handle(event)
    assert g.root_cause == root  # no reported cause: never taken for a task error


def test_failure_of_the_last_running_task_fails_the_job_at_once():
    g = running_graph()
    for eid in ALL[:-1]:
        g.handle(TaskStateReported(eid, "FINISHED", now=2.0))
    actions = g.handle(TaskStateReported(SINK0, "FAILED", TRACEBACK, now=3.0))
    assert [type(a) for a in actions] == [JobStatusChanged, JobStatusChanged, JobTerminated]
    assert actions[0] == JobStatusChanged(JobStatus.RUNNING, JobStatus.FAILING)
    assert actions[1] == JobStatusChanged(JobStatus.FAILING, JobStatus.FAILED)
    end = actions[2]
    assert isinstance(end, JobTerminated) and end.state == JobStatus.FAILED and TRACEBACK in end.failure


def test_deployment_failure_fails_the_job_like_a_task_failure():
    g = new_graph()
    g.handle(SlotsAssigned(SLOTS, 0.0))
    actions = g.handle(DeploymentFailed(SRC1, "connection refused", 1.0))
    assert actions == [
        JobStatusChanged(JobStatus.RUNNING, JobStatus.FAILING),
        CancelExecutions((SRC0, AGG0, AGG1, SINK0)),
    ]
    assert "deployment failed: connection refused" in g.failure
    assert g.executions[SRC1].state == "FAILED"


def test_cancel_while_failing_is_ignored_and_the_end_stays_failed():
    g = running_graph()
    g.handle(TaskStateReported(SRC0, "FAILED", TRACEBACK, now=2.0))
    before = snapshot(g)
    actions = g.handle(CancelRequested(2.5))
    assert len(actions) == 1 and isinstance(actions[0], Ignored)
    assert snapshot(g) == before
    actions = []
    for eid in (SRC1, AGG0, AGG1, SINK0):
        actions += g.handle(TaskStateReported(eid, "CANCELED", now=3.0))
    assert [t.state for t in terminations(actions)] == [JobStatus.FAILED]


# -- global failure -----------------------------------------------------------------
def test_global_failure_while_created_fails_at_once():
    g = new_graph()
    actions = g.handle(GlobalFailure("too many failed checkpoints", 1.0))
    assert actions == [
        JobStatusChanged(JobStatus.CREATED, JobStatus.FAILED),
        JobTerminated(JobStatus.FAILED, "too many failed checkpoints"),
    ]
    assert set(task_states(g).values()) == {"CANCELED"}


def test_global_failure_while_running_cancels_everything_then_fails():
    g = running_graph()
    actions = g.handle(GlobalFailure("too many failed checkpoints", 2.0))
    assert actions == [JobStatusChanged(JobStatus.RUNNING, JobStatus.FAILING), CancelExecutions(ALL)]
    actions = []
    for eid in ALL:
        actions += g.handle(TaskStateReported(eid, "CANCELED", now=3.0))
    assert actions == [
        JobStatusChanged(JobStatus.FAILING, JobStatus.FAILED),
        JobTerminated(JobStatus.FAILED, "too many failed checkpoints"),
    ]


def test_global_failure_after_a_task_failure_keeps_the_first_root_cause():
    g = running_graph()
    g.handle(TaskStateReported(SRC0, "FAILED", TRACEBACK, now=2.0))
    assert g.handle(GlobalFailure("later", 2.5)) == []
    assert TRACEBACK in g.failure and "later" not in g.failure


def test_global_failure_after_the_end_changes_nothing():
    g = running_graph()
    for eid in ALL:
        g.handle(TaskStateReported(eid, "FINISHED", now=2.0))
    before = snapshot(g)
    assert terminations(g.handle(GlobalFailure("late", 3.0))) == []
    assert snapshot(g) == before


# -- TaskManager lost -------------------------------------------------------------
def test_taskmanager_lost_fails_exactly_its_executions():
    g = running_graph()
    actions = g.handle(TaskManagerLost("tm-b", "heartbeat timeout", 2.0))
    assert actions == [JobStatusChanged(JobStatus.RUNNING, JobStatus.FAILING), CancelExecutions((SRC0, AGG0, SINK0))]
    assert task_states(g) == {SRC0: "CANCELING", SRC1: "FAILED", AGG0: "CANCELING", AGG1: "FAILED", SINK0: "CANCELING"}
    assert "tm-b" in g.executions[SRC1].error and "heartbeat timeout" in g.executions[SRC1].error
    assert "tm-b" in g.failure and "heartbeat timeout" in g.failure
    actions = []
    for eid in (SRC0, AGG0, SINK0):
        actions += g.handle(TaskStateReported(eid, "CANCELED", now=3.0))
    assert actions == [
        JobStatusChanged(JobStatus.FAILING, JobStatus.FAILED),
        JobTerminated(JobStatus.FAILED, g.failure),
    ]


def test_losing_an_unrelated_taskmanager_changes_nothing():
    g = running_graph()
    before = snapshot(g)
    assert g.handle(TaskManagerLost("tm-z", "gone", 2.0)) == []
    assert snapshot(g) == before


def test_losing_a_taskmanager_before_deployment_changes_nothing():
    g = new_graph()
    before = snapshot(g)
    assert g.handle(TaskManagerLost("tm-a", "gone", 2.0)) == []
    assert snapshot(g) == before


def test_taskmanager_lost_while_cancelling_ends_canceled():
    g = running_graph()
    g.handle(CancelRequested(2.0))
    g.handle(TaskStateReported(SRC0, "CANCELED", now=2.5))
    g.handle(TaskStateReported(AGG0, "CANCELED", now=2.5))
    g.handle(TaskStateReported(SINK0, "CANCELED", now=2.5))
    actions = g.handle(TaskManagerLost("tm-b", "gone", 3.0))
    assert actions == [
        JobStatusChanged(JobStatus.CANCELLING, JobStatus.CANCELED),
        JobTerminated(JobStatus.CANCELED, ""),
    ]


# -- cancel -----------------------------------------------------------------------
def test_cancel_while_created_cancels_at_once_without_deployments():
    g = new_graph()
    actions = g.handle(CancelRequested(1.0))
    assert actions == [JobStatusChanged(JobStatus.CREATED, JobStatus.CANCELED), JobTerminated(JobStatus.CANCELED, "")]
    assert g.state == JobStatus.CANCELED
    assert set(task_states(g).values()) == {"CANCELED"}
    # slots arriving afterwards deploy nothing
    late = g.handle(SlotsAssigned(SLOTS, 2.0))
    assert len(late) == 1 and isinstance(late[0], Ignored)
    assert g.state == JobStatus.CANCELED


def test_cancel_while_running_cancels_running_tasks_then_ends_canceled():
    g = running_graph()
    g.handle(TaskStateReported(SRC0, "FINISHED", now=1.5))
    actions = g.handle(CancelRequested(2.0))
    assert actions == [
        JobStatusChanged(JobStatus.RUNNING, JobStatus.CANCELLING),
        CancelExecutions((SRC1, AGG0, AGG1, SINK0)),
    ]
    assert g.state == JobStatus.CANCELLING
    assert g.handle(TaskStateReported(SRC1, "CANCELED", now=3.0)) == []
    assert g.handle(TaskStateReported(AGG0, "CANCELED", now=3.0)) == []
    assert g.handle(TaskStateReported(AGG1, "FINISHED", now=3.0)) == []  # finished before the cancel landed
    actions = g.handle(TaskStateReported(SINK0, "CANCELED", now=3.0))
    assert actions == [
        JobStatusChanged(JobStatus.CANCELLING, JobStatus.CANCELED),
        JobTerminated(JobStatus.CANCELED, ""),
    ]
    assert g.state == JobStatus.CANCELED


def test_second_cancel_is_ignored():
    g = running_graph()
    g.handle(CancelRequested(2.0))
    before = snapshot(g)
    actions = g.handle(CancelRequested(3.0))
    assert len(actions) == 1 and isinstance(actions[0], Ignored)
    assert snapshot(g) == before


def test_cancel_timeout_forces_canceled():
    g = running_graph()
    g.handle(CancelRequested(100.0))
    g.handle(TaskStateReported(SRC0, "CANCELED", now=101.0))
    assert g.handle(Tick(100.0 + TIMEOUT - 0.001)) == []
    assert g.state == JobStatus.CANCELLING
    actions = g.handle(Tick(100.0 + TIMEOUT))
    assert actions == [
        JobStatusChanged(JobStatus.CANCELLING, JobStatus.CANCELED),
        JobTerminated(JobStatus.CANCELED, ""),
    ]
    assert set(task_states(g).values()) == {"CANCELED"}
    assert "no answer to cancel" in g.executions[SINK0].error
    assert g.executions[SRC0].error == ""  # answered in time
    assert g.handle(Tick(1000.0)) == []


def test_cancel_timeout_while_failing_forces_failed_with_root_cause():
    g = running_graph()
    g.handle(TaskStateReported(AGG0, "FAILED", TRACEBACK, now=50.0))
    assert g.handle(Tick(59.0)) == []
    actions = g.handle(Tick(60.0))
    assert [type(a) for a in actions] == [JobStatusChanged, JobTerminated]
    end = actions[1]
    assert isinstance(end, JobTerminated) and end.state == JobStatus.FAILED and TRACEBACK in end.failure
    assert g.state == JobStatus.FAILED


def test_tick_while_running_does_nothing():
    g = running_graph()
    before = snapshot(g)
    assert g.handle(Tick(1e9)) == []
    assert snapshot(g) == before


# -- stale reports --------------------------------------------------------------------
@pytest.mark.parametrize(
    "report",
    [
        TaskStateReported("job1/0/src/0", "RUNNING", now=5.0),  # duplicate
        TaskStateReported("job1/0/nope/0", "FAILED", "x", now=5.0),  # unknown execution
        TaskStateReported("job1/1/src/0", "FAILED", "x", now=5.0),  # another attempt's execution
        TaskStateReported("job1/0/src/0", "DEPLOYING", now=5.0),  # going backwards
    ],
    ids=["duplicate", "unknown", "other-attempt", "backwards"],
)
def test_stale_reports_are_ignored_while_running(report):
    g = running_graph()
    before = snapshot(g)
    actions = g.handle(report)
    assert len(actions) == 1 and isinstance(actions[0], Ignored)
    assert snapshot(g) == before


def test_late_running_report_while_canceling_is_ignored():
    g = running_graph()
    g.handle(CancelRequested(2.0))
    before = snapshot(g)
    actions = g.handle(TaskStateReported(SRC0, "RUNNING", now=2.1))
    assert len(actions) == 1 and isinstance(actions[0], Ignored)
    assert snapshot(g) == before


def test_reports_after_the_end_are_ignored():
    g = running_graph()
    g.handle(TaskStateReported(SRC0, "FAILED", TRACEBACK, now=2.0))
    for eid in (SRC1, AGG0, AGG1, SINK0):
        g.handle(TaskStateReported(eid, "CANCELED", now=3.0))
    assert g.state == JobStatus.FAILED
    before = snapshot(g)
    for eid in ALL:
        for state in ("RUNNING", "FINISHED", "CANCELED", "FAILED"):
            actions = g.handle(TaskStateReported(eid, state, "late", now=4.0))
            assert len(actions) == 1 and isinstance(actions[0], Ignored), (eid, state, actions)
    assert g.handle(DeploymentFailed(SRC1, "late", 4.0))[0].__class__ is Ignored
    assert snapshot(g) == before


# -- transition tables ------------------------------------------------------------------
JOB_STATES = tuple(JOB_TRANSITIONS)
ILLEGAL_JOB = [(a, b) for a in JOB_STATES for b in JOB_STATES if b not in JOB_TRANSITIONS[a]]
TASK_STATES = tuple(TASK_TRANSITIONS)
ILLEGAL_TASK = [(a, b) for a in TASK_STATES for b in TASK_STATES if b not in TASK_TRANSITIONS[a]]


def _closed_with_final_terminals(table: Mapping[S, tuple[S, ...]], terminal: list[S]) -> None:
    for src, targets in table.items():
        assert set(targets) <= set(table), src
        assert src not in targets, src
    for t in terminal:
        assert table[t] == ()


def test_transition_tables_are_closed_and_terminal_states_are_final():
    _closed_with_final_terminals(JOB_TRANSITIONS, [s for s in JobStatus if s.terminal])
    _closed_with_final_terminals(TASK_TRANSITIONS, [s for s in ExecutionState if s.terminal])


@pytest.mark.parametrize("old,new", ILLEGAL_JOB, ids=[f"{a}->{b}" for a, b in ILLEGAL_JOB])
def test_illegal_job_transition_raises_and_leaves_state_unchanged(old, new):
    g = new_graph()
    g.state = old
    before = snapshot(g)
    with pytest.raises(IllegalTransition):
        g._set_job(new)
    assert snapshot(g) == before


@pytest.mark.parametrize("old,new", ILLEGAL_TASK, ids=[f"{a}->{b}" for a, b in ILLEGAL_TASK])
def test_illegal_task_transition_raises_and_leaves_state_unchanged(old, new):
    g = new_graph()
    ex = g.executions[SRC0]
    ex.state = old
    before = snapshot(g)
    with pytest.raises(IllegalTransition):
        g._set_task(ex, new)
    assert snapshot(g) == before


def test_reported_state_names_are_stored_as_members():
    g = running_graph()  # reports "RUNNING" as a plain name
    assert all(type(ex.state) is ExecutionState for ex in g.executions.values())
    with pytest.raises(ValueError):
        g.handle(TaskStateReported(SRC0, "SCHEDULED", now=2.0))  # no such state


def test_legal_job_transition_reports_the_change():
    g = new_graph()
    assert g._set_job(JobStatus.RUNNING) == [JobStatusChanged(JobStatus.CREATED, JobStatus.RUNNING)]
    assert g.state == JobStatus.RUNNING


# -- bugs ---------------------------------------------------------------------------------
def test_unsolicited_canceled_report_fails_the_job_instead_of_raising():
    g = running_graph()
    actions = g.handle(TaskStateReported(SRC0, "CANCELED", now=2.0))
    # the job can no longer finish: it must wind down rather than stay RUNNING
    assert g.state in (JobStatus.FAILING, JobStatus.FAILED), (g.state, actions)
    for eid in (SRC1, AGG0, AGG1, SINK0):
        actions += g.handle(TaskStateReported(eid, "FINISHED", now=3.0))
    assert g.state == JobStatus.FAILED
    assert [t.state for t in terminations(actions)] == [JobStatus.FAILED]


def test_failed_report_before_deployment_leaves_state_consistent():
    g = new_graph()
    before = snapshot(g)
    try:
        actions = g.handle(TaskStateReported(SRC0, "FAILED", TRACEBACK, now=1.0))
    except IllegalTransition:
        assert snapshot(g) == before  # raising is fine only if nothing changed
    else:
        assert actions and (isinstance(actions[0], Ignored) or g.state == JobStatus.FAILED)
