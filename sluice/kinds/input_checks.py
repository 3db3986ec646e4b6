"""The checks of an operator's inputs: their shape (how many, partitioned how, on which keys)
and the columns the carried schemas show (`OperatorSpec.output_schema`).

Named in each kind's descriptor (`check_inputs`, `check_columns`; sluice/kinds/table.py) and
called by `sluice.graph.validate`: the input shapes once every edge is known, the columns
after the hash edges' key columns. Each raises JobValidationError naming the operator
(`operators[i]`) or its config field. A column check never rejects on a guess: an unknown
schema (None) or an `unknown` type passes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sluice import schema as schemas
from sluice.eventtime import TimeDomain
from sluice.kinds.common import (
    NUMERIC_AGGREGATES,
    JobValidationError,
    Partitioning,
    aggregate_keys,
    partitioning_of,
    require_columns,
)
from sluice.v1 import common_pb2


@dataclasses.dataclass(frozen=True)
class OperatorInputs:
    """One operator with its inputs as a check sees them: `where` is `operators[i]`."""

    where: str
    op: common_pb2.OperatorSpec
    kind: str
    p: dict[str, Any]  # its config
    edges: tuple[common_pb2.EdgeSpec, ...]  # the edges into it
    schemas: tuple[schemas.Schema | None, ...] = ()  # what each edge carries, when known (column checks)


# -- input shapes --------------------------------------------------------------------------------
def follows_key_by(c: OperatorInputs) -> None:
    """A keyed aggregate, window or process function reads one hash edge on its own keys."""
    keys = aggregate_keys(c.p)
    ins = c.edges
    if len(ins) != 1 or partitioning_of(ins[0]) != Partitioning.HASH or list(ins[0].keys) != keys:
        raise JobValidationError(
            c.where, f"{c.kind} {c.op.id!r} must follow key_by({', '.join(repr(k) for k in keys)})"
        )


def two_keyed_inputs(c: OperatorInputs) -> None:
    """A join reads two different operators, each over a hash edge on its side's keys."""
    keys = aggregate_keys(c.p)
    right_keys = c.p.get("right_keys") or keys
    sources = [e.source for e in c.edges]
    left = c.p.get("left")
    if (
        len(c.edges) != 2
        or any(
            partitioning_of(e) != Partitioning.HASH or list(e.keys) != (keys if e.source == left else right_keys)
            for e in c.edges
        )
        or left not in sources
        or len(set(sources)) != 2
    ):
        raise JobValidationError(
            c.where,
            f"interval join {c.op.id!r} needs two different inputs, each after key_by("
            f"{', '.join(repr(k) for k in keys)}), its left one named in config.left",
        )


def keyed_and_broadcast(c: OperatorInputs) -> None:
    """A broadcast process function reads its keyed side over a hash edge and a broadcast edge."""
    keys = aggregate_keys(c.p)
    by = {partitioning_of(e): e for e in c.edges}
    keyed = by.get(Partitioning.HASH)
    if (
        len(c.edges) != 2
        or keyed is None
        or list(keyed.keys) != keys
        or keyed.source != c.p.get("left")
        or Partitioning.BROADCAST not in by
    ):
        raise JobValidationError(
            c.where,
            f"broadcast process {c.op.id!r} needs a keyed input (key_by({', '.join(repr(k) for k in keys)}), "
            "named in config.left) and a broadcast() input",
        )


# -- columns ----------------------------------------------------------------------------------------
def timestamp_column(c: OperatorInputs) -> None:
    """assign_timestamps_and_watermarks: its event-time column is in its input, as epoch ms or a timestamp."""
    _event_time_column(c, window=False)


def window_timestamp_column(c: OperatorInputs) -> None:
    """A window's event-time column (none to check for processing-time windows)."""
    _event_time_column(c, window=True)


def _event_time_column(c: OperatorInputs, window: bool) -> None:
    inputs, p, op = c.schemas, c.p, c.op
    if not inputs:
        return
    column = (p.get("strategy") or {}).get("timestamp_column") or p.get("timestamp_column")
    window_kind = p["window"].get("kind") if window else None
    processing_time = window_kind == "tumbling-processing-time"
    if column and not processing_time:
        field = f"{c.where}.config.timestamp_column"
        if inputs[0] is not None and column not in inputs[0]:
            raise JobValidationError(field, f"operator {op.name or op.id!r}: {inputs[0].missing(column)}")
        t = inputs[0].type_of(column) if inputs[0] is not None else None
        if t is not None and t != schemas.UNKNOWN and t not in schemas.EVENT_TIME_TYPES:
            raise JobValidationError(
                field,
                f"operator {op.name or op.id!r}: the event-time column {column!r} is {t}; it must hold "
                "epoch milliseconds (an integer) or a timestamp",
            )


def aggregate_inputs(c: OperatorInputs) -> None:
    """A keyed operator's aggregates read columns its input has, numeric where the function needs it."""
    inputs, p = c.schemas, c.p
    if not inputs or not p.get("aggs"):
        return
    for out, (fn, col) in p["aggs"].items():
        if fn == "count":
            continue  # counts rows: its column is not read
        field = f"{c.where}.config.aggs.{out}"
        require_columns(field, inputs[0], [col])
        t = inputs[0].type_of(col) if inputs[0] is not None else None
        if fn in NUMERIC_AGGREGATES and t is not None and t != schemas.UNKNOWN and not schemas.is_numeric(t):
            raise JobValidationError(field, f"{fn} needs a numeric column; {col!r} is {t}")


def deduplicate_columns(c: OperatorInputs) -> None:
    """deduplicate's event-time column is one its input has."""
    if c.schemas and c.p.get("time") == TimeDomain.EVENT_TIME and c.p.get("timestamp"):
        require_columns(f"{c.where}.config.timestamp", c.schemas[0], [c.p["timestamp"]])


def file_sink_columns(c: OperatorInputs) -> None:
    """A file sink's columns are in its input; a text sink writes exactly one."""
    _sink_columns(c, with_key=False)


def sqlite_sink_columns(c: OperatorInputs) -> None:
    """A SQLite sink's key columns and columns are in its input."""
    _sink_columns(c, with_key=True)


def _sink_columns(c: OperatorInputs, with_key: bool) -> None:
    p = c.p
    for schema in c.schemas:
        if with_key:  # its key columns are written too
            require_columns(f"{c.where}.config.key", schema, p.get("key") or [])
        require_columns(f"{c.where}.config.columns", schema, p.get("columns") or [])
        visible = [n for n in schema.names if not n.startswith("__")] if schema is not None else None
        if p.get("format") == "text" and not p.get("columns") and visible is not None and len(visible) != 1:
            raise JobValidationError(
                f"{c.where}.config.columns",
                f"a text file sink writes exactly one column; the stream has {len(visible)}: "
                f"{', '.join(visible)}. Give FileSink(columns=[...]) one of them",
            )
