"""Savepoint requests of one job (docs/savepoints.md): their records for the status, and the
one in progress. Pure: wall-clock times arrive as arguments.

The CheckpointCoordinator owns a requested savepoint's target while it is wanted and pending
(`SavepointRequested.target`, carried on to `PersistCheckpoint.savepoint_target`) and reports
where its copy went on `NotifyComplete.savepoint_path`; these records follow those actions
(`triggered`, `completed`, `failed`), so that `JobInfo.savepoints` says how each request went.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

from sluice.states import SavepointStatus

SAVEPOINTS_SHOWN = 16  # savepoint requests a job's status keeps
MAX_TARGET_LENGTH = 4096  # characters of a savepoint target directory


@dataclasses.dataclass
class SavepointRequest:
    """One savepoint request (`SavepointInfo` in proto/sluice/v1/common.proto)."""

    request_id: str
    stop: bool
    target: str
    trigger_ms: int
    status: SavepointStatus = SavepointStatus.IN_PROGRESS
    checkpoint_id: int = 0
    path: str = ""
    failure: str = ""
    end_ms: int = 0


def check_target(target: str) -> None:
    """ValueError unless `target` can name a savepoint directory."""
    if not target or len(target) > MAX_TARGET_LENGTH or "\0" in target:
        raise ValueError("savepoint directory: give --dir (a directory or URI of at most 4096 characters)")


class SavepointRequests:
    """The last `SAVEPOINTS_SHOWN` requests, the one in progress, and the savepoint a job stopped with."""

    def __init__(self) -> None:
        self._requests: collections.deque[SavepointRequest] = collections.deque(maxlen=SAVEPOINTS_SHOWN)
        self.current: SavepointRequest | None = None  # the one in progress
        self.stopped_with = ""  # the savepoint of a job stopped with one

    def started(self, request: SavepointRequest) -> None:
        if self.current is not None:
            raise ValueError(f"savepoint {self.current.request_id} is in progress")
        self._requests.append(request)
        self.current = request

    def triggered(self, checkpoint_id: int) -> None:
        if self.current is not None:
            self.current.checkpoint_id = checkpoint_id

    def completed(self, checkpoint_id: int, path: str, now_ms: int) -> SavepointRequest | None:
        """The savepoint of `checkpoint_id` is written to `path`: the request it completed, None
        when that request already ended."""
        request = self.current
        if request is None or request.checkpoint_id != checkpoint_id:
            return None
        self.current = None
        request.end_ms = now_ms
        request.status, request.path = SavepointStatus.COMPLETED, path
        if request.stop:
            self.stopped_with = path
        return request

    def failed(self, failure: str, now_ms: int) -> SavepointRequest | None:
        """The request in progress failed: it, None without one."""
        request, self.current = self.current, None
        if request is None:
            return None
        request.end_ms = now_ms
        request.status, request.failure = SavepointStatus.FAILED, failure
        return request

    @property
    def in_progress(self) -> bool:
        return self.current is not None and self.current.status == SavepointStatus.IN_PROGRESS

    def __iter__(self) -> Iterator[SavepointRequest]:
        return iter(self._requests)
