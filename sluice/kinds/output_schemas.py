"""Each kind's output columns from its settings and its inputs' columns (rules in sluice/schema.py).

Named in each kind's descriptor (`output_schema`, sluice/kinds/table.py); the job API derives
every operator's `OperatorSpec.output_schema` through them (sluice/api/stream_graph.py), after
a schema the user declared (`map(output_schema=...)`, `from_generator(schema=...)`) and a
union's merged inputs, which come first. None: the columns cannot be known before running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sluice import schema as schemas

Inputs = Sequence[schemas.Schema | None]


@dataclasses.dataclass(frozen=True)
class Derivation:
    """What an output schema rule reads: the operator's settings and its inputs' columns, in edge order."""

    payload: Mapping[str, Any]
    inputs: Inputs


WINDOW_COLUMNS = (("window_start", "bigint"), ("window_end", "bigint"))


def unknown(d: Derivation) -> schemas.Schema | None:
    """Generator and map/flat_map bodies without a declared schema, process functions, sinks: None."""


def same_as_input(d: Derivation) -> schemas.Schema | None:
    """A filter or a timestamp assigner: its one input's columns."""
    return _one(d.inputs)


def file_source(d: Derivation) -> schemas.Schema | None:
    """A text source's one `value` column, or the schema the source was given or inferred."""
    if d.payload.get("format") == "text":
        return schemas.of(("value", "string"))
    return schemas.parse_or_none(d.payload.get("schema"))


def collection_source(d: Derivation) -> schemas.Schema | None:
    """A collection's columns, from its rows."""
    return schemas.from_rows(d.payload.get("rows") or [])


def select(d: Derivation) -> schemas.Schema | None:
    """select(...): its expressions' names, typed where a plain column gives the type."""
    return schemas.select(_one(d.inputs), d.payload.get("columns") or [])


def aggregate(d: Derivation) -> schemas.Schema | None:
    """A keyed aggregate: the keys, then one column per aggregate."""
    return schemas.aggregate(_one(d.inputs), d.payload["keys"], d.payload["aggs"])


def window(d: Derivation) -> schemas.Schema | None:
    """A window's output columns: the keys, window_start, window_end, then the aggregates
    (unknown for apply() without a declared schema)."""
    aggs = d.payload.get("aggs")
    if not aggs:
        return None
    keys = d.payload["keys"]
    fields = list(schemas.aggregate(_one(d.inputs), keys, aggs).fields)
    columns = schemas.of(*WINDOW_COLUMNS).fields
    return schemas.Schema((*fields[: len(keys)], *columns, *fields[len(keys) :]))


def interval_join(d: Derivation) -> schemas.Schema | None:
    """An interval join: the keys, the left side's other columns, the right side's (suffixed on a clash)."""
    return join_schema(d.inputs, d.payload["keys"], d.payload["right_suffix"], d.payload.get("right_keys"))


def window_join(d: Derivation) -> schemas.Schema | None:
    """A windowed join: as an interval join, with window_start and window_end after the keys."""
    return join_schema(
        d.inputs, d.payload["keys"], d.payload["right_suffix"], d.payload.get("right_keys"), windowed=True
    )


def join_schema(
    inputs: Inputs,
    keys: list[str],
    suffix: str,
    right_keys: list[str] | None = None,
    windowed: bool = False,
) -> schemas.Schema | None:
    """A join's output columns, when both inputs' are known."""
    left, right = (list(inputs) + [None, None])[:2] if len(inputs) <= 2 else (None, None)
    if left is None or right is None:
        return None
    fields = [f for f in left.fields if f.name in keys]
    if windowed:
        fields += list(schemas.of(*WINDOW_COLUMNS).fields)
    fields += [f for f in left.fields if f.name not in keys]
    names = set(left.names)
    for f in right.fields:
        if f.name not in (right_keys or keys):
            fields.append(schemas.Field(f.name + suffix if f.name in names else f.name, f.type))
    return schemas.Schema(tuple(fields))


def _one(inputs: Inputs) -> schemas.Schema | None:
    return inputs[0] if len(inputs) == 1 else None
