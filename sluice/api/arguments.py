"""The job API's argument checks that more than one of its modules needs (pure: no Spark).

Each raises TypeError or ValueError naming the call and the bad argument, before anything is
added to the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice import schema as schemas
from sluice.graph import AGGREGATE_FUNCTIONS

# An output schema given by the user: a Spark DDL string or a pyspark StructType.
SchemaLike = Any

KEY_BY_USAGE = 'key_by() takes column names: key_by("a") or key_by("a", "b") or key_by(["a", "b"])'


def process_payload(
    keys: Sequence[str], fn: Any, output_schema: SchemaLike, on_timer: Any, batch: bool = False
) -> tuple[dict[str, Any], schemas.Schema | None]:
    """A process function's settings, checked, and its declared output columns; `batch`: the
    batch form (`process_batch`, one call per batch)."""
    call, args, timer_args = (
        ("process_batch", "rows, ctx", "timers, ctx") if batch else ("process", "key, rows, ctx", "key, timestamp, ctx")
    )
    target = getattr(fn, "process", fn)
    if not callable(target):
        raise TypeError(f"{call}() takes a function ({args}) or an object with process(); got {describe(fn)}")
    if on_timer is not None and not callable(on_timer):
        raise TypeError(f"{call}(on_timer=...) takes a function ({timer_args}); got {describe(on_timer)}")
    declared = None if output_schema is None else schemas.to_schema(output_schema, f"{call}(output_schema=...)")
    payload: dict[str, Any] = {"keys": list(keys), "process": fn}
    if batch:
        payload["batch"] = True
    if on_timer is not None:
        payload["on_timer"] = on_timer
    if declared is not None:
        payload["output_schema"] = declared.ddl()
    return payload, declared


def key_columns(args: Sequence[Any]) -> tuple[str, ...]:
    """The key columns of `key_by(*args)`; a TypeError or ValueError naming the bad argument."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        columns, where = list(args[0]), "key_by([...]): item"
    else:
        columns, where = list(args), "key_by(): argument"
    if not columns:
        raise TypeError(f"key_by() got no column; {KEY_BY_USAGE}")
    seen: set[str] = set()
    for i, c in enumerate(columns, 1):
        if not isinstance(c, str):
            raise TypeError(f"{where} {i} is {describe(c)}, not a column name; {KEY_BY_USAGE}")
        if not c.strip():
            raise ValueError(f"{where} {i} is an empty string, not a column name; {KEY_BY_USAGE}")
        if c in seen:
            raise ValueError(f"{where} {i}: column {c!r} is given twice; {KEY_BY_USAGE}")
        seen.add(c)
    return tuple(columns)


def describe(value: Any) -> str:
    kind = type(value).__name__
    if kind == "Column":  # a pyspark Column: key_by takes names, Spark expressions go in select()
        return f"a pyspark Column ({value!r}; select() it into a named column first)"
    if isinstance(value, (list, tuple)):
        return f"a {kind} ({value!r}; pass one list, or names as separate arguments)"
    if callable(value):
        return f"a function ({getattr(value, '__name__', kind)}; key selectors are column names)"
    return f"a {kind} ({value!r})"


def column_name(fn: str, column: Any) -> str:
    if not isinstance(column, str) or not column:
        raise TypeError(f"{fn}() takes a column name (a non-empty string), got {describe(column)}")
    return column


def check_aggs(aggs: dict[str, Any], keys: Sequence[str]) -> dict[str, tuple[str, str]]:
    """`aggregate(**aggs)` checked in the client: (function, column) pairs of known functions,
    output names that neither repeat a key column nor start with `__` (internal columns)."""
    if not aggs:
        raise TypeError('aggregate() needs at least one output, e.g. aggregate(total=("sum", "v"))')
    out: dict[str, tuple[str, str]] = {}
    for name, spec in aggs.items():
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2 and all(isinstance(x, str) for x in spec)):
            raise TypeError(
                f"aggregate({name}=...): expected a (function, column) pair such as ('sum', 'v'), got {spec!r}"
            )
        fn, column = spec
        if fn not in AGGREGATE_FUNCTIONS:
            raise ValueError(f"aggregate({name}=...): unknown function {fn!r}; known: {', '.join(AGGREGATE_FUNCTIONS)}")
        if not column:
            raise ValueError(f"aggregate({name}=...): the column is empty (count takes '*')")
        if name in keys:
            raise ValueError(
                f"aggregate({name}=...): {name!r} is also a key column and the output keeps the key columns; "
                f"name the aggregate otherwise, e.g. {fn}({column!r}, name='{fn}_{column}')"
            )
        if name.startswith("__"):
            raise ValueError(f"aggregate({name}=...): names starting with '__' are reserved for internal columns")
        out[name] = (fn, column)
    return out
