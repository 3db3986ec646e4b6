"""Pipelined regions and the regions a failure restarts (a pure core: chains, edges and
subtasks in, regions out; no clock, no I/O).

A **pipelined region** is a set of subtasks connected by pipelined exchanges: data flows
between them while they run, so they must be deployed together and, when one fails,
restarted together. A blocking exchange (a batch job's result written to files before
its consumers start) cuts regions apart: its consumers start once it is complete and can
read it again after a failure.

Inside a job, subtasks are connected per edge:
- pointwise (`forward` between chains): producer subtask i feeds the consumer subtasks
  its share of the consumer's parallelism maps to (i -> i when both are equal);
- all-to-all (`hash`, `rebalance`, `broadcast`): every producer subtask feeds every
  consumer subtask.

A streaming job whose edges are all pipelined has one region per connected component:
an embarrassingly parallel job (sources and forward edges only) has one region per
subtask index, a job with a `key_by` one region for everything across it.

:func:`regions_to_restart` answers the failover question: the failed subtask's region,
every region consuming a blocking result of a region that restarts (its input is produced
again), and every region producing a blocking result a restarting region needs but that
is no longer available (its files were on a lost TaskManager: backtracking).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

Subtask = tuple[str, int]  # (chain id, subtask index)
Region = frozenset[Subtask]


@dataclasses.dataclass(frozen=True)
class RegionEdge:
    producer: str  # chain id
    consumer: str  # chain id
    pointwise: bool  # forward; False: all-to-all (hash, rebalance, broadcast)
    blocking: bool  # the producer's result is complete before its consumers read it


def pointwise_targets(producer_parallelism: int, consumer_parallelism: int, subtask: int) -> range:
    """Consumer subtasks that producer `subtask` feeds over a pointwise edge: each producer
    subtask owns an even share of the consumers (or shares one, when it has more subtasks)."""
    if producer_parallelism <= consumer_parallelism:
        start = subtask * consumer_parallelism // producer_parallelism
        end = (subtask + 1) * consumer_parallelism // producer_parallelism
        return range(start, max(end, start + 1))
    target = subtask * consumer_parallelism // producer_parallelism
    return range(target, target + 1)


class _UnionFind:
    def __init__(self, items: Iterable[Subtask]) -> None:
        self.parent: dict[Subtask, Subtask] = {i: i for i in items}

    def find(self, item: Subtask) -> Subtask:
        root = item
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:  # path compression
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: Subtask, b: Subtask) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _check(parallelism: Mapping[str, int], edges: Sequence[RegionEdge]) -> None:
    for chain, p in parallelism.items():
        if p < 1:
            raise ValueError(f"chain {chain!r}: parallelism must be >= 1, got {p}")
    for e in edges:
        for end in (e.producer, e.consumer):
            if end not in parallelism:
                raise ValueError(f"edge {e.producer!r} -> {e.consumer!r}: unknown chain {end!r}")


def pipelined_regions(parallelism: Mapping[str, int], edges: Sequence[RegionEdge]) -> list[Region]:
    """The job's pipelined regions, ordered by their first subtask in `parallelism`'s order
    (chains in topological order give regions in the order they can be scheduled)."""
    _check(parallelism, edges)
    order = [(chain, i) for chain, p in parallelism.items() for i in range(p)]
    uf = _UnionFind(order)
    for e in edges:
        if e.blocking:
            continue
        pp, pc = parallelism[e.producer], parallelism[e.consumer]
        if e.pointwise:
            for i in range(pp):
                for j in pointwise_targets(pp, pc, i):
                    uf.union((e.producer, i), (e.consumer, j))
        else:  # all-to-all: one component spans both chains entirely
            first = (e.producer, 0)
            for i in range(pp):
                uf.union(first, (e.producer, i))
            for j in range(pc):
                uf.union(first, (e.consumer, j))
    members: dict[Subtask, list[Subtask]] = {}
    for v in order:
        members.setdefault(uf.find(v), []).append(v)
    position = {v: n for n, v in enumerate(order)}
    return sorted((frozenset(m) for m in members.values()), key=lambda r: min(position[v] for v in r))


def region_of(regions: Sequence[Region], subtask: Subtask) -> Region:
    for r in regions:
        if subtask in r:
            return r
    raise ValueError(f"subtask {subtask} is in no region")


def blocking_neighbours(
    parallelism: Mapping[str, int], edges: Sequence[RegionEdge], subtask: Subtask, downstream: bool
) -> set[Subtask]:
    """Subtasks across blocking edges from `subtask`: its consumers (downstream) or its producers."""
    chain, i = subtask
    out: set[Subtask] = set()
    for e in edges:
        if not e.blocking or (e.producer if downstream else e.consumer) != chain:
            continue
        pp, pc = parallelism[e.producer], parallelism[e.consumer]
        if downstream:
            targets = pointwise_targets(pp, pc, i) if e.pointwise else range(pc)
            out.update((e.consumer, j) for j in targets)
        else:
            sources = [p for p in range(pp) if i in pointwise_targets(pp, pc, p)] if e.pointwise else range(pp)
            out.update((e.producer, p) for p in sources)
    return out


def regions_to_restart(
    parallelism: Mapping[str, int],
    edges: Sequence[RegionEdge],
    failed: Subtask,
    unavailable: Iterable[Subtask] = (),
) -> list[Region]:
    """The regions that restart when `failed` fails, in scheduling order.

    `unavailable`: producer subtasks whose blocking results are gone (e.g. their TaskManager
    died); a restarting region that reads one restarts its producer's region too."""
    regions = pipelined_regions(parallelism, edges)
    lost = set(unavailable)
    restart: list[Region] = []
    todo = [region_of(regions, failed)]
    while todo:
        region = todo.pop()
        if region in restart:
            continue
        restart.append(region)
        for v in region:
            for consumer in blocking_neighbours(parallelism, edges, v, downstream=True):
                todo.append(region_of(regions, consumer))  # its input is produced again
            for producer in blocking_neighbours(parallelism, edges, v, downstream=False):
                if producer in lost:
                    todo.append(region_of(regions, producer))  # backtracking: produce it again
    index = {r: n for n, r in enumerate(regions)}
    return sorted(restart, key=lambda r: index[r])
