"""The plan of bench/throughput_suite.py, pure: the configurations of both systems (the sweep grid and
the matched pair at 2 task threads), the order of each phase's runs (bench/run_matrix.py), the
choice of the best and the matched configurations from the sweep's runs, and the input sizes.

The orders, all alternating the two systems so that a drift of the machine falls on both:

- sweep: each system's configurations round-robin (every one, then all again in reverse order),
  one Sluice cluster at a time, its runs spread among an equal share of the peer's;
- headline: the pairs' configurations (one Sluice, one peer, interleaved), forward and backward
  round by round: S P | P S | S P ...;
- sizes: the sizes forward and backward round by round, Sluice first at every size of the odd
  rounds (1st, 3rd ...), the peer first at every size of the even ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from run_matrix import Order, interleave, items_only, matrix
from stats import est

CHUNK_EVENTS = 100_000  # events per generated chunk (bench/throughput_workload.py); sizes are multiples of it
SWEEP_MFPT = (0, 40, 20, 8)  # maxFilesPerTrigger; 0: unset
SWEEP_SHUFFLE = (1, 2, 4)
SWEEP_MASTERS = (2, 4)  # local[n]
SWEEP_SLUICE = ((1, 2, 2), (2, 1, 2), (2, 2, 2), (2, 2, 4))  # (TaskManagers, slots, parallelism)
SLUICE, PEER = "Sluice", "peer"
WARM_UP, SWEEP, HEADLINE = "warm-up", "sweep", "headline"  # run phases; a size sweep's: "size <events>"


@dataclass(frozen=True)
class SluiceConfig:
    taskmanagers: int
    slots: int
    parallelism: int
    options: tuple[tuple[str, str], ...] = ()  # job options (`-D key=value`) of its runs

    system = SLUICE

    @property
    def threads(self) -> int:
        """Spark task threads in all: each TaskManager's Spark runs local[slots]."""
        return self.taskmanagers * self.slots

    @property
    def label(self) -> str:
        options = "".join(f", {key}={value}" for key, value in self.options)
        return f"{self.taskmanagers} TM x {self.slots} slots, p={self.parallelism}{options}"

    @property
    def cluster_key(self) -> tuple[int, int]:
        return (self.taskmanagers, self.slots)


@dataclass(frozen=True)
class PeerConfig:
    master: int  # local[n]
    mfpt: int  # maxFilesPerTrigger; 0: unset
    shuffle: int

    system = PEER

    @property
    def threads(self) -> int:
        return self.master

    @property
    def label(self) -> str:
        return f"local[{self.master}], maxFilesPerTrigger {self.mfpt or 'unset'}, shuffle {self.shuffle}"


Config = SluiceConfig | PeerConfig
C = TypeVar("C", SluiceConfig, PeerConfig)
Pair = tuple[SluiceConfig, PeerConfig, str]  # (Sluice's configuration, the peer's, the pair's name)

# the matched pair at 2 Spark task threads: the quick headline, and each system's fallback
MATCHED_SLUICE, MATCHED_PEER = SluiceConfig(1, 2, 2), PeerConfig(2, 0, 2)


def sweep_configs() -> tuple[list[SluiceConfig], list[PeerConfig]]:
    sluice = [SluiceConfig(*c) for c in SWEEP_SLUICE if c[2] <= c[0] * c[1]]
    peer = [PeerConfig(m, f, s) for m in SWEEP_MASTERS for f in SWEEP_MFPT for s in SWEEP_SHUFFLE]
    return sluice, peer


# ------------------------------------------------------------------------------------------------
# orders
# ------------------------------------------------------------------------------------------------
def sweep_order(
    sluice_cfgs: Sequence[SluiceConfig], peer_cfgs: Sequence[PeerConfig], runs: int
) -> list[tuple[tuple[int, int], list[Config]]]:
    """The sweep's runs, per Sluice cluster (TaskManagers, slots) in the order the configurations
    name them: that cluster's configurations round-robin, spread among an equal share of the peer's
    round-robin runs (every peer run falls in one cluster's share)."""
    peer_order = items_only(peer_cfgs, runs, Order.REVERSE)
    clusters = list(dict.fromkeys(c.cluster_key for c in sluice_cfgs))
    share = math.ceil(len(peer_order) / len(clusters))
    out: list[tuple[tuple[int, int], list[Config]]] = []
    for ci, key in enumerate(clusters):
        mine = items_only([c for c in sluice_cfgs if c.cluster_key == key], runs, Order.REVERSE)
        order: list[Config] = interleave(mine, peer_order[ci * share : (ci + 1) * share])
        out.append((key, order))
    return out


def headline_order(pairs: Sequence[Pair], runs: int) -> list[Config]:
    """`runs` runs of every configuration of the pairs (a configuration in two pairs runs once for
    both), the systems interleaved, forward and backward round by round: S P (P) | (P) P S | ..."""
    sluice = list(dict.fromkeys(p[0] for p in pairs))
    peer = list(dict.fromkeys(p[1] for p in pairs))
    order: list[Config] = interleave(sluice, peer)
    return items_only(order, runs, Order.REVERSE)


def size_order(sizes: Sequence[int], runs: int) -> list[tuple[int, str]]:
    """(events, system) per run: the sizes forward and backward round by round, at every size of a
    round both systems, Sluice first in the odd rounds and the peer first in the even ones."""
    cells = matrix([SLUICE, PEER], sizes, runs, items_order=Order.REVERSE, systems_order=Order.ALTERNATE)
    return [(c.item, c.system) for c in cells]


# ------------------------------------------------------------------------------------------------
# the best and the matched configurations
# ------------------------------------------------------------------------------------------------
def best_config(runs: Sequence[dict], configs: Sequence[C]) -> C | None:
    """The configuration with the highest median events/s over its kept runs."""
    scored = []
    for c in configs:
        e = est([r for r in runs if r["config"] == c], "rate")
        if e.median is not None:
            scored.append((e.median, c))
    return max(scored, key=lambda x: x[0])[1] if scored else None


def best_with_threads(runs: Sequence[dict], configs: Sequence[C], threads: int) -> C | None:
    return best_config(runs, [c for c in configs if c.threads == threads])


def headline_pairs(
    sweep: Sequence[dict], sluice_cfgs: Sequence[SluiceConfig], peer_cfgs: Sequence[PeerConfig], threads: int
) -> list[Pair]:
    """The headline's pairs from the sweep's runs: each system's best configuration ("best"), and
    the best of each at `threads` task threads ("matched"); one pair "best = matched" when they are
    the same. A system with no kept run falls back to the matched pair at 2 threads."""
    best_s = best_config(sweep, sluice_cfgs) or MATCHED_SLUICE
    best_p = best_config(sweep, peer_cfgs) or MATCHED_PEER
    m_s = best_with_threads(sweep, sluice_cfgs, threads) or MATCHED_SLUICE
    m_p = best_with_threads(sweep, peer_cfgs, threads) or MATCHED_PEER
    if (best_s, best_p) == (m_s, m_p):
        return [(best_s, best_p, "best = matched")]
    return [(best_s, best_p, "best"), (m_s, m_p, "matched")]


def parse_sizes(text: str) -> list[int]:
    """'0.5,2,8' (millions of events) -> [500000, 2000000, 8000000]."""
    sizes = [round(float(x) * 1e6) for x in text.split(",") if x.strip()]
    for s in sizes:
        if s <= 0 or s % CHUNK_EVENTS:
            raise ValueError(f"a size is a multiple of {CHUNK_EVENTS / 1e6:g} M events, got {s / 1e6:g} M")
    return sizes
