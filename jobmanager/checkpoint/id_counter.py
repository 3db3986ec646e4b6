"""Checkpoint id counters: where the coordinator gets the next checkpoint id.

Theory of operation
-------------------
Checkpoint ids of a job are handed out by a counter that outlives any one
JobManager (docs/protocols.md: `jobs/<job-id>/checkpoint_id_counter` in
ZooKeeper), so that an id is never reused — not across restarts of the job,
not across JobManager failover. `chk-<n>` directories and ZooKeeper pointers
are named by id; reusing one would overwrite a checkpoint.

Contract (tests/unit/test_checkpoint_id_counter.py, run against every backing):
  * `get_and_increment()` returns the next id and advances the counter; the
    first id of a fresh counter is 1; ids are strictly increasing, never
    repeated, also under concurrent callers.
  * `get()` returns the id the next `get_and_increment()` will hand out,
    without advancing.

`InMemoryCheckpointIDCounter` backs tests and single-process clusters.
"""

from __future__ import annotations

import abc
import threading


class CheckpointIDCounter(abc.ABC):
    @abc.abstractmethod
    def get_and_increment(self) -> int:
        """Return the next checkpoint id and advance the counter."""

    @abc.abstractmethod
    def get(self) -> int:
        """Return the id the next `get_and_increment()` will hand out."""

    @abc.abstractmethod
    def advance_to(self, value: int) -> None:
        """Make the next id at least `value` (a job restored from a savepoint continues its
        checkpoint ids, so that its committed output sorts after the savepoint's)."""


class InMemoryCheckpointIDCounter(CheckpointIDCounter):
    def __init__(self, start: int = 1):
        if isinstance(start, bool) or not isinstance(start, int) or start < 1:
            raise ValueError(f"checkpoint id counter start must be an int >= 1, got {start!r}")
        self._next = start
        self._lock = threading.Lock()

    def get_and_increment(self) -> int:
        with self._lock:
            value, self._next = self._next, self._next + 1
            return value

    def get(self) -> int:
        with self._lock:
            return self._next

    def advance_to(self, value: int) -> None:
        with self._lock:
            self._next = max(self._next, value)

    def __repr__(self) -> str:
        return f"InMemoryCheckpointIDCounter(next={self._next})"
