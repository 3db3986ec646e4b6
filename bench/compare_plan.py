"""What one bench/compare.py invocation runs, and in which order (pure): the two sizes, the checkpoint
intervals, the fixed input rate of the latency runs, and the order of Sluice's throughput jobs on its
warm cluster (bench/run_matrix.py: the checkpoint modes "on" and "off" take turns, the mode that goes
first turned every round).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from run_matrix import Order, matrix

SIZES: dict[str, dict[str, Any]] = {
    "quick": dict(
        events=200_000,
        files=16,
        runs=3,
        recovery_events=1_600_000,
        recovery_files=160,
        recovery_runs=1,
        failover_runs=1,
        mfpt=4,
        recovery_mfpt=4,
        short_runs=1,
        warmups=4,
        overhead_events=None,
        overhead_files=None,
        paced_files=0,
    ),
    "full": dict(
        events=2_000_000,
        files=40,
        runs=5,
        recovery_events=2_000_000,
        recovery_files=400,
        recovery_runs=3,
        failover_runs=3,
        mfpt=8,
        recovery_mfpt=4,
        short_runs=3,
        warmups=6,
        overhead_events=6_000_000,
        overhead_files=120,
        paced_files=60,
    ),
}
INTERVAL = 1000  # ms between Sluice checkpoints
SHORT_INTERVAL = 250  # ms: the same job with shorter checkpoints, for what latency costs in throughput
PARALLELISM = 2
PACED_RATE = 4.0  # files per second into the watched directory (fixed-rate latency)
PACED_EVENTS_PER_FILE = 25_000  # so 100,000 events/s: well below both systems' capacity
MODES = {"on": INTERVAL, "off": 0}  # the checkpoint modes the throughput runs alternate


class SluiceJob(NamedTuple):
    """One throughput job on the warm cluster: its result list (`group`), label, checkpoint
    interval (ms, 0: off) and input."""

    group: str
    label: str
    interval: int
    input: str


def on_off(runs: int, group: str, label: str, input_: str) -> list[SluiceJob]:
    """`runs` rounds of one job with checkpoints on and one with them off, on first in odd rounds."""
    return [
        SluiceJob(group, f"{label} {c.round}", MODES[c.system], input_)
        for c in matrix(list(MODES), [input_], runs, systems_order=Order.ROTATE)
    ]


def sluice_jobs(warmups: int, runs: int, short_runs: int, overhead: bool) -> list[SluiceJob]:
    """Sluice's throughput jobs in run order: the warm-ups (on, off, on, ...: the JVMs' JIT keeps
    speeding jobs up over the first few, so both modes warm up alike), the measured on/off rounds, the
    jobs with short checkpoints, and with `overhead` the longer on/off jobs of the checkpoint overhead
    (several checkpoints each)."""
    warm = matrix(list(MODES), ["warm-up"], -(-warmups // 2))[:warmups]
    jobs = [SluiceJob("warmup", f"warm-up {i}", MODES[c.system], "throughput") for i, c in enumerate(warm, 1)]
    jobs += on_off(runs, "runs", "run", "throughput")
    jobs += [SluiceJob("short", f"short {i}", SHORT_INTERVAL, "throughput") for i in range(1, short_runs + 1)]
    return jobs + (on_off(runs, "overhead", "overhead", "overhead") if overhead else [])
