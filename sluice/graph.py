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

What differs between operator kinds is not here: `validate` checks what every job needs and
asks each operator's descriptor (sluice/kinds/table.py) for the rest — its role, its config,
its inputs and its columns.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from sluice import schema as schemas
from sluice import states
from sluice.kinds import common, config_checks, input_checks
from sluice.kinds import table as kind_table
from sluice.v1 import common_pb2

# The kinds' vocabulary, re-exported: the rules of the kinds define it without importing this
# module (sluice/kinds/), and the runtime and the API know it by these names.
OperatorKind = kind_table.OperatorKind
Role = kind_table.Role
descriptor = kind_table.descriptor
AGGREGATE_FUNCTIONS = common.AGGREGATE_FUNCTIONS
LATE_OUTPUT = common.LATE_OUTPUT
MAX_ERROR_LENGTH = common.MAX_ERROR_LENGTH
MAX_ID_LENGTH = common.MAX_ID_LENGTH
NUMERIC_AGGREGATES = common.NUMERIC_AGGREGATES
JobValidationError = common.JobValidationError
Partitioning = common.Partitioning
aggregate_keys = common.aggregate_keys
partitioning_of = common.partitioning_of
positive_number = common.positive_number
require_columns = common.require_columns

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 32768

# Bounds on a submitted job graph (validate), so that no job can make the JobManager hold,
# store or deploy more than this; every task's deployment descriptor carries the whole graph.
MAX_OPERATORS = 1024
MAX_EDGES = 4096
MAX_NAME_LENGTH = 1024  # the job's and each operator's name
MAX_KEYS = 64  # key columns of one edge
MAX_SCHEMA_LENGTH = 64 * 1024  # an operator's output_schema DDL
MAX_CONFIG_BYTES = 1024 * 1024  # an operator's config JSON
MAX_CODE_BYTES = 16 * 1024 * 1024  # the code entries of one operator together
MAX_TOTAL_CODE_BYTES = 32 * 1024 * 1024  # the code entries of the whole job
MAX_JOB_GRAPH_BYTES = 48 * 1024 * 1024  # the serialized JobGraph


# The groups of kinds by role and rule, read from their descriptors (sluice/kinds/table.py).
SOURCE_KINDS = kind_table.kinds(Role.SOURCE)
SINK_KINDS = kind_table.kinds(Role.SINK)
TRANSFORM_KINDS = kind_table.kinds(Role.OPERATOR)
BODY_KINDS = tuple(k for k in TRANSFORM_KINDS if descriptor(k).body)
KEYED_KINDS = tuple(k for k in TRANSFORM_KINDS if descriptor(k).keyed)  # must follow key_by on their keys
# The settings that may be Python code (OperatorSpec.code), by kind; every other setting is plain
# data in OperatorSpec.config, and a kind not listed takes no code at all.
CODE_SETTINGS: dict[OperatorKind, frozenset[str]] = {k: descriptor(k).code for k in OperatorKind if descriptor(k).code}


def kind_of(op: common_pb2.OperatorSpec) -> OperatorKind:
    """The operator's kind (ValueError when unset or unknown: validate() reports it as a field error)."""
    return states.from_proto(OperatorKind, op.kind)


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
        d = descriptor(kind)
        config_checks.check_code_names(where, op, str(kind), d.code, d.body, payload, d.sql_body)
        d.check_config(config_checks.OperatorConfig(f"{where}.config", op, payload, check_paths))
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
        d = descriptor(kind)
        if d.role == Role.SOURCE and ins[op.id]:
            raise JobValidationError(where, f"source {op.id!r} cannot have inputs")
        if d.role != Role.SOURCE and not ins[op.id]:
            raise JobValidationError(where, f"operator {op.id!r} ({kind}) has no input")
        if d.role == Role.SINK and outs[op.id]:
            raise JobValidationError(where, f"sink {op.id!r} cannot have outputs")
        shape = input_checks.OperatorInputs(where, op, str(kind), payloads[op.id], tuple(ins[op.id]))
        if d.keyed:  # one hash edge on its own keys
            input_checks.follows_key_by(shape)
        if d.check_inputs is not None:  # the shapes of joins and broadcast process functions
            d.check_inputs(shape)
        for e in outs[op.id]:
            if e.output_tag and (e.output_tag != LATE_OUTPUT or not payloads[op.id].get("late_output")):
                raise JobValidationError(
                    where,
                    f"edge {e.source} -> {e.target} reads side output {e.output_tag!r}, which {op.id!r} does not "
                    "have (a window's late data: window(...).side_output_late_data())",
                )
    if not any(descriptor(kinds[o]).role == Role.SINK for o in kinds):
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
    rule = descriptor(kind).unbounded
    return rule(payload) if rule is not None else None


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


def _check_columns(
    job: common_pb2.JobGraph, payloads: dict[str, dict], kinds: dict[str, OperatorKind], ins: dict[str, list]
) -> None:
    """Key columns of hash edges, then each operator's columns (its descriptor's `check_columns`:
    event-time columns, aggregate inputs, sink columns) against the carried output schemas
    (plain proto fields, except what only a config says, already parsed by validate)."""
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
        kind = kinds[op.id]
        inputs = input_checks.OperatorInputs(
            f"operators[{i}]",
            op,
            str(kind),
            payloads[op.id],
            tuple(ins[op.id]),
            tuple(schema_of(e) for e in ins[op.id]),
        )
        for check in descriptor(kind).check_columns:
            check(inputs)


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
