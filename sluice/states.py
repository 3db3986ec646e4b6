"""The one vocabulary of states and outcomes (docs/architecture.md, "States").

Every closed set is an `enum.StrEnum`: code compares members, never string
literals, and a member still prints (and JSON-encodes) as its name, so the
CLI and `status --json` show `RUNNING`, `FINISHED`, ... as before. Sets that
cross a process boundary are also proto enums (proto/sluice/v1/*.proto) whose
values are the member names with a prefix (`JOB_STATE_RUNNING`);
`to_proto`/`from_proto` convert, and refuse `*_UNSPECIFIED` and values this
side does not know, so a missing or forged field never becomes a state.

Flink's names: JobStatus, ExecutionState, CheckpointStatus.
"""

from __future__ import annotations

import enum
from typing import TypeVar, overload

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from sluice.v1 import common_pb2, jobmanager_pb2


class IllegalTransition(RuntimeError):
    """A state machine was asked for a transition its table does not allow; its state is unchanged."""


S = TypeVar("S", bound=enum.StrEnum)


def check_transition(transitions: dict[S, tuple[S, ...]], old: S, new: S, what: str) -> None:
    """Raise IllegalTransition unless `old -> new` is in `transitions` (a core's table, written as data)."""
    if new not in transitions[old]:
        raise IllegalTransition(f"{what}: {old} -> {new}")


class JobStatus(enum.StrEnum):
    """A job. FAILING and CANCELLING are the execution graph's own (tasks winding
    down); clients see those as RUNNING or RESTARTING, never on the wire."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    CANCELLING = "CANCELLING"
    RESTARTING = "RESTARTING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)


class ExecutionState(enum.StrEnum):
    """One execution: a subtask of a chain in one attempt (JobManager's view and TaskManager's)."""

    CREATED = "CREATED"
    DEPLOYING = "DEPLOYING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"
    FAILED = "FAILED"

    @property
    def terminal(self) -> bool:
        return self in (ExecutionState.FINISHED, ExecutionState.CANCELED, ExecutionState.FAILED)


class CheckpointStatus(enum.StrEnum):
    IN_PROGRESS = "IN_PROGRESS"
    PERSISTING = "PERSISTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class SavepointStatus(enum.StrEnum):
    """A savepoint request's progress (docs/savepoints.md)."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class ReconfigurationStatus(enum.StrEnum):
    """A live reconfiguration's progress (docs/reconfiguration.md)."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"


class AckOutcome(enum.StrEnum):
    """How the checkpoint coordinator took an acknowledgement (docs/checkpoints.md)."""

    SUCCESS = "SUCCESS"
    DUPLICATE = "DUPLICATE"
    UNKNOWN = "UNKNOWN"
    DISCARDED = "DISCARDED"


class FailureCause(enum.StrEnum):
    """Why an execution failed, as the TaskManager reports it."""

    TASK_ERROR = "TASK_ERROR"
    PEER_UNREACHABLE = "PEER_UNREACHABLE"
    NON_RECOVERABLE = "NON_RECOVERABLE"


class StateBackend(enum.StrEnum):
    """Where an operator's keyed state lives (the job option `state.backend`, docs/state-backends.md);
    also the `backend` of a keyed-state handle. Local to a process: never a proto enum."""

    MEMORY = "memory"
    ROCKSDB = "rocksdb"


class AclMode(enum.StrEnum):
    """``high-availability.zookeeper.client.acl``, as Flink names its values (sluice/zk/auth.py)."""

    CREATOR = "creator"  # all permissions to the cluster's digest identity only
    OPEN = "open"  # world-readable and -writable (ZooKeeper's default)


# -- proto conversion -----------------------------------------------------------------
# enum class -> (proto enum wrapper, value prefix)
_PROTO: dict[type[enum.StrEnum], tuple[EnumTypeWrapper, str]] = {
    JobStatus: (common_pb2.JobState, "JOB_STATE_"),
    ExecutionState: (common_pb2.ExecutionState, "EXECUTION_STATE_"),
    CheckpointStatus: (common_pb2.CheckpointStatus, "CHECKPOINT_STATUS_"),
    SavepointStatus: (common_pb2.SavepointStatus, "SAVEPOINT_STATUS_"),
    ReconfigurationStatus: (common_pb2.ReconfigurationStatus, "RECONFIGURATION_STATUS_"),
    AckOutcome: (jobmanager_pb2.AckOutcome, "ACK_OUTCOME_"),
    FailureCause: (jobmanager_pb2.FailureCause, "FAILURE_CAUSE_"),
}


def register_proto(cls: type[enum.StrEnum], wrapper: EnumTypeWrapper, prefix: str) -> None:
    """Declare that `cls` travels as the proto enum `wrapper` (values `prefix + member name`)."""
    _PROTO[cls] = (wrapper, prefix)


@overload
def to_proto(member: JobStatus) -> common_pb2.JobState: ...
@overload
def to_proto(member: ExecutionState) -> common_pb2.ExecutionState: ...
@overload
def to_proto(member: CheckpointStatus) -> common_pb2.CheckpointStatus: ...
@overload
def to_proto(member: SavepointStatus) -> common_pb2.SavepointStatus: ...
@overload
def to_proto(member: ReconfigurationStatus) -> common_pb2.ReconfigurationStatus: ...
@overload
def to_proto(member: AckOutcome) -> jobmanager_pb2.AckOutcome: ...
@overload
def to_proto(member: FailureCause) -> jobmanager_pb2.FailureCause: ...
@overload
def to_proto(member: enum.StrEnum) -> int: ...  # an enum given to register_proto
def to_proto(member: enum.StrEnum) -> int:
    """The proto enum value of `member` (ValueError for a member the wire does not carry)."""
    wrapper, prefix = _PROTO[type(member)]
    try:
        return int(wrapper.Value(prefix + member.name))
    except ValueError:
        raise ValueError(f"{type(member).__name__}.{member.name} is not sent between processes") from None


def from_proto(cls: type[S], value: int) -> S:
    """The member of `cls` for a proto enum value; ValueError for UNSPECIFIED or an unknown value."""
    wrapper, prefix = _PROTO[cls]
    try:
        name = wrapper.Name(value)
    except ValueError:
        raise ValueError(f"unknown {cls.__name__} value {value}") from None
    member = cls.__members__.get(name.removeprefix(prefix))
    if member is None:
        raise ValueError(f"{cls.__name__} must be set, got {name}")
    return member
