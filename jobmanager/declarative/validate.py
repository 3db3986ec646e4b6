"""The shape of a DeclarativeJob, checked field by field: every string and list bounded, every
closed set known, paths absolute. `check(job)` returns a `Plan` (plain frozen dataclasses) or
raises InvalidRequest naming the field (`declarative.steps[2].key_by.aggregates[0].function`)
and what to put there. What needs the stream's columns — SQL expressions, keys, aggregate
inputs, sink columns — is checked while the job graph is built (translate.py).

Pure: no Spark, no gRPC; the request's message classes are plain data.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Mapping, Sequence

from jobmanager.errors import InvalidRequest
from sluice import schema as schemas
from sluice import schema_inference as inference
from sluice.graph import AGGREGATE_FUNCTIONS
from sluice.v1 import declarative_pb2

ROOT = "declarative"
MAX_NAME = 256  # characters of a job, column, alias, option key or function name
MAX_EXPRESSION = 4096  # characters of a SQL expression, a path, an option value
MAX_STEPS = 256
MAX_FIELDS = 1024  # schema fields, select items, sink columns
MAX_KEYS = 64
MAX_AGGREGATES = 256
MAX_OPTIONS = 64  # entries of config and of source options
MAX_PARALLELISM = 1024
MAX_MS = 10 * 365 * 24 * 3600 * 1000  # ten years, in ms: any duration field

SOURCE_FORMATS = ("json", "csv", "text", "parquet")
FILE_SINK_FORMATS = ("csv", "json", "parquet", "text")  # FileSink's formats (docs/file-formats.md)
SINK_FORMATS = (*FILE_SINK_FORMATS, "print")
WINDOW_KINDS = ("tumbling", "sliding", "session")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


@dataclasses.dataclass(frozen=True)
class Source:
    format: str
    path: str
    schema: str | None  # Spark DDL; None for text
    options: Mapping[str, str]  # checked as from_files checks them, for the format
    suffix: str | None
    monitor_interval_ms: int | None
    on_error: str | None


@dataclasses.dataclass(frozen=True)
class Select:
    where: str
    items: tuple[tuple[str, str], ...]  # (expression, alias; "" for a plain column)


@dataclasses.dataclass(frozen=True)
class Filter:
    where: str
    condition: str


@dataclasses.dataclass(frozen=True)
class Window:
    kind: str
    size_ms: int
    slide_ms: int
    gap_ms: int
    timestamp_column: str
    max_out_of_orderness_ms: int
    allowed_lateness_ms: int


@dataclasses.dataclass(frozen=True)
class KeyBy:
    where: str
    keys: tuple[str, ...]
    aggregates: tuple[tuple[str, str, str], ...]  # (output name, function, input column; "*" for count)
    window: Window | None


Step = Select | Filter | KeyBy


@dataclasses.dataclass(frozen=True)
class Sink:
    format: str
    path: str
    columns: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    parallelism: int
    config: Mapping[str, str]
    source: Source
    steps: tuple[Step, ...]
    sink: Sink


def bad(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{ROOT}.{field}" if field else ROOT, message)


def text(value: str, field: str, limit: int = MAX_NAME, required: bool = True, what: str = "a name") -> str:
    """A bounded string field: no NUL, at most `limit` characters, present when `required`."""
    if required and not value.strip():
        raise bad(field, f"is empty; give {what}")
    if len(value) > limit:
        raise bad(field, f"{len(value)} characters, more than {limit}")
    if "\0" in value:
        raise bad(field, "holds a NUL character")
    return value


def count(items: Sequence[object], field: str, limit: int, least: int = 0, what: str = "entries") -> None:
    if len(items) > limit:
        raise bad(field, f"{len(items)} {what}, more than {limit}")
    if len(items) < least:
        raise bad(field, f"is empty; give at least {least} of its {what}")


def mapping(values: Mapping[str, str], field: str) -> dict[str, str]:
    count(list(values), field, MAX_OPTIONS)
    out = {}
    for key in sorted(values):
        text(key, f"{field} key {key[:40]!r}", what="a key")
        out[key] = text(values[key], f"{field}[{key!r}]", MAX_EXPRESSION, required=False)
    return out


def path(value: str, field: str) -> str:
    """An absolute path or a URI: relative paths would be resolved where each process runs."""
    text(value, field, MAX_EXPRESSION, what="an absolute directory path or a URI")
    if not (posixpath.isabs(value) or _URI.match(value)):
        raise bad(
            field,
            f"{value[:200]!r} is not an absolute path or a URI; the JobManager and TaskManagers resolve it, "
            "not the client: give /absolute/dir or scheme://...",
        )
    return value


def millis(value: int, field: str, least: int = 0) -> int:
    if value < least or value > MAX_MS:
        raise bad(field, f"{value} is not a number of milliseconds in [{least}, {MAX_MS}]")
    return value


def check(job: declarative_pb2.DeclarativeJob) -> Plan:
    """The job's plan, or InvalidRequest naming the first field that is wrong."""
    name = text(job.name, "name", what="the job's name")
    if not 0 <= job.parallelism <= MAX_PARALLELISM:
        raise bad("parallelism", f"{job.parallelism} is not in 1..{MAX_PARALLELISM} (0: 1)")
    if not job.HasField("source"):
        raise bad("source", "is missing; give the files to read: format, path, schema")
    if not job.HasField("sink"):
        raise bad("sink", 'is missing; give {"format": "csv", "path": "/abs/out"} or {"format": "print"}')
    count(job.steps, "steps", MAX_STEPS, what="steps")
    return Plan(
        name=name,
        parallelism=job.parallelism or 1,
        config=mapping(job.config, "config"),
        source=_source(job.source),
        steps=tuple(_step(s, f"steps[{i}]") for i, s in enumerate(job.steps)),
        sink=_sink(job.sink),
    )


def _source(s: declarative_pb2.DeclarativeSource) -> Source:
    if s.format not in SOURCE_FORMATS:
        raise bad("source.format", f"unknown format {s.format[:40]!r}; use one of {', '.join(SOURCE_FORMATS)}")
    count(s.schema, "source.schema", MAX_FIELDS, what="fields")
    ddl: str | None = None
    if s.format == "text":
        if s.schema:
            raise bad("source.schema", "a text source has one column, value string: leave schema empty")
    elif not s.schema:
        why = (
            " (the JobManager reads no file to find them: list the columns the job reads, with the types of "
            "the files' footers; each file is checked against them as it is read)"
            if s.format == "parquet"
            else ""
        )
        raise bad(
            "source.schema",
            f"is empty; a {s.format} source needs its columns{why}, e.g. "
            '[{"name": "url", "type": "string"}, {"name": "ts", "type": "bigint"}]',
        )
    else:
        seen: set[str] = set()
        parts = []
        for i, f in enumerate(s.schema):
            where = f"source.schema[{i}]"
            text(f.name, f"{where}.name", what="the column's name")
            text(f.type, f"{where}.type", what="a Spark SQL type such as string, bigint, double or timestamp")
            if f.name.lower() in seen:
                raise bad(f"{where}.name", f"column {f.name!r} is declared twice (Spark compares names ignoring case)")
            seen.add(f.name.lower())
            try:
                schemas.canonical_type(f.type, f.name)
            except ValueError as exc:
                raise bad(f"{where}.type", str(exc)) from None
            parts.append(f"{schemas.quote(f.name)} {f.type}")
        ddl = ", ".join(parts)
        try:
            schemas.parse(ddl)
        except ValueError as exc:
            raise bad("source.schema", str(exc)) from None
    options = mapping(s.options, "source.options")
    on_error = text(s.on_error, "source.on_error", MAX_EXPRESSION, required=False) or None
    try:  # the rules of from_files(options=..., on_error=...) for this format, each error at its field
        checked = inference.check_options(s.format, options)
        inference.error_policy(s.format, checked, on_error)
        inference.check_corrupt_column(ddl, checked)
    except inference.ReaderOptionError as exc:
        raise bad(_reader_field(exc.field), exc.message) from None
    return Source(
        format=s.format,
        path=path(s.path, "source.path"),
        schema=ddl,
        options=options,
        suffix=text(s.suffix, "source.suffix", required=False) or None,
        monitor_interval_ms=millis(s.monitor_interval_ms, "source.monitor_interval_ms") or None,
        on_error=on_error,
    )


def _reader_field(field: str) -> str:
    """The DeclarativeSource field of a ReaderOptionError's `options.<key>`, `options` or `on_error`."""
    if field.startswith("options."):
        return f"source.options[{field[len('options.') :]!r}]"
    return f"source.{field}"


def _step(step: declarative_pb2.DeclarativeStep, where: str) -> Step:
    kind = step.WhichOneof("step")
    if kind == "select":
        field = f"{where}.select.items"
        count(step.select.items, field, MAX_FIELDS, least=1, what="items")
        aliases: set[str] = set()
        items = []
        for i, item in enumerate(step.select.items):
            expr = text(item.expr, f"{field}[{i}].expr", MAX_EXPRESSION, what="a Spark SQL expression")
            alias = text(item.alias, f"{field}[{i}].alias", required=False)
            if alias.startswith("__"):
                raise bad(f"{field}[{i}].alias", "names starting with '__' are reserved for internal columns")
            if alias:
                if alias.lower() in aliases:
                    raise bad(f"{field}[{i}].alias", f"{alias!r} names two items; give each its own name")
                aliases.add(alias.lower())
            items.append((expr, alias))
        return Select(f"{where}.select", tuple(items))
    if kind == "filter":
        condition = text(
            step.filter.condition, f"{where}.filter.condition", MAX_EXPRESSION, what="a Spark SQL boolean expression"
        )
        return Filter(f"{where}.filter", condition)
    if kind == "key_by":
        return _key_by(step.key_by, f"{where}.key_by")
    raise bad(where, "is empty; give one of select, filter, key_by")


def _key_by(k: declarative_pb2.KeyByStep, where: str) -> KeyBy:
    count(k.keys, f"{where}.keys", MAX_KEYS, least=1, what="key columns")
    keys = tuple(text(c, f"{where}.keys[{i}]", what="a column name") for i, c in enumerate(k.keys))
    if len(set(keys)) != len(keys):
        raise bad(f"{where}.keys", "names a column twice")
    count(k.aggregates, f"{where}.aggregates", MAX_AGGREGATES, least=1, what="aggregates")
    aggs: list[tuple[str, str, str]] = []
    names: set[str] = set()
    for i, a in enumerate(k.aggregates):
        at = f"{where}.aggregates[{i}]"
        fn = a.function.lower()
        if fn not in AGGREGATE_FUNCTIONS:
            raise bad(
                f"{at}.function", f"unknown function {a.function[:40]!r}; use one of {', '.join(AGGREGATE_FUNCTIONS)}"
            )
        column = text(a.column, f"{at}.column", required=fn != "count", what="the input column's name")
        if fn == "count":
            if column not in ("", "*"):
                raise bad(
                    f"{at}.column",
                    f"count counts rows: give '*' (or nothing), not {column!r}; to count non-null values, filter "
                    f"with {column} IS NOT NULL first",
                )
            column = "*"
        name = text(a.name, f"{at}.name", required=False) or ("count" if fn == "count" else column)
        if name in keys:
            raise bad(f"{at}.name", f"{name!r} is also a key column; name the aggregate otherwise")
        if name in names:
            raise bad(f"{at}.name", f"{name!r} names two aggregates; give each its own name")
        names.add(name)
        aggs.append((name, fn, column))
    window = _window(k.window, f"{where}.window") if k.HasField("window") else None
    if window is not None and {"window_start", "window_end"} & names:
        raise bad(f"{where}.aggregates", "window_start and window_end are the window's own columns; name it otherwise")
    return KeyBy(where, keys, tuple(aggs), window)


def _window(w: declarative_pb2.EventTimeWindow, where: str) -> Window:
    if w.kind not in WINDOW_KINDS:
        raise bad(f"{where}.kind", f"unknown window kind {w.kind[:40]!r}; use one of {', '.join(WINDOW_KINDS)}")
    column = text(w.timestamp_column, f"{where}.timestamp_column", what="the event-time column")
    size = millis(w.size_ms, f"{where}.size_ms", least=1 if w.kind != "session" else 0)
    slide = millis(w.slide_ms, f"{where}.slide_ms", least=1 if w.kind == "sliding" else 0)
    gap = millis(w.gap_ms, f"{where}.gap_ms", least=1 if w.kind == "session" else 0)
    for field, value, wanted in (
        ("size_ms", size, w.kind != "session"),
        ("slide_ms", slide, w.kind == "sliding"),
        ("gap_ms", gap, w.kind == "session"),
    ):
        if value and not wanted:
            raise bad(f"{where}.{field}", f"a {w.kind} window takes no {field}")
    return Window(
        kind=w.kind,
        size_ms=size,
        slide_ms=slide,
        gap_ms=gap,
        timestamp_column=column,
        max_out_of_orderness_ms=millis(w.max_out_of_orderness_ms, f"{where}.max_out_of_orderness_ms"),
        allowed_lateness_ms=millis(w.allowed_lateness_ms, f"{where}.allowed_lateness_ms"),
    )


def _sink(s: declarative_pb2.DeclarativeSink) -> Sink:
    if s.format not in SINK_FORMATS:
        raise bad("sink.format", f"unknown format {s.format[:40]!r}; use one of {', '.join(SINK_FORMATS)}")
    count(s.columns, "sink.columns", MAX_FIELDS, what="columns")
    columns = tuple(text(c, f"sink.columns[{i}]", what="a column name") for i, c in enumerate(s.columns))
    if s.format == "print":
        if s.path or columns:
            raise bad("sink", "a print sink takes no path and no columns")
        return Sink("print", "", ())
    if len(set(columns)) != len(columns):
        raise bad("sink.columns", "names a column twice")
    if s.format == "text" and len(columns) > 1:
        raise bad(
            "sink.columns",
            f"a text sink writes one column per line, got {len(columns)}: {', '.join(columns)}; "
            "give one (or use csv, json or parquet)",
        )
    return Sink(s.format, path(s.path, "sink.path"), columns)
