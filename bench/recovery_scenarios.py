"""The recovery suite's scenarios (bench/recovery_suite.py): their names, what each kills, the job's
settings both systems share, and the order the runs are made in. Pure.

Runs alternate between the systems in every round and the scenarios of a phase are reversed every
other round (bench/run_matrix.py, `Order.REVERSE`): phase (a) S-spare P S-nospare, then S-nospare P
S-spare, ...; phase (b) S P, then P S, ... Phase (b) follows phase (a), after a STOP_A step that
stops phase (a)'s clusters.
"""

from __future__ import annotations

from run_matrix import Order, items_only

PARALLELISM = 2  # the job's (Sluice) and the shuffle partitions (peer)
CHECKPOINT_MS = 500
SPARE, NOSPARE, EXECUTOR, APP, DRIVER = "sluice-spare", "sluice-nospare", "peer-executor", "sluice-app", "peer-driver"
SCENARIOS: dict[str, tuple[str, str, str]] = {  # name -> (scenario, system, what is killed and what restarts)
    SPARE: ("a", "Sluice", "TaskManager of source #0 (process group, its Spark JVM too); warm spare running"),
    NOSPARE: ("a", "Sluice", "TaskManager of source #0 (process group); no spare: the supervisor restarts it"),
    EXECUTOR: ("a", "Spark", "one executor JVM of 2 (standalone, 2 workers x 2 cores); the worker relaunches it"),
    APP: ("b", "Sluice", "JobManager, TaskManagers, supervisor (SIGKILL at once); cluster restarted, job recovered"),
    DRIVER: ("b", "Spark", "the driver's process group (Python + local[4] JVM); a new driver on the checkpoint"),
}
PHASES = {"a": (SPARE, EXECUTOR, NOSPARE), "b": (APP, DRIVER)}  # a round's runs, in the order of an even round
STOP_A = "stop-a"  # the step between the phases: phase (b) runs without phase (a)'s idle clusters


def schedule(rounds: int, phase: str) -> list[str]:
    """One phase's runs in order: its scenarios each round, reversed every other round."""
    return items_only(PHASES[phase], rounds, Order.REVERSE)


def plan(phases: str, rounds: int) -> list[str]:
    """Every step of an invocation (`phases`: "ab", "a" or "b"): phase (a)'s runs, then STOP_A and
    phase (b)'s runs."""
    steps = schedule(rounds, "a") if "a" in phases else []
    return steps + ([STOP_A, *schedule(rounds, "b")] if "b" in phases else [])


def system(kind: str) -> str:
    """The system a run measures, as the resource meter names it: "sluice" or "spark"."""
    return "sluice" if kind.startswith("sluice") else "spark"
