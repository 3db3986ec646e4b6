"""Task threads for the task registry's tests (test_task_registry.py, test_memory_reclaim.py): a
task whose work ignores the cooperative cancel, either in Python code (an interrupt reaches it) or
in one blocking C call (nothing does), the reports it makes, and the TaskManager's give-up hook."""

from __future__ import annotations

import threading
import time

from sluice.states import ExecutionState
from sluice.v1 import common_pb2, taskmanager_pb2
from taskmanager.network.partition import PartitionManager, TaskCancelled
from taskmanager.spark_engine import SparkEngine
from taskmanager.task import Task
from taskmanager.task_messages import Failure

DEADLINE = 10.0


class Reports:
    def __init__(self) -> None:
        self.states: list[tuple[str, ExecutionState, Failure | None]] = []
        self.lock = threading.Lock()

    def report(self, task, state, failure=None, end_of_input=False) -> None:
        with self.lock:
            self.states.append((task.execution_id, state, failure))

    def acknowledge(self, task, checkpoint_id, handle, size) -> None:
        raise AssertionError("no checkpoints here")

    def decline(self, task, checkpoint_id, reason) -> None:
        raise AssertionError("no checkpoints here")

    def of(self, execution_id: str) -> list[ExecutionState]:
        with self.lock:
            return [state for eid, state, _ in self.states if eid == execution_id]


class StubbornTask(Task):
    """Its work never looks at the cancel flag: a busy Python loop, or a wait in one C call."""

    def __init__(self, execution_id: str, reports: Reports, blocking: bool) -> None:
        tdd = taskmanager_pb2.TaskDeploymentDescriptor(
            leader_session_id="s1",
            job_id="job-a",
            execution_id=execution_id,
            chain_id="c",
            parallelism=1,
            job=common_pb2.JobGraph(),
        )
        super().__init__(tdd, SparkEngine(1), PartitionManager(), "127.0.0.1:1", reports)
        self.blocking = blocking
        self.release = threading.Event()
        self.started = threading.Event()

    def _run(self) -> None:
        self._interruptible = True
        try:
            self.started.set()
            if self.blocking:
                self.release.wait()  # one C call: an asynchronous exception waits for it to return
            else:
                end = time.monotonic() + 60
                while time.monotonic() < end:  # Python bytecode: an interrupt arrives here
                    pass
            self.state = ExecutionState.FINISHED
            self.reports.report(self, ExecutionState.FINISHED)
        except TaskCancelled:
            self._interruptible = False
            self.state = ExecutionState.CANCELED
            self.reports.report(self, ExecutionState.CANCELED)
        finally:
            self._interruptible = False


class Fatal:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
