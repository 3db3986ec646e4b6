"""A TaskManager gives an ended task's memory back (taskmanager/memory_reclaim.py): once the task's
thread is gone, a full collection frees the task's reference cycles (and so its state), and a
failing reclaim leaves the TaskManager and later reclaims alone. Real task threads, no Spark."""

from __future__ import annotations

import gc
import threading
import weakref

from helpers import wait_until
from task_thread_scripts import DEADLINE, Fatal, Reports, StubbornTask

from taskmanager.memory_reclaim import MemoryReclaimer, reclaim
from taskmanager.task_registry import TaskRegistry


def registry(reclaimer: MemoryReclaimer) -> tuple[TaskRegistry, Fatal]:
    fatal = Fatal()
    tasks = TaskRegistry(1, cancellation_interval=0.05, cancellation_timeout=5, on_fatal=fatal, reclaimer=reclaimer)
    tasks.follow("s1")
    return tasks, fatal


def run_one(tasks: TaskRegistry, eid: str) -> tuple[weakref.ref, threading.Thread]:
    """Deploy a task that ends as soon as it is released, release it; a weak reference to it and its thread."""
    task = tasks.deploy(0, "job-a", eid, lambda: StubbornTask(eid, Reports(), blocking=True))
    assert isinstance(task, StubbornTask)
    task.start()
    assert task.started.wait(DEADLINE)
    thread = task.thread
    task.release.set()
    return weakref.ref(task), thread


def test_an_ended_tasks_cycles_are_freed_once_its_thread_is_gone():
    seen_alive: list[bool] = []
    threads: list[threading.Thread] = []
    ready = threading.Event()  # the test holds no reference to the task any more

    def recording_reclaim() -> None:
        assert ready.wait(DEADLINE)
        seen_alive.extend(t.is_alive() for t in threads)
        reclaim()

    reclaimer = MemoryReclaimer(rss=lambda: 0, reclaim=recording_reclaim)
    tasks, _ = registry(reclaimer)
    gc.disable()  # only the reclaimer's collection may free the task (it is cyclic garbage)
    try:
        ref, thread = run_one(tasks, "a/0")
        threads.append(thread)
        ready.set()
        wait_until(lambda: reclaimer.rounds == 1, DEADLINE, "a reclaim after the task ended")
        assert seen_alive == [False]  # reclaimed only after the task's thread was gone
        assert ref() is None, "the ended task (and what it held) is still in memory"
    finally:
        gc.enable()
    assert tasks.table.free_slots() == 1


def test_a_failing_reclaim_is_logged_and_the_next_task_end_reclaims_again(caplog):
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("no memory to reclaim with")

    reclaimer = MemoryReclaimer(rss=lambda: 0, reclaim=flaky)
    tasks, fatal = registry(reclaimer)
    run_one(tasks, "a/0")
    wait_until(lambda: len(calls) == 1 and tasks.table.free_slots() == 1, DEADLINE, "the first reclaim")
    run_one(tasks, "a/1")
    wait_until(lambda: reclaimer.rounds == 1, DEADLINE, "a reclaim after the second task")
    assert len(calls) == 2 and fatal.reasons == []
    assert "reclaiming memory after the tasks ended failed" in caplog.text


def test_the_reclaim_logs_the_ended_tasks_and_the_rss_before_and_after(caplog):
    caplog.set_level("INFO", logger="sluice.taskmanager")
    sizes = iter([700 << 20, 400 << 20])
    reclaimer = MemoryReclaimer(rss=lambda: next(sizes), reclaim=lambda: None)
    tasks, _ = registry(reclaimer)
    run_one(tasks, "a/0")
    wait_until(lambda: reclaimer.rounds == 1, DEADLINE, "a reclaim")
    line = next(r.getMessage() for r in caplog.records if "reclaimed memory" in r.getMessage())
    assert line.startswith("[job job-a attempt 0 task c#0] ended") and line.endswith("RSS 700 -> 400 MiB")


def test_the_collection_waits_for_the_reports_to_be_sent_first():
    order: list[str] = []
    sent = threading.Event()

    def reports_sent(timeout: float) -> bool:
        assert 0 < timeout <= 5
        order.append("reports")
        return sent.wait(DEADLINE)

    reclaimer = MemoryReclaimer(rss=lambda: 0, reclaim=lambda: order.append("reclaim"), reports_sent=reports_sent)
    tasks, _ = registry(reclaimer)
    run_one(tasks, "a/0")
    wait_until(lambda: order == ["reports"], DEADLINE, "the reclaimer waiting for the reports")
    assert reclaimer.rounds == 0  # nothing collected while a report may be in flight
    sent.set()
    wait_until(lambda: reclaimer.rounds == 1, DEADLINE, "a reclaim once the reports were sent")
    assert order == ["reports", "reclaim"]
