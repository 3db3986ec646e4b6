"""TaskSlotTable: which job and tasks occupy each of a TaskManager's slots.

Theory of operation
-------------------
A pure state machine (no threads, no gRPC, no clock): ``handle(event)``
takes one event dataclass and returns a list of action dataclasses, like the
JobManager's cores; the TaskManager's servicer is the adapter.

A slot is FREE or ALLOCATED to one job (``SlotState``); with slot sharing it
can hold one subtask of each of that job's chains. A task submitted to a
slot held by another job, to a slot that does not exist, or twice, is
``Rejected`` (an outcome, not an error). A slot becomes FREE again
(``SlotFreed``) only when its last task ended (``TaskEnded``: the adapter
sends it when the task's thread has really ended, never when a task was only
asked to stop). When the leader changes, every task of the old leader is to
be cancelled (``CancelTasks``); their slots stay ALLOCATED until they end.
Transitions are data (``TRANSITIONS``); an illegal one raises
``IllegalTransition`` (sluice/states.py) and leaves the state unchanged.

A cancel for an execution that is not here (``CancelRequested``) may have
overtaken its deployment: the table remembers its id (a tombstone, at most
``max_tombstones``, the oldest forgotten first) and rejects a later
``TaskSubmitted`` for it, so the late deployment never starts a task nobody
will cancel again. A cancel for a task that is here answers
``CancelTasks`` for it (Flink's ``TaskExecutor.cancelTask``).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import TypeAlias

from sluice.states import check_transition


class SlotState(enum.StrEnum):
    FREE = "FREE"
    ALLOCATED = "ALLOCATED"


TRANSITIONS: dict[SlotState, tuple[SlotState, ...]] = {
    SlotState.FREE: (SlotState.ALLOCATED,),
    SlotState.ALLOCATED: (SlotState.FREE,),
}


@dataclasses.dataclass(frozen=True)
class TaskSubmitted:
    slot_index: int
    job_id: str
    execution_id: str


@dataclasses.dataclass(frozen=True)
class TaskEnded:
    execution_id: str


@dataclasses.dataclass(frozen=True)
class LeaderChanged:
    pass


@dataclasses.dataclass(frozen=True)
class CancelRequested:
    execution_id: str


SlotTableEvent: TypeAlias = TaskSubmitted | TaskEnded | LeaderChanged | CancelRequested


@dataclasses.dataclass(frozen=True)
class Accepted:
    execution_id: str


@dataclasses.dataclass(frozen=True)
class Rejected:
    execution_id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class SlotFreed:
    slot_index: int


@dataclasses.dataclass(frozen=True)
class CancelTasks:
    execution_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Remembered:
    """A cancel for an execution not deployed here: a later deployment of it is rejected."""

    execution_id: str


SlotTableAction: TypeAlias = Accepted | Rejected | SlotFreed | CancelTasks | Remembered
Actions: TypeAlias = list[SlotTableAction]


@dataclasses.dataclass
class Slot:
    index: int
    state: SlotState = SlotState.FREE
    job_id: str = ""
    executions: set[str] = dataclasses.field(default_factory=set)


MAX_TOMBSTONES = 4096  # cancels remembered for executions not (yet) deployed here


class TaskSlotTable:
    def __init__(self, slots: int, max_tombstones: int = MAX_TOMBSTONES) -> None:
        if slots < 1:
            raise ValueError(f"a TaskManager needs at least 1 slot, got {slots}")
        if max_tombstones < 1:
            raise ValueError(f"max_tombstones must be at least 1, got {max_tombstones}")
        self.slots = [Slot(i) for i in range(slots)]
        self._slot_of: dict[str, int] = {}
        self.max_tombstones = max_tombstones
        self._tombstones: collections.OrderedDict[str, None] = collections.OrderedDict()

    def handle(self, event: SlotTableEvent) -> list[SlotTableAction]:
        match event:
            case TaskSubmitted():
                return self._submit(event)
            case TaskEnded():
                return self._ended(event.execution_id)
            case LeaderChanged():
                return self._leader_changed()
            case CancelRequested():
                return self._cancel(event.execution_id)
            case _:
                raise TypeError(f"not a slot table event: {event!r}")

    def _submit(self, ev: TaskSubmitted) -> Actions:
        if not 0 <= ev.slot_index < len(self.slots):
            return [
                Rejected(
                    ev.execution_id, f"slot {ev.slot_index} does not exist (this TaskManager has {len(self.slots)})"
                )
            ]
        if ev.execution_id in self._slot_of:
            return [Rejected(ev.execution_id, "already running here")]
        if ev.execution_id in self._tombstones:
            return [Rejected(ev.execution_id, "cancelled before it was deployed; not started")]
        slot = self.slots[ev.slot_index]
        if slot.state == SlotState.ALLOCATED and slot.job_id != ev.job_id:
            return [Rejected(ev.execution_id, f"slot {ev.slot_index} is held by job {slot.job_id}")]
        if slot.state == SlotState.FREE:
            self._set(slot, SlotState.ALLOCATED)
            slot.job_id = ev.job_id
        slot.executions.add(ev.execution_id)
        self._slot_of[ev.execution_id] = ev.slot_index
        return [Accepted(ev.execution_id)]

    def _ended(self, execution_id: str) -> Actions:
        index = self._slot_of.pop(execution_id, None)
        if index is None:
            return []
        slot = self.slots[index]
        slot.executions.discard(execution_id)
        if slot.executions:
            return []
        self._set(slot, SlotState.FREE)
        slot.job_id = ""
        return [SlotFreed(index)]

    def _leader_changed(self) -> Actions:
        """Cancel the old leader's tasks; their slots are freed as each one ends."""
        ids = tuple(sorted(self._slot_of))
        return [CancelTasks(ids)] if ids else []

    def _cancel(self, execution_id: str) -> Actions:
        if execution_id in self._slot_of:
            return [CancelTasks((execution_id,))]
        self._tombstones[execution_id] = None
        self._tombstones.move_to_end(execution_id)
        while len(self._tombstones) > self.max_tombstones:
            self._tombstones.popitem(last=False)
        return [Remembered(execution_id)]

    @staticmethod
    def _set(slot: Slot, new: SlotState) -> None:
        check_transition(TRANSITIONS, slot.state, new, f"slot {slot.index}")
        slot.state = new

    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.state == SlotState.FREE)

    def slot_report(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """Every slot as (index, job id or "" when free, its executions): what heartbeats carry
        (Flink's SlotReport), so that the JobManager offers a slot only once it is really free."""
        return [(s.index, s.job_id, tuple(sorted(s.executions))) for s in self.slots]

    def tombstoned(self, execution_id: str) -> bool:
        return execution_id in self._tombstones
