"""The tasks a TaskManager runs, their slots, and the leader session they belong to.

One lock guards the slot table (a pure core, taskmanager/slot_table.py), the
running tasks and the leader session this TaskManager follows, so that a new
leader session and the cancellation of the old leader's tasks happen at once
(docs/architecture.md, "Fencing"). The servicer deploys and cancels through
it, the leader connection switches sessions and reads the slot report for
its heartbeats.

A task's slot is freed only when the task's thread has really ended (its
exit hook, `_exited`), never when it was only asked to stop: until then the
slot report says the slot is held, and the JobManager offers it to no other
job.

Cancellation watchdog (Flink's `task.cancellation.interval` and
`task.cancellation.timeout`): a cancelled task that is still running after
each interval is interrupted again (its Spark jobs cancelled by tag, an
exception raised in its thread as far as Python allows, `Task.interrupt`).
When it has not ended within the timeout, the task is reported FAILED with
the reason, and if its thread still lives the TaskManager gives up
(`on_fatal`): the process exits so that its supervisor starts a fresh one —
the only way to get back a slot a Python thread will not leave.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import assert_never

from sluice import config
from sluice.states import ExecutionState, FailureCause
from sluice.v1 import jobmanager_pb2
from taskmanager import slot_table as st
from taskmanager.memory_reclaim import MemoryReclaimer
from taskmanager.metrics import io_proto
from taskmanager.task import Task
from taskmanager.task_messages import Failure

log = logging.getLogger("sluice.taskmanager")

# The exit status of a TaskManager that gave up on a task that would not stop (sysexits' EX_SOFTWARE).
EXIT_TASK_DID_NOT_STOP = 70
EXIT_SPARK_JVM_DIED = 71  # taskmanager/server.py: the Spark JVM ended under the TaskManager


class TaskRejected(Exception):
    """The slot table refused a deployment; the message says why."""


def exit_process(reason: str, status: int = EXIT_TASK_DID_NOT_STOP) -> None:
    """The default `on_fatal`: end the process at once (a thread that will not stop also
    stops an orderly shutdown); its supervisor restarts it."""
    log.critical("TaskManager exits (status %d): %s", status, reason)
    logging.shutdown()
    os._exit(status)


class TaskRegistry:
    def __init__(
        self,
        slots: int,
        cancellation_interval: float = config.TASK_CANCELLATION_INTERVAL.default,
        cancellation_timeout: float = config.TASK_CANCELLATION_TIMEOUT.default,
        on_fatal: Callable[[str], None] = exit_process,
        clock: Callable[[], float] = time.monotonic,
        reclaimer: MemoryReclaimer | None = None,
    ) -> None:
        if not cancellation_interval > 0:
            raise ValueError(f"task.cancellation.interval must be > 0, got {cancellation_interval!r}")
        if not cancellation_timeout >= 0:
            raise ValueError(f"task.cancellation.timeout must be >= 0 (0: never give up), got {cancellation_timeout!r}")
        self.table = st.TaskSlotTable(slots)
        self._tasks: dict[str, Task] = {}
        self._lock = threading.RLock()
        self._session: str | None = None
        self.cancellation_interval = cancellation_interval
        self.cancellation_timeout = cancellation_timeout
        self._on_fatal = on_fatal
        self._clock = clock
        self._watched: set[str] = set()  # execution ids with a running watchdog
        self._slot_listeners: list[Callable[[], None]] = []
        self._reclaimer = reclaimer  # gives an ended task's memory back (taskmanager/memory_reclaim.py)

    @property
    def session(self) -> str | None:
        """The leader session this TaskManager follows (None before the first registration)."""
        return self._session

    def follow(self, session_id: str) -> None:
        """Follow leader session `session_id`; a change of session cancels the old leader's tasks."""
        with self._lock:
            if self._session == session_id:
                return
            if self._session is not None:
                self._apply(self.table.handle(st.LeaderChanged()), f"new leader session {session_id}")
            self._session = session_id

    def on_slot_freed(self, listener: Callable[[], None]) -> None:
        """`listener()` runs (outside the lock) each time a slot became free: e.g. heartbeat now."""
        self._slot_listeners.append(listener)

    def deploy(self, slot_index: int, job_id: str, execution_id: str, create: Callable[[], Task]) -> Task:
        """Take a slot for the task `create` builds (TaskRejected when the slot table refuses)."""
        with self._lock:
            self._apply(self.table.handle(st.TaskSubmitted(slot_index, job_id, execution_id)), f"[job {job_id}]")
            try:
                task = create()
            except BaseException:
                self.table.handle(st.TaskEnded(execution_id))  # nothing runs: give the slot back
                raise
            task.add_exit_hook(self._exited)
            self._tasks[execution_id] = task
            return task

    def cancel(self, execution_id: str, why: str = "") -> bool:
        """Cancel a task (and watch that it stops); a cancel for an execution not deployed here is
        remembered, so that its late deployment is refused. True when the task was here."""
        with self._lock:
            actions = self.table.handle(st.CancelRequested(execution_id))
            self._apply(actions, why or f"cancel of {execution_id}")
            return not any(isinstance(a, st.Remembered) for a in actions)

    def _exited(self, task: Task) -> None:
        """The exit hook of every task: its thread has ended, its slot may be freed."""
        with self._lock:
            if self._tasks.get(task.execution_id) is not task:
                return
            del self._tasks[task.execution_id]
            freed = any(isinstance(a, st.SlotFreed) for a in self.table.handle(st.TaskEnded(task.execution_id)))
        if freed:
            for listener in self._slot_listeners:
                listener()
        if self._reclaimer is not None:
            self._reclaimer.task_ended(task.thread, task.tag)

    def get(self, execution_id: str) -> Task | None:
        with self._lock:
            return self._tasks.get(execution_id)

    def all(self) -> list[Task]:
        with self._lock:
            return list(self._tasks.values())

    def metrics(self) -> list[jobmanager_pb2.TaskMetrics]:
        """What heartbeats carry about each task."""
        now = time.monotonic()
        with self._lock:
            return [
                jobmanager_pb2.TaskMetrics(
                    job_id=t.job_id,
                    execution_id=t.execution_id,
                    counters=t.counters(),
                    bad_record_samples=t.bad_record_samples,
                    watermark=t.watermark,
                    key_group_records=t.key_group_load(),
                    io=io_proto(t.io_snapshot(now)),
                )
                for t in self._tasks.values()
            ]

    def slot_report(self) -> list[jobmanager_pb2.SlotStatus]:
        """What heartbeats carry about each slot: the job holding it ("" when free) and its tasks."""
        with self._lock:
            return [
                jobmanager_pb2.SlotStatus(slot_index=index, job_id=job_id, execution_ids=executions)
                for index, job_id, executions in self.table.slot_report()
            ]

    def _apply(self, actions: Sequence[st.SlotTableAction], why: str) -> None:
        """Carry out the slot table's actions (under the lock)."""
        for action in actions:
            match action:
                case st.Rejected():
                    raise TaskRejected(f"task {action.execution_id}: {action.reason}")
                case st.CancelTasks():
                    if len(action.execution_ids) > 1:
                        log.warning("%s: cancelling %d tasks", why, len(action.execution_ids))
                    for eid in action.execution_ids:
                        task = self._tasks.get(eid)
                        if task is not None:
                            self._cancel_task(task)
                case st.Remembered():
                    log.info(
                        "%s: no such task here; a later deployment of %s will be refused", why, action.execution_id
                    )
                case st.Accepted() | st.SlotFreed():
                    pass
                case _:
                    assert_never(action)

    # -- the cancellation watchdog ---------------------------------------------------------------
    def _cancel_task(self, task: Task) -> None:
        task.cancel()
        if task.execution_id in self._watched:
            return
        self._watched.add(task.execution_id)
        threading.Thread(
            target=self._watch,
            args=(task, self._clock()),
            name=f"cancel-watchdog-{task.tdd.chain_id}-{task.tdd.subtask_index}",
            daemon=True,
        ).start()

    def _watch(self, task: Task, since: float) -> None:
        """Until `task`'s thread ended: interrupt it every interval; give up after the timeout."""
        try:
            timeout = self.cancellation_timeout
            while True:
                wait = self.cancellation_interval
                if timeout > 0:
                    wait = min(wait, max(0.0, since + timeout - self._clock()))
                if task.thread_ident is None:
                    return  # not started yet: it sees the cancel before its first batch
                task.join(wait)
                if not task.alive:
                    return
                elapsed = self._clock() - since
                if timeout > 0 and elapsed >= timeout:
                    break
                sent = task.interrupt()
                log.warning(
                    "%s still running %.1fs after it was cancelled: %s",
                    task.tag,
                    elapsed,
                    "cancelled its Spark jobs again and interrupted its thread"
                    if sent
                    else "cancelled its Spark jobs again",
                )
            self._give_up(task, timeout)
        finally:
            with self._lock:
                self._watched.discard(task.execution_id)

    def _give_up(self, task: Task, timeout: float) -> None:
        where = _stack_of(task)
        reason = (
            f"task did not stop within {timeout:g}s of being cancelled (task.cancellation.timeout); "
            "its TaskManager exits so that its supervisor restarts it with free slots"
        )
        log.error("%s %s; the task's thread is at:\n%s", task.tag, reason, where)
        task.reports.report(task, ExecutionState.FAILED, Failure(f"{reason}\n{where}", FailureCause.TASK_ERROR))
        if task.alive:
            self._on_fatal(f"{task.tag} {reason}")


def _stack_of(task: Task) -> str:
    """Where the task's thread is now (for the log and the report), or why that is unknown."""
    ident = task.thread_ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return "(the task's thread has ended)"
    return "".join(traceback.format_stack(frame))
