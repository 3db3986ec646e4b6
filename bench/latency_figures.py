"""The figures of bench/latency_suite.py's runs: each file's latency after the warm files, percentiles
with a block-bootstrap interval of p50, per-minute summaries, capacity from a backlog drain, which runs
count, and the maximum sustainable rate at a p99 bound. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from bench_common import pct
from stats import CONFIDENCE, RESAMPLES, SEED, Estimate

SLUICE, PEER = "Sluice", "Structured Streaming"
SYSTEMS = (SLUICE, PEER)  # in the report's order
BOUNDS = (1.0, 2.0)  # s: p99 bounds of the maximum sustainable throughput
BLOCK_S = 2.0  # s of arrivals per bootstrap block


def latencies(arrival: Sequence[float], seen: dict[int, float], warm: int) -> list[tuple[float, float]]:
    """(arrival − first arrival, latency) of every file after the first `warm` whose marker was seen."""
    if not arrival:
        return []
    t0 = arrival[0]
    return [(t - t0, seen[i] - t) for i, t in enumerate(arrival) if i >= warm and i in seen]


def block_bootstrap_ci(
    samples: Sequence[float], block: int, q: float = 50, resamples: int = RESAMPLES, seed: int = SEED
) -> Estimate:
    """The q-th percentile of `samples` (in arrival order) with a block-bootstrap interval: the samples
    cut into consecutive blocks of `block`, blocks resampled with replacement (as many as there are),
    the percentile of each resample; interval = CONFIDENCE percentiles of those. One block: no interval."""
    xs = np.asarray(samples, dtype=float)
    n = len(xs)
    if n == 0:
        return Estimate(None, None, None, 0)
    value = float(np.percentile(xs, q))
    block = max(1, block)
    blocks = [xs[i : i + block] for i in range(0, n, block)]
    if len(blocks) < 2:
        return Estimate(value, None, None, n)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(blocks), size=(resamples, len(blocks)))
    stats = np.array([np.percentile(np.concatenate([blocks[k] for k in row]), q) for row in picks])
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return Estimate(value, float(low), float(high), n)


def summary(lat: Sequence[float]) -> dict:
    return {
        "n": len(lat),
        "p50": pct(lat, 50),
        "p95": pct(lat, 95),
        "p99": pct(lat, 99),
        "max": max(lat) if lat else None,
    }


def per_minute(series: Sequence[tuple[float, float]], minute: float = 60.0) -> list[dict]:
    """The latency summary of each minute of arrivals (series: (arrival offset s, latency s))."""
    buckets: dict[int, list[float]] = {}
    for t, lat in series:
        buckets.setdefault(int(t // minute), []).append(lat)
    return [{"minute": m + 1, **summary(buckets[m])} for m in sorted(buckets)]


def drain_rate(arrival: Sequence[float], seen: dict[int, float], events: int) -> float | None:
    """Capacity from a backlog drain: events / (first rename → last marker seen); None if a marker is missing."""
    if not arrival or len(seen) < len(arrival):
        return None
    span = max(seen.values()) - arrival[0]
    return events / span if span > 0 else None


def counted(run: dict) -> bool:
    """In the figures: output check passed, every marker seen, not excluded by the load rule."""
    return bool(run.get("ok")) and not run.get("excluded")


def max_sustainable(runs: Iterable[dict], bound: float) -> dict | None:
    """The counted run with the highest rate whose p99 ≤ bound (None: no such run)."""
    ok = [r for r in runs if counted(r) and r["p99"] is not None and r["p99"] <= bound]
    return max(ok, key=lambda r: r["rate"]) if ok else None
