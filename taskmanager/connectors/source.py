"""A connector source's reader heading a task's chain (docs/connectors.md).

`ConnectorSource` adapts a user's `SourceReader` to the task's `Source` interface. It asks
the JobManager's split enumerator for splits through `request` (the RequestSplits RPC):
at once when its reader is idle, else every `REQUEST_INTERVAL` seconds (splits
discovered later). Its state in a checkpoint is the number of assignments it holds and
its reader's unfinished splits with their positions; a restore hands those back to a new
reader, and the enumerator sends again whatever was assigned after the checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sluice.connectors.api import END, NOTHING_YET, ReaderContext, SourceReader, SourceSplit
from taskmanager.operators.base import IDLE, Idle, Payload, Source
from taskmanager.spark_engine import Batch, SparkEngine

log = logging.getLogger("sluice.taskmanager.connectors")

REQUEST_INTERVAL = 1.0  # seconds between requests while the reader is busy (new splits discovered later)
IDLE_REQUEST_INTERVAL = 0.2  # while it has nothing to read


class SplitAnswer:
    """The JobManager's answer, as the adapter needs it (a RequestSplitsResponse fits)."""

    first: int
    splits: list[str]  # JSON splits
    no_more_splits: bool


# (operator id, received, last checkpoint, idle) -> the answer, or None when the request failed
Requester = Callable[[str, int, int, bool], Any]


class ConnectorSource(Source):
    def __init__(
        self,
        payload: Payload,
        ctx: ReaderContext,
        engine: SparkEngine | None,
        request: Requester,
        tag: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine, self.request, self.tag, self.clock = engine, request, tag, clock
        self.operator_id = ctx.operator_id
        self.reader: SourceReader = payload["source"].create_reader(ctx)
        self.received = 0  # assignments of this subtask the reader holds
        self.no_more = False
        self.last_checkpoint = ctx.restored_checkpoint  # the newest checkpoint snapshotted or restored
        self.idle = True  # the reader has no unfinished split (as far as its last poll said)
        self._asked_at = float("-inf")
        self.offset = 0  # batches emitted (log lines)
        self.idle_wait = 0.05
        self.closed = False

    # -- reading ----------------------------------------------------------------------------------
    def _ask(self) -> None:
        now = self.clock()
        if self.no_more or now - self._asked_at < (IDLE_REQUEST_INTERVAL if self.idle else REQUEST_INTERVAL):
            return
        self._asked_at = now
        answer = self.request(self.operator_id, self.received, self.last_checkpoint, self.idle)
        if answer is None:
            return
        if answer.first != self.received:
            raise RuntimeError(f"split assignments start at {answer.first}, expected {self.received}")
        splits = [SourceSplit.from_json(json.loads(s)) for s in answer.splits]
        if splits:
            self.reader.add_splits(splits)
            self.received += len(splits)
            self.idle = False
            self._asked_at = float("-inf")  # there may be more: ask again at once
            log.info("%s source %s got splits %s", self.tag, self.operator_id, ", ".join(s.id for s in splits))
        if answer.no_more_splits and not splits:
            self.no_more = True
            self.reader.notify_no_more_splits()

    def next_batch(self) -> Batch | Idle | None:
        self._ask()
        polled = self.reader.poll_next()
        if polled is END:
            if not self.no_more:
                raise RuntimeError(
                    f"the reader of source {self.operator_id} returned END before it was told no more splits come"
                )
            self.close()
            return None
        if polled is NOTHING_YET:
            self.idle = True
            return IDLE
        if not isinstance(polled, pa.Table):
            raise TypeError(f"poll_next() must return a pyarrow.Table, NOTHING_YET or END, got {type(polled).__name__}")
        self.idle = False
        if polled.num_rows == 0:
            return IDLE
        self.offset += 1
        self.records_read += polled.num_rows
        return Batch(self.engine, table=polled)

    def has_pending_input(self) -> bool:
        """A split the reader has not finished (its last poll gave rows), or one the enumerator
        assigns when asked now (asked at once, whatever the request interval)."""
        if not self.idle:
            return True
        if self.no_more:
            return False
        self._asked_at = float("-inf")
        self._ask()
        return not self.idle

    # -- checkpoints ------------------------------------------------------------------------------
    def snapshot_at(self, checkpoint_id: int) -> dict[str, Any]:
        splits = self.reader.snapshot_state(checkpoint_id)
        self.last_checkpoint = max(self.last_checkpoint, checkpoint_id)
        return {
            "offset": self.offset,
            "received": self.received,
            "no_more": self.no_more,
            "splits": [s.to_json() for s in splits],
        }

    def snapshot(self) -> dict[str, Any]:
        raise RuntimeError("a connector source snapshots with snapshot_at(checkpoint_id)")

    def restore(self, handle: dict[str, Any]) -> None:
        self.offset = int(handle.get("offset", 0))
        self.received = int(handle["received"])
        splits = [SourceSplit.from_json(s) for s in handle.get("splits", [])]
        if splits:
            self.reader.add_splits(splits)
            self.idle = False
        if handle.get("no_more"):
            self.no_more = True
            self.reader.notify_no_more_splits()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.reader.notify_checkpoint_complete(checkpoint_id)

    def describe_offset(self) -> str:
        return f"{self.received} splits received, {self.offset} batches"

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.reader.close()
