"""What a live reconfiguration changes, computed from the job graph alone (pure).

The unit is the task (chain) holding the operator: an operator rescaled live takes those
chained with it along, so that the job's chains keep their shape. Tasks:

- *redeployed*: that chain and every chain downstream of it. Each of their subtasks stops
  at the reconfiguration barrier (its state is in that checkpoint) and a new subtask is
  deployed from the checkpoint in the new configuration (state moved by key group).
- *switched*: the chains outside that set with an edge into it. They keep running: at the
  barrier they end their old output partitions and write on into new ones, routed to the
  new subtasks.
- every other task is not touched at all.

A source task cannot be redeployed live (nothing upstream could hold its input across the
switch): that is refused with a clear error, as is a parallelism above the slots the job
holds (the new subtasks are deployed into them). So the sources always keep running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sluice import graph, key_groups
from sluice.v1 import common_pb2

PARALLELISM = "parallelism"
FUNCTION = "function"
REBALANCE = "rebalance-keys"


class ReconfigurationError(ValueError):
    """A reconfiguration that cannot be made; the message says why and what to do instead."""


@dataclasses.dataclass(frozen=True)
class Plan:
    kind: str
    operator: str  # the operator's uid
    chain: str  # the chain holding it
    parallelism: int  # that chain's parallelism after the change
    new_job: common_pb2.JobGraph
    redeployed: tuple[str, ...]  # chain ids, in topological order
    switched: tuple[str, ...]  # chain ids
    moved: tuple[int, ...] = ()  # rebalance-keys: the key groups moved
    from_subtask: int = -1  # rebalance-keys: moved from this subtask (the busiest) ...
    to_subtask: int = -1  # ... to this one (the idlest)


def make_plan(
    job: common_pb2.JobGraph,
    operator: str,
    parallelism: int = 0,
    new_job: common_pb2.JobGraph | None = None,
    slots: int | None = None,
    key_group_load: Mapping[int, int] | None = None,
) -> Plan:
    """The plan for `operator` at `parallelism` (> 0), or with its settings from the operator
    of the same id in `new_job`, or (`key_group_load`: input rows per key group of its task)
    with key groups moved from its busiest subtask to its idlest; `slots`: how many slots the
    job holds (default: what it needs)."""
    ops = {op.id: op for op in job.operators}
    if operator not in ops:
        raise ReconfigurationError(f"the job has no operator with uid {operator!r}; its operators: {', '.join(ops)}")
    if sum((parallelism > 0, new_job is not None, key_group_load is not None)) != 1:
        raise ReconfigurationError("give one of a new parallelism, a new job file or --rebalance-keys")
    chains = graph.build_chains(job)
    chain = graph.chain_of(chains)[operator]
    held = slots if slots is not None else graph.slots_required(job)
    moved: tuple[int, ...] = ()
    busiest = idlest = -1
    if key_group_load is not None:
        kind = REBALANCE
        head = ops[chain.operator_ids[0]]
        keyed = [e for e in job.edges if e.target == head.id and graph.partitioning_of(e) == graph.Partitioning.HASH]
        if not keyed:
            raise ReconfigurationError(
                f"operator {operator!r} does not run behind a key_by: it has no key groups to move"
            )
        maxp = job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
        current = graph.key_group_owners(job, chain.id) or key_groups.default_table(chain.parallelism, maxp)
        table, busiest, idlest, moved = rebalance(current, chain.parallelism, key_group_load)
        if not moved:
            raise ReconfigurationError(
                f"no key group of subtask {busiest} can move to subtask {idlest} and even out their input "
                f"({_loads_text(current, chain.parallelism, key_group_load)}): the load is even, or one key group "
                "carries it"
            )
        target = common_pb2.JobGraph()
        target.CopyFrom(job)
        target.key_group_owners[chain.id].owners[:] = table
    elif parallelism > 0:
        kind = PARALLELISM
        maxp = job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
        if not 1 <= parallelism <= maxp:
            raise ReconfigurationError(f"parallelism must be between 1 and the job's max parallelism {maxp}")
        if parallelism > held:
            raise ReconfigurationError(
                f"parallelism {parallelism} needs {parallelism} slots and the job holds {held}: "
                "live reconfiguration deploys into the job's slots; `sluice rescale` can take more"
            )
        if parallelism == chain.parallelism:
            raise ReconfigurationError(f"operator {operator!r} already runs at parallelism {parallelism}")
        target = graph.rescaled(job, parallelism, members=chain.operator_ids)
    else:
        assert new_job is not None
        kind = FUNCTION
        replacement = next((op for op in new_job.operators if op.id == operator), None)
        if replacement is None:
            raise ReconfigurationError(
                f"the new job has no operator with uid {operator!r}: give the new version's operator "
                f"the same uid (DataStream.uid) as the running one"
            )
        old = ops[operator]
        if replacement.kind != old.kind:
            raise ReconfigurationError(
                f"operator {operator!r} is of kind {graph.kind_of(old)} and the new one of kind "
                f"{graph.kind_of(replacement)}: only its function may change live"
            )
        target = common_pb2.JobGraph()
        target.CopyFrom(job)
        op = next(o for o in target.operators if o.id == operator)
        op.config, op.output_schema = replacement.config, replacement.output_schema
        op.ClearField("code")
        op.code.update(replacement.code)
    graph.validate(target)  # raises JobValidationError naming what the change broke
    new_chains = graph.build_chains(target)
    if [(c.id, c.operator_ids) for c in new_chains] != [(c.id, c.operator_ids) for c in chains]:
        raise ReconfigurationError(
            f"the change would regroup the job's tasks around {operator!r}; use `sluice rescale`"
        )
    if graph.kind_of(ops[chain.operator_ids[0]]) in graph.SOURCE_KINDS:
        raise ReconfigurationError(
            f"operator {operator!r} runs in a source task ({chain.name!r}), which cannot be redeployed live; "
            "use `sluice rescale` (stop with a savepoint, then resume)"
        )
    redeployed = downstream_closure(job, chains, chain.id)  # never a source task: some task keeps running
    of = graph.chain_of(chains)
    inside = set(redeployed)
    switched = sorted(
        {of[e.source].id for e in job.edges if of[e.target].id in inside and of[e.source].id not in inside}
    )
    new_par = parallelism if parallelism > 0 else chain.parallelism
    return Plan(kind, operator, chain.id, new_par, target, tuple(redeployed), tuple(switched), moved, busiest, idlest)


def rebalance(
    owners: Sequence[int], parallelism: int, load: Mapping[int, int]
) -> tuple[list[int], int, int, tuple[int, ...]]:
    """Key groups moved from the busiest subtask to the idlest, each move the one that evens
    their loads most, as long as a move lowers the larger of the two (pure). Returns the new
    owner table, the busiest and idlest subtasks, and the key groups moved."""
    table = list(owners)
    totals = [0] * parallelism
    for kg, n in load.items():
        if 0 <= kg < len(table):
            totals[table[kg]] += n
    busiest = max(range(parallelism), key=lambda s: (totals[s], -s))
    idlest = min(range(parallelism), key=lambda s: (totals[s], s))
    moved: list[int] = []
    while True:
        gap = totals[busiest] - totals[idlest]
        candidates = [kg for kg, s in enumerate(table) if s == busiest and 0 < load.get(kg, 0) < gap]
        if not candidates:
            break
        kg = min(candidates, key=lambda k: (abs(load[k] - gap / 2), k))
        table[kg] = idlest
        totals[busiest] -= load[kg]
        totals[idlest] += load[kg]
        moved.append(kg)
    return table, busiest, idlest, tuple(sorted(moved))


def _loads_text(owners: Sequence[int], parallelism: int, load: Mapping[int, int]) -> str:
    totals = [0] * parallelism
    for kg, n in load.items():
        if 0 <= kg < len(owners):
            totals[owners[kg]] += n
    return ", ".join(f"subtask {s}: {n} rows" for s, n in enumerate(totals))


def downstream_closure(job: common_pb2.JobGraph, chains: list[graph.Chain], start: str) -> list[str]:
    """Chain `start` and every chain reachable from it, in the order of `chains`."""
    of = graph.chain_of(chains)
    succ: dict[str, set[str]] = {c.id: set() for c in chains}
    for e in job.edges:
        if of[e.source].id != of[e.target].id:
            succ[of[e.source].id].add(of[e.target].id)
    seen, todo = {start}, [start]
    while todo:
        for nxt in succ[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return [c.id for c in chains if c.id in seen]
