"""Operator state of one parallelism handed to another (a savepoint restored at a new parallelism).

Pure functions (docs/savepoints.md, "Rescaling"). Keyed state needs nothing here: every new
subtask reads the rows of its key-group range from all the old subtasks' files
(`CheckpointStorage.read_keyed_state`). Inline state (source positions, pending sink commits,
watermarks) is per subtask, and each operator kind's descriptor says how its old subtasks'
states become the new ones (`redistribute` in sluice/kinds/table.py; the rules, one per kind,
in sluice/kinds/redistribution.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.kinds import redistribution
from sluice.kinds.common import RescaleError, State
from sluice.kinds.redistribution import generator_streams, items_read
from sluice.kinds.table import OperatorKind, descriptor

__all__ = ["RescaleError", "State", "generator_streams", "items_read", "redistribute"]


def redistribute(kind: OperatorKind, operator: str, old: Sequence[State], parallelism: int) -> list[State]:
    """The inline states of `parallelism` new subtasks from those of the old subtasks (`old[i]`
    of old subtask i). Unchanged parallelism keeps each subtask's own state."""
    if parallelism < 1:
        raise RescaleError(f"operator {operator!r}: parallelism must be >= 1, got {parallelism}")
    if len(old) == parallelism:
        return list(old)
    if all(s is None for s in old):
        return [None] * parallelism
    return descriptor(kind).redistribute(redistribution.Rescale(operator, str(kind), old, parallelism))
