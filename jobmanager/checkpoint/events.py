"""The CheckpointCoordinator's vocabulary (jobmanager/checkpoint/coordinator.py): its config,
the events it takes, the actions it returns and the results it reports. Plain frozen
dataclasses, no behaviour beyond checking a config; the coordinator module re-exports every
name, so callers import them from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeAlias

from sluice import job_options as jo
from sluice.states import AckOutcome, CheckpointStatus


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    interval: float | None  # seconds; None or <= 0 disables periodic checkpoints
    # defaults: the job options' (sluice/job_options.py)
    timeout: float = jo.CHECKPOINTING_TIMEOUT.default
    min_pause: float = jo.CHECKPOINTING_MIN_PAUSE.default  # between the end of one checkpoint and the next trigger
    max_concurrent: int = 1  # only 1 is supported
    tolerable_failures: int = jo.CHECKPOINTING_TOLERABLE_FAILURES.default  # consecutive failed checkpoints tolerated
    retained: int = jo.CHECKPOINTS_NUM_RETAINED.default  # completed checkpoints kept

    def __post_init__(self) -> None:
        i, t, p, m, f, r = (
            self.interval,
            self.timeout,
            self.min_pause,
            self.max_concurrent,
            self.tolerable_failures,
            self.retained,
        )
        for name, ok, want in (
            ("interval", i is None or _num(i), "a number of seconds or None"),
            ("timeout", _num(t) and t > 0, "> 0 seconds"),
            ("min_pause", _num(p) and p >= 0, ">= 0 seconds"),
            ("max_concurrent", is_int(m) and m == 1, "1 (the only supported value)"),
            ("tolerable_failures", is_int(f) and f >= 0, "an int >= 0"),
            ("retained", is_int(r) and r >= 1, "an int >= 1"),
        ):
            if not ok:
                raise ValueError(f"checkpoint {name} must be {want}, got {getattr(self, name)!r}")

    @property
    def periodic(self) -> bool:
        return self.interval is not None and self.interval > 0


# -- events ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Tick:
    now: float


@dataclasses.dataclass(frozen=True)
class FinalCheckpointRequested:
    now: float


@dataclasses.dataclass(frozen=True)
class Acknowledge:
    execution_id: str
    checkpoint_id: int
    handle: object
    size: int
    now: float


@dataclasses.dataclass(frozen=True)
class Decline:
    execution_id: str
    checkpoint_id: int
    reason: str
    now: float


@dataclasses.dataclass(frozen=True)
class TasksLost:
    reason: str
    now: float


@dataclasses.dataclass(frozen=True)
class CheckpointPersisted:
    checkpoint_id: int
    now: float
    savepoint_path: str = ""  # a savepoint: where its copy was written (NotifyComplete reports it)


@dataclasses.dataclass(frozen=True)
class PersistFailed:
    checkpoint_id: int
    reason: str
    now: float


@dataclasses.dataclass(frozen=True)
class SavepointRequested:
    stop: bool
    now: float
    target: str = ""  # the directory its copy goes to; the coordinator hands it on in PersistCheckpoint


@dataclasses.dataclass(frozen=True)
class ReconfigurationRequested:
    now: float


@dataclasses.dataclass(frozen=True)
class Suspend:
    now: float


@dataclasses.dataclass(frozen=True)
class Resume:
    now: float


CoordinatorEvent: TypeAlias = (
    Tick
    | FinalCheckpointRequested
    | Acknowledge
    | Decline
    | TasksLost
    | CheckpointPersisted
    | PersistFailed
    | SavepointRequested
    | ReconfigurationRequested
    | Suspend
    | Resume
)


# -- actions --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TriggerCheckpoint:
    checkpoint_id: int
    timestamp: float
    targets: tuple[str, ...]
    final: bool
    savepoint: bool = False
    stop: bool = False  # stop with a savepoint: sources stop reading after its barrier
    reconfigure: bool = False  # the barrier of a live reconfiguration


@dataclasses.dataclass(frozen=True)
class PersistCheckpoint:
    checkpoint_id: int
    handles: Mapping[str, object]  # execution id -> state handle, in execution order
    final: bool
    savepoint: bool = False
    savepoint_target: str = ""  # a savepoint: the directory its copy goes to (its request's)


@dataclasses.dataclass(frozen=True)
class NotifyComplete:
    checkpoint_id: int
    targets: tuple[str, ...]
    final: bool
    savepoint_path: str = ""  # a completed savepoint: where its copy is (the savepoint's completion)


@dataclasses.dataclass(frozen=True)
class NotifyAborted:
    checkpoint_id: int
    targets: tuple[str, ...]
    reason: str
    savepoint: bool = False
    superseded: bool = False  # replaced by the final checkpoint: not a failure (numberOfFailedCheckpoints)


@dataclasses.dataclass(frozen=True)
class DiscardCheckpoint:
    checkpoint_id: int
    # an aborted checkpoint's acknowledged handles (a completed one's are known to the adapter's
    # SharedStateRegistry): the shared state files they uploaded may go too. Not compared: a
    # discard is the same discard whichever acks came in
    handles: tuple[object, ...] = dataclasses.field(default=(), compare=False)


@dataclasses.dataclass(frozen=True)
class FailJob:
    reason: str


@dataclasses.dataclass(frozen=True)
class AckResult:
    """How one Acknowledge was taken; always the first action of its event."""

    execution_id: str
    checkpoint_id: int
    outcome: AckOutcome


CoordinatorAction: TypeAlias = (
    TriggerCheckpoint | PersistCheckpoint | NotifyComplete | NotifyAborted | DiscardCheckpoint | FailJob | AckResult
)
Actions: TypeAlias = list[CoordinatorAction]


# -- results --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CompletedCheckpoint:
    checkpoint_id: int
    handles: Mapping[str, object]
    trigger_time: float
    completion_time: float
    size: int
    final: bool = False
    savepoint: bool = False


@dataclasses.dataclass(frozen=True)
class CheckpointStats:
    checkpoint_id: int
    status: CheckpointStatus
    trigger_time: float
    end_time: float | None
    size: int
    acks: int
    expected: int
    failure: str = ""
    full_size: int = 0  # the whole state, files written by earlier checkpoints included (incremental)
