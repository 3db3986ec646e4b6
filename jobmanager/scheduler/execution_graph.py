"""ExecutionGraph: the life of one job's tasks, as a pure state machine.

Theory of operation
-------------------
A job is a set of chains (tasks), each with a parallelism; every (chain,
subtask) pair is an *execution* with a unique execution id. The job waits in
CREATED until the slot pool hands it its slots (`SlotsAssigned`); then every
execution is deployed at once (streaming jobs run all tasks together) and the
job is RUNNING. TaskManagers report each execution's state
(`TaskStateReported`). When every execution FINISHED, the job is FINISHED.
The first FAILED execution (or a lost TaskManager) fails the job: the other
executions are cancelled and, once they all reached a terminal state (or
`cancel_timeout` passed — a TaskManager may be gone), the job is FAILED with
the first failure as root cause. A cancel request works the same way and ends
CANCELED.

Inputs are events, outputs are actions; time arrives in events. Reports that
no longer apply (late, duplicate, for an unknown execution) return an
explicit `Ignored` outcome instead of raising. Transitions are data
(`JOB_TRANSITIONS`, `TASK_TRANSITIONS`); an illegal one raises and leaves the
state unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from jobmanager.scheduler.slot_pool import SlotId

# -- states -------------------------------------------------------------------
CREATED, RUNNING, FAILING, CANCELLING = "CREATED", "RUNNING", "FAILING", "CANCELLING"
FINISHED, FAILED, CANCELED = "FINISHED", "FAILED", "CANCELED"
JOB_TERMINAL = (FINISHED, FAILED, CANCELED)

JOB_TRANSITIONS: dict[str, tuple[str, ...]] = {
    CREATED: (RUNNING, CANCELED, FAILED),
    RUNNING: (FINISHED, FAILING, CANCELLING),
    FAILING: (FAILED,),
    CANCELLING: (CANCELED,),
    FINISHED: (), FAILED: (), CANCELED: (),
}

T_CREATED, T_DEPLOYING, T_RUNNING, T_FINISHED = "CREATED", "DEPLOYING", "RUNNING", "FINISHED"
T_CANCELING, T_CANCELED, T_FAILED = "CANCELING", "CANCELED", "FAILED"
TASK_TERMINAL = (T_FINISHED, T_CANCELED, T_FAILED)

TASK_TRANSITIONS: dict[str, tuple[str, ...]] = {
    T_CREATED: (T_DEPLOYING, T_CANCELED, T_FAILED),
    T_DEPLOYING: (T_RUNNING, T_FINISHED, T_FAILED, T_CANCELING, T_CANCELED),
    T_RUNNING: (T_FINISHED, T_FAILED, T_CANCELING, T_CANCELED),
    T_CANCELING: (T_CANCELED, T_FINISHED, T_FAILED),
    T_FINISHED: (), T_CANCELED: (), T_FAILED: (),
}


class IllegalTransition(RuntimeError):
    pass


# -- events ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SlotsAssigned:
    slots: tuple[SlotId, ...]
    now: float


@dataclasses.dataclass(frozen=True)
class TaskStateReported:
    execution_id: str
    state: str
    error: str = ""
    now: float = 0.0


@dataclasses.dataclass(frozen=True)
class DeploymentFailed:
    execution_id: str
    error: str
    now: float


@dataclasses.dataclass(frozen=True)
class TaskManagerLost:
    resource_id: str
    reason: str
    now: float


@dataclasses.dataclass(frozen=True)
class GlobalFailure:
    """The job fails as a whole (e.g. too many failed checkpoints)."""
    reason: str
    now: float


@dataclasses.dataclass(frozen=True)
class CancelRequested:
    now: float


@dataclasses.dataclass(frozen=True)
class Tick:
    now: float


# -- actions --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DeployExecutions:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CancelExecutions:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class JobStatusChanged:
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class JobTerminated:
    state: str
    failure: str


@dataclasses.dataclass(frozen=True)
class Ignored:
    reason: str


# -- model ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ChainInfo:
    id: str
    name: str
    parallelism: int


@dataclasses.dataclass
class Execution:
    execution_id: str
    chain_id: str
    name: str
    subtask: int
    state: str = T_CREATED
    slot: SlotId | None = None
    error: str = ""


def execution_id(job_id: str, attempt: int | str, chain_id: str, subtask: int) -> str:
    return f"{job_id}/{attempt}/{chain_id}/{subtask}"


class ExecutionGraph:
    def __init__(self, job_id: str, chains: Iterable[ChainInfo], attempt: int = 0,
                 cancel_timeout: float = 10.0, attempt_tag: str | None = None):
        # attempt_tag names this attempt in execution ids; it must be unique across
        # JobManager leaders too (a new leader counts attempts from 0 again).
        self.attempt_tag = attempt_tag if attempt_tag is not None else str(attempt)
        self.job_id = job_id
        self.attempt = attempt
        self.cancel_timeout = cancel_timeout
        self.state = CREATED
        self.failure = ""
        self._ending_since: float | None = None
        self.executions: dict[str, Execution] = {}
        for c in chains:
            for i in range(c.parallelism):
                eid = execution_id(job_id, self.attempt_tag, c.id, i)
                self.executions[eid] = Execution(eid, c.id, c.name, i)

    @property
    def slots_required(self) -> int:
        return 1 + max(e.subtask for e in self.executions.values())

    def slot_of(self, chain_id: str, subtask: int) -> SlotId | None:
        return self.executions[execution_id(self.job_id, self.attempt_tag, chain_id, subtask)].slot

    # -- dispatch ---------------------------------------------------------------
    def handle(self, event) -> list:
        handler = {
            SlotsAssigned: self._on_slots, TaskStateReported: self._on_report,
            DeploymentFailed: self._on_deployment_failed, TaskManagerLost: self._on_tm_lost,
            CancelRequested: self._on_cancel, Tick: self._on_tick, GlobalFailure: self._on_global_failure,
        }.get(type(event))
        if handler is None:
            raise TypeError(f"not an ExecutionGraph event: {event!r}")
        return handler(event)

    def _on_slots(self, ev: SlotsAssigned) -> list:
        if self.state != CREATED:
            return [Ignored(f"slots assigned while {self.state}")]
        if len(ev.slots) < self.slots_required:
            raise ValueError(f"need {self.slots_required} slots, got {len(ev.slots)}")
        actions = self._set_job(RUNNING)
        for ex in self.executions.values():
            ex.slot = ev.slots[ex.subtask]
            self._set_task(ex, T_DEPLOYING)
        return actions + [DeployExecutions(tuple(self.executions))]

    def _on_report(self, ev: TaskStateReported) -> list:
        ex = self.executions.get(ev.execution_id)
        if ex is None:
            return [Ignored(f"unknown execution {ev.execution_id}")]
        if ex.state == ev.state:
            return [Ignored(f"duplicate report {ev.state} for {ev.execution_id}")]
        if ev.state not in TASK_TRANSITIONS[ex.state]:
            return [Ignored(f"late report {ev.state} for {ev.execution_id} in {ex.state}")]
        if self.state == CREATED:  # nothing was deployed: a report cannot be about this attempt
            return [Ignored(f"report {ev.state} for {ev.execution_id} before deployment")]
        self._set_task(ex, ev.state)
        where = f"task {ex.name} ({ex.subtask + 1}/{self._parallelism(ex)})"
        if ev.state == T_FAILED:
            ex.error = ev.error
            return self._fail(f"{where} failed:\n{ev.error}", ev.now)
        if ev.state == T_CANCELED and self.state == RUNNING:  # nobody asked: the job cannot finish
            ex.error = ev.error or "cancelled on its TaskManager"
            return self._fail(f"{where} was cancelled unexpectedly: {ex.error}", ev.now)
        return self._check_done()

    def _on_deployment_failed(self, ev: DeploymentFailed) -> list:
        return self._on_report(TaskStateReported(ev.execution_id, T_FAILED, f"deployment failed: {ev.error}", ev.now))

    def _on_tm_lost(self, ev: TaskManagerLost) -> list:
        lost = [ex for ex in self.executions.values()
                if ex.slot is not None and ex.slot.resource_id == ev.resource_id and ex.state not in TASK_TERMINAL]
        if not lost:
            return []
        for ex in lost:
            self._set_task(ex, T_FAILED)
            ex.error = f"TaskManager {ev.resource_id} lost: {ev.reason}"
        return self._fail(f"TaskManager {ev.resource_id} lost: {ev.reason}", ev.now)

    def _on_global_failure(self, ev: GlobalFailure) -> list:
        if self.state == CREATED:
            for ex in self.executions.values():
                self._set_task(ex, T_CANCELED)
            self.failure = ev.reason
            return self._set_job(FAILED) + [JobTerminated(FAILED, ev.reason)]
        return self._fail(ev.reason, ev.now)

    def _on_cancel(self, ev: CancelRequested) -> list:
        if self.state in JOB_TERMINAL or self.state == CANCELLING:
            return [Ignored(f"cancel while {self.state}")]
        if self.state == CREATED:
            for ex in self.executions.values():
                self._set_task(ex, T_CANCELED)
            return self._set_job(CANCELED) + [JobTerminated(CANCELED, "")]
        if self.state == FAILING:  # already winding down; the end state stays FAILED
            return [Ignored("cancel while FAILING")]
        actions = self._set_job(CANCELLING)
        self._ending_since = ev.now
        return actions + self._cancel_running() + self._check_done()

    def _on_tick(self, ev: Tick) -> list:
        if self.state not in (FAILING, CANCELLING) or self._ending_since is None:
            return []
        if ev.now - self._ending_since < self.cancel_timeout:
            return []
        for ex in self.executions.values():
            if ex.state not in TASK_TERMINAL:
                self._set_task(ex, T_CANCELED)
                ex.error = f"no answer to cancel within {self.cancel_timeout}s"
        return self._check_done()

    # -- helpers ----------------------------------------------------------------
    def _fail(self, failure: str, now: float) -> list:
        if self.state in (FAILING, CANCELLING) or self.state in JOB_TERMINAL:
            return self._check_done()
        self.failure = failure
        actions = self._set_job(FAILING)
        self._ending_since = now
        return actions + self._cancel_running() + self._check_done()

    def _cancel_running(self) -> list:
        ids = []
        for ex in self.executions.values():
            if ex.state in (T_DEPLOYING, T_RUNNING):
                self._set_task(ex, T_CANCELING)
                ids.append(ex.execution_id)
            elif ex.state == T_CREATED:
                self._set_task(ex, T_CANCELED)
        return [CancelExecutions(tuple(ids))] if ids else []

    def _check_done(self) -> list:
        states = [ex.state for ex in self.executions.values()]
        if not all(s in TASK_TERMINAL for s in states):
            return []
        end = {RUNNING: FINISHED, FAILING: FAILED, CANCELLING: CANCELED}.get(self.state)
        if end is None:
            return []
        if end == FINISHED and any(s != T_FINISHED for s in states):  # failures and cancels move to FAILING first
            raise IllegalTransition(f"job RUNNING with terminal tasks {set(states)}")
        return self._set_job(end) + [JobTerminated(end, self.failure)]

    def _set_job(self, new: str) -> list:
        if new not in JOB_TRANSITIONS[self.state]:
            raise IllegalTransition(f"job {self.job_id}: {self.state} -> {new}")
        old, self.state = self.state, new
        return [JobStatusChanged(old, new)]

    def _set_task(self, ex: Execution, new: str) -> None:
        if new not in TASK_TRANSITIONS[ex.state]:
            raise IllegalTransition(f"{ex.execution_id}: {ex.state} -> {new}")
        ex.state = new

    def _parallelism(self, ex: Execution) -> int:
        return sum(1 for e in self.executions.values() if e.chain_id == ex.chain_id)
