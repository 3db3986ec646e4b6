"""Job graphs: validation and operator chaining.

A job graph (the `JobGraph` proto) is what a client submits: operators with a
parallelism and a cloudpickled payload, joined by edges. The JobManager
validates it here before accepting it, and both the JobManager and the
TaskManagers derive the same *chains* from it: consecutive operators joined
by a `forward` edge with equal parallelism, where the upstream operator has
no other output and the downstream operator no other input, run as one task,
so a chain of PySpark bodies costs one Spark call per batch.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import cloudpickle

from sluice.v1 import common_pb2

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 32768

SOURCE_KINDS = ("source_files", "source_generator", "source_collection")
BODY_KINDS = ("map", "filter", "flat_map")
TRANSFORM_KINDS = BODY_KINDS + ("select", "aggregate")
SINK_KINDS = ("sink_file", "sink_print")
KNOWN_KINDS = SOURCE_KINDS + TRANSFORM_KINDS + SINK_KINDS
PARTITIONINGS = ("forward", "hash", "rebalance", "broadcast")
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max")


class JobValidationError(ValueError):
    """A submitted job is malformed; `field` names the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def dumps_payload(payload: dict[str, Any]) -> bytes:
    return cloudpickle.dumps(payload)


def loads_payload(data: bytes) -> dict[str, Any]:
    return pickle.loads(data)


@dataclasses.dataclass(frozen=True)
class Chain:
    """A task: operators run back to back in one thread, head first."""

    id: str                       # the head operator's id
    operator_ids: tuple[str, ...]
    name: str
    parallelism: int
    inputs: tuple[common_pb2.EdgeSpec, ...]   # edges into the head from other chains
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
        return (e.partitioning == "forward" and len(outs[e.source]) == 1
                and len(ins[e.target]) == 1
                and ops[e.source].parallelism == ops[e.target].parallelism)

    chains = []
    for op_id in topological_order(job):
        if len(ins[op_id]) == 1 and chainable(ins[op_id][0]):
            continue  # not a head: belongs to its upstream's chain
        members = [op_id]
        while len(outs[members[-1]]) == 1 and chainable(outs[members[-1]][0]):
            members.append(outs[members[-1]][0].target)
        chains.append(Chain(
            id=op_id, operator_ids=tuple(members),
            name=" -> ".join(ops[m].name or ops[m].kind for m in members),
            parallelism=ops[op_id].parallelism,
            inputs=tuple(ins[op_id]), outputs=tuple(outs[members[-1]])))
    return chains


def chain_of(chains: list[Chain]) -> dict[str, Chain]:
    """operator id -> the chain holding it."""
    return {op_id: c for c in chains for op_id in c.operator_ids}


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


def validate(job: common_pb2.JobGraph, check_paths: bool = True) -> dict[str, dict]:
    """Raise JobValidationError for a malformed job; return the unpickled payloads."""
    maxp = job.max_parallelism or DEFAULT_MAX_PARALLELISM
    if not 1 <= maxp <= MAX_MAX_PARALLELISM:
        raise JobValidationError("max_parallelism", f"must be in 1..{MAX_MAX_PARALLELISM}, got {maxp}")
    if not job.operators:
        raise JobValidationError("operators", "the job has no operators")
    payloads: dict[str, dict] = {}
    for i, op in enumerate(job.operators):
        where = f"operators[{i}]"
        if not op.id:
            raise JobValidationError(f"{where}.id", "must not be empty")
        if op.id in payloads:
            raise JobValidationError(f"{where}.id", f"duplicate operator id {op.id!r}")
        if op.kind not in KNOWN_KINDS:
            raise JobValidationError(f"{where}.kind", f"unknown operator {op.kind!r}; known: {', '.join(KNOWN_KINDS)}")
        if not 1 <= op.parallelism <= maxp:
            raise JobValidationError(
                f"{where}.parallelism",
                f"operator {op.name or op.id!r} has parallelism {op.parallelism}; it must be in 1..{maxp} (max_parallelism)")
        try:
            payload = loads_payload(op.payload)
        except Exception as exc:  # noqa: BLE001 — any unpickling failure is bad input
            raise JobValidationError(f"{where}.payload", f"cannot unpickle operator {op.name or op.id!r}: {type(exc).__name__}: {exc}") from None
        if not isinstance(payload, dict):
            raise JobValidationError(f"{where}.payload", "must be a pickled dict")
        _validate_payload(where, op, payload, check_paths)
        payloads[op.id] = payload

    ins: dict[str, list] = {op.id: [] for op in job.operators}
    outs: dict[str, list] = {op.id: [] for op in job.operators}
    kinds = {op.id: op.kind for op in job.operators}
    par = {op.id: op.parallelism for op in job.operators}
    for j, e in enumerate(job.edges):
        where = f"edges[{j}]"
        for end in ("source", "target"):
            if getattr(e, end) not in kinds:
                raise JobValidationError(f"{where}.{end}", f"unknown operator id {getattr(e, end)!r}")
        if e.partitioning not in PARTITIONINGS:
            raise JobValidationError(f"{where}.partitioning", f"unknown partitioning {e.partitioning!r}; known: {', '.join(PARTITIONINGS)}")
        if e.partitioning == "hash" and not e.key:
            raise JobValidationError(f"{where}.key", "a hash edge needs a key column (key_by)")
        if e.partitioning == "forward" and par[e.source] != par[e.target]:
            raise JobValidationError(
                f"{where}.partitioning",
                f"forward edge {e.source} -> {e.target} joins parallelism {par[e.source]} to {par[e.target]}; "
                "use rebalance() or key_by() between operators of different parallelism")
        ins[e.target].append(e)
        outs[e.source].append(e)
    topological_order(job)
    for i, op in enumerate(job.operators):
        where = f"operators[{i}]"
        if op.kind in SOURCE_KINDS and ins[op.id]:
            raise JobValidationError(where, f"source {op.id!r} cannot have inputs")
        if op.kind not in SOURCE_KINDS and not ins[op.id]:
            raise JobValidationError(where, f"operator {op.id!r} ({op.kind}) has no input")
        if op.kind in SINK_KINDS and outs[op.id]:
            raise JobValidationError(where, f"sink {op.id!r} cannot have outputs")
        if op.kind == "aggregate":
            key = payloads[op.id]["key"]
            if len(ins[op.id]) != 1 or ins[op.id][0].partitioning != "hash" or ins[op.id][0].key != key:
                raise JobValidationError(where, f"aggregate {op.id!r} must follow key_by({key!r})")
    if not any(kinds[o] in SINK_KINDS for o in kinds):
        raise JobValidationError("operators", "the job has no sink; add sink_to(...) or print()")
    return payloads


def positive_number(x) -> bool:
    """An int or float above 0 (not a bool): intervals such as a file source's monitor interval."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def _validate_payload(where: str, op: common_pb2.OperatorSpec, p: dict, check_paths: bool) -> None:
    if op.kind in BODY_KINDS:
        body = p.get("body")
        if not (callable(body) or (op.kind == "filter" and isinstance(body, str))):
            raise JobValidationError(f"{where}.body", f"{op.kind} body of {op.name or op.id!r} is not callable: {body!r}")
    elif op.kind == "select":
        cols = p.get("columns")
        if not cols or not all(isinstance(c, str) for c in cols):
            raise JobValidationError(f"{where}.columns", "select needs one or more SQL expressions as strings")
    elif op.kind == "source_generator":
        if not callable(p.get("body")):
            raise JobValidationError(f"{where}.body", f"generator body is not callable: {p.get('body')!r}")
        count = p.get("count")
        if count is not None and (not isinstance(count, int) or count < 0):
            raise JobValidationError(f"{where}.count", f"must be a non-negative int or None, got {count!r}")
    elif op.kind == "source_files":
        interval = p.get("monitor_interval")
        if interval is not None and not positive_number(interval):
            raise JobValidationError(f"{where}.monitor_interval",
                                     f"must be a positive number of seconds or absent, got {interval!r}")
        if not check_paths:
            return
        from sluice.storage import list_files  # local import: pyarrow is heavy
        try:
            files = list_files(p["path"], p.get("suffix", ""))
        except FileNotFoundError as exc:
            raise JobValidationError(f"{where}.path", str(exc)) from None
        if not files and interval is None:  # a monitored directory may start empty
            raise JobValidationError(f"{where}.path", f"no input files ending in {p.get('suffix')!r} under {p['path']!r}")
    elif op.kind == "aggregate":
        aggs = p.get("aggs") or {}
        if not aggs:
            raise JobValidationError(f"{where}.aggs", "an aggregate needs at least one aggregation")
        for out, (fn, _col) in aggs.items():
            if fn not in AGGREGATE_FUNCTIONS:
                raise JobValidationError(f"{where}.aggs.{out}", f"unknown aggregation {fn!r}; known: {', '.join(AGGREGATE_FUNCTIONS)}")
    elif op.kind == "sink_file":
        if not p.get("path"):
            raise JobValidationError(f"{where}.path", "a file sink needs an output path")
