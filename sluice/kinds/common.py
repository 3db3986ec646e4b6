"""What every kind's rules share: the validation error, a few names of the job graph, and helpers.

`sluice.graph` re-exports each of these names; they live here so that the rules of the kinds
(`sluice/kinds/`) need not import `sluice.graph`, which reads them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from sluice import schema as schemas
from sluice import states
from sluice.v1 import common_pb2

MAX_ID_LENGTH = 256  # operator ids, edge ends, key column names
MAX_ERROR_LENGTH = 2048  # a validation message quotes bad input; gRPC carries it in a small trailer
LATE_OUTPUT = "late"  # EdgeSpec.output_tag of a window's late-data side output
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")
NUMERIC_AGGREGATES = ("sum", "avg")  # need a numeric input column


class Partitioning(enum.StrEnum):
    """How an edge distributes records over the target's subtasks."""

    FORWARD = "forward"
    HASH = "hash"  # by key group of the key column
    REBALANCE = "rebalance"
    BROADCAST = "broadcast"


states.register_proto(Partitioning, common_pb2.Partitioning, "PARTITIONING_")


def partitioning_of(edge: common_pb2.EdgeSpec | Any) -> Partitioning:
    """The partitioning of an EdgeSpec or a ResultPartitionDescriptor."""
    return states.from_proto(Partitioning, edge.partitioning)


# An operator's inline state in a checkpoint (a JSON-able dict), or None.
State = dict[str, Any] | None


class JobValidationError(ValueError):
    """A submitted job is malformed; `field` names the offending field."""

    def __init__(self, field: str, message: str):
        field, message = _clip(field, 256), _clip(message, MAX_ERROR_LENGTH)  # they may quote the input
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class RescaleError(ValueError):
    """Operator state that cannot move to the new parallelism; the message says why."""


def aggregate_keys(payload: Mapping[str, Any]) -> list[str]:
    """An aggregate payload's key columns, in key order (`keys`; a job graph built before
    composite keys carried one column as `key`)."""
    keys = payload.get("keys")
    if keys is None and payload.get("key"):
        keys = [payload["key"]]
    return list(keys or [])


def positive_number(x: object) -> bool:
    """An int or float above 0 (not a bool): intervals such as a file source's monitor interval."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def require_columns(field: str, schema: schemas.Schema | None, columns: Iterable[str]) -> None:
    """JobValidationError at `field` for the first of `columns` that `schema` lacks
    (nothing when the schema is unknown: a check never rejects on a guess)."""
    if schema is None:
        return
    for c in columns:
        if c not in schema:
            raise JobValidationError(field, schema.missing(c))
