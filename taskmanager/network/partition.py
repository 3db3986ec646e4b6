"""Result partitions: a producer subtask's output, one bounded subpartition
per consumer subtask.

A subpartition holds at most `capacity` batches; a producer adding to a full
one blocks until its consumer takes from it — the first half of
backpressure (the second is the consumer's credit, see exchange.py). Items
are tuples: (BATCH, pyarrow.Table), (BARRIER, checkpoint_id), (WATERMARK, ms),
(STATUS, idle: bool) and (END, None); only batches count against the capacity.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias


class ItemKind(enum.StrEnum):
    """What an item in a subpartition or input channel carries."""

    BATCH = "batch"  # a pyarrow.Table of records
    BARRIER = "barrier"  # a checkpoint barrier: its checkpoint id
    WATERMARK = "watermark"  # event time: its timestamp in ms (docs/event-time.md)
    STATUS = "status"  # the stream went idle (True) or active again (False)
    END = "end"  # end of the partition: None


BATCH, BARRIER, END = ItemKind.BATCH, ItemKind.BARRIER, ItemKind.END
WATERMARK, STATUS = ItemKind.WATERMARK, ItemKind.STATUS
Item: TypeAlias = tuple[ItemKind, Any]


class TaskCancelled(Exception):
    pass


class PartitionReleased(Exception):
    pass


class ResultSubpartition:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: collections.deque[Item] = collections.deque()
        self._cond = threading.Condition()
        self._released = False

    def add(self, item: Item, cancelled: Callable[[], bool] = lambda: False) -> None:
        with self._cond:
            while len(self._items) >= self.capacity and item[0] == BATCH and not self._released:
                if cancelled():
                    raise TaskCancelled()
                self._cond.wait(0.1)
            if self._released:
                raise PartitionReleased()
            self._items.append(item)
            self._cond.notify_all()

    def poll(self, timeout: float) -> Item | None:
        """The next item, waiting up to `timeout`; None when there is none — at once when the
        subpartition is released (a reader must then stop: check `released`, never poll again)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._items:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._released:
                    return None
                self._cond.wait(remaining)
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def backlog(self) -> int:
        return len(self._items)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._items.clear()
            self._cond.notify_all()


class ResultPartition:
    """Released when every consumer took its END (pipelined, consumed once),
    or at once when the producer fails or is cancelled."""

    def __init__(
        self,
        partition_id: str,
        num_subpartitions: int,
        capacity: int,
        on_consumed: Callable[[str], None] = lambda _pid: None,
    ) -> None:
        self.partition_id = partition_id
        self.subpartitions = [ResultSubpartition(capacity) for _ in range(num_subpartitions)]
        self._pending = set(range(num_subpartitions))
        self._lock = threading.Lock()
        self._on_consumed = on_consumed

    def consumed(self, index: int) -> None:
        with self._lock:
            self._pending.discard(index)
            done = not self._pending
        if done:
            self._on_consumed(self.partition_id)

    def release(self) -> None:
        for s in self.subpartitions:
            s.release()


class PartitionManager:
    """Partitions produced on this TaskManager, found by id by local and remote consumers."""

    def __init__(self) -> None:
        self._partitions: dict[str, ResultPartition] = {}
        self._cond = threading.Condition()

    def register(self, partition: ResultPartition) -> None:
        with self._cond:
            self._partitions[partition.partition_id] = partition
            self._cond.notify_all()

    def get(self, partition_id: str, timeout: float) -> ResultPartition | None:
        """Wait up to `timeout` for the producer to be deployed here."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while partition_id not in self._partitions:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._partitions[partition_id]

    def release(self, partition_id: str) -> None:
        with self._cond:
            p = self._partitions.pop(partition_id, None)
        if p is not None:
            p.release()
