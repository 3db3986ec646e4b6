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
the first failure as root cause (`root_cause`: the task, its reported
`FailureCause` and its error, which the JobMaster's failure classification
and exception history read). A cancel request works the same way and ends
CANCELED.

Inputs are events, outputs are actions; time arrives in events. Reports that
no longer apply (late, duplicate, for an unknown execution) return an
explicit `Ignored` outcome instead of raising. Transitions are data
(`JOB_TRANSITIONS`, `TASK_TRANSITIONS`, keyed by the `JobStatus` and
`ExecutionState` members of sluice/states.py); an illegal one raises
`IllegalTransition` and leaves the state unchanged. A state reported as a
plain name (`"RUNNING"`) is turned into its member on the way in, so stored
states are always members.

Execution ids are built here, by `execution_id()`, and only here; nothing
parses them apart (reports carry the job id beside the execution id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TypeAlias

from jobmanager.scheduler.slot_pool import SlotId
from sluice.states import ExecutionState, FailureCause, IllegalTransition, JobStatus, check_transition

CANCEL_TIMEOUT = 10.0  # seconds a FAILING/CANCELLING job waits for its tasks' answers (a TaskManager may be gone)

# -- states -------------------------------------------------------------------
_J, _T = JobStatus, ExecutionState

# The execution graph's part of JobStatus (RESTARTING is the JobMaster's, between attempts).
JOB_TRANSITIONS: dict[JobStatus, tuple[JobStatus, ...]] = {
    _J.CREATED: (_J.RUNNING, _J.CANCELED, _J.FAILED),
    _J.RUNNING: (_J.FINISHED, _J.FAILING, _J.CANCELLING),
    _J.FAILING: (_J.FAILED,),
    _J.CANCELLING: (_J.CANCELED,),
    _J.FINISHED: (),
    _J.FAILED: (),
    _J.CANCELED: (),
}

TASK_TRANSITIONS: dict[ExecutionState, tuple[ExecutionState, ...]] = {
    _T.CREATED: (_T.DEPLOYING, _T.CANCELED, _T.FAILED),
    _T.DEPLOYING: (_T.RUNNING, _T.FINISHED, _T.FAILED, _T.CANCELING, _T.CANCELED),
    _T.RUNNING: (_T.FINISHED, _T.FAILED, _T.CANCELING, _T.CANCELED),
    _T.CANCELING: (_T.CANCELED, _T.FINISHED, _T.FAILED),
    _T.FINISHED: (),
    _T.CANCELED: (),
    _T.FAILED: (),
}


# -- events ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SlotsAssigned:
    slots: tuple[SlotId, ...]
    now: float


@dataclasses.dataclass(frozen=True)
class TaskStateReported:
    execution_id: str
    state: ExecutionState  # a plain name ("RUNNING") is accepted and coerced by handle()
    error: str = ""
    now: float = 0.0
    cause: FailureCause | None = None  # with FAILED: the cause the TaskManager reported


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
    address: str = ""  # host:port it was registered with, for the root cause


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


@dataclasses.dataclass(frozen=True)
class ReplaceChains:
    """Live reconfiguration (docs/reconfiguration.md): these chains' executions, all FINISHED
    at the reconfiguration barrier, give way to new ones (at the chains' new parallelism, in
    the job's slots), named with `tag` instead of the attempt's."""

    chains: tuple[ChainInfo, ...]
    tag: str
    now: float


ExecutionGraphEvent: TypeAlias = (
    SlotsAssigned
    | TaskStateReported
    | DeploymentFailed
    | TaskManagerLost
    | GlobalFailure
    | CancelRequested
    | Tick
    | ReplaceChains
)


# -- actions --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DeployExecutions:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CancelExecutions:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class JobStatusChanged:
    old: JobStatus
    new: JobStatus


@dataclasses.dataclass(frozen=True)
class JobTerminated:
    state: JobStatus
    failure: str


@dataclasses.dataclass(frozen=True)
class Ignored:
    reason: str


ExecutionGraphAction: TypeAlias = DeployExecutions | CancelExecutions | JobStatusChanged | JobTerminated | Ignored
Actions: TypeAlias = list[ExecutionGraphAction]


# -- model ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RootCause:
    """The failure that failed an attempt (the first one; later ones are its consequences)."""

    task: str  # "<chain name> (<subtask+1>/<parallelism>)"; "" for a job-wide cause (lost TaskManager, global)
    chain_id: str  # "" for a job-wide cause
    error: str  # the task's traceback, or the reason
    cause: FailureCause | None = None  # as the task reported it; None when no task reported it
    lost_taskmanager: str = ""  # resource id of the TaskManager whose loss failed the attempt


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
    state: ExecutionState = ExecutionState.CREATED
    slot: SlotId | None = None
    error: str = ""


def execution_id(job_id: str, attempt: int | str, chain_id: str, subtask: int) -> str:
    """The one place execution ids are built; they are opaque everywhere else."""
    return f"{job_id}/{attempt}/{chain_id}/{subtask}"


class ExecutionGraph:
    def __init__(
        self,
        job_id: str,
        chains: Iterable[ChainInfo],
        attempt: int = 0,
        cancel_timeout: float = CANCEL_TIMEOUT,
        attempt_tag: str | None = None,
    ) -> None:
        # attempt_tag names this attempt in execution ids; it must be unique across
        # JobManager leaders too (a new leader counts attempts from 0 again).
        self.attempt_tag = attempt_tag if attempt_tag is not None else str(attempt)
        self.job_id = job_id
        self.attempt = attempt
        self.cancel_timeout = cancel_timeout
        self.state = JobStatus.CREATED
        self.failure = ""
        self.root_cause: RootCause | None = None  # set with `failure`
        self._ending_since: float | None = None
        self.executions: dict[str, Execution] = {}
        self.tags: dict[str, str] = {}  # chain id -> the tag in its execution ids (ReplaceChains changes it)
        self.slots: tuple[SlotId, ...] = ()
        for c in chains:
            self.tags[c.id] = self.attempt_tag
            for i in range(c.parallelism):
                eid = execution_id(job_id, self.attempt_tag, c.id, i)
                self.executions[eid] = Execution(eid, c.id, c.name, i)

    @property
    def slots_required(self) -> int:
        return 1 + max(e.subtask for e in self.executions.values())

    def slot_of(self, chain_id: str, subtask: int) -> SlotId | None:
        return self.executions[execution_id(self.job_id, self.tags[chain_id], chain_id, subtask)].slot

    # -- dispatch ---------------------------------------------------------------
    def handle(self, event: ExecutionGraphEvent) -> list[ExecutionGraphAction]:
        match event:
            case SlotsAssigned():
                return self._on_slots(event)
            case TaskStateReported():
                return self._on_report(event)
            case DeploymentFailed():
                return self._on_deployment_failed(event)
            case TaskManagerLost():
                return self._on_tm_lost(event)
            case GlobalFailure():
                return self._on_global_failure(event)
            case CancelRequested():
                return self._on_cancel(event)
            case Tick():
                return self._on_tick(event)
            case ReplaceChains():
                return self._on_replace(event)
            case _:
                raise TypeError(f"not an ExecutionGraph event: {event!r}")

    def _on_slots(self, ev: SlotsAssigned) -> Actions:
        if self.state != JobStatus.CREATED:
            return [Ignored(f"slots assigned while {self.state}")]
        if len(ev.slots) < self.slots_required:
            raise ValueError(f"need {self.slots_required} slots, got {len(ev.slots)}")
        actions = self._set_job(JobStatus.RUNNING)
        self.slots = tuple(ev.slots)
        for ex in self.executions.values():
            ex.slot = ev.slots[ex.subtask]
            self._set_task(ex, ExecutionState.DEPLOYING)
        return [*actions, DeployExecutions(tuple(self.executions))]

    def _on_report(self, ev: TaskStateReported) -> Actions:
        state = ExecutionState(ev.state)  # the edge: a plain name becomes its member (ValueError if none)
        ex = self.executions.get(ev.execution_id)
        if ex is None:
            return [Ignored(f"unknown execution {ev.execution_id}")]
        if ex.state == state:
            return [Ignored(f"duplicate report {state} for {ev.execution_id}")]
        if state not in TASK_TRANSITIONS[ex.state]:
            return [Ignored(f"late report {state} for {ev.execution_id} in {ex.state}")]
        if self.state == JobStatus.CREATED:  # nothing was deployed: a report cannot be about this attempt
            return [Ignored(f"report {state} for {ev.execution_id} before deployment")]
        self._set_task(ex, state)
        where = f"task {ex.name} ({ex.subtask + 1}/{self._parallelism(ex)})"
        task = where.removeprefix("task ")
        if state == ExecutionState.FAILED:
            ex.error = ev.error
            return self._fail(f"{where} failed:\n{ev.error}", ev.now, RootCause(task, ex.chain_id, ev.error, ev.cause))
        if state == ExecutionState.CANCELED and self.state == JobStatus.RUNNING:  # nobody asked: cannot finish
            ex.error = ev.error or "cancelled on its TaskManager"
            failure = f"{where} was cancelled unexpectedly: {ex.error}"
            return self._fail(failure, ev.now, RootCause(task, ex.chain_id, failure))
        return self._check_done()

    def _on_deployment_failed(self, ev: DeploymentFailed) -> Actions:
        return self._on_report(
            TaskStateReported(ev.execution_id, ExecutionState.FAILED, f"deployment failed: {ev.error}", ev.now)
        )

    def _on_tm_lost(self, ev: TaskManagerLost) -> Actions:
        lost = [
            ex
            for ex in self.executions.values()
            if ex.slot is not None and ex.slot.resource_id == ev.resource_id and not ex.state.terminal
        ]
        if not lost:
            return []
        where = f"TaskManager {ev.resource_id}" + (f" ({ev.address})" if ev.address else "")
        for ex in lost:
            self._set_task(ex, ExecutionState.FAILED)
            ex.error = f"{where} lost: {ev.reason}"
        # The task it ran: a body that kills its TaskManager (os._exit, a crash in native code) shows here.
        names = [f"{ex.name} ({ex.subtask + 1}/{self._parallelism(ex)})" for ex in lost]
        tasks = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        failure = f"{where} exited while running task {tasks} (lost: {ev.reason})"
        first = lost[0]
        return self._fail(failure, ev.now, RootCause(names[0], first.chain_id, failure, None, ev.resource_id))

    def _on_global_failure(self, ev: GlobalFailure) -> Actions:
        if self.state == JobStatus.CREATED:
            for ex in self.executions.values():
                self._set_task(ex, ExecutionState.CANCELED)
            self.failure, self.root_cause = ev.reason, RootCause("", "", ev.reason)
            return [*self._set_job(JobStatus.FAILED), JobTerminated(JobStatus.FAILED, ev.reason)]
        return self._fail(ev.reason, ev.now, RootCause("", "", ev.reason))

    def _on_cancel(self, ev: CancelRequested) -> Actions:
        if self.state.terminal or self.state == JobStatus.CANCELLING:
            return [Ignored(f"cancel while {self.state}")]
        if self.state == JobStatus.CREATED:
            for ex in self.executions.values():
                self._set_task(ex, ExecutionState.CANCELED)
            return [*self._set_job(JobStatus.CANCELED), JobTerminated(JobStatus.CANCELED, "")]
        if self.state == JobStatus.FAILING:  # already winding down; the end state stays FAILED
            return [Ignored("cancel while FAILING")]
        actions = self._set_job(JobStatus.CANCELLING)
        self._ending_since = ev.now
        return actions + self._cancel_running() + self._check_done()

    def _on_tick(self, ev: Tick) -> Actions:
        if self.state not in (JobStatus.FAILING, JobStatus.CANCELLING) or self._ending_since is None:
            return []
        if ev.now - self._ending_since < self.cancel_timeout:
            return []
        for ex in self.executions.values():
            if not ex.state.terminal:
                self._set_task(ex, ExecutionState.CANCELED)
                ex.error = f"no answer to cancel within {self.cancel_timeout}s"
        return self._check_done()

    def _on_replace(self, ev: ReplaceChains) -> Actions:
        if self.state != JobStatus.RUNNING:
            return [Ignored(f"replace while {self.state}")]
        replaced = {c.id for c in ev.chains}
        old = [ex for ex in self.executions.values() if ex.chain_id in replaced]
        if any(ex.state != ExecutionState.FINISHED for ex in old):
            raise ValueError(f"chains {sorted(replaced)} still have executions that did not finish")
        if any(c.parallelism > len(self.slots) for c in ev.chains) or ev.tag in self.tags.values():
            raise ValueError(f"{len(self.slots)} slots and tag {ev.tag!r} cannot hold {ev.chains}")
        for ex in old:
            del self.executions[ex.execution_id]
        new = []
        for c in ev.chains:
            self.tags[c.id] = ev.tag
            for i in range(c.parallelism):
                eid = execution_id(self.job_id, ev.tag, c.id, i)
                ex = self.executions[eid] = Execution(eid, c.id, c.name, i, slot=self.slots[i])
                self._set_task(ex, ExecutionState.DEPLOYING)
                new.append(eid)
        return [DeployExecutions(tuple(new))]

    # -- helpers ----------------------------------------------------------------
    def _fail(self, failure: str, now: float, root: RootCause) -> Actions:
        if self.state in (JobStatus.FAILING, JobStatus.CANCELLING) or self.state.terminal:
            return self._check_done()
        self.failure, self.root_cause = failure, root
        actions = self._set_job(JobStatus.FAILING)
        self._ending_since = now
        return actions + self._cancel_running() + self._check_done()

    def _cancel_running(self) -> Actions:
        ids = []
        for ex in self.executions.values():
            if ex.state in (ExecutionState.DEPLOYING, ExecutionState.RUNNING):
                self._set_task(ex, ExecutionState.CANCELING)
                ids.append(ex.execution_id)
            elif ex.state == ExecutionState.CREATED:
                self._set_task(ex, ExecutionState.CANCELED)
        return [CancelExecutions(tuple(ids))] if ids else []

    _END_OF = {
        JobStatus.RUNNING: JobStatus.FINISHED,
        JobStatus.FAILING: JobStatus.FAILED,
        JobStatus.CANCELLING: JobStatus.CANCELED,
    }

    def _check_done(self) -> Actions:
        states = [ex.state for ex in self.executions.values()]
        if not all(s.terminal for s in states):
            return []
        end = self._END_OF.get(self.state)
        if end is None:
            return []
        if end == JobStatus.FINISHED and any(s != ExecutionState.FINISHED for s in states):
            # failures and cancels move the job to FAILING first
            raise IllegalTransition(f"job RUNNING with terminal tasks {sorted(set(states))}")
        return [*self._set_job(end), JobTerminated(end, self.failure)]

    def _set_job(self, new: JobStatus) -> Actions:
        check_transition(JOB_TRANSITIONS, self.state, new, f"job {self.job_id}")
        old, self.state = self.state, new
        return [JobStatusChanged(old, new)]

    def _set_task(self, ex: Execution, new: ExecutionState) -> None:
        check_transition(TASK_TRANSITIONS, ex.state, new, ex.execution_id)
        ex.state = new

    def _parallelism(self, ex: Execution) -> int:
        return sum(1 for e in self.executions.values() if e.chain_id == ex.chain_id)
