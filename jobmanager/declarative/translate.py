"""A DeclarativeJob (SubmitJobRequest.declarative) made into the JobGraph the Python API builds.

`to_job_graph(job)` checks the fields (validate.py), then drives the job API (`sluice.api`:
StreamExecutionEnvironment, DataStream, KeyedStream) in-process, step by step, exactly as a
job file would — so a declarative job and the equivalent Python job have the same graph, and
every rule of the API (schemas derived per operator, key and sink columns, window settings,
job options) applies to both. Before each step it checks what that step names against the
columns of the stream so far: SQL expressions (expressions.py), key columns, aggregate inputs,
the timestamp column, sink columns. Every refusal is an InvalidRequest naming the field:

    declarative.steps[1].filter.condition: unknown column 'urll'; the stream's columns are: url, user, ts

Nothing runs here: no Spark, no I/O, no Python code of the client (the graph holds no pickled
code at all: every operator's settings are plain JSON). The environment is built with
`read_inputs_at_build` off, so no file a client names is opened here — a JobManager does not
read (or hang on) a path a client chose; a Parquet source's schema is checked against each
file's footer when a task reads it, and a mismatch fails the job naming the file. Pure: no
gRPC, kazoo or pyspark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from sqlglot import exp

from jobmanager.declarative import expressions, validate
from jobmanager.declarative.validate import Filter, KeyBy, Plan, Select
from jobmanager.errors import InvalidRequest
from sluice import schema as schemas
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.api.datastream import DataStream
from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from sluice.v1 import common_pb2, declarative_pb2

T = TypeVar("T")


def to_job_graph(job: declarative_pb2.DeclarativeJob) -> common_pb2.JobGraph:
    """The job graph of `job`; InvalidRequest naming the field when a field is wrong."""
    return build(validate.check(job))


def build(plan: Plan) -> common_pb2.JobGraph:
    env = StreamExecutionEnvironment()
    env.read_inputs_at_build = False  # no file a client names is read here: the tasks check each file
    env.set_parallelism(plan.parallelism)
    for key, value in plan.config.items():
        _api(functools.partial(env.set_config, key, value), f"config[{key!r}]")
    src = plan.source
    stream = _api(
        lambda: env.from_files(
            src.path,
            format=src.format,
            schema=src.schema,
            suffix=src.suffix,
            monitor_interval_ms=src.monitor_interval_ms,
            options=dict(src.options) or None,
            on_error=src.on_error,
        ),
        "source",
    )
    for step in plan.steps:
        if isinstance(step, Select):
            stream = _select(stream, step)
        elif isinstance(step, Filter):
            stream = _filter(stream, step)
        else:
            stream = _key_by(stream, step)
    sink = plan.sink
    if sink.format == "print":
        stream.print()
    else:
        for i, c in enumerate(sink.columns):
            _column(stream, c, f"sink.columns[{i}]")
        names = _names(stream)
        if sink.format == "text" and not sink.columns and len(names) != 1:
            raise _bad(
                "sink.columns",
                f"is empty, and the stream has {len(names)} columns ({', '.join(names)}); a text sink writes one "
                "column per line: name it",
            )
        _api(
            lambda: stream.sink_to(FileSink(sink.path, columns=sink.columns or None, format=sink.format)),
            "sink",
        )
    return _api(lambda: env.get_job_graph(plan.name), "")


def _select(stream: DataStream, step: Select) -> DataStream:
    names = _names(stream)
    exprs = []
    for i, (expr, alias) in enumerate(step.items):
        where = f"{step.where}.items[{i}]"
        tree = _expression(expr, names, f"{where}.expr")
        column = expressions.column_name(tree)
        actual = _actual(names, column) if column is not None else None
        if actual is not None:  # a plain column: by its declared name, so its type is known further on
            exprs.append(schemas.quote(actual) + (f" AS {schemas.quote(alias)}" if alias else ""))
        elif not alias:
            raise _bad(f"{where}.alias", f"is empty; name the computed column {expr[:80]!r}")
        else:
            exprs.append(f"({expr}) AS {schemas.quote(alias)}")
    return _api(lambda: stream.select(*exprs), step.where)


def _filter(stream: DataStream, step: Filter) -> DataStream:
    _expression(step.condition, _names(stream), f"{step.where}.condition")
    return _api(lambda: stream.filter(step.condition), step.where)


def _key_by(stream: DataStream, step: KeyBy) -> DataStream:
    for i, key in enumerate(step.keys):
        _column(stream, key, f"{step.where}.keys[{i}]")
    aggs: dict[str, tuple[str, str]] = {}
    for i, (name, fn, column) in enumerate(step.aggregates):
        if fn != "count":
            t = _column(stream, column, f"{step.where}.aggregates[{i}].column")
            if fn in ("sum", "avg") and t != schemas.UNKNOWN and not schemas.is_numeric(t):
                raise _bad(f"{step.where}.aggregates[{i}].column", f"{fn} needs a numeric column; {column!r} is {t}")
        aggs[name] = (fn, column)
    w = step.window
    if w is None:
        return _api(lambda: stream.key_by(*step.keys).aggregate(**aggs), step.where)
    where = f"{step.where}.window"
    _column(stream, w.timestamp_column, f"{where}.timestamp_column")
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(w.max_out_of_orderness_ms).with_timestamp_column(
        w.timestamp_column
    )
    timed = _api(lambda: stream.assign_timestamps_and_watermarks(strategy), where)
    if w.kind == "tumbling":
        assigner: WindowAssigner = _api(lambda: TumblingEventTimeWindows.of(w.size_ms), where)
    elif w.kind == "sliding":
        assigner = _api(lambda: SlidingEventTimeWindows.of(w.size_ms, w.slide_ms), where)
    else:
        assigner = _api(lambda: EventTimeSessionWindows.with_gap(w.gap_ms), where)
    windowed = _api(lambda: timed.key_by(*step.keys).window(assigner), where)
    if w.allowed_lateness_ms:
        windowed = _api(lambda: windowed.allowed_lateness(w.allowed_lateness_ms), where)
    return _api(lambda: windowed.aggregate(**aggs), step.where)


def _names(stream: DataStream) -> list[str]:
    known = stream.schema
    if known is None:  # cannot happen: a declarative source has a schema, and every step keeps it known
        raise AssertionError("a declarative stream's columns are always known")
    return known.names


def _actual(names: list[str], column: str) -> str | None:
    """The declared name of `column`, matched as Spark's analyzer does (ignoring case)."""
    if column in names:
        return column
    return next((n for n in names if n.lower() == column.lower()), None)


def _column(stream: DataStream, column: str, field: str) -> str:
    """The type of `column` in the stream (names compared exactly, as the job API does)."""
    known = stream.schema
    if known is None:
        return schemas.UNKNOWN
    t = known.type_of(column)
    if t is None:
        near = _actual(known.names, column)
        hint = f" (did you mean {near!r}? key, aggregate and sink columns match exactly)" if near else ""
        raise _bad(field, f"unknown column {column!r}{hint}; the stream's columns are: {', '.join(known.names)}")
    return t


def _expression(text: str, names: list[str], field: str) -> exp.Expr:
    try:
        return expressions.check(text, names)
    except expressions.ExpressionError as exc:
        raise _bad(field, f"{text[:200]!r} {exc}") from None


def _api(call: Callable[[], T], field: str) -> T:
    """`call()` into the job API; its ValueError or TypeError becomes an InvalidRequest at `field`."""
    try:
        return call()
    except InvalidRequest:
        raise
    except (ValueError, TypeError) as exc:
        raise _bad(field, str(exc)) from None


def _bad(field: str, message: str) -> InvalidRequest:
    return validate.bad(field, message)
