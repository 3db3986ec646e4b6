"""The tasks a TaskManager runs, their slots, and the leader session they belong to.

One lock guards the slot table (a pure core, taskmanager/slot_table.py), the
running tasks and the leader session this TaskManager follows, so that a new
leader session and the cancellation of the old leader's tasks happen at once
(docs/architecture.md, "Fencing"). The servicer deploys through it, the
leader connection switches sessions and reports task ends through it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import assert_never

from sluice.v1 import jobmanager_pb2
from taskmanager import slot_table as st
from taskmanager.task import Task

log = logging.getLogger("sluice.taskmanager")


class TaskRejected(Exception):
    """The slot table refused a deployment; the message says why."""


class TaskRegistry:
    def __init__(self, slots: int) -> None:
        self.table = st.TaskSlotTable(slots)
        self._tasks: dict[str, Task] = {}
        self._lock = threading.RLock()
        self._session: str | None = None

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

    def deploy(self, slot_index: int, job_id: str, execution_id: str, create: Callable[[], Task]) -> Task:
        """Take a slot for the task `create` builds (TaskRejected when the slot table refuses)."""
        with self._lock:
            self._apply(self.table.handle(st.TaskSubmitted(slot_index, job_id, execution_id)), f"[job {job_id}]")
            task = create()
            self._tasks[execution_id] = task
            return task

    def ended(self, task: Task) -> None:
        """`task` reached a terminal state: free its slot (unless a newer deployment holds its id)."""
        with self._lock:
            if self._tasks.get(task.execution_id) is task:
                self._apply(self.table.handle(st.TaskEnded(task.execution_id)), task.tag)
                del self._tasks[task.execution_id]

    def get(self, execution_id: str) -> Task | None:
        with self._lock:
            return self._tasks.get(execution_id)

    def all(self) -> list[Task]:
        with self._lock:
            return list(self._tasks.values())

    def metrics(self) -> list[jobmanager_pb2.TaskMetrics]:
        """What heartbeats carry about each task."""
        with self._lock:
            return [
                jobmanager_pb2.TaskMetrics(
                    job_id=t.job_id,
                    execution_id=t.execution_id,
                    records_in=t.records_in,
                    records_out=t.records_out,
                    records_sent=t.records_sent,
                    records_malformed=t.records_malformed,
                )
                for t in self._tasks.values()
            ]

    def _apply(self, actions: Sequence[st.SlotTableAction], why: str) -> None:
        """Carry out the slot table's actions (under the lock)."""
        for action in actions:
            match action:
                case st.Rejected():
                    raise TaskRejected(f"task {action.execution_id}: {action.reason}")
                case st.CancelTasks():
                    log.warning("%s: cancelling %d tasks of the old leader", why, len(action.execution_ids))
                    for eid in action.execution_ids:
                        task = self._tasks.pop(eid, None)
                        if task is not None:
                            task.cancel()
                case st.Accepted() | st.SlotFreed():
                    pass
                case _:
                    assert_never(action)
