"""The checks of each kind's config (`OperatorSpec.config`) and code entries, by name only.

One function per kind (or family of kinds), named in its descriptor (`check_config`,
sluice/kinds/table.py); `sluice.graph.validate` calls it with the operator's parsed config.
Each raises JobValidationError naming the field (`operators[i].config.<key>`). The bytes of a
code entry are never unpickled here: only which entries exist is checked.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sluice.eventtime import TimeDomain
from sluice.kinds.common import AGGREGATE_FUNCTIONS, MAX_ID_LENGTH, JobValidationError, aggregate_keys, positive_number
from sluice.v1 import common_pb2


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    """One operator's config as a check sees it: `where` is `operators[i].config`."""

    where: str
    op: common_pb2.OperatorSpec
    p: dict[str, Any]
    check_paths: bool  # whether input paths and directories may be looked at (the client's check)


def no_config(c: OperatorConfig) -> None:
    """A kind whose config holds nothing to check (a body kind, print)."""


def check_code_names(
    where: str,
    op: common_pb2.OperatorSpec,
    kind: str,
    allowed: frozenset[str],
    body: bool,
    config: dict[str, Any],
    sql_body: bool = False,
) -> None:
    """The code entries `op` has (by name only: their bytes are opaque here) against what its
    kind takes (`allowed`), and a body where the kind needs one (`body`; with `sql_body`, a filter's,
    it may be a SQL condition in config instead)."""
    for key in op.code:
        if key not in allowed:
            takes = f"takes code only as {', '.join(sorted(allowed))}" if allowed else "takes no code"
            raise JobValidationError(
                f"{where}.code.{key}", f"a {kind} operator {takes}; its other settings are plain data in config"
            )
        if key in config:
            raise JobValidationError(f"{where}.code.{key}", f"{key!r} is set in both config and code; keep one")
        if not op.code[key]:
            raise JobValidationError(f"{where}.code.{key}", "is empty; it must hold the cloudpickled object")
    name = op.name or op.id
    if body and "body" not in op.code:
        if sql_body and isinstance(config.get("body"), str) and config["body"].strip():
            return  # a SQL condition
        if "body" in config:
            wants = "a SQL condition string or a function" if sql_body else "a function"
            raise JobValidationError(
                f"{where}.config.body", f"{kind} body of {name!r} must be {wants}, got {config['body']!r}"
            )
        raise JobValidationError(
            f"{where}.code.body", f"{kind} operator {name!r} has no body: cloudpickle its function into code.body"
        )


def check_select(c: OperatorConfig) -> None:
    """select: its SQL expressions."""
    where, p = c.where, c.p
    cols = p.get("columns")
    if not cols or not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
        raise JobValidationError(f"{where}.columns", "select needs one or more SQL expressions as strings")


def check_generator(c: OperatorConfig) -> None:
    """A generator source: its count and batch size."""
    where, p = c.where, c.p
    count = p.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise JobValidationError(f"{where}.count", f"must be a non-negative int or None, got {count!r}")
    batch_size = p.get("batch_size")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise JobValidationError(f"{where}.batch_size", f"must be a positive int or absent, got {batch_size!r}")


def check_connector_source(c: OperatorConfig) -> None:
    """env.from_source: the connector Source's settings (sluice/connectors/validation.py)."""
    _check_connector(c, is_source=True)


def check_connector_sink(c: OperatorConfig) -> None:
    """sink_to(Sink) of a connector: its settings (sluice/connectors/validation.py)."""
    _check_connector(c, is_source=False)


def _check_connector(c: OperatorConfig, is_source: bool) -> None:
    where, op, p = c.where, c.op, c.p
    from sluice.connectors import validation as connector_validation  # local: only connector jobs need it

    try:
        connector_validation.check_config(is_source, p, op.code)
    except connector_validation.ConnectorConfigError as exc:
        raise JobValidationError(f"{where}.{exc.field}", exc.message) from None


def check_collection(c: OperatorConfig) -> None:
    """A collection source: its rows, in config or code."""
    where, op, p = c.where, c.op, c.p
    rows = p.get("rows")
    if "rows" in p and not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
        raise JobValidationError(f"{where}.rows", "must be a list of objects, one per row")
    if "rows" not in p and "rows" not in op.code:
        raise JobValidationError(f"{where}.rows", "a collection source needs its rows")


def check_file_source(c: OperatorConfig) -> None:
    """A file source: format, schema, path, reader options; its files when paths are checked."""
    where, p, check_paths = c.where, c.p, c.check_paths
    from sluice import schema_inference  # the reader options' rules (local: only file sources need them)

    interval = p.get("monitor_interval")
    if interval is not None and not positive_number(interval):
        raise JobValidationError(
            f"{where}.monitor_interval", f"must be a positive number of seconds or absent, got {interval!r}"
        )
    if p.get("format") not in schema_inference.FORMATS:
        raise JobValidationError(
            f"{where}.format", f"unknown format {p.get('format')!r}; known: {', '.join(schema_inference.FORMATS)}"
        )
    schema = p.get("schema")
    if schema is not None and not (isinstance(schema, str) and schema.strip()):
        raise JobValidationError(f"{where}.schema", f"must be a Spark DDL string or absent, got {schema!r}")
    path, suffix = p.get("path"), p.get("suffix", "")
    if not isinstance(path, str) or not path:
        raise JobValidationError(f"{where}.path", f"a file source needs a directory path, got {path!r}")
    if not isinstance(suffix, str):
        raise JobValidationError(f"{where}.suffix", f"must be a string such as '.jsonl', got {suffix!r}")
    try:
        options = schema_inference.check_options(p["format"], p.get("options"))
        schema_inference.check_corrupt_column(schema, options)
    except schema_inference.ReaderOptionError as exc:
        raise JobValidationError(f"{where}.{exc.field}", exc.message) from None
    if not check_paths:
        return
    from sluice.storage import list_files  # local import: pyarrow is heavy

    try:
        files = list_files(path, suffix)
    except (OSError, ValueError) as exc:  # missing, not a directory, or not a path pyarrow.fs reads
        raise JobValidationError(f"{where}.path", str(exc)) from None
    if not files and interval is None:  # a monitored directory may start empty
        raise JobValidationError(f"{where}.path", f"no input files ending in {suffix!r} under {path!r}")


def check_aggregate(c: OperatorConfig) -> None:
    """A keyed aggregate: its keys and (function, column) pairs."""
    where, p = c.where, c.p
    if not isinstance(p.get("keys", []), list):
        raise JobValidationError(f"{where}.keys", f"must be a list of key column names, got {p['keys']!r}")
    keys = aggregate_keys(p)
    if not keys or not all(isinstance(k, str) and k for k in keys) or len(set(keys)) != len(keys):
        raise JobValidationError(f"{where}.keys", f"an aggregate needs distinct key column names, got {keys!r}")
    aggs = p.get("aggs") or {}
    if not isinstance(aggs, dict) or not aggs:
        raise JobValidationError(f"{where}.aggs", "an aggregate needs at least one aggregation")
    for out, spec in aggs.items():
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2 and all(isinstance(x, str) for x in spec)):
            raise JobValidationError(f"{where}.aggs.{out}", f"expected a (function, column) pair, got {spec!r}")
        fn = spec[0]
        if not isinstance(out, str) or not out or out.startswith("__") or out in keys:
            raise JobValidationError(
                f"{where}.aggs.{out}", "an output name must be non-empty, not a key column, not start with '__'"
            )
        if fn not in AGGREGATE_FUNCTIONS:
            raise JobValidationError(
                f"{where}.aggs.{out}", f"unknown aggregation {fn!r}; known: {', '.join(AGGREGATE_FUNCTIONS)}"
            )


def check_timestamps(c: OperatorConfig) -> None:
    """assign_timestamps_and_watermarks: its watermark strategy (sluice/eventtime/validation.py)."""
    _check_event_time(c, "timestamps")


def check_window(c: OperatorConfig) -> None:
    """A window: its assigner, lateness and what it computes (sluice/eventtime/validation.py)."""
    _check_event_time(c, "window")


def _check_event_time(c: OperatorConfig, kind: str) -> None:
    where, op, p = c.where, c.op, c.p
    from sluice.eventtime import validation  # local: numpy is only needed for event time

    try:
        validation.check(kind, p, has_apply="apply" in op.code)
    except (TypeError, ValueError) as exc:
        raise JobValidationError(where, f"operator {op.name or op.id!r}: {exc}") from None


def _require_key_columns(field: str, keys: Any, needs: str) -> None:
    """JobValidationError at `field` unless `keys` is a non-empty list of column names."""
    if not (isinstance(keys, list) and keys and all(isinstance(k, str) and k for k in keys)):
        raise JobValidationError(field, f"{needs}, got {keys!r}")


def check_process(c: OperatorConfig) -> None:
    """A process function (keyed, or with broadcast state): keys, function, state TTL."""
    where, op, p = c.where, c.op, c.p
    _require_key_columns(f"{where}.keys", p.get("keys"), "a process function needs the key columns of its key_by")
    if "process" not in op.code:
        raise JobValidationError(f"{where.rsplit('.', 1)[0]}.code.process", "a process operator needs its function")
    ttl = p.get("state_ttl_ms")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
        raise JobValidationError(f"{where}.state_ttl_ms", f"must be a whole number of ms > 0, got {ttl!r}")
    if not isinstance(p.get("batch", False), bool):  # process_batch: one call per batch
        raise JobValidationError(f"{where}.batch", f"must be true or false, got {p.get('batch')!r}")


# deduplicate's within_ms: at most 2**53 ms (about 285,000 years), so a time plus it stays in int64
MAX_DEDUPLICATE_WITHIN_MS = 2**53


def check_deduplicate(c: OperatorConfig) -> None:
    """deduplicate: keys, within_ms, the time it goes by and, in event time, the time column."""
    where, p = c.where, c.p
    _require_key_columns(f"{where}.keys", p.get("keys"), "deduplicate needs its key columns")
    within = p.get("within_ms")
    if isinstance(within, bool) or not isinstance(within, int) or not 0 < within <= MAX_DEDUPLICATE_WITHIN_MS:
        raise JobValidationError(
            f"{where}.within_ms", f"must be a whole number of ms in 1..{MAX_DEDUPLICATE_WITHIN_MS:,}, got {within!r}"
        )
    if p.get("time") not in tuple(TimeDomain):
        raise JobValidationError(f"{where}.time", f"must be 'event' or 'processing', got {p.get('time')!r}")
    if p["time"] == TimeDomain.EVENT_TIME and not (isinstance(p.get("timestamp"), str) and p["timestamp"]):
        raise JobValidationError(
            f"{where}.timestamp",
            "event-time deduplication needs the event-time column (assign_timestamps_and_watermarks first)",
        )


def check_join_table(c: OperatorConfig) -> None:
    """join_table: join columns, how, refresh and the table function."""
    where, op, p = c.where, c.op, c.p
    on = p.get("on")
    if not (isinstance(on, list) and on and all(isinstance(c, str) and c for c in on)):
        raise JobValidationError(f"{where}.on", f"join_table needs one or more join column names, got {on!r}")
    if p.get("how", "inner") not in ("inner", "left"):
        raise JobValidationError(f"{where}.how", f"must be 'inner' or 'left', got {p.get('how')!r}")
    refresh = p.get("refresh_ms")
    if refresh is not None and (isinstance(refresh, bool) or not isinstance(refresh, int) or refresh <= 0):
        raise JobValidationError(f"{where}.refresh_ms", f"must be a whole number of ms > 0 or absent, got {refresh!r}")
    if "table_fn" not in op.code:
        raise JobValidationError(f"{where.rsplit('.', 1)[0]}.code.table_fn", "join_table needs its table function")


def check_interval_join(c: OperatorConfig) -> None:
    """An interval join: keys, bounds and both sides' event time."""
    _check_join(c, windowed=False)


def check_window_join(c: OperatorConfig) -> None:
    """A windowed join: both sides' keys, the window, and both sides' event time."""
    _check_join(c, windowed=True)


def _check_join(c: OperatorConfig, windowed: bool) -> None:
    where, p = c.where, c.p
    for name in ("keys", "right_keys") if windowed else ("keys",):
        _require_key_columns(f"{where}.{name}", p.get(name), "a join needs its key columns")
    if windowed:
        from sluice.eventtime.windows import PaneWindows, window_from_config

        try:
            assigner = window_from_config(p.get("window") or {})
        except (TypeError, ValueError) as exc:
            raise JobValidationError(f"{where}.window", str(exc)) from None
        if not isinstance(assigner, PaneWindows) or assigner.processing_time:
            raise JobValidationError(f"{where}.window", "a windowed join takes tumbling or sliding event-time windows")
        if len(p["keys"]) != len(p["right_keys"]):
            raise JobValidationError(f"{where}.right_keys", "where(...) and equal_to(...) name as many columns")
    lower, upper = p.get("lower_ms", 0), p.get("upper_ms", 0)
    whole = [b for b in (lower, upper) if isinstance(b, int) and not isinstance(b, bool)]
    if len(whole) != 2 or whole[0] > whole[1]:
        raise JobValidationError(
            f"{where}.lower_ms",
            f"between(lower_ms, upper_ms) needs whole ms with lower <= upper, got {lower!r}, {upper!r}",
        )
    for side in ("left_timestamp", "right_timestamp"):
        if not isinstance(p.get(side), str) or not p[side]:
            raise JobValidationError(
                f"{where}.{side}",
                "both sides of an interval join need event time: assign_timestamps_and_watermarks before key_by",
            )


def check_file_sink(c: OperatorConfig) -> None:
    """A file sink: path, columns and format."""
    where, p = c.where, c.p
    if not p.get("path") or not isinstance(p["path"], str):
        raise JobValidationError(f"{where}.path", f"a file sink needs an output path, got {p.get('path')!r}")
    columns = p.get("columns")
    if columns is not None and not (
        isinstance(columns, list) and columns and all(isinstance(c, str) and c for c in columns)
    ):
        raise JobValidationError(f"{where}.columns", f"must be absent or a list of column names, got {columns!r}")
    from sluice.schema_inference import SINK_FORMATS  # the file formats (docs/file-formats.md)

    if p.get("format", "csv") not in SINK_FORMATS:
        raise JobValidationError(
            f"{where}.format", f"unknown format {p.get('format')!r}; known: {', '.join(SINK_FORMATS)}"
        )
    if p.get("format") == "text" and columns is not None and len(columns) != 1:
        raise JobValidationError(
            f"{where}.columns", f"a text file sink writes exactly one column, got {', '.join(columns)}"
        )


def check_sqlite_sink(c: OperatorConfig) -> None:
    """A SQLite sink (the runtime: taskmanager/operators/sqlite_sink.py): database, table, key, columns."""
    where, p, check_paths = c.where, c.p, c.check_paths
    db_path, table, key, columns = p.get("db_path"), p.get("table"), p.get("key"), p.get("columns")
    if not isinstance(db_path, str) or not db_path or db_path == ":memory:" or db_path.startswith("file:"):
        raise JobValidationError(f"{where}.db_path", f"a SQLite sink needs a database file path, got {db_path!r}")
    if not (
        isinstance(table, str)
        and table.isascii()
        and table.isidentifier()
        and not table.lower().startswith(("sqlite_", "_sluice_"))
    ):
        raise JobValidationError(
            f"{where}.table",
            "must be a table name of letters, digits and '_', not starting with a digit, "
            f"'sqlite_' or '_sluice_'; got {table!r}",
        )

    def names(x: Any) -> list[str] | None:
        ok = isinstance(x, (list, tuple)) and x and all(isinstance(c, str) and c for c in x)
        return list(x) if ok and len(set(x)) == len(x) else None

    if (key := names(key)) is None:
        raise JobValidationError(f"{where}.key", f"needs one or more distinct column names, got {p.get('key')!r}")
    if columns is not None:
        if (columns := names(columns)) is None:
            raise JobValidationError(
                f"{where}.columns", f"must be absent or one or more distinct column names, got {p.get('columns')!r}"
            )
        if missing := [k for k in key if k not in columns]:
            raise JobValidationError(
                f"{where}.key", f"key column {', '.join(missing)} not among the columns {', '.join(columns)}"
            )
    timeout = p.get("timeout_s")
    if timeout is not None and not positive_number(timeout):
        raise JobValidationError(f"{where}.timeout_s", f"must be a positive number of seconds, got {timeout!r}")
    sink_id = p.get("sink_id")
    if sink_id is not None and not (isinstance(sink_id, str) and 0 < len(sink_id) <= MAX_ID_LENGTH):
        raise JobValidationError(f"{where}.sink_id", f"must be a non-empty string or absent, got {sink_id!r}")
    if check_paths:
        import os.path

        directory = os.path.dirname(os.path.abspath(db_path))
        if not os.path.isdir(directory):
            raise JobValidationError(f"{where}.db_path", f"the database's directory {directory} does not exist")
