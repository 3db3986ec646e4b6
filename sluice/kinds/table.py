"""`OperatorKind` and its descriptors: every rule of an operator kind, in one row of `DESCRIPTORS`.

A descriptor says what a kind is (its role: source, operator or sink; whether it must follow
key_by on its keys), which settings may be code, how its config, inputs and columns are
checked (`sluice.graph.validate`), what columns it outputs (the job API's schema derivation,
sluice/api/stream_graph.py), how its inline state redistributes when its parallelism changes
(`sluice.checkpoints.rescale.redistribute`) and the few per-kind facts the API and per-key
routing need. The rules themselves are functions in the modules beside this one.

To add a kind: a member of `OperatorKind` (and of the proto enum in
proto/sluice/v1/common.proto, `make proto`), its row in `DESCRIPTORS`, its runtime class in
taskmanager/operators/ mapped in `OPERATORS` (registry.py) or, for a source, `SOURCES`
(sources.py), and its API method (sluice/api/); tests/unit/test_operator_kinds.py fails until
each of these is there.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any

from sluice import schema as schemas
from sluice import states
from sluice.kinds import config_checks as cfg
from sluice.kinds import input_checks as ins
from sluice.kinds import output_schemas as out
from sluice.kinds import redistribution as moves
from sluice.kinds.common import State
from sluice.v1 import common_pb2


class OperatorKind(enum.StrEnum):
    """What an operator does; the value also names it in operator ids and chain names."""

    SOURCE_FILES = "source_files"
    SOURCE_GENERATOR = "source_generator"
    SOURCE_COLLECTION = "source_collection"
    MAP = "map"
    FILTER = "filter"
    FLAT_MAP = "flat_map"
    SELECT = "select"
    AGGREGATE = "aggregate"
    SINK_FILE = "sink_file"
    SINK_PRINT = "sink_print"
    SINK_SQLITE = "sink_sqlite"
    TIMESTAMPS = "timestamps"  # assign_timestamps_and_watermarks (docs/event-time.md)
    WINDOW = "window"  # key_by(...).window(...)
    PROCESS = "process"  # key_by(...).process(fn): keyed state and timers (docs/user-state.md)
    INTERVAL_JOIN = "interval_join"  # two keyed streams joined on event time (docs/user-state.md)
    JOIN_TABLE = "join_table"  # a stream enriched from a table loaded in Spark (docs/user-state.md)
    BROADCAST_PROCESS = "broadcast_process"  # a keyed process function with broadcast state (docs/user-state.md)
    WINDOW_JOIN = "window_join"  # two keyed streams joined per event-time window (docs/user-state.md)
    SOURCE_CONNECTOR = "source_connector"  # env.from_source(source): a sluice.connectors Source
    SINK_CONNECTOR = "sink_connector"  # stream.sink_to(sink) of a sluice.connectors Sink
    DEDUPLICATE = "deduplicate"  # stream.deduplicate(keys, within_ms, time) (docs/user-state.md)


states.register_proto(OperatorKind, common_pb2.OperatorKind, "OPERATOR_KIND_")


class Role(enum.StrEnum):
    """Where an operator stands in a job: a source has no input, a sink no output."""

    SOURCE = "source"
    OPERATOR = "operator"
    SINK = "sink"


Payload = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class OperatorDescriptor:
    """Everything Sluice knows about one operator kind outside its runtime class."""

    kind: OperatorKind
    role: Role
    check_config: Callable[[cfg.OperatorConfig], None]  # its config and code entries
    output_schema: Callable[[out.Derivation], schemas.Schema | None]  # its columns from its inputs'
    redistribute: Callable[[moves.Rescale], list[State]]  # its inline state at another parallelism
    code: frozenset[str] = frozenset()  # the settings that may be Python code (OperatorSpec.code)
    body: bool = False  # needs a body in code.body
    sql_body: bool = False  # its body may instead be a SQL condition string in config.body
    keyed: bool = False  # must follow key_by on its keys (config.keys): one hash edge on them
    check_inputs: Callable[[ins.OperatorInputs], None] | None = None  # other input shapes: joins, broadcast
    check_columns: tuple[Callable[[ins.OperatorInputs], None], ...] = ()  # against the carried schemas
    unbounded: Callable[[Payload], str | None] | None = None  # a source: why it never ends (None: it always ends)
    keyed_sink: bool = False  # needs each key's rows in one subtask (sluice/key_partitioning.py)
    routing_key: Callable[[Payload], tuple[str, ...] | None] | None = None  # the key a hash edge into it uses
    default_parallelism: int | None = None  # without set_parallelism (None: the job's)
    state_ttl: bool = False  # takes the job's default state TTL (state.ttl) when it sets none
    event_time_column: Callable[[Payload], str | None] | None = None  # assigns event time from this column


def _monitored(p: Payload) -> str | None:
    return "it monitors its directory for new files (monitor_interval_ms)" if p.get("monitor_interval") else None


def _endless(p: Payload) -> str | None:
    return "it is a generator without count=" if p.get("count") is None else None


def _unbounded_connector(p: Payload) -> str | None:
    return "its connector Source is unbounded" if not p.get("bounded") else None


def _strategy_column(p: Payload) -> str | None:
    column: str | None = p["strategy"]["timestamp_column"]
    return column


def _sqlite_key(p: Payload) -> tuple[str, ...] | None:
    key = p.get("key") or []
    return tuple([key] if isinstance(key, str) else key) if key else None


K, R = OperatorKind, Role
BODY = frozenset({"body"})  # a PySpark function DataFrame -> DataFrame, cloudpickled
DESCRIPTORS: dict[OperatorKind, OperatorDescriptor] = {
    d.kind: d
    for d in (
        OperatorDescriptor(
            K.SOURCE_FILES, R.SOURCE, cfg.check_file_source, out.file_source, moves.file_source, unbounded=_monitored
        ),
        OperatorDescriptor(
            K.SOURCE_GENERATOR,
            R.SOURCE,
            cfg.check_generator,
            out.unknown,
            moves.generator_source,
            code=BODY,
            body=True,
            unbounded=_endless,
        ),
        OperatorDescriptor(
            K.SOURCE_COLLECTION,
            R.SOURCE,
            cfg.check_collection,
            out.collection_source,
            moves.collection_source,
            code=frozenset({"rows"}),  # rows that are not JSON (dates, bytes, ...)
            default_parallelism=1,
        ),
        OperatorDescriptor(K.MAP, R.OPERATOR, cfg.no_config, out.unknown, moves.refuse, code=BODY, body=True),
        OperatorDescriptor(  # or a SQL condition string in config
            K.FILTER, R.OPERATOR, cfg.no_config, out.same_as_input, moves.refuse, code=BODY, body=True, sql_body=True
        ),
        OperatorDescriptor(K.FLAT_MAP, R.OPERATOR, cfg.no_config, out.unknown, moves.refuse, code=BODY, body=True),
        OperatorDescriptor(K.SELECT, R.OPERATOR, cfg.check_select, out.select, moves.refuse),
        OperatorDescriptor(
            K.AGGREGATE,
            R.OPERATOR,
            cfg.check_aggregate,
            out.aggregate,
            moves.refuse,  # keyed state only: nothing inline
            keyed=True,
            check_columns=(ins.aggregate_inputs,),
        ),
        OperatorDescriptor(
            K.SINK_FILE,
            R.SINK,
            cfg.check_file_sink,
            out.unknown,
            moves.file_sink,
            check_columns=(ins.file_sink_columns,),
            keyed_sink=True,
        ),
        OperatorDescriptor(K.SINK_PRINT, R.SINK, cfg.no_config, out.unknown, moves.stateless),
        OperatorDescriptor(
            K.SINK_SQLITE,
            R.SINK,
            cfg.check_sqlite_sink,
            out.unknown,
            moves.sqlite_sink,
            check_columns=(ins.sqlite_sink_columns,),
            keyed_sink=True,
            routing_key=_sqlite_key,
        ),
        OperatorDescriptor(
            K.TIMESTAMPS,
            R.OPERATOR,
            cfg.check_timestamps,
            out.same_as_input,
            moves.event_time,
            check_columns=(ins.timestamp_column,),
            event_time_column=_strategy_column,
        ),
        OperatorDescriptor(
            K.WINDOW,
            R.OPERATOR,
            cfg.check_window,
            out.window,
            moves.event_time,
            code=frozenset({"apply"}),  # fn(key, window_start, window_end, rows) -> pandas.DataFrame
            keyed=True,
            check_columns=(ins.window_timestamp_column, ins.aggregate_inputs),
        ),
        OperatorDescriptor(
            K.PROCESS,
            R.OPERATOR,
            cfg.check_process,
            out.unknown,
            moves.event_time,
            code=frozenset({"process", "on_timer"}),  # fn(key, rows, ctx); on_timer(key, ts, ctx)
            keyed=True,
            check_columns=(ins.aggregate_inputs,),
            state_ttl=True,
        ),
        OperatorDescriptor(
            K.INTERVAL_JOIN,
            R.OPERATOR,
            cfg.check_interval_join,
            out.interval_join,
            moves.event_time,
            check_inputs=ins.two_keyed_inputs,
        ),
        OperatorDescriptor(
            K.DEDUPLICATE,
            R.OPERATOR,
            cfg.check_deduplicate,
            out.same_as_input,
            moves.event_time,  # the waiting rows and remembered keys are keyed state
            keyed=True,
            check_columns=(ins.deduplicate_columns,),
        ),
        OperatorDescriptor(
            K.JOIN_TABLE,
            R.OPERATOR,
            cfg.check_join_table,
            out.unknown,
            moves.refuse,
            code=frozenset({"table_fn"}),  # fn(spark) -> DataFrame
        ),
        OperatorDescriptor(
            K.BROADCAST_PROCESS,
            R.OPERATOR,
            cfg.check_process,
            out.unknown,
            moves.event_time,
            code=frozenset({"process", "on_timer", "process_broadcast"}),
            check_inputs=ins.keyed_and_broadcast,
            state_ttl=True,
        ),
        OperatorDescriptor(
            K.WINDOW_JOIN,
            R.OPERATOR,
            cfg.check_window_join,
            out.window_join,
            moves.event_time,
            check_inputs=ins.two_keyed_inputs,
        ),
        OperatorDescriptor(
            K.SOURCE_CONNECTOR,
            R.SOURCE,
            cfg.check_connector_source,
            out.unknown,
            moves.refuse,
            code=frozenset({"source"}),  # the Source: its readers run on TaskManagers
            unbounded=_unbounded_connector,
        ),
        OperatorDescriptor(
            K.SINK_CONNECTOR,
            R.SINK,
            cfg.check_connector_sink,
            out.unknown,
            moves.refuse,
            code=frozenset({"sink"}),  # the Sink: its writers and committers
        ),
    )
}


def descriptor(kind: OperatorKind) -> OperatorDescriptor:
    """The descriptor of `kind` (KeyError for a kind without one: the completeness test prevents it)."""
    return DESCRIPTORS[kind]


def kinds(role: Role) -> tuple[OperatorKind, ...]:
    """The kinds of one role, in the enum's order."""
    return tuple(k for k in OperatorKind if k in DESCRIPTORS and DESCRIPTORS[k].role == role)
