"""Split assignment for connector sources, in the JobManager (docs/connectors.md). A pure
core: the JobMaster feeds it the readers' requests, checkpoint triggers and the results
of the lookups it asked for, under the dispatcher's lock; it does no I/O.

Per source operator a `SourceCoordinator` holds the enumerator (one of the built-ins of
sluice.connectors.enumerators, rebuilt from plain JSON) and, per reader subtask, the
*assignment log*: every split assigned to that subtask in order. A reader tells how many
assignments it holds (`received`: restored from its checkpoint, plus what came since)
and gets the log from there, so an answer lost on the way is sent again, and a reader
restored from a checkpoint gets again the splits assigned after it — as the splits
assigned after the last checkpoint go back to the enumerator in Flink.

Consistency with checkpoints (the valve). When checkpoint n is triggered, the
coordinator snapshots the enumerator and the logs (stored in `_metadata`); from then on
a reader gets no new assignment until it reports having snapshotted n (or a later
checkpoint). So a reader's state at n never holds a split the enumerator's state at n
does not show as assigned to it, and a restore of both from n neither loses nor
duplicates a split.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from sluice.connectors import enumerators
from sluice.connectors.api import SplitEnumerator

MAX_SPLITS_PER_ANSWER = 64


class SplitRequestError(ValueError):
    """A request that contradicts the assignment log (the reader claims more than it was given)."""


@dataclasses.dataclass(frozen=True)
class Assignment:
    first: int  # index in the subtask's log of splits[0]
    splits: list[dict[str, Any]]  # JSON splits {"id": ..., "data": {...}}
    no_more_splits: bool


@dataclasses.dataclass(frozen=True)
class Lookup:
    """A discovery the JobMaster runs off its lock, then hands back with `on_discovered`."""

    operator_id: str
    what: dict[str, Any]


class SourceCoordinator:
    def __init__(
        self,
        operator_id: str,
        parallelism: int,
        spec: dict[str, Any],
        enumerator: SplitEnumerator,
        logs: list[list[dict[str, Any]]] | None = None,
        valve: int = 0,
    ) -> None:
        self.operator_id, self.parallelism, self.spec = operator_id, parallelism, spec
        self.enumerator = enumerator
        self.logs: list[list[dict[str, Any]]] = logs if logs is not None else [[] for _ in range(parallelism)]
        self.valve = valve  # the newest checkpoint triggered: readers must have snapshotted it to get more
        self.readers: set[int] = set()
        self.snapshots: dict[int, dict[str, Any]] = {}
        enumerator.start(parallelism)

    @classmethod
    def create(cls, operator_id: str, parallelism: int, spec: dict[str, Any]) -> SourceCoordinator:
        return cls(operator_id, parallelism, spec, enumerators.build(spec))

    @classmethod
    def restore(
        cls, operator_id: str, parallelism: int, spec: dict[str, Any], state: dict[str, Any], checkpoint_id: int
    ) -> SourceCoordinator:
        logs = state["assigned"]
        if len(logs) != parallelism:
            raise SplitRequestError(
                f"source {operator_id} ran at parallelism {len(logs)} in checkpoint {checkpoint_id}, now at "
                f"{parallelism}: connector sources cannot change parallelism across a restore yet"
            )
        return cls(
            operator_id, parallelism, spec, enumerators.restore(spec, state["enumerator"]), logs, valve=checkpoint_id
        )

    def request(self, subtask: int, received: int, last_checkpoint: int, idle: bool) -> Assignment:
        if not 0 <= subtask < self.parallelism:
            raise SplitRequestError(f"subtask {subtask} outside the source's parallelism {self.parallelism}")
        log = self.logs[subtask]
        if received > len(log):
            raise SplitRequestError(
                f"subtask {subtask} of source {self.operator_id} holds {received} assignments, "
                f"but only {len(log)} were made"
            )
        if subtask not in self.readers:
            self.readers.add(subtask)
            self.enumerator.add_reader(subtask)
        if received == len(log) and last_checkpoint >= self.valve:
            log.extend(s.to_json() for s in self.enumerator.handle_split_request(subtask, idle))
        out = log[received : received + MAX_SPLITS_PER_ANSWER]
        done = self.enumerator.exhausted() and received + len(out) == len(log)
        return Assignment(received, out, done)

    def checkpoint_triggered(self, checkpoint_id: int) -> None:
        self.snapshots[checkpoint_id] = {
            "enumerator": self.enumerator.snapshot_state(checkpoint_id),
            "assigned": copy.deepcopy(self.logs),
        }
        self.valve = max(self.valve, checkpoint_id)

    def state_of(self, checkpoint_id: int) -> dict[str, Any] | None:
        """The snapshot taken when `checkpoint_id` was triggered; older ones are dropped."""
        for cid in [c for c in self.snapshots if c < checkpoint_id]:
            del self.snapshots[cid]
        return self.snapshots.get(checkpoint_id)

    def discovery(self, now: float) -> Lookup | None:
        what = self.enumerator.discovery(now)
        return Lookup(self.operator_id, what) if what is not None else None


class SourceCoordinators:
    """Every connector source of one attempt, by operator id."""

    def __init__(self, coordinators: dict[str, SourceCoordinator]) -> None:
        self.by_operator = coordinators

    @classmethod
    def build(
        cls, sources: dict[str, tuple[int, dict[str, Any]]], states: dict[str, Any], checkpoint_id: int
    ) -> SourceCoordinators:
        """`sources`: operator id -> (parallelism, enumerator spec); `states`: the coordinators'
        states in the restored checkpoint's `_metadata` (empty: a fresh start)."""
        out = {}
        for op_id, (parallelism, spec) in sources.items():
            if op_id in states:
                out[op_id] = SourceCoordinator.restore(op_id, parallelism, spec, states[op_id], checkpoint_id)
            else:
                out[op_id] = SourceCoordinator.create(op_id, parallelism, spec)
        return cls(out)

    def checkpoint_triggered(self, checkpoint_id: int) -> None:
        for c in self.by_operator.values():
            c.checkpoint_triggered(checkpoint_id)

    def states_of(self, checkpoint_id: int) -> dict[str, Any]:
        out = {}
        for op_id, c in self.by_operator.items():
            state = c.state_of(checkpoint_id)
            if state is not None:
                out[op_id] = state
        return out

    def lookups(self, now: float) -> list[Lookup]:
        return [lk for c in self.by_operator.values() if (lk := c.discovery(now)) is not None]

    def on_discovered(self, lookup: Lookup, found: list[str] | None, now: float) -> None:
        """`found` None: the lookup failed (it is asked again at the next tick)."""
        c = self.by_operator.get(lookup.operator_id)
        if c is None:
            return
        if found is None:
            c.enumerator.discovery_failed()
            return
        c.enumerator.on_discovered(found, now)
