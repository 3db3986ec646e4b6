"""How the benchmark reports turn runs into figures: medians with a bootstrap
95 % confidence interval, and the load rule that leaves runs out of them.

- `median_ci(values)`: the median and a percentile-bootstrap interval (the
  runs resampled with replacement RESAMPLES times, the median of each
  resample, the 2.5th and 97.5th percentiles of those medians). The seed is
  fixed, so the same runs give the same interval in every report.
- The load rule: each run records the machine's 1-minute load average when it
  starts and when it ends (`load1()`); a run whose load exceeded the threshold
  at either end is marked and left out of every median (`apply_load_rule`),
  and the report says how many runs were left out and why (`load_rule_text`).
- `valid(runs)`, `kept(runs)`, `est(runs, key)`: the runs that count
  (completed, output checked, a window taken), those of them the load rule
  kept, and the median and interval of `key` over those.

bench/README.md ("How the figures are computed") says how to read them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 20261123  # fixed: a report's intervals are reproducible from its runs
LOAD_FACTOR = 2.0  # default threshold: cores x LOAD_FACTOR (bench/README.md, "How the figures are computed")
NO_VALID_RUNS = "no valid runs"


@dataclass(frozen=True)
class Estimate:
    """A median over `n` runs with its confidence interval (low, high: None below 2 runs);
    `excluded`: runs left out by the load rule."""

    median: float | None
    low: float | None
    high: float | None
    n: int
    excluded: int = 0


def median_ci(
    values: Iterable[float | None],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    excluded: int = 0,
) -> Estimate:
    """The median of `values` (None ignored) and its percentile-bootstrap interval."""
    xs = np.array([v for v in values if v is not None], dtype=float)
    n = len(xs)
    if n == 0:
        return Estimate(None, None, None, 0, excluded)
    med = float(np.median(xs))
    if n == 1:
        return Estimate(med, None, None, 1, excluded)
    rng = np.random.default_rng(seed)
    medians = np.median(xs[rng.integers(0, n, size=(resamples, n))], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return Estimate(med, float(low), float(high), n, excluded)


def fmt_estimate(est: Estimate, spec: str = ",.0f") -> str:
    """`154,440 [148,020–160,310]`; one run: `154,440 (1 run, no interval)`; every run left out by the
    load rule: `no valid runs (3 left out by the load rule)`; no run at all: `—`."""
    if est.n == 0 or est.median is None:
        return f"{NO_VALID_RUNS} ({est.excluded} left out by the load rule)" if est.excluded else "—"
    if est.low is None or est.high is None:
        return f"{format(est.median, spec)} (1 run, no interval)"
    return f"{format(est.median, spec)} [{format(est.low, spec)}–{format(est.high, spec)}]"


# -- the load rule ---------------------------------------------------------------------------------------
def load1() -> float:
    """The machine's 1-minute load average now."""
    return os.getloadavg()[0]


def default_load_threshold(cores: int | None = None) -> float:
    return (cores or os.cpu_count() or 1) * LOAD_FACTOR


def run_load(run: dict) -> float | None:
    """The higher of a run's load at start and at end (None: not recorded)."""
    loads = [run.get("load_start"), run.get("load_end")]
    known = [x for x in loads if x is not None]
    return max(known) if known else None


def over_threshold(run: dict, threshold: float | None) -> bool:
    load = run_load(run)
    return threshold is not None and load is not None and load > threshold


def apply_load_rule(runs: Iterable[dict], threshold: float | None) -> list[dict]:
    """Mark each run (`excluded`: True when its load exceeded `threshold`); returns the runs that stay."""
    kept = []
    for r in runs:
        r["excluded"] = over_threshold(r, threshold)
        if not r["excluded"]:
            kept.append(r)
    return kept


def estimate(runs: Sequence[dict], value: str | Callable[[dict], float | None]) -> Estimate:
    """The median and interval of `value` over the runs the load rule kept (marked by
    `apply_load_rule`; unmarked runs count as kept); runs without a value are ignored."""
    get = value if callable(value) else (lambda r: r.get(value))
    kept = [r for r in runs if not r.get("excluded")]
    return median_ci((get(r) for r in kept), excluded=len(runs) - len(kept))


def valid(runs: Iterable[dict]) -> list[dict]:
    """Runs that count: completed, output exactly once, a window taken (the load rule is applied through
    each run's `excluded`)."""
    return [r for r in runs if r.get("ok")]


def kept(runs: Iterable[dict]) -> list[dict]:
    """The valid runs the load rule kept."""
    return [r for r in valid(runs) if not r.get("excluded")]


def est(runs: Sequence[dict], key: str) -> Estimate:
    """The median and interval of `key` over the valid runs the load rule kept."""
    return estimate(valid(runs), key)


def fmt_load(run: dict) -> str:
    """`2.10→2.45`, marked when the run was left out."""
    a, b = run.get("load_start"), run.get("load_end")
    text = f"{'—' if a is None else format(a, '.2f')}→{'—' if b is None else format(b, '.2f')}"
    return text + " (excluded)" if run.get("excluded") else text


def load_rule_text(threshold: float | None, groups: Sequence[tuple[str, Sequence[dict]]]) -> str:
    """One sentence: the threshold and, per group of runs, how many the rule left out."""
    if threshold is None:
        return "Load rule: off (every run counted)."
    parts = [
        f"{name} {sum(1 for r in runs if r.get('excluded'))} of {len(runs)}"
        for name, runs in groups
        if runs and any(r.get("excluded") for r in runs)
    ]
    head = (
        f"Load rule: a run whose 1-minute load average at its start or end exceeded {threshold:g} is left out of "
        "every median and interval (marked *excluded* in the tables)"
    )
    return head + (": " + "; ".join(parts) + " left out." if parts else "; no run exceeded it.")
