"""An ExecutionGraph's state and the queries on it (jobmanager/scheduler/execution_graph.py).

The transition tables of jobs and executions, the model (`Execution`, `ChainInfo`, `RootCause`,
`Speculation`, `RegionRestart`, execution ids) and `ExecutionGraphState`: the fields of one job attempt, the
queries its event handlers ask (slots, regions, producers and consumers, attempts of a
subtask), and the only code that changes a job's or an execution's state (`_set_job`,
`_set_task`), through the tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from jobmanager.scheduler.execution_graph_events import Actions, CancelExecutions, JobStatusChanged
from jobmanager.scheduler.pipelined_regions import Region, RegionEdge, Subtask, blocking_neighbours, pipelined_regions
from jobmanager.scheduler.slot_pool import SlotId
from sluice.states import ExecutionState, FailureCause, JobStatus, check_transition

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


@dataclasses.dataclass(frozen=True)
class Speculation:
    """When a BATCH subtask is slow enough to get a backup attempt (docs/batch.md)."""

    multiplier: float = 1.5
    min_finished: float = 0.75
    min_runtime: float = 1.0  # seconds


@dataclasses.dataclass
class Execution:
    execution_id: str
    chain_id: str
    name: str
    subtask: int
    state: ExecutionState = ExecutionState.CREATED
    slot: SlotId | None = None
    error: str = ""
    run: int = 0  # this subtask's execution attempt within the job attempt
    speculative: bool = False
    started_at: float | None = None  # deployed
    ended_at: float | None = None  # FINISHED

    @property
    def subtask_key(self) -> Subtask:
        return (self.chain_id, self.subtask)


def execution_id(job_id: str, attempt: int | str, chain_id: str, subtask: int) -> str:
    """The one place execution ids are built; they are opaque everywhere else."""
    return f"{job_id}/{attempt}/{chain_id}/{subtask}"


def run_suffix(run: int) -> str:
    """What a re-run's ids (executions, result partitions) carry after the attempt's tag."""
    return f"~{run}" if run else ""


@dataclasses.dataclass
class RegionRestart:
    """A region failover in progress (Flink's pipelined-region restart): the regions whose executions
    are being cancelled, replaced once the JobMaster's RestartRegions came and every one ended."""

    regions: set[int] = dataclasses.field(default_factory=set)  # indexes into ExecutionGraphState.regions
    wanted: bool = False  # the JobMaster's RestartRegions came
    since: float | None = None  # when their cancellation began: cancel_timeout counts from it

    def begin(self, regions: set[int], now: float) -> None:
        """`regions` fail too: their cancellation begins now, and the restart waits for a new answer."""
        self.regions |= regions
        self.wanted, self.since = False, now

    def clear(self) -> None:
        """The restart happened: no region is restarting."""
        self.regions.clear()
        self.wanted, self.since = False, None


class ExecutionGraphState:
    """One job attempt's executions, slots and regions; ExecutionGraph adds the event handlers."""

    def __init__(
        self,
        job_id: str,
        chains: Iterable[ChainInfo],
        attempt: int = 0,
        cancel_timeout: float = CANCEL_TIMEOUT,
        attempt_tag: str | None = None,
        edges: Sequence[RegionEdge] = (),
        region_failover: bool = False,
        batch: bool = False,
        speculation: Speculation | None = None,
    ) -> None:
        # attempt_tag names this attempt in execution ids; it must be unique across
        # JobManager leaders too (a new leader counts attempts from 0 again).
        self.attempt_tag = attempt_tag if attempt_tag is not None else str(attempt)
        self.job_id = job_id
        self.attempt = attempt
        self.cancel_timeout = cancel_timeout
        self.state = JobStatus.CREATED
        self.failure = ""
        self.root_cause: RootCause | None = None  # set with `failure`, and by a region failover
        self._ending_since: float | None = None
        self.executions: dict[str, Execution] = {}
        self.current: dict[Subtask, str] = {}  # subtask -> its execution that counts (the winner, the latest run)
        self.tags: dict[str, str] = {}  # chain id -> the tag in its execution ids (ReplaceChains changes it)
        self.slots: tuple[SlotId, ...] = ()
        self.lost_slots: set[SlotId] = set()
        self.edges = tuple(edges)
        self.batch = batch
        self.region_failover = region_failover or batch  # a batch job always recovers by region
        self.speculation = speculation if batch else None
        self.parallelism: dict[str, int] = {}
        self.names: dict[str, str] = {}
        self.deployments = 0  # executions deployed in this attempt (restarts and backups included)
        self.region_restart = RegionRestart()  # the regions being cancelled for a region restart
        self._slots_requested = False
        self.unavailable: set[Subtask] = set()  # BATCH: finished producers whose results are gone or released
        for c in chains:
            self.tags[c.id] = self.attempt_tag
            self.parallelism[c.id] = c.parallelism
            self.names[c.id] = c.name
            for i in range(c.parallelism):
                self._add(Execution(execution_id(job_id, self.attempt_tag, c.id, i), c.id, c.name, i))
        self._compute_regions()

    def _compute_regions(self) -> None:
        edges = [e for e in self.edges if e.producer in self.parallelism and e.consumer in self.parallelism]
        if self.batch:
            edges = [dataclasses.replace(e, blocking=True) for e in edges]
        self.edges = tuple(edges)
        self.regions: list[Region] = pipelined_regions(self.parallelism, self.edges)
        self.region_index: dict[Subtask, int] = {v: n for n, r in enumerate(self.regions) for v in r}

    def _add(self, ex: Execution) -> None:
        self.executions[ex.execution_id] = ex
        if not ex.speculative:
            self.current[ex.subtask_key] = ex.execution_id

    @property
    def restarting(self) -> set[int]:
        """The regions being cancelled for a region restart (`region_restart.regions`)."""
        return self.region_restart.regions

    @property
    def slots_required(self) -> int:
        return 1 + max(e.subtask for e in self.executions.values())

    def slot_of(self, chain_id: str, subtask: int) -> SlotId | None:
        return self.executions[self.current[(chain_id, subtask)]].slot

    def current_execution(self, chain_id: str, subtask: int) -> Execution:
        return self.executions[self.current[(chain_id, subtask)]]

    def region_name(self, ex: Execution) -> str:
        index = self.region_index.get(ex.subtask_key)
        return "" if index is None else f"r{index}"

    # -- batch scheduling -------------------------------------------------------
    def _producers(self, subtask: Subtask) -> set[Subtask]:
        """BATCH: the subtasks whose results `subtask` reads (every edge is blocking)."""
        return blocking_neighbours(self.parallelism, self.edges, subtask, downstream=False)

    def _consumers(self, subtask: Subtask) -> set[Subtask]:
        """BATCH: the subtasks that read `subtask`'s results."""
        return blocking_neighbours(self.parallelism, self.edges, subtask, downstream=True)

    def _finished(self, subtask: Subtask) -> bool:
        eid = self.current.get(subtask)
        return eid is not None and self.executions[eid].state == ExecutionState.FINISHED

    def _consumers_done(self, subtask: Subtask) -> bool:
        return all(self._finished(c) for c in self._consumers(subtask))

    def _busy_slots(self) -> set[SlotId]:
        return {ex.slot for ex in self.executions.values() if ex.slot is not None and not ex.state.terminal}

    def _free_slots(self) -> list[SlotId]:
        busy = self._busy_slots()
        return [s for s in self.slots if s not in busy and s not in self.lost_slots]

    def _deployed_once(self, subtask: Subtask) -> bool:
        return any(ex.slot is not None or ex.state != ExecutionState.CREATED for ex in self._attempts(subtask))

    # -- speculation ------------------------------------------------------------
    def _live_rival(self, ex: Execution) -> Execution | None:
        for other in self._attempts(ex.subtask_key):
            if other is not ex and other.state in (ExecutionState.DEPLOYING, ExecutionState.RUNNING):
                return other
        return None

    def _attempts(self, subtask: Subtask) -> list[Execution]:
        return [ex for ex in self.executions.values() if ex.subtask_key == subtask]

    def _superseded(self, ex: Execution) -> bool:
        """`ex` is an attempt that no longer counts: another attempt of its subtask is current
        and still alive or finished (a speculative race), and `ex` is not that one."""
        eid = self.current.get(ex.subtask_key)
        if eid == ex.execution_id or eid is None:
            return False
        other = self.executions[eid]
        if ex.state == ExecutionState.FINISHED:
            return other.state == ExecutionState.FINISHED
        return other.state != ExecutionState.FAILED and other.state != ExecutionState.CANCELED

    # -- helpers ----------------------------------------------------------------
    def _deploying(self, ex: Execution, now: float) -> None:
        self._set_task(ex, ExecutionState.DEPLOYING)
        ex.started_at = now
        self.deployments += 1

    def _cancel_running(self) -> Actions:
        ids = []
        for ex in self.executions.values():
            if ex.state in (ExecutionState.DEPLOYING, ExecutionState.RUNNING):
                self._set_task(ex, ExecutionState.CANCELING)
                ids.append(ex.execution_id)
            elif ex.state == ExecutionState.CREATED:
                self._set_task(ex, ExecutionState.CANCELED)
        return [CancelExecutions(tuple(ids))] if ids else []

    def _set_job(self, new: JobStatus) -> Actions:
        check_transition(JOB_TRANSITIONS, self.state, new, f"job {self.job_id}")
        old, self.state = self.state, new
        return [JobStatusChanged(old, new)]

    def _set_task(self, ex: Execution, new: ExecutionState) -> None:
        check_transition(TASK_TRANSITIONS, ex.state, new, ex.execution_id)
        ex.state = new

    def _parallelism(self, ex: Execution) -> int:
        return self.parallelism.get(ex.chain_id) or sum(
            1 for e in self.executions.values() if e.chain_id == ex.chain_id
        )
