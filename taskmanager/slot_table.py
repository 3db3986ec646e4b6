"""TaskSlotTable: which job and tasks occupy each of a TaskManager's slots.
A pure state machine (no threads, no gRPC).

A slot is FREE or ALLOCATED to one job; with slot sharing it can hold one
subtask of each of that job's chains. A task submitted to a slot held by
another job is rejected; a slot becomes FREE again when its last task
ended. When the leader changes, every task of the old leader is to be
cancelled and all slots are freed.
"""

from __future__ import annotations

import dataclasses

FREE, ALLOCATED = "FREE", "ALLOCATED"
TRANSITIONS = {FREE: (ALLOCATED,), ALLOCATED: (FREE,)}


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


@dataclasses.dataclass
class Slot:
    index: int
    state: str = FREE
    job_id: str = ""
    executions: set = dataclasses.field(default_factory=set)


class TaskSlotTable:
    def __init__(self, slots: int):
        if slots < 1:
            raise ValueError(f"a TaskManager needs at least 1 slot, got {slots}")
        self.slots = [Slot(i) for i in range(slots)]
        self._slot_of: dict[str, int] = {}

    def handle(self, event) -> list:
        if isinstance(event, TaskSubmitted):
            return self._submit(event)
        if isinstance(event, TaskEnded):
            return self._ended(event.execution_id)
        if isinstance(event, LeaderChanged):
            ids = tuple(sorted(self._slot_of))
            actions: list = [CancelTasks(ids)] if ids else []
            for eid in ids:
                actions += self._ended(eid)
            return actions
        raise TypeError(f"not a slot table event: {event!r}")

    def _submit(self, ev: TaskSubmitted) -> list:
        if not 0 <= ev.slot_index < len(self.slots):
            return [Rejected(ev.execution_id, f"slot {ev.slot_index} does not exist (this TaskManager has {len(self.slots)})")]
        if ev.execution_id in self._slot_of:
            return [Rejected(ev.execution_id, "already running here")]
        slot = self.slots[ev.slot_index]
        if slot.state == ALLOCATED and slot.job_id != ev.job_id:
            return [Rejected(ev.execution_id, f"slot {ev.slot_index} is held by job {slot.job_id}")]
        if slot.state == FREE:
            self._set(slot, ALLOCATED)
            slot.job_id = ev.job_id
        slot.executions.add(ev.execution_id)
        self._slot_of[ev.execution_id] = ev.slot_index
        return [Accepted(ev.execution_id)]

    def _ended(self, execution_id: str) -> list:
        index = self._slot_of.pop(execution_id, None)
        if index is None:
            return []
        slot = self.slots[index]
        slot.executions.discard(execution_id)
        if slot.executions:
            return []
        self._set(slot, FREE)
        slot.job_id = ""
        return [SlotFreed(index)]

    def _set(self, slot: Slot, new: str) -> None:
        if new not in TRANSITIONS[slot.state]:
            raise RuntimeError(f"slot {slot.index}: {slot.state} -> {new}")
        slot.state = new

    def free_slots(self) -> int:
        return sum(1 for s in self.slots if s.state == FREE)
