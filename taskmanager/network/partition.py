"""Result partitions: a producer subtask's output, one bounded subpartition
per consumer subtask.

A subpartition holds at most `capacity` batches; a producer adding to a full
one blocks until its consumer takes from it — the first half of
backpressure (the second is the consumer's credit, see exchange.py). Items
are tuples: (BATCH, pyarrow.Table), (BARRIER, checkpoint_id), (WATERMARK, ms),
(STATUS, idle: bool) and (END, None); only batches count against the capacity.

A BATCH job's blocking partitions keep their batches on local disk instead
(taskmanager/network/blocking_partition.py). Both kinds meet the same
`Partition` interface: the producer's RecordWriter adds items to
`subpartitions[i]`, and each consumer (a local input channel, or the
DataExchange servicer for a remote one) reads through `reader(i)`: the one
queue of a pipelined subpartition, or a fresh pass over a blocking one's file.
"""

from __future__ import annotations

import collections
import enum
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeAlias


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


class SubpartitionWriter(Protocol):
    """Where a RecordWriter puts one consumer's items."""

    @property
    def capacity(self) -> int: ...

    def add(self, item: Item, cancelled: Callable[[], bool] = ...) -> None: ...

    def backlog(self) -> int: ...


class SubpartitionReader(Protocol):
    """One consumer's view of one subpartition: poll until END; `released`: stop reading."""

    def poll(self, timeout: float) -> Item | None: ...

    def backlog(self) -> int: ...

    @property
    def released(self) -> bool: ...

    def close(self) -> None: ...


class Partition(Protocol):
    """A result partition as the task, its RecordWriters, the consumers and the
    PartitionManager see it: pipelined (ResultPartition) or blocking
    (blocking_partition.BlockingResultPartition)."""

    @property
    def partition_id(self) -> str: ...

    @property
    def job_id(self) -> str: ...

    @property
    def blocking(self) -> bool: ...

    @property
    def subpartitions(self) -> Sequence[SubpartitionWriter]: ...

    @property
    def num_subpartitions(self) -> int: ...

    def reader(self, index: int) -> SubpartitionReader:
        """What a consumer of subpartition `index` polls (close it when done)."""
        ...

    def consumed(self, index: int) -> None:
        """A consumer took the END of subpartition `index`."""
        ...

    def finish(self) -> None:
        """The producer finished: its writers are closed (a blocking partition becomes readable)."""
        ...

    def release(self) -> None: ...


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

    def close(self) -> None:
        """A reader is done (nothing to free: the queue is the partition's)."""


class ResultPartition:
    """Released when every consumer took its END (pipelined, consumed once),
    or at once when the producer fails or is cancelled."""

    blocking = False

    def __init__(
        self,
        partition_id: str,
        num_subpartitions: int,
        capacity: int,
        on_consumed: Callable[[str], None] = lambda _pid: None,
        job_id: str = "",
    ) -> None:
        self.partition_id = partition_id
        self.job_id = job_id
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

    @property
    def num_subpartitions(self) -> int:
        return len(self.subpartitions)

    def reader(self, index: int) -> ResultSubpartition:
        """Pipelined: the subpartition's queue itself (it has one consumer)."""
        return self.subpartitions[index]

    def finish(self) -> None:
        """Nothing to do: the consumers read while the producer runs."""

    def release(self) -> None:
        for s in self.subpartitions:
            s.release()


class PartitionManager:
    """Partitions produced on this TaskManager, found by id by local and remote consumers.

    `local_dir` is the TaskManager's working directory: blocking partitions keep their files
    under `<local_dir>/partitions/` (None: a temporary directory made on first use and
    removed by `close`)."""

    def __init__(self, local_dir: str | None = None) -> None:
        self._partitions: dict[str, Partition] = {}
        self._cond = threading.Condition()
        self._local_dir = local_dir
        self._owns_dir = False

    @property
    def local_dir(self) -> str:
        with self._cond:
            if self._local_dir is None:
                self._local_dir, self._owns_dir = tempfile.mkdtemp(prefix="sluice-partitions-"), True
            return self._local_dir

    def register(self, partition: Partition) -> None:
        """A new partition; a blocking one under an id already held replaces (and deletes) it:
        its producer runs again, and writes the same directory."""
        with self._cond:
            old = self._partitions.get(partition.partition_id)
            self._partitions[partition.partition_id] = partition
            self._cond.notify_all()
        if old is not None and old is not partition and old.blocking:
            old.release()

    def get(self, partition_id: str, timeout: float) -> Partition | None:
        """Wait up to `timeout` for the producer to be deployed here."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while partition_id not in self._partitions:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._partitions[partition_id]

    def release(self, partition_id: str, partition: Partition | None = None) -> None:
        """Release partition `partition_id`; given `partition`, release that one, and drop the
        id only while it names that partition (not a re-run's that replaced it)."""
        with self._cond:
            held = self._partitions.get(partition_id)
            if held is not None and (partition is None or held is partition):
                del self._partitions[partition_id]
        target = partition if partition is not None else held
        if target is not None:
            target.release()

    def release_blocking(self, job_id: str, partition_ids: Iterable[str] = (), all_of_job: bool = False) -> int:
        """Release the blocking partitions of `job_id` named in `partition_ids` (every one of
        the job's with `all_of_job`); ids not held here, of another job or of a pipelined
        partition are skipped. Returns how many were released."""
        wanted = set(partition_ids)
        with self._cond:
            chosen = [
                p
                for pid, p in self._partitions.items()
                if p.blocking and p.job_id == job_id and (all_of_job or pid in wanted)
            ]
            for p in chosen:
                del self._partitions[p.partition_id]
        for p in chosen:
            p.release()
        return len(chosen)

    def blocking_partitions(self) -> list[Partition]:
        with self._cond:
            return [p for p in self._partitions.values() if p.blocking]

    def close(self) -> None:
        """The TaskManager stops: release every partition (blocking ones delete their files)."""
        with self._cond:
            held, self._partitions = list(self._partitions.values()), {}
        for p in held:
            p.release()
        if self._owns_dir and self._local_dir is not None and os.path.isdir(self._local_dir):
            shutil.rmtree(self._local_dir, ignore_errors=True)
