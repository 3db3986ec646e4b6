"""The TaskManager's task registry: the cancellation watchdog, slots freed only when a task's
thread really ended, and cancels that overtook their deployment. Real task threads (no Spark):
a task whose work ignores the cooperative cancel, either in Python code (an interrupt reaches
it) or in one blocking C call (nothing does: the TaskManager gives up)."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import wait_until
from task_thread_scripts import DEADLINE, Fatal, Reports, StubbornTask

from sluice.states import ExecutionState, FailureCause
from taskmanager.task_registry import TaskRegistry, TaskRejected


def registry(timeout: float = 0.6) -> tuple[TaskRegistry, Fatal]:
    fatal = Fatal()
    tasks = TaskRegistry(1, cancellation_interval=0.05, cancellation_timeout=timeout, on_fatal=fatal)
    tasks.follow("s1")
    return tasks, fatal


def deploy(tasks: TaskRegistry, eid: str, reports: Reports, blocking: bool) -> StubbornTask:
    task = tasks.deploy(0, "job-a", eid, lambda: StubbornTask(eid, reports, blocking))
    assert isinstance(task, StubbornTask)
    task.start()
    assert task.started.wait(DEADLINE)
    return task


def test_an_interrupt_stops_a_task_that_ignores_the_cancel_and_only_then_frees_its_slot():
    tasks, fatal = registry(timeout=30)
    freed = threading.Event()
    tasks.on_slot_freed(freed.set)
    reports = Reports()
    task = deploy(tasks, "a/0", reports, blocking=False)
    assert tasks.cancel("a/0") is True
    assert tasks.table.free_slots() == 0 and tasks.slot_report()[0].job_id == "job-a"  # asked, not ended
    wait_until(lambda: reports.of("a/0") == [ExecutionState.CANCELED], DEADLINE, "CANCELED after an interrupt")
    task.join(DEADLINE)
    assert freed.wait(DEADLINE)
    assert tasks.table.free_slots() == 1 and tasks.slot_report()[0].job_id == ""
    assert tasks.get("a/0") is None and fatal.reasons == []


def test_a_task_that_does_not_stop_within_the_timeout_fails_and_its_taskmanager_gives_up():
    tasks, fatal = registry(timeout=0.6)
    reports = Reports()
    task = deploy(tasks, "a/0", reports, blocking=True)
    started = time.monotonic()
    tasks.cancel("a/0")
    wait_until(lambda: fatal.reasons, DEADLINE, "the watchdog to give up")
    assert time.monotonic() - started >= 0.6
    [(_, state, failure)] = reports.states
    assert state == ExecutionState.FAILED and failure is not None and failure.cause == FailureCause.TASK_ERROR
    assert "did not stop within 0.6s of being cancelled (task.cancellation.timeout)" in failure.error
    assert "self.release.wait()" in failure.error  # where the thread hangs
    assert "a/0" not in fatal.reasons[0] and "task c#0" in fatal.reasons[0]
    assert tasks.table.free_slots() == 0  # its thread still runs: the slot is not free
    task.release.set()
    task.join(DEADLINE)
    wait_until(lambda: tasks.table.free_slots() == 1, DEADLINE, "the slot freed once the thread ended")


def test_a_timeout_of_zero_never_gives_up():
    tasks, fatal = registry(timeout=0)
    task = deploy(tasks, "a/0", Reports(), blocking=True)
    tasks.cancel("a/0")
    time.sleep(0.5)  # ten intervals: the watchdog keeps trying, never gives up
    assert fatal.reasons == [] and task.alive
    task.release.set()
    task.join(DEADLINE)
    wait_until(lambda: tasks.table.free_slots() == 1, DEADLINE, "the slot freed")


def test_a_cancel_that_overtook_its_deployment_refuses_the_deployment():
    tasks, _ = registry()
    assert tasks.cancel("late/0") is False
    created = []
    with pytest.raises(TaskRejected, match="cancelled before it was deployed"):
        tasks.deploy(0, "job-a", "late/0", lambda: created.append(1))  # type: ignore[arg-type, return-value]  # never called
    assert created == [] and tasks.table.free_slots() == 1


def test_a_new_leader_cancels_the_old_leaders_tasks_and_their_slots_stay_held_until_they_end():
    tasks, _ = registry(timeout=30)
    reports = Reports()
    task = deploy(tasks, "a/0", reports, blocking=True)
    tasks.follow("s2")
    assert task.cancelled() and tasks.table.free_slots() == 0
    with pytest.raises(TaskRejected, match="held by job job-a"):
        tasks.deploy(0, "job-b", "b/0", lambda: StubbornTask("b/0", reports, True))
    task.release.set()
    task.join(DEADLINE)
    wait_until(lambda: tasks.table.free_slots() == 1, DEADLINE, "the slot freed")


@pytest.mark.parametrize(("interval", "timeout"), [(0, 1), (-1, 1), (1, -1)])
def test_bad_watchdog_settings_are_refused(interval, timeout):
    with pytest.raises(ValueError, match="task.cancellation"):
        TaskRegistry(1, cancellation_interval=interval, cancellation_timeout=timeout)
