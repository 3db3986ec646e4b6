"""Where keyed state lives: the state backend of a job (docs/state-backends.md).

`state.backend` (sluice/job_options.py) picks one per job:

* `memory` (the default): Python dicts on the task's heap; a snapshot copies the whole
  state into an Arrow table (taskmanager/state/memory_backend.py).
* `rocksdb`: one embedded RocksDB per (task, operator) under the TaskManager's working
  directory; a snapshot is a RocksDB checkpoint (hard links) uploaded off the task thread,
  incrementally when `state.backend.incremental` is true (taskmanager/state/rocksdb_backend.py).

An operator holds its keyed state in a `KeyedValues`: key -> (key group, tuple of plain
values), read and written a batch at a time (`get_many` / `put_many`), so a backend that
crosses into C++ does it once per Arrow batch rather than once per row.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sluice.states import StateBackend

MEMORY = StateBackend.MEMORY
ROCKSDB = StateBackend.ROCKSDB
BACKENDS = tuple(StateBackend)


@dataclasses.dataclass(frozen=True)
class StateBackendConfig:
    """Which backend an operator's keyed state uses and where a native backend keeps its files."""

    kind: str = MEMORY
    incremental: bool = True  # rocksdb: upload only new SST files at a checkpoint
    local_dir: str = ""  # rocksdb: this (task, operator)'s directory under the TaskManager's working directory

    def __post_init__(self) -> None:
        if self.kind not in BACKENDS:
            raise ValueError(f"state.backend: expected one of {', '.join(BACKENDS)}, got {self.kind!r}")
        if self.kind == ROCKSDB and not self.local_dir:
            raise ValueError("the rocksdb state backend needs a local directory")

    @classmethod
    def for_task(
        cls, config: Mapping[str, Any], work_dir: Callable[[], str], execution_id: str, operator_id: str
    ) -> StateBackendConfig:
        """The backend of one operator of a task, from its job's configuration (options already
        checked at submission: a bad value here raises JobConfigError); `work_dir` gives the
        TaskManager's working directory (asked only for rocksdb)."""
        from sluice import job_options

        kind = job_options.STATE_BACKEND.read(config)
        incremental = job_options.STATE_BACKEND_INCREMENTAL.read(config)
        if kind != ROCKSDB:
            return cls(kind, incremental)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{execution_id}-{operator_id}")
        return cls(kind, incremental, os.path.join(work_dir(), "state", safe[:200]))


@dataclasses.dataclass(frozen=True)
class NativeRestore:
    """Native (rocksdb) keyed state handles to restore an operator from, with where they are."""

    handles: list[dict[str, Any]]
    fs: Any  # pyarrow.fs.FileSystem of the job's checkpoint storage (a savepoint's handles name their own)
    key_groups: tuple[int, int]
    owned: list[int] | None  # a live rebalance's key groups of this subtask (inside key_groups)
    scratch: str  # a local path prefix for temporary copies


def create(config: StateBackendConfig | None, tag: str = "") -> KeyedValues:
    """The keyed state of one operator (None: the memory backend)."""
    if config is None or config.kind == MEMORY:
        from taskmanager.state.memory_backend import MemoryKeyedValues

        return MemoryKeyedValues()
    from taskmanager.state.rocksdb_backend import RocksDBKeyedValues

    return RocksDBKeyedValues(config, tag)


def is_native(handle: Mapping[str, Any]) -> bool:
    """A keyed state handle written by the rocksdb backend (else: an Arrow file of rows)."""
    return handle.get("backend") == ROCKSDB


class KeyedValues(abc.ABC):
    """Keyed state: key -> (key group, tuple of plain values). Keys are plain values (or tuples
    of them); values are tuples of plain values (None, bool, int, float, str, bytes, dates)."""

    @abc.abstractmethod
    def get_many(self, keys: Sequence[Any], kgs: Sequence[int]) -> list[tuple[Any, ...] | None]:
        """The values of `keys` (None where absent)."""

    @abc.abstractmethod
    def put_many(self, keys: Sequence[Any], kgs: Sequence[int], values: Sequence[tuple[Any, ...]]) -> None:
        """Set the values of `keys`, each in its key group."""

    @abc.abstractmethod
    def items(self) -> Iterator[tuple[Any, int, tuple[Any, ...]]]:
        """Every (key, key group, values), in no particular order."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Drop every entry."""

    def __bool__(self) -> bool:
        return any(True for _ in self.items())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027 — optional hook
        """Checkpoint `checkpoint_id` completed (rocksdb: its uploads may be referenced again)."""

    def close(self) -> None:  # noqa: B027 — optional hook
        """Release local resources (rocksdb: the database and its directory)."""
