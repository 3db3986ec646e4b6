"""Key groups: the one place that maps keys to key groups and key groups to
subtasks (Flink's KeyGroupRangeAssignment).

A key belongs to key group ``pmod(xxhash64(key), max_parallelism)``, computed
inside Spark so that every process and run agrees. Key group ``kg`` belongs to
operator subtask ``kg * parallelism // max_parallelism``, so each subtask owns
one contiguous range of key groups (``key_group_range``). Keyed state is
written with its key group per row (column ``KEY_GROUP``) and tagged with the
writer's range, so a restore at another parallelism reads the overlapping
ranges (sluice/checkpoints/storage.py).

Writers and readers of keys and keyed state use this module only: the
producer side of a hash exchange (taskmanager/network/record_writer.py), the
keyed operators (taskmanager/operators/keyed_aggregate.py), the task that
writes and restores their state (taskmanager/task.py) and checkpoint storage.
It imports neither pyspark nor pyarrow at module import (both are taken inside
the functions that need them), so the JobManager can use it too.
"""

from __future__ import annotations

from typing import Any

KEY_GROUP = "__kg"  # column holding a row's key group (int32), in exchanged batches and keyed state


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> tuple[int, int]:
    """The contiguous key groups ``[lo, hi]`` owned by `subtask` of `parallelism` (inclusive)."""
    _check(parallelism, max_parallelism)
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} out of range for parallelism {parallelism}")
    lo = (subtask * max_parallelism + parallelism - 1) // parallelism
    hi = ((subtask + 1) * max_parallelism + parallelism - 1) // parallelism - 1
    return lo, hi


def owner(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The subtask (operator index) that owns `key_group`."""
    return key_group * parallelism // max_parallelism


def owners(key_groups: Any, parallelism: int, max_parallelism: int) -> Any:
    """``owner`` of each key group of an Arrow array or column (an int64 array)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.divide(pc.multiply(key_groups.cast(pa.int64()), parallelism), max_parallelism)


def spark_key_group(key_column: str, max_parallelism: int) -> Any:
    """The Spark column computing the key group of `key_column`, named ``KEY_GROUP`` (int)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(F.col(key_column)), F.lit(max_parallelism)).cast("int").alias(KEY_GROUP)


def _check(parallelism: int, max_parallelism: int) -> None:
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism {parallelism} must be in 1..{max_parallelism} (max_parallelism)")
