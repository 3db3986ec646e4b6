"""The plan of the checkpoint overhead suite (bench/checkpoint_overhead.py): the state sizes, the data
set of each (every url occurs, its final count known), and the order of the runs in a block. Pure:
numpy and files only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

URL = "/page/"


@dataclass(frozen=True)
class StateSize:
    """A data set whose url count (keys of state) is `keys`: `base_files` files of `per_file` events
    each, every url at least once (when base_files * per_file >= keys), each hard-linked `copies` times."""

    name: str
    keys: int
    base_files: int
    per_file: int
    copies: int

    @property
    def events(self) -> int:
        return self.base_files * self.per_file * self.copies

    @property
    def files(self) -> int:
        return self.base_files * self.copies


# Full sizes: each run lasts ~5-10 s on the 2-core reference machine (several 1 s checkpoints).
FULL = {
    "10k": StateSize("10k", 10_000, 4, 100_000, 15),
    "1m": StateSize("1m", 1_000_000, 10, 100_000, 2),
    "5m": StateSize("5m", 5_000_000, 50, 100_000, 1),
}
QUICK = {"10k": StateSize("10k", 10_000, 2, 100_000, 5)}
FULL_BLOCKS = {"10k": 4, "1m": 4, "5m": 2}


def url_sequence(keys: int, events: int, seed: int) -> np.ndarray:
    """`events` url indices in [0, keys): random permutations of all urls, one after the other (so
    every url occurs once `events` >= `keys`, and the counts differ by at most one)."""
    rng = np.random.default_rng(seed)
    reps = -(-events // keys)
    return np.concatenate([rng.permutation(keys) for _ in range(reps)])[:events]


def make_dataset(directory: str, spec: StateSize, seed: int = 7) -> dict[str, int]:
    """The input files of `spec` under `directory`; returns the expected final count per url."""
    os.makedirs(directory, exist_ok=True)
    seq = url_sequence(spec.keys, spec.base_files * spec.per_file, seed)
    for f in range(spec.base_files):
        idx = seq[f * spec.per_file : (f + 1) * spec.per_file]
        base = f * spec.per_file
        text = "".join(
            f'{{"url": "{URL}{u}", "user": {(u * 7919) % 1_000_003}, "ts": {1_700_000_000_000 + base + i}}}\n'
            for i, u in enumerate(idx.tolist())
        )
        first = os.path.join(directory, f"events-000-{f:04d}.jsonl")
        with open(first, "w") as fh:
            fh.write(text)
        for c in range(1, spec.copies):  # the same events again, under another name
            os.link(first, os.path.join(directory, f"events-{c:03d}-{f:04d}.jsonl"))
    counts = np.bincount(seq, minlength=spec.keys) * spec.copies
    return {f"{URL}{i}": int(n) for i, n in enumerate(counts.tolist()) if n}


def block_order(intervals: Sequence[int], block: int) -> list[int]:
    """The runs of one block: 0 (checkpoints off) and every interval. Even blocks: off first, then the
    intervals rotated by block // 2; odd blocks: the previous block's order reversed.

    (Not bench/run_matrix.py's orders: its Order.REVERSE reverses the items every other round but
    never turns them, and its Order.ROTATE turns the systems by round + item, not the items by
    round // 2 behind a fixed first run.)"""
    if block % 2:
        return list(reversed(block_order(intervals, block - 1)))
    k = (block // 2) % len(intervals) if intervals else 0
    return [0, *intervals[k:], *intervals[:k]]


def parse_blocks(text: str) -> dict[str, int]:
    """--blocks: `10k=4,1m=3` -> {"10k": 4, "1m": 3} (names lower-cased)."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, n = item.partition("=")
        out[name.strip().lower()] = int(n)
    return out
