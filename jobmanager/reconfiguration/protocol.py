"""The live reconfiguration protocol, as a pure state machine (docs/reconfiguration.md).

Events in, actions out, time as an input; the JobMaster carries the actions out.

    PREPARING   every affected task is told what to do at the barrier (PrepareReconfiguration);
                periodic checkpoints are held back meanwhile
        | all answered                 -> RequestBarrier
        | one refused, or the deadline -> ABORTED, SendAbort to the prepared ones (nothing changed)
    BARRIER     the reconfiguration checkpoint is triggered like any other; at it the switched
                tasks move their outputs over and the redeployed ones stop
        | it completed                 -> RETIRING
        | it failed, or the deadline   -> FAILED, FailJob: the job restarts from its latest
                                          checkpoint with the configuration it had
    RETIRING    the stopped tasks commit what the checkpoint covers and finish
        | all finished                 -> DEPLOYING, ReplaceTasks: the new subtasks, from the checkpoint
    DEPLOYING
        | all new subtasks running     -> COMPLETED, Commit: the new configuration is the job's
    any state but the ends: the job failing -> FAILED (the old configuration restarts; from
    COMPLETED on the new one does), a deadline passed -> FailJob.

A checkpoint or a failure in the middle thus leaves one configuration or the other: before
Commit every restart uses the old job graph (the barrier's checkpoint is a checkpoint of the
old topology), after it the new one, whose restore maps state by operator.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import TypeAlias

from sluice.states import check_transition


class Phase(enum.StrEnum):
    PREPARING = "PREPARING"
    BARRIER = "BARRIER"
    RETIRING = "RETIRING"
    DEPLOYING = "DEPLOYING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"


_P = Phase
TRANSITIONS: dict[Phase, tuple[Phase, ...]] = {
    _P.PREPARING: (_P.BARRIER, _P.ABORTED),
    _P.BARRIER: (_P.RETIRING, _P.FAILED),
    _P.RETIRING: (_P.DEPLOYING, _P.FAILED),
    _P.DEPLOYING: (_P.COMPLETED, _P.FAILED),
    _P.COMPLETED: (),
    _P.FAILED: (),
    _P.ABORTED: (),
}
ENDED = (_P.COMPLETED, _P.FAILED, _P.ABORTED)


# -- events -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Prepared:
    execution_id: str


@dataclasses.dataclass(frozen=True)
class PrepareFailed:
    execution_id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class BarrierTriggered:
    checkpoint_id: int
    now: float


@dataclasses.dataclass(frozen=True)
class BarrierCompleted:
    checkpoint_id: int


@dataclasses.dataclass(frozen=True)
class BarrierAborted:
    checkpoint_id: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Retired:
    """An execution that stopped at the barrier has finished."""

    execution_id: str


@dataclasses.dataclass(frozen=True)
class Deployed:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Running:
    execution_id: str
    now: float


@dataclasses.dataclass(frozen=True)
class JobFailing:
    reason: str


@dataclasses.dataclass(frozen=True)
class Tick:
    now: float


Event: TypeAlias = (
    Prepared
    | PrepareFailed
    | BarrierTriggered
    | BarrierCompleted
    | BarrierAborted
    | Retired
    | Deployed
    | Running
    | JobFailing
    | Tick
)


# -- actions ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RequestBarrier:
    pass


@dataclasses.dataclass(frozen=True)
class SendAbort:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ReplaceTasks:
    pass


@dataclasses.dataclass(frozen=True)
class Commit:
    pass


@dataclasses.dataclass(frozen=True)
class FailJob:
    reason: str


Action: TypeAlias = RequestBarrier | SendAbort | ReplaceTasks | Commit | FailJob


class Reconfiguration:
    def __init__(self, prepare: Iterable[str], retiring: Iterable[str], now: float, timeout: float) -> None:
        self.to_prepare = frozenset(prepare)
        self.retiring = frozenset(retiring)
        if not self.retiring or not self.retiring <= self.to_prepare:
            raise ValueError("a reconfiguration retires some executions, each of them prepared")
        self.phase = Phase.PREPARING
        self.timeout = timeout
        self.deadline = now + timeout
        self.prepared: set[str] = set()
        self.retired: set[str] = set()
        self.new: frozenset[str] = frozenset()
        self.running: set[str] = set()
        self.checkpoint_id: int | None = None
        self.barrier_at: float | None = None
        self.pause: float | None = None  # barrier to the new subtasks running
        self.failure = ""

    @property
    def ended(self) -> bool:
        return self.phase in ENDED

    def handle(self, event: Event) -> list[Action]:
        if self.ended:
            return []
        match event:
            case Prepared(execution_id=eid):
                if self.phase != Phase.PREPARING or eid not in self.to_prepare:
                    return []
                self.prepared.add(eid)
                if self.prepared == self.to_prepare:
                    self._move(Phase.BARRIER)
                    self.deadline += self.timeout
                    return [RequestBarrier()]
                return []
            case PrepareFailed(execution_id=eid, reason=reason):
                if self.phase != Phase.PREPARING or eid not in self.to_prepare:
                    return []
                return self._abort(f"task {eid} could not prepare: {reason}")
            case BarrierTriggered(checkpoint_id=cid, now=now):
                if self.phase == Phase.BARRIER and self.checkpoint_id is None:
                    self.checkpoint_id, self.barrier_at = cid, now
                return []
            case BarrierCompleted(checkpoint_id=cid):
                if self.phase != Phase.BARRIER or cid != self.checkpoint_id:
                    return []
                self._move(Phase.RETIRING)
                return self._maybe_replace()
            case BarrierAborted(checkpoint_id=cid, reason=reason):
                if self.phase != Phase.BARRIER or cid != self.checkpoint_id:
                    return []
                return self._fail(f"its checkpoint {cid} failed: {reason}", fail_job=True)
            case Retired(execution_id=eid):
                if eid in self.retiring:
                    self.retired.add(eid)
                return self._maybe_replace() if self.phase == Phase.RETIRING else []
            case Deployed(execution_ids=eids):
                if self.phase == Phase.DEPLOYING:
                    self.new = frozenset(eids)
                return []
            case Running(execution_id=eid, now=now):
                if self.phase != Phase.DEPLOYING or eid not in self.new:
                    return []
                self.running.add(eid)
                if self.running == self.new:
                    self._move(Phase.COMPLETED)
                    self.pause = now - (self.barrier_at if self.barrier_at is not None else now)
                    return [Commit()]
                return []
            case JobFailing(reason=reason):
                if self.phase == Phase.PREPARING:
                    return self._abort(f"the job failed first: {reason}")
                return self._fail(f"the job failed during it: {reason}", fail_job=False)
            case Tick(now=now):
                if now < self.deadline:
                    return []
                if self.phase == Phase.PREPARING:
                    return self._abort(f"not every task prepared within {self.timeout:g}s")
                return self._fail(f"{self.phase.lower()} took longer than {self.timeout:g}s", fail_job=True)
            case _:
                raise TypeError(f"not a reconfiguration event: {event!r}")

    def _maybe_replace(self) -> list[Action]:
        if self.retired != self.retiring:
            return []
        self._move(Phase.DEPLOYING)
        self.deadline += self.timeout
        return [ReplaceTasks()]

    def _abort(self, reason: str) -> list[Action]:
        self._move(Phase.ABORTED)
        self.failure = reason
        return [SendAbort(tuple(sorted(self.prepared)))]

    def _fail(self, reason: str, fail_job: bool) -> list[Action]:
        self._move(Phase.FAILED)
        self.failure = reason
        return [FailJob(f"reconfiguration failed: {reason}")] if fail_job else []

    def _move(self, new: Phase) -> None:
        check_transition(TRANSITIONS, self.phase, new, "reconfiguration")
        self.phase = new
