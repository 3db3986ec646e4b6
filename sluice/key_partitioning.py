"""Per-key routing as an invariant of the job graph (pure; docs/savepoints.md, "Keyed edges").

An operator's output is *partitioned by key* when each of its subtasks emits the rows of its
own keys only: it reads a hash edge (a keyed aggregate, window, process function, join,
broadcast process, or a sink re-keyed here), or it reads, over forward edges only, operators
partitioned by the same key (a map after a keyed aggregate, a window's late-data side
output). Consumers such as the SQLite sink (an upsert per key) and the file sink (each key's
updates in order) rely on it: all rows of one key must reach one of their subtasks, through
one channel, in order.

A forward edge keeps that only while both ends have one parallelism. Whatever changes a
parallelism (the job API, `sluice rescale --operator`, `sluice reconfigure --operator`, a
resume at another parallelism) goes through `keep_keyed`, which makes an edge out of an
operator partitioned by key that can no longer be forward

1. a hash edge on the SQLite sink's own key columns, into a SQLite sink;
2. else a hash edge on the producer's key columns, when its output schema is known to carry
   them;
3. else (with `follow`) gives the consumer the producer's parallelism, so the edge stays
   forward; the consumer's own outputs are then looked at in turn; when the consumer cannot
   follow and a SQLite or file sink depends on the edge, the change is refused;
4. else leaves it a rebalance, which `check` refuses when the edge leads, through forward
   edges, into a SQLite or file sink, naming the edge and what to do instead.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

from sluice import graph, states
from sluice.graph import OperatorKind, Partitioning
from sluice.kinds.table import descriptor
from sluice.v1 import common_pb2

# the sinks that need each key's rows in one subtask (`keyed_sink` in their descriptors)
KEYED_SINKS = tuple(k for k in OperatorKind if descriptor(k).keyed_sink)

Keys = tuple[str, ...]


def _hash(edge: common_pb2.EdgeSpec, keys: Keys) -> None:
    edge.partitioning = cast(common_pb2.Partitioning, states.to_proto(Partitioning.HASH))
    edge.keys[:] = list(keys)


def _rebalance(edge: common_pb2.EdgeSpec) -> None:
    edge.partitioning = cast(common_pb2.Partitioning, states.to_proto(Partitioning.REBALANCE))
    del edge.keys[:]


def _inputs(job: common_pb2.JobGraph) -> dict[str, list[common_pb2.EdgeSpec]]:
    ins: dict[str, list[common_pb2.EdgeSpec]] = {op.id: [] for op in job.operators}
    for e in job.edges:
        ins[e.target].append(e)
    return ins


def partitioned_by(op_id: str, ins: dict[str, list[common_pb2.EdgeSpec]], keyed: dict[str, Keys | None]) -> Keys | None:
    """The key columns `op_id`'s output is partitioned by, from its input edges and the
    producers' own (`keyed`), or None."""
    edges = [e for e in ins[op_id] if graph.partitioning_of(e) != Partitioning.BROADCAST]
    hashed = [e for e in edges if graph.partitioning_of(e) == Partitioning.HASH]
    if hashed:
        return tuple(hashed[0].keys)
    if not edges or any(graph.partitioning_of(e) != Partitioning.FORWARD for e in edges):
        return None
    found = {keyed.get(e.source) for e in edges}
    return found.pop() if len(found) == 1 else None


def partitioning(job: common_pb2.JobGraph) -> dict[str, Keys | None]:
    """Each operator's key columns when its output is partitioned by key, else None."""
    ins = _inputs(job)
    keyed: dict[str, Keys | None] = {}
    for op_id in graph.topological_order(job):
        keyed[op_id] = partitioned_by(op_id, ins, keyed)
    return keyed


def keyed_sinks_reached(job: common_pb2.JobGraph) -> dict[str, str | None]:
    """For each operator, the first SQLite or file sink it is or reaches over forward edges
    only, or None (one pass in reverse topological order)."""
    kinds = {op.id: graph.kind_of(op) for op in job.operators}
    forward: dict[str, list[str]] = {op_id: [] for op_id in kinds}
    for e in job.edges:
        if graph.partitioning_of(e) == Partitioning.FORWARD:
            forward[e.source].append(e.target)
    reached: dict[str, str | None] = {}
    for op_id in reversed(graph.topological_order(job)):
        if kinds[op_id] in KEYED_SINKS:
            reached[op_id] = op_id
        else:
            reached[op_id] = next((r for t in forward[op_id] if (r := reached[t]) is not None), None)
    return reached


def _edge_schema(carried: dict[str, Any], edge: common_pb2.EdgeSpec, ins: dict[str, list[common_pb2.EdgeSpec]]) -> Any:
    """What the edge carries, when known: its source's output schema, or for a late-data
    side output the window's input rows."""
    if not edge.output_tag:
        return carried[edge.source]
    return carried[ins[edge.source][0].source] if ins[edge.source] else None


def keep_keyed(
    job: common_pb2.JobGraph,
    candidates: Collection[int] | None = None,
    follow: bool = False,
    fixed: Collection[str] = (),
) -> None:
    """Make, in place, every edge out of an operator partitioned by key keyed again where it
    lost that: a forward edge between different parallelisms, and a rebalance edge into a
    SQLite or file sink (or into operators forwarding to one); `candidates` (edge indexes)
    narrows that to those edges (the job API passes its default ones). With `follow`, a
    consumer that cannot be re-keyed takes its producer's parallelism, unless it is in
    `fixed` (the operators a rescale was asked for) or has other inputs. ValueError naming the
    edge when an edge that a SQLite or file sink depends on can be neither re-keyed nor kept
    forward (any other becomes a rebalance)."""
    ops = {op.id: op for op in job.operators}
    numbered: dict[str, list[int]] = {op.id: [] for op in job.operators}  # edge indexes by target
    for j, e in enumerate(job.edges):
        numbered[e.target].append(j)
    ins = {op_id: [job.edges[j] for j in idx] for op_id, idx in numbered.items()}
    keyed: dict[str, Keys | None] = {}
    carried = graph.output_schemas(job)
    sinks = keyed_sinks_reached(job)  # rebalance edges are only ever turned into hash edges here
    for op_id in graph.topological_order(job):
        for j in numbered[op_id]:
            e = job.edges[j]
            if candidates is not None and j not in candidates:
                continue
            src, dst = ops[e.source], ops[e.target]
            kind = graph.partitioning_of(e)
            uneven = kind == Partitioning.FORWARD and src.parallelism != dst.parallelism
            lost = kind == Partitioning.REBALANCE and sinks[e.target] is not None
            if not (uneven or lost):
                continue
            keys = keyed.get(e.source)
            if keys is None:
                if uneven:
                    _rebalance(e)
                continue
            rekey = _rekey(dst, carried, e, keys, ins)
            if rekey is not None:
                _hash(e, rekey)
            elif uneven and follow and op_id not in fixed and len(ins[op_id]) == 1:
                dst.parallelism = src.parallelism
            elif uneven and follow and sinks[e.target] is not None:
                raise ValueError(
                    f"edge {e.source} -> {e.target}: {e.source!r} is partitioned by key "
                    f"({', '.join(keys)}) and sink {sinks[e.target]!r} after it must get each key's rows in "
                    "one subtask, but the "
                    f"key columns are not known to be in the stream and {e.target!r} cannot follow "
                    f"{e.source!r}'s parallelism {src.parallelism}; change both together, or give "
                    f"{e.source!r} an output schema with the key columns"
                )
            elif uneven:
                _rebalance(e)  # `check` refuses it when a keyed sink depends on it
        keyed[op_id] = partitioned_by(op_id, ins, keyed)


def _rekey(
    target: common_pb2.OperatorSpec,
    carried: dict[str, Any],
    edge: common_pb2.EdgeSpec,
    keys: Keys,
    ins: dict[str, list[common_pb2.EdgeSpec]],
) -> Keys | None:
    """The columns to hash `edge` (into `target`) on so that it stays keyed, or None when none is
    known to work."""
    routing_key = descriptor(graph.kind_of(target)).routing_key  # a SQLite sink's own key
    if routing_key is not None and (key := routing_key(graph.operator_config(target))):
        return key
    schema = _edge_schema(carried, edge, ins)
    if schema is not None and all(k in schema for k in keys):
        return keys
    return None


def check(job: common_pb2.JobGraph) -> None:
    """JobValidationError for a rebalance edge out of an operator partitioned by key into a
    SQLite or file sink (or into operators forwarding to one): rows of one key would reach
    several of its subtasks, and their order would be lost."""
    keyed = partitioning(job)
    sinks = keyed_sinks_reached(job)
    for j, e in enumerate(job.edges):
        if graph.partitioning_of(e) != Partitioning.REBALANCE or keyed.get(e.source) is None:
            continue
        sink = sinks[e.target]
        if sink is None:
            continue
        keys = ", ".join(repr(k) for k in keyed[e.source] or ())
        raise graph.JobValidationError(
            f"edges[{j}].partitioning",
            f"edge {e.source} -> {e.target} rebalances the output of {e.source!r}, which is partitioned by key "
            f"({keys}), so one key's rows would reach several subtasks of sink {sink!r} out of order; "
            f"key_by({keys}) before it, or give {e.target!r} the parallelism of {e.source!r}",
        )
