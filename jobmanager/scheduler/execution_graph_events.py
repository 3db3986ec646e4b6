"""The events an ExecutionGraph takes and the actions it returns (jobmanager/scheduler/execution_graph.py).

Frozen dataclasses, one typed union each: `ExecutionGraphEvent` in, `ExecutionGraphAction` out.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeAlias

from jobmanager.scheduler.slot_pool import SlotId
from sluice.states import ExecutionState, FailureCause, JobStatus

if TYPE_CHECKING:
    from jobmanager.scheduler.execution_graph_state import ChainInfo, Execution, RootCause


# -- events ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SlotsAssigned:
    slots: tuple[SlotId, ...]
    now: float


@dataclasses.dataclass(frozen=True)
class TaskStateReported:
    execution_id: str
    state: ExecutionState | str  # a plain name ("RUNNING") is accepted and coerced by handle()
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


@dataclasses.dataclass(frozen=True)
class SlotsAdded:
    """More slots for a running job: replacements for slots a lost TaskManager took (a
    streaming region restart waits for them), or more room for a BATCH job."""

    slots: tuple[SlotId, ...]
    now: float


@dataclasses.dataclass(frozen=True)
class RestartRegions:
    """The JobMaster's answer to `RegionsFailed`: restart the failed regions now."""

    now: float


ExecutionGraphEvent: TypeAlias = (
    SlotsAssigned
    | SlotsAdded
    | RestartRegions
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


@dataclasses.dataclass(frozen=True)
class RegionsFailed:
    """Region failover began: `regions` (indices into `ExecutionGraph.regions`) are being
    cancelled while the rest of the job runs on. The JobMaster answers `RestartRegions`
    (after its restart strategy's delay) or a `GlobalFailure`."""

    regions: tuple[int, ...]
    failure: str
    root_cause: RootCause


@dataclasses.dataclass(frozen=True)
class RegionsRestarted:
    """New executions replace those of restarted regions (deployed by the `DeployExecutions`
    that follows, in a streaming job; scheduled as inputs are ready in a BATCH job)."""

    new: tuple[str, ...]
    replaced: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RequestSlots:
    count: int
    minimum: int | None = None
    extend: bool = True


@dataclasses.dataclass(frozen=True)
class ReleasePartitions:
    """BATCH: the result partitions of these (finished) executions are needed no more."""

    executions: tuple[Execution, ...]

    @property
    def execution_ids(self) -> tuple[str, ...]:
        return tuple(ex.execution_id for ex in self.executions)


ExecutionGraphAction: TypeAlias = (
    DeployExecutions
    | CancelExecutions
    | JobStatusChanged
    | JobTerminated
    | Ignored
    | RegionsFailed
    | RegionsRestarted
    | RequestSlots
    | ReleasePartitions
)
Actions: TypeAlias = list[ExecutionGraphAction]
