"""Job graphs: validation and operator chaining.

A job graph (the `JobGraph` proto) is what a client submits: operators with a
parallelism and their settings, joined by edges. An operator's settings are
split in two (`encode_operator`): the plain data as a JSON object in
`OperatorSpec.config`, and each setting that is Python code (a body, rows that
are not JSON) cloudpickled on its own in `OperatorSpec.code`. The JobManager
validates a job here before accepting it, from the plain proto fields and the
configs only: it sees which `code` entries exist, never what they hold, and
nothing here unpickles except `operator_settings`, which only the TaskManager
task that runs the operator calls (docs/protocols.md#job-graphs). Both the
JobManager and the TaskManagers derive the same *chains* from a job:
consecutive operators joined by a `forward` edge with equal parallelism, where
the upstream operator has no other output and the downstream operator no other
input, run as one task, so a chain of PySpark bodies costs one Spark call per
batch.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import Any

from sluice import schema as schemas
from sluice import states
from sluice.v1 import common_pb2

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 32768

# Bounds on a submitted job graph (validate), so that no job can make the JobManager hold,
# store or deploy more than this; every task's deployment descriptor carries the whole graph.
MAX_OPERATORS = 1024
MAX_EDGES = 4096
MAX_ID_LENGTH = 256  # operator ids, edge ends, key column names
MAX_NAME_LENGTH = 1024  # the job's and each operator's name
MAX_KEYS = 64  # key columns of one edge
MAX_SCHEMA_LENGTH = 64 * 1024  # an operator's output_schema DDL
MAX_CONFIG_BYTES = 1024 * 1024  # an operator's config JSON
MAX_CODE_BYTES = 16 * 1024 * 1024  # the code entries of one operator together
MAX_TOTAL_CODE_BYTES = 32 * 1024 * 1024  # the code entries of the whole job
MAX_JOB_GRAPH_BYTES = 48 * 1024 * 1024  # the serialized JobGraph


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


class Partitioning(enum.StrEnum):
    """How an edge distributes records over the target's subtasks."""

    FORWARD = "forward"
    HASH = "hash"  # by key group of the key column
    REBALANCE = "rebalance"
    BROADCAST = "broadcast"


states.register_proto(OperatorKind, common_pb2.OperatorKind, "OPERATOR_KIND_")
states.register_proto(Partitioning, common_pb2.Partitioning, "PARTITIONING_")

SOURCE_KINDS = (
    OperatorKind.SOURCE_FILES,
    OperatorKind.SOURCE_GENERATOR,
    OperatorKind.SOURCE_COLLECTION,
    OperatorKind.SOURCE_CONNECTOR,
)
BODY_KINDS = (OperatorKind.MAP, OperatorKind.FILTER, OperatorKind.FLAT_MAP)
TRANSFORM_KINDS = (
    *BODY_KINDS,
    OperatorKind.SELECT,
    OperatorKind.AGGREGATE,
    OperatorKind.TIMESTAMPS,
    OperatorKind.WINDOW,
    OperatorKind.PROCESS,
    OperatorKind.INTERVAL_JOIN,
    OperatorKind.JOIN_TABLE,
    OperatorKind.BROADCAST_PROCESS,
    OperatorKind.WINDOW_JOIN,
)
KEYED_KINDS = (OperatorKind.AGGREGATE, OperatorKind.WINDOW, OperatorKind.PROCESS)  # must follow key_by on their keys
LATE_OUTPUT = "late"  # EdgeSpec.output_tag of a window's late-data side output
SINK_KINDS = (OperatorKind.SINK_FILE, OperatorKind.SINK_PRINT, OperatorKind.SINK_SQLITE, OperatorKind.SINK_CONNECTOR)
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")
# The settings that may be Python code (OperatorSpec.code), by kind; every other setting is plain
# data in OperatorSpec.config, and a kind not listed takes no code at all.
CODE_SETTINGS: dict[OperatorKind, frozenset[str]] = {
    OperatorKind.MAP: frozenset({"body"}),
    OperatorKind.FILTER: frozenset({"body"}),  # or a SQL condition string in config
    OperatorKind.FLAT_MAP: frozenset({"body"}),
    OperatorKind.SOURCE_GENERATOR: frozenset({"body"}),
    OperatorKind.SOURCE_COLLECTION: frozenset({"rows"}),  # rows that are not JSON (dates, bytes, ...)
    OperatorKind.WINDOW: frozenset({"apply"}),  # fn(key, window_start, window_end, rows) -> pandas.DataFrame
    OperatorKind.PROCESS: frozenset({"process", "on_timer"}),  # fn(key, rows, ctx); on_timer(key, ts, ctx)
    OperatorKind.JOIN_TABLE: frozenset({"table_fn"}),  # fn(spark) -> DataFrame
    OperatorKind.BROADCAST_PROCESS: frozenset({"process", "on_timer", "process_broadcast"}),
    OperatorKind.SOURCE_CONNECTOR: frozenset({"source"}),  # the Source: its readers run on TaskManagers
    OperatorKind.SINK_CONNECTOR: frozenset({"sink"}),  # the Sink: its writers and committers
}
NUMERIC_AGGREGATES = ("sum", "avg")  # need a numeric input column


def aggregate_keys(payload: dict[str, Any]) -> list[str]:
    """An aggregate payload's key columns, in key order (`keys`; a job graph built before
    composite keys carried one column as `key`)."""
    keys = payload.get("keys")
    if keys is None and payload.get("key"):
        keys = [payload["key"]]
    return list(keys or [])


def kind_of(op: common_pb2.OperatorSpec) -> OperatorKind:
    """The operator's kind (ValueError when unset or unknown: validate() reports it as a field error)."""
    return states.from_proto(OperatorKind, op.kind)


def partitioning_of(edge: common_pb2.EdgeSpec | Any) -> Partitioning:
    """The partitioning of an EdgeSpec or a ResultPartitionDescriptor."""
    return states.from_proto(Partitioning, edge.partitioning)


class JobValidationError(ValueError):
    """A submitted job is malformed; `field` names the offending field."""

    def __init__(self, field: str, message: str):
        field, message = _clip(field, 256), _clip(message, MAX_ERROR_LENGTH)  # they may quote the input
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


MAX_ERROR_LENGTH = 2048  # a validation message quotes bad input; gRPC carries it in a small trailer


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class _NotPlain(Exception):
    """A value that JSON cannot carry as it is."""


def _plain(value: Any) -> Any:
    """`value` as plain JSON data (tuples become lists); _NotPlain for anything else."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotPlain()
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _NotPlain()
        return {k: _plain(v) for k, v in value.items()}
    raise _NotPlain()


def encode_operator(settings: dict[str, Any]) -> tuple[str, dict[str, bytes]]:
    """An operator's settings as (`OperatorSpec.config`, `OperatorSpec.code`): each setting
    that is plain data (strings, numbers, bools, None, lists, tuples, dicts of those) goes
    into the JSON config; every other one is cloudpickled on its own under its name."""
    import cloudpickle  # local: only the client pickles

    config: dict[str, Any] = {}
    code: dict[str, bytes] = {}
    for key, value in settings.items():
        if not isinstance(key, str):
            raise TypeError(f"operator setting names are strings, got {key!r}")
        try:
            config[key] = _plain(value)
        except _NotPlain:
            code[key] = cloudpickle.dumps(value)
    return json.dumps(config, allow_nan=False, separators=(",", ":")), code


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_config(text: str) -> dict[str, Any]:
    """A config JSON object (empty text: no settings); ValueError saying what is wrong."""
    if not text:
        return {}
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object of the operator's settings, got a {type(value).__name__}")
    return value


def operator_config(op: common_pb2.OperatorSpec) -> dict[str, Any]:
    """The operator's plain settings (`config`), without unpickling anything."""
    return parse_config(op.config)


class OperatorCodeError(RuntimeError):
    """An operator's code does not load on this TaskManager, or is not what the kind needs."""


def loads_code(op: common_pb2.OperatorSpec, key: str) -> Any:
    """Unpickle one code entry of `op`: run only by the TaskManager task that runs the
    operator. Any failure here is the job's (taskmanager/task_messages.py classifies it as
    non-recoverable by this function's name)."""
    import pickle  # local: nothing on the JobManager's path unpickles

    where = f"operator {op.name or op.id!r} ({op.id}): code.{key}"
    try:
        value = pickle.loads(op.code[key])
    except Exception as exc:
        raise OperatorCodeError(f"{where} cannot be unpickled here: {type(exc).__name__}: {exc}") from exc
    if key == "body" and not callable(value):
        raise OperatorCodeError(f"{where} is not callable: {type(value).__name__}")
    return value


def operator_settings(op: common_pb2.OperatorSpec) -> dict[str, Any]:
    """The operator's settings as the job API wrote them: its config with each code entry
    unpickled. Unpickling runs code: only the TaskManager task that runs `op` calls this."""
    settings = operator_config(op)
    for key in op.code:
        settings[key] = loads_code(op, key)
    return settings


@dataclasses.dataclass(frozen=True)
class Chain:
    """A task: operators run back to back in one thread, head first."""

    id: str  # the head operator's id
    operator_ids: tuple[str, ...]
    name: str
    parallelism: int
    inputs: tuple[common_pb2.EdgeSpec, ...]  # edges into the head from other chains
    outputs: tuple[common_pb2.EdgeSpec, ...]  # edges out of the tail to other chains


def build_chains(job: common_pb2.JobGraph) -> list[Chain]:
    """Chains in topological order (sources first). Assumes a validated graph."""
    ops = {op.id: op for op in job.operators}
    outs: dict[str, list] = {op.id: [] for op in job.operators}
    ins: dict[str, list] = {op.id: [] for op in job.operators}
    for e in job.edges:
        outs[e.source].append(e)
        ins[e.target].append(e)

    def chainable(e: common_pb2.EdgeSpec) -> bool:
        return (
            partitioning_of(e) == Partitioning.FORWARD
            and not e.output_tag  # a side output is never chained
            and len(outs[e.source]) == 1
            and len(ins[e.target]) == 1
            and ops[e.source].parallelism == ops[e.target].parallelism
        )

    chains = []
    for op_id in topological_order(job):
        if len(ins[op_id]) == 1 and chainable(ins[op_id][0]):
            continue  # not a head: belongs to its upstream's chain
        members = [op_id]
        while len(outs[members[-1]]) == 1 and chainable(outs[members[-1]][0]):
            members.append(outs[members[-1]][0].target)
        chains.append(
            Chain(
                id=op_id,
                operator_ids=tuple(members),
                name=" -> ".join(ops[m].name or kind_of(ops[m]) for m in members),
                parallelism=ops[op_id].parallelism,
                inputs=tuple(ins[op_id]),
                outputs=tuple(outs[members[-1]]),
            )
        )
    return chains


def chain_of(chains: list[Chain]) -> dict[str, Chain]:
    """operator id -> the chain holding it."""
    return {op_id: c for c in chains for op_id in c.operator_ids}


def key_group_owners(job: common_pb2.JobGraph, chain_id: str) -> list[int]:
    """The subtask of each key group of a chain, when a live rebalance set them (else empty:
    contiguous ranges, sluice/key_groups.py)."""
    return list(job.key_group_owners[chain_id].owners) if chain_id in job.key_group_owners else []


def slots_required(job: common_pb2.JobGraph) -> int:
    """With slot sharing one slot holds one subtask of every operator."""
    return max(op.parallelism for op in job.operators)


def topological_order(job: common_pb2.JobGraph) -> list[str]:
    order, indegree = [], {op.id: 0 for op in job.operators}
    for e in job.edges:
        indegree[e.target] += 1
    ready = [op.id for op in job.operators if indegree[op.id] == 0]
    succ: dict[str, list[str]] = {op.id: [] for op in job.operators}
    for e in job.edges:
        succ[e.source].append(e.target)
    while ready:
        n = ready.pop(0)
        order.append(n)
        for m in succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    if len(order) != len(job.operators):
        cyclic = sorted(set(indegree) - set(order))
        raise JobValidationError("edges", f"the graph has a cycle through operators {cyclic}")
    return order


def _check_bounds(job: common_pb2.JobGraph) -> None:
    """The size limits of a job graph (the MAX_* constants above), before anything is parsed."""
    if (size := job.ByteSize()) > MAX_JOB_GRAPH_BYTES:
        raise JobValidationError("job", f"the job graph is {size} bytes; the limit is {MAX_JOB_GRAPH_BYTES}")
    if len(job.name) > MAX_NAME_LENGTH:
        raise JobValidationError("name", f"{len(job.name)} characters; the limit is {MAX_NAME_LENGTH}")
    if len(job.operators) > MAX_OPERATORS:
        raise JobValidationError("operators", f"{len(job.operators)} operators; the limit is {MAX_OPERATORS}")
    if len(job.edges) > MAX_EDGES:
        raise JobValidationError("edges", f"{len(job.edges)} edges; the limit is {MAX_EDGES}")
    total_code = 0
    for i, op in enumerate(job.operators):
        where = f"operators[{i}]"
        for field, value, limit in (
            ("id", op.id, MAX_ID_LENGTH),
            ("name", op.name, MAX_NAME_LENGTH),
            ("output_schema", op.output_schema, MAX_SCHEMA_LENGTH),
        ):
            if len(value) > limit:
                raise JobValidationError(f"{where}.{field}", f"{len(value)} characters; the limit is {limit}")
        if (n := len(op.config.encode())) > MAX_CONFIG_BYTES:
            raise JobValidationError(f"{where}.config", f"{n} bytes of JSON; the limit is {MAX_CONFIG_BYTES}")
        code = sum(len(k) + len(v) for k, v in op.code.items())
        if code > MAX_CODE_BYTES:
            raise JobValidationError(f"{where}.code", f"{code} bytes of pickled code; the limit is {MAX_CODE_BYTES}")
        total_code += code
    if total_code > MAX_TOTAL_CODE_BYTES:
        raise JobValidationError(
            "operators", f"{total_code} bytes of pickled code in all; the limit is {MAX_TOTAL_CODE_BYTES}"
        )
    for j, e in enumerate(job.edges):
        if len(e.keys) > MAX_KEYS:
            raise JobValidationError(f"edges[{j}].keys", f"{len(e.keys)} key columns; the limit is {MAX_KEYS}")
        for field, value in (("source", e.source), ("target", e.target), *(("keys", k) for k in e.keys)):
            if len(value) > MAX_ID_LENGTH:
                raise JobValidationError(
                    f"edges[{j}].{field}", f"{len(value)} characters; the limit is {MAX_ID_LENGTH}"
                )


def validate(job: common_pb2.JobGraph, check_paths: bool = True) -> dict[str, dict[str, Any]]:
    """Raise JobValidationError for a malformed job; return each operator's config (its
    plain settings) by operator id. Reads plain proto fields and configs only: the names of
    the code entries are checked, their bytes are never unpickled."""
    maxp = job.max_parallelism or DEFAULT_MAX_PARALLELISM
    if not 1 <= maxp <= MAX_MAX_PARALLELISM:
        raise JobValidationError("max_parallelism", f"must be in 1..{MAX_MAX_PARALLELISM}, got {maxp}")
    if not job.operators:
        raise JobValidationError("operators", "the job has no operators")
    _check_bounds(job)
    payloads: dict[str, dict[str, Any]] = {}
    kinds: dict[str, OperatorKind] = {}
    for i, op in enumerate(job.operators):
        where = f"operators[{i}]"
        if not op.id:
            raise JobValidationError(f"{where}.id", "must not be empty")
        if op.id in payloads:
            raise JobValidationError(f"{where}.id", f"duplicate operator id {op.id!r}")
        try:
            kind = kind_of(op)
        except ValueError as exc:
            raise JobValidationError(
                f"{where}.kind", f"{exc}; known: {', '.join(k.name for k in OperatorKind)}"
            ) from None
        if not 1 <= op.parallelism <= maxp:
            raise JobValidationError(
                f"{where}.parallelism",
                f"operator {op.name or op.id!r} has parallelism {op.parallelism}; "
                f"it must be in 1..{maxp} (max_parallelism)",
            )
        try:
            payload = operator_config(op)
        except ValueError as exc:
            raise JobValidationError(f"{where}.config", f"operator {op.name or op.id!r}: {exc}") from None
        _check_code_names(where, op, kind, payload)
        _validate_config(f"{where}.config", op, kind, payload, check_paths)
        payloads[op.id] = payload
        kinds[op.id] = kind
    par = {op.id: op.parallelism for op in job.operators}
    for chain_id, table in job.key_group_owners.items():
        where = f"key_group_owners[{chain_id[:MAX_ID_LENGTH]!r}]"
        if chain_id not in par:
            raise JobValidationError(where, "names no operator of the job")
        if len(table.owners) != maxp or not all(0 <= s < par[chain_id] for s in table.owners):
            raise JobValidationError(
                where, f"must give each of the {maxp} key groups a subtask in 0..{par[chain_id] - 1}"
            )

    ins: dict[str, list] = {op.id: [] for op in job.operators}
    outs: dict[str, list] = {op.id: [] for op in job.operators}
    par = {op.id: op.parallelism for op in job.operators}
    pairs: set[tuple[str, str]] = set()
    for j, e in enumerate(job.edges):
        where = f"edges[{j}]"
        for end in ("source", "target"):
            if getattr(e, end) not in kinds:
                raise JobValidationError(f"{where}.{end}", f"unknown operator id {getattr(e, end)!r}")
        try:
            partitioning = partitioning_of(e)
        except ValueError as exc:
            raise JobValidationError(
                f"{where}.partitioning", f"{exc}; known: {', '.join(p.name for p in Partitioning)}"
            ) from None
        if partitioning == Partitioning.HASH and not e.keys:
            raise JobValidationError(f"{where}.keys", "a hash edge needs a key column (key_by)")
        if any(not k for k in e.keys) or len(set(e.keys)) != len(e.keys):
            raise JobValidationError(
                f"{where}.keys", f"key columns must be distinct non-empty names, got {list(e.keys)}"
            )
        if (e.source, e.target) in pairs:
            raise JobValidationError(
                where,
                f"a second edge {e.source} -> {e.target}: an operator reads another one once (the data "
                "exchange names a result partition by its two ends); pass one of the two streams through "
                "an operator of its own first, e.g. select('*')",
            )
        pairs.add((e.source, e.target))
        if partitioning == Partitioning.FORWARD and par[e.source] != par[e.target]:
            raise JobValidationError(
                f"{where}.partitioning",
                f"forward edge {e.source} -> {e.target} joins parallelism {par[e.source]} to {par[e.target]}; "
                "use rebalance() or key_by() between operators of different parallelism",
            )
        ins[e.target].append(e)
        outs[e.source].append(e)
    topological_order(job)
    for i, op in enumerate(job.operators):
        where = f"operators[{i}]"
        kind = kinds[op.id]
        if kind in SOURCE_KINDS and ins[op.id]:
            raise JobValidationError(where, f"source {op.id!r} cannot have inputs")
        if kind not in SOURCE_KINDS and not ins[op.id]:
            raise JobValidationError(where, f"operator {op.id!r} ({kind}) has no input")
        if kind in SINK_KINDS and outs[op.id]:
            raise JobValidationError(where, f"sink {op.id!r} cannot have outputs")
        if kind in KEYED_KINDS:
            keys = aggregate_keys(payloads[op.id])
            if (
                len(ins[op.id]) != 1
                or partitioning_of(ins[op.id][0]) != Partitioning.HASH
                or list(ins[op.id][0].keys) != keys
            ):
                raise JobValidationError(
                    where, f"{kind} {op.id!r} must follow key_by({', '.join(repr(k) for k in keys)})"
                )
        if kind in (OperatorKind.INTERVAL_JOIN, OperatorKind.WINDOW_JOIN):
            keys = aggregate_keys(payloads[op.id])
            right_keys = payloads[op.id].get("right_keys") or keys
            sources = [e.source for e in ins[op.id]]
            left = payloads[op.id].get("left")
            if (
                len(ins[op.id]) != 2
                or any(
                    partitioning_of(e) != Partitioning.HASH
                    or list(e.keys) != (keys if e.source == left else right_keys)
                    for e in ins[op.id]
                )
                or left not in sources
                or len(set(sources)) != 2
            ):
                raise JobValidationError(
                    where,
                    f"interval join {op.id!r} needs two different inputs, each after key_by("
                    f"{', '.join(repr(k) for k in keys)}), its left one named in config.left",
                )
        if kind == OperatorKind.BROADCAST_PROCESS:
            keys = aggregate_keys(payloads[op.id])
            by = {partitioning_of(e): e for e in ins[op.id]}
            keyed = by.get(Partitioning.HASH)
            if (
                len(ins[op.id]) != 2
                or keyed is None
                or list(keyed.keys) != keys
                or keyed.source != payloads[op.id].get("left")
                or Partitioning.BROADCAST not in by
            ):
                raise JobValidationError(
                    where,
                    f"broadcast process {op.id!r} needs a keyed input (key_by({', '.join(repr(k) for k in keys)}), "
                    "named in config.left) and a broadcast() input",
                )
        for e in outs[op.id]:
            if e.output_tag and (e.output_tag != LATE_OUTPUT or not payloads[op.id].get("late_output")):
                raise JobValidationError(
                    where,
                    f"edge {e.source} -> {e.target} reads side output {e.output_tag!r}, which {op.id!r} does not "
                    "have (a window's late data: window(...).side_output_late_data())",
                )
    if not any(kinds[o] in SINK_KINDS for o in kinds):
        raise JobValidationError("operators", "the job has no sink; add sink_to(...) or print()")
    _check_columns(job, payloads, kinds, ins)
    _check_runtime_mode(job, payloads, kinds)
    from sluice import key_partitioning  # local: it builds on this module

    key_partitioning.check(job)  # per-key routing into SQLite and file sinks
    return payloads


def is_batch(job: common_pb2.JobGraph) -> bool:
    """The job runs in BATCH mode (`execution.runtime-mode`, docs/batch.md)."""
    return str(job.config.get("execution.runtime-mode", "")).strip().lower() == "batch"


def unbounded_reason(kind: OperatorKind, payload: dict[str, Any]) -> str | None:
    """Why a source never ends (None: it is bounded)."""
    if kind == OperatorKind.SOURCE_FILES and payload.get("monitor_interval"):
        return "it monitors its directory for new files (monitor_interval_ms)"
    if kind == OperatorKind.SOURCE_GENERATOR and payload.get("count") is None:
        return "it is a generator without count="
    if kind == OperatorKind.SOURCE_CONNECTOR and not payload.get("bounded"):
        return "its connector Source is unbounded"
    return None


def _check_runtime_mode(
    job: common_pb2.JobGraph, payloads: dict[str, dict[str, Any]], kinds: dict[str, OperatorKind]
) -> None:
    """BATCH needs every source bounded: a batch job runs each stage to its end."""
    if not is_batch(job):
        return
    for i, op in enumerate(job.operators):
        reason = unbounded_reason(kinds[op.id], payloads[op.id]) if kinds[op.id] in SOURCE_KINDS else None
        if reason is not None:
            raise JobValidationError(
                f"operators[{i}]",
                f"source {op.name or op.id!r} is unbounded ({reason}), but the job runs in BATCH mode, which "
                'needs every source to end; bound the source or use env.set_runtime_mode("STREAMING")',
            )


def output_schemas(job: common_pb2.JobGraph) -> dict[str, schemas.Schema | None]:
    """Each operator's carried output schema (`OperatorSpec.output_schema`), None when empty."""
    out: dict[str, schemas.Schema | None] = {}
    for i, op in enumerate(job.operators):
        try:
            out[op.id] = schemas.parse(op.output_schema) if op.output_schema else None
        except schemas.SchemaError as exc:
            raise JobValidationError(f"operators[{i}].output_schema", str(exc)) from None
    return out


def require_columns(field: str, schema: schemas.Schema | None, columns: Any) -> None:
    """JobValidationError at `field` for the first of `columns` that `schema` lacks
    (nothing when the schema is unknown: a check never rejects on a guess)."""
    if schema is None:
        return
    for c in columns:
        if c not in schema:
            raise JobValidationError(field, schema.missing(c))


def _check_columns(
    job: common_pb2.JobGraph, payloads: dict[str, dict], kinds: dict[str, OperatorKind], ins: dict[str, list]
) -> None:
    """Key columns of hash edges, aggregate inputs and sink columns against the carried
    output schemas (plain proto fields, except what only a config says: the aggregates and
    the sink's columns, already parsed by validate)."""
    carried = output_schemas(job)

    def schema_of(e: common_pb2.EdgeSpec) -> schemas.Schema | None:
        """What an edge carries: its source's output, or for a late-data side output the
        window's input rows."""
        if not e.output_tag:
            return carried[e.source]
        return carried[ins[e.source][0].source] if ins[e.source] else None

    for j, e in enumerate(job.edges):
        if partitioning_of(e) == Partitioning.HASH:
            require_columns(f"edges[{j}].keys", schema_of(e), e.keys)
    for i, op in enumerate(job.operators):
        inputs = [schema_of(e) for e in ins[op.id]]
        p = payloads[op.id]
        if kinds[op.id] in (OperatorKind.TIMESTAMPS, OperatorKind.WINDOW) and inputs:
            column = (p.get("strategy") or {}).get("timestamp_column") or p.get("timestamp_column")
            window_kind = p["window"].get("kind") if kinds[op.id] == OperatorKind.WINDOW else None
            processing_time = window_kind == "tumbling-processing-time"
            if column and not processing_time:
                field = f"operators[{i}].config.timestamp_column"
                if inputs[0] is not None and column not in inputs[0]:
                    raise JobValidationError(field, f"operator {op.name or op.id!r}: {inputs[0].missing(column)}")
                t = inputs[0].type_of(column) if inputs[0] is not None else None
                if t is not None and t != schemas.UNKNOWN and t not in schemas.EVENT_TIME_TYPES:
                    raise JobValidationError(
                        field,
                        f"operator {op.name or op.id!r}: the event-time column {column!r} is {t}; it must hold "
                        "epoch milliseconds (an integer) or a timestamp",
                    )
        if kinds[op.id] in KEYED_KINDS and inputs and p.get("aggs"):
            for out, (fn, col) in p["aggs"].items():
                if fn == "count":
                    continue  # counts rows: its column is not read
                field = f"operators[{i}].config.aggs.{out}"
                require_columns(field, inputs[0], [col])
                t = inputs[0].type_of(col) if inputs[0] is not None else None
                if fn in NUMERIC_AGGREGATES and t is not None and t != schemas.UNKNOWN and not schemas.is_numeric(t):
                    raise JobValidationError(field, f"{fn} needs a numeric column; {col!r} is {t}")
        elif kinds[op.id] in (OperatorKind.SINK_FILE, OperatorKind.SINK_SQLITE):
            for schema in inputs:
                if kinds[op.id] == OperatorKind.SINK_SQLITE:  # its key columns are written too
                    require_columns(f"operators[{i}].config.key", schema, p.get("key") or [])
                require_columns(f"operators[{i}].config.columns", schema, p.get("columns") or [])
                visible = [n for n in schema.names if not n.startswith("__")] if schema is not None else None
                if p.get("format") == "text" and not p.get("columns") and visible is not None and len(visible) != 1:
                    raise JobValidationError(
                        f"operators[{i}].config.columns",
                        f"a text file sink writes exactly one column; the stream has {len(visible)}: "
                        f"{', '.join(visible)}. Give FileSink(columns=[...]) one of them",
                    )


def positive_number(x) -> bool:
    """An int or float above 0 (not a bool): intervals such as a file source's monitor interval."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def _check_code_names(where: str, op: common_pb2.OperatorSpec, kind: OperatorKind, config: dict[str, Any]) -> None:
    """The code entries `op` has (by name only: their bytes are opaque here) against what its
    kind takes (CODE_SETTINGS), and a body where the kind needs one."""
    allowed = CODE_SETTINGS.get(kind, frozenset())
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
    if kind in (*BODY_KINDS, OperatorKind.SOURCE_GENERATOR) and "body" not in op.code:
        if kind == OperatorKind.FILTER and isinstance(config.get("body"), str) and config["body"].strip():
            return  # a SQL condition
        if "body" in config:
            wants = "a SQL condition string or a function" if kind == OperatorKind.FILTER else "a function"
            raise JobValidationError(
                f"{where}.config.body", f"{kind} body of {name!r} must be {wants}, got {config['body']!r}"
            )
        raise JobValidationError(
            f"{where}.code.body", f"{kind} operator {name!r} has no body: cloudpickle its function into code.body"
        )


def _validate_config(where: str, op: common_pb2.OperatorSpec, kind: OperatorKind, p: dict, check_paths: bool) -> None:
    """The checks of one operator's config; `where` is `operators[i].config`."""
    if kind == OperatorKind.SELECT:
        cols = p.get("columns")
        if not cols or not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
            raise JobValidationError(f"{where}.columns", "select needs one or more SQL expressions as strings")
    elif kind == OperatorKind.SOURCE_GENERATOR:
        count = p.get("count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
            raise JobValidationError(f"{where}.count", f"must be a non-negative int or None, got {count!r}")
        batch_size = p.get("batch_size")
        if batch_size is not None and (
            not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
        ):
            raise JobValidationError(f"{where}.batch_size", f"must be a positive int or absent, got {batch_size!r}")
    elif kind in (OperatorKind.SOURCE_CONNECTOR, OperatorKind.SINK_CONNECTOR):
        from sluice.connectors import validation as connector_validation  # local: only connector jobs need it

        try:
            connector_validation.check_config(kind == OperatorKind.SOURCE_CONNECTOR, p, op.code)
        except connector_validation.ConnectorConfigError as exc:
            raise JobValidationError(f"{where}.{exc.field}", exc.message) from None
    elif kind == OperatorKind.SOURCE_COLLECTION:
        rows = p.get("rows")
        if "rows" in p and not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
            raise JobValidationError(f"{where}.rows", "must be a list of objects, one per row")
        if "rows" not in p and "rows" not in op.code:
            raise JobValidationError(f"{where}.rows", "a collection source needs its rows")
    elif kind == OperatorKind.SOURCE_FILES:
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
    elif kind == OperatorKind.AGGREGATE:
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
    elif kind in (OperatorKind.TIMESTAMPS, OperatorKind.WINDOW):
        from sluice.eventtime import validation  # local: numpy is only needed for event time

        try:
            validation.check(kind.value, p, has_apply="apply" in op.code)
        except (TypeError, ValueError) as exc:
            raise JobValidationError(where, f"operator {op.name or op.id!r}: {exc}") from None
    elif kind in (OperatorKind.PROCESS, OperatorKind.BROADCAST_PROCESS):
        process_keys = p.get("keys")
        if not (
            isinstance(process_keys, list) and process_keys and all(isinstance(k, str) and k for k in process_keys)
        ):
            raise JobValidationError(
                f"{where}.keys", f"a process function needs the key columns of its key_by, got {process_keys!r}"
            )
        if "process" not in op.code:
            raise JobValidationError(f"{where.rsplit('.', 1)[0]}.code.process", "a process operator needs its function")
        ttl = p.get("state_ttl_ms")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
            raise JobValidationError(f"{where}.state_ttl_ms", f"must be a whole number of ms > 0, got {ttl!r}")
    elif kind == OperatorKind.JOIN_TABLE:
        on = p.get("on")
        if not (isinstance(on, list) and on and all(isinstance(c, str) and c for c in on)):
            raise JobValidationError(f"{where}.on", f"join_table needs one or more join column names, got {on!r}")
        if p.get("how", "inner") not in ("inner", "left"):
            raise JobValidationError(f"{where}.how", f"must be 'inner' or 'left', got {p.get('how')!r}")
        refresh = p.get("refresh_ms")
        if refresh is not None and (isinstance(refresh, bool) or not isinstance(refresh, int) or refresh <= 0):
            raise JobValidationError(
                f"{where}.refresh_ms", f"must be a whole number of ms > 0 or absent, got {refresh!r}"
            )
        if "table_fn" not in op.code:
            raise JobValidationError(f"{where.rsplit('.', 1)[0]}.code.table_fn", "join_table needs its table function")
    elif kind in (OperatorKind.INTERVAL_JOIN, OperatorKind.WINDOW_JOIN):
        for name in ("keys", "right_keys") if kind == OperatorKind.WINDOW_JOIN else ("keys",):
            join_keys = p.get(name)
            if not (isinstance(join_keys, list) and join_keys and all(isinstance(k, str) and k for k in join_keys)):
                raise JobValidationError(f"{where}.{name}", f"a join needs its key columns, got {join_keys!r}")
        if kind == OperatorKind.WINDOW_JOIN:
            from sluice.eventtime.windows import PaneWindows, window_from_config

            try:
                assigner = window_from_config(p.get("window") or {})
            except (TypeError, ValueError) as exc:
                raise JobValidationError(f"{where}.window", str(exc)) from None
            if not isinstance(assigner, PaneWindows) or assigner.processing_time:
                raise JobValidationError(
                    f"{where}.window", "a windowed join takes tumbling or sliding event-time windows"
                )
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
    elif kind == OperatorKind.SINK_FILE:
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
    elif kind == OperatorKind.SINK_SQLITE:  # the runtime: taskmanager/operators/sqlite_sink.py
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


def rescaled(
    job: common_pb2.JobGraph, parallelism: int, operator: str | None = None, members: tuple[str, ...] = ()
) -> common_pb2.JobGraph:
    """A copy of `job` with every operator (or only `operator`, by id, or only `members`) at
    `parallelism`; a forward edge between operators of different parallelism becomes a
    rebalance, as the job API makes it, except out of an operator partitioned by key, where
    it is re-keyed or its consumer follows (sluice/key_partitioning.py; `sluice rescale`,
    docs/savepoints.md). ValueError naming what is wrong."""
    maxp = job.max_parallelism or DEFAULT_MAX_PARALLELISM
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or not 1 <= parallelism <= maxp:
        raise ValueError(f"parallelism must be between 1 and the job's max parallelism {maxp}, got {parallelism}")
    ids = [op.id for op in job.operators]
    if operator is not None and operator not in ids:
        raise ValueError(f"the job has no operator with uid {operator!r}; its operators: {', '.join(ids)}")
    chosen = set(members) | ({operator} if operator is not None else set())
    new = common_pb2.JobGraph()
    new.CopyFrom(job)
    for op in new.operators:
        if not chosen or op.id in chosen:
            op.parallelism = parallelism
    from sluice import key_partitioning  # local: it builds on this module

    # a forward edge between operators now of different parallelism becomes a rebalance, or
    # a hash edge (or its consumer follows) where per-key routing depends on it
    key_partitioning.keep_keyed(new, follow=True, fixed=chosen)
    par = {op.id: op.parallelism for op in new.operators}
    before = {op.id: op.parallelism for op in job.operators}
    for chain_id in [c for c in new.key_group_owners if par.get(c) != before.get(c)]:
        del new.key_group_owners[chain_id]  # a rebalanced assignment is for the old parallelism
    return new
