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
(``SlotFreed``) when its last task ended. When the leader changes, every
task of the old leader is to be cancelled (``CancelTasks``) and all slots
are freed. Transitions are data (``TRANSITIONS``); an illegal one raises
``IllegalTransition`` (sluice/states.py) and leaves the state unchanged.
"""

from __future__ import annotations

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


SlotTableEvent: TypeAlias = TaskSubmitted | TaskEnded | LeaderChanged


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


SlotTableAction: TypeAlias = Accepted | Rejected | SlotFreed | CancelTasks
Actions: TypeAlias = list[SlotTableAction]


@dataclasses.dataclass
class Slot:
    index: int
    state: SlotState = SlotState.FREE
    job_id: str = ""
    executions: set[str] = dataclasses.field(default_factory=set)


class TaskSlotTable:
    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a TaskManager needs at least 1 slot, got {slots}")
        self.slots = [Slot(i) for i in range(slots)]
        self._slot_of: dict[str, int] = {}

    def handle(self, event: SlotTableEvent) -> list[SlotTableAction]:
        match event:
            case TaskSubmitted():
                return self._submit(event)
            case TaskEnded():
                return self._ended(event.execution_id)
            case LeaderChanged():
                return self._leader_changed()
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
        ids = tuple(sorted(self._slot_of))
        actions: Actions = [CancelTasks(ids)] if ids else []
        for eid in ids:
            actions += self._ended(eid)
        return actions

    @staticmethod
    def _set(slot: Slot, new: SlotState) -> None:
        check_transition(TRANSITIONS, slot.state, new, f"slot {slot.index}")
        slot.state = new

    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.state == SlotState.FREE)
