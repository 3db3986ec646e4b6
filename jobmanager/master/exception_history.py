"""ExceptionHistory, as Flink keeps it: the root cause of every failed attempt.

Restarted or final, each entry has its time, attempt, task, one-line cause and traceback (at
most `TRACEBACK_LIMIT` characters); the last `HISTORY_SIZE` entries go into
`JobInfo.exceptions`. An ended job's JobInfo goes to the job result store, so its history
outlives a JobManager failover; a running job taken over by a new leader starts a fresh
history there. Pure: times arrive as arguments.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

from jobmanager.scheduler.execution_graph import RootCause
from jobmanager.scheduler.restart_strategy import exception_line

HISTORY_SIZE = 32  # exception history entries kept per job
TRACEBACK_LIMIT = 8192  # characters of a traceback kept in the history (the job result store is a ZooKeeper node)


@dataclasses.dataclass(frozen=True)
class ExceptionEntry:
    """One entry of the exception history (`ExceptionEntry` in proto/sluice/v1/common.proto)."""

    time_ms: int
    attempt: int
    task: str
    cause: str
    traceback: str
    restarted: bool


def bounded(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """`text` cut to about `limit` characters: its head and its tail, where a traceback says what failed."""
    if len(text) <= limit:
        return text
    head = limit // 8
    tail = limit - head
    return f"{text[:head]}\n... ({len(text) - limit} characters cut) ...\n{text[-tail:]}"


class ExceptionHistory:
    """The last `HISTORY_SIZE` root causes; `failed(now_ms)` stamps when the current failure began."""

    def __init__(self) -> None:
        self._entries: collections.deque[ExceptionEntry] = collections.deque(maxlen=HISTORY_SIZE)
        self._failed_ms = 0  # when the failure being decided began (0: none stamped)

    def failed(self, now_ms: int) -> None:
        self._failed_ms = now_ms

    @property
    def stamped(self) -> bool:
        return self._failed_ms != 0

    def record(self, root: RootCause | None, failure: str, attempt: int, restarted: bool, now_ms: int) -> None:
        """The root cause of the attempt that just failed (`failure` when the graph names none)."""
        text = root.error if root is not None else failure
        task = root.task if root is not None else ""
        self.add(
            ExceptionEntry(self._failed_ms or now_ms, attempt, task, exception_line(text), bounded(text), restarted)
        )
        self._failed_ms = 0

    def add(self, entry: ExceptionEntry) -> None:
        self._entries.append(entry)

    @property
    def last_cause(self) -> str:
        return self._entries[-1].cause

    def __iter__(self) -> Iterator[ExceptionEntry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int) -> ExceptionEntry:
        return self._entries[index]
