"""Blocking result partitions: a producer's output kept on local disk (BATCH jobs).

Theory of operation
-------------------
A job in BATCH mode (`execution.runtime-mode`, `sluice.graph.is_batch`) cuts its
graph at blocking exchanges: the JobManager deploys a stage's consumers only
after its producers finished, and marks each such output `blocking` in the
task's ResultPartitionDescriptor. For such an output the task builds a
`BlockingResultPartition` instead of a pipelined `ResultPartition`
(taskmanager/network/partition.py); its RecordWriter writes to it exactly as
to a pipelined one (same partitioning, same combiner).

Writing. Each subpartition is one file,
`<TaskManager working dir>/partitions/<job>/<partition>/<subpartition>.arrow`
(`partition_directory`; the names are made safe by `safe_name`), written
with Arrow IPC on the producer's thread as batches arrive: a write never
waits for a consumer (there is no capacity; it is disk). The file is a
sequence of IPC streams, a new one each time the batches' schema changes, so
any sequence of tables round-trips. Only batches go to the file. Barriers do
not exist in BATCH (checkpointing is off), stream status means nothing to a
consumer that reads everything, and of the watermarks only the last one
written counts: the reader hands it over right before END. That is the final
watermark (+inf) when the producer had event time, so event-time windows and
timers downstream fire at the end of their input, and no row is late, as
when all the input is there at once. A subpartition that got no batch has no
file and reads as empty.

Finishing. END closes a subpartition's file. When the producer task has
ended its input and closed its writers it calls `finish()`, logs the bytes
written (with the task's correlation tag) and only then reports FINISHED:
from that moment the partition is readable.

Reading. `reader(i)` returns a fresh `BlockingSubpartitionReader`, a pass
over file `i` from its start with the poll/backlog/released/close interface
of a pipelined subpartition, so the DataExchange servicer (remote consumers,
credit-based flow control unchanged) and LocalInputChannel serve both kinds
alike. Any number of readers may read a partition, any number of times (a
re-run consumer reads it again from the start). A reader of a partition whose
producer has not finished waits, each poll bounded by the caller's timeout.
A reader holds one open file and one batch at a time: it reads record batch by
record batch, joining consecutive ones up to READ_TARGET_BYTES per item.

Lifetime. A consumer's END does not release a blocking partition. It is
deleted (files and directory) only by `release()`: when the JobManager asks
(TaskExecutor.ReleasePartitions, specific ids or all of a job:
`PartitionManager.release_blocking`), when its producer fails or is cancelled
(the incomplete files go), when a re-run of the producer registers the same
partition id, or when the TaskManager stops (`PartitionManager.close`, and
the TaskManager's working directory goes with it). A reader whose partition
was released stops (`released`), as with a pipelined partition.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from taskmanager.network.partition import (
    BARRIER,
    BATCH,
    END,
    STATUS,
    WATERMARK,
    Item,
    PartitionManager,
    PartitionReleased,
)

log = logging.getLogger("sluice.taskmanager.network")

PARTITIONS_DIR = "partitions"  # under the TaskManager's working directory
READ_TARGET_BYTES = 4 << 20  # a reader joins consecutive record batches up to this size per item
WRITE_BUFFER_BYTES = 1 << 20  # the write buffer of each open subpartition file
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe_name(value: str) -> str:
    """A file name for an id from the wire: its safe characters (at most 64, never a leading
    dot) and a digest of the whole id, so distinct ids never share a name and none escapes
    its directory."""
    readable = _UNSAFE.sub("_", value)[:64].lstrip(".")
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    return f"{readable}-{digest}" if readable else digest


def job_directory(local_dir: str, job_id: str) -> str:
    return os.path.join(local_dir, PARTITIONS_DIR, safe_name(job_id))


def partition_directory(local_dir: str, job_id: str, partition_id: str) -> str:
    """Where the files of blocking partition `partition_id` of job `job_id` live."""
    return os.path.join(job_directory(local_dir, job_id), safe_name(partition_id))


class BlockingSubpartition:
    """The producer's side of one subpartition: batches appended to its file."""

    capacity = 1  # never full (backlog() is 0): a write goes to disk and never waits for a consumer

    def __init__(self, partition: BlockingResultPartition, index: int) -> None:
        self._partition = partition
        self.index = index
        self.path = os.path.join(partition.directory, f"{index}.arrow")
        self._lock = threading.Lock()
        self._file: Any = None  # a pyarrow output stream while the file is open
        self._writer: Any = None  # the IPC stream writer of the current schema
        self._schema: pa.Schema | None = None
        self.ended = False
        self.rows_written = 0
        self.bytes_written = 0
        self.last_watermark: int | None = None  # handed to readers before END

    def add(self, item: Item, cancelled: Callable[[], bool] = lambda: False) -> None:  # noqa: ARG002 — never waits
        kind, value = item
        with self._lock:
            if self._partition.released:
                raise PartitionReleased()
            if self.ended:
                raise RuntimeError(f"subpartition {self.index} of {self._partition.partition_id} got {kind} after END")
            if kind == BATCH:
                self._write(value)
            elif kind == WATERMARK:
                self.last_watermark = value
            elif kind == END:
                self._close()
                self.ended = True
            else:  # barriers (no checkpoints in BATCH) and stream status are not kept
                assert kind in (BARRIER, STATUS), kind

    def backlog(self) -> int:
        return 0

    def _write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self._file is None:
            self._file = self._open()
        if self._writer is None or not table.schema.equals(self._schema, check_metadata=True):
            if self._writer is not None:
                self._writer.close()  # its end-of-stream marker; a stream of the new schema follows
            self._writer = ipc.new_stream(self._file, table.schema)
            self._schema = table.schema
        self._writer.write_table(table)
        self.rows_written += table.num_rows

    def _open(self) -> Any:
        # A release of another partition of the job may remove the (empty) job directory
        # between makedirs and open: make it again.
        for attempt in range(3):
            os.makedirs(self._partition.directory, exist_ok=True)
            try:
                return pa.BufferedOutputStream(pa.OSFile(self.path, "wb"), buffer_size=WRITE_BUFFER_BYTES)
            except FileNotFoundError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self.bytes_written = self._file.tell()
            self._file.close()
            self._file = None

    def discard(self) -> None:
        """Released: close the file without caring for its content (it is deleted)."""
        with self._lock:
            try:
                self._close()
            except Exception:  # noqa: BLE001 — the file is deleted anyway
                self._writer = self._file = None
            self.ended = True


class BlockingResultPartition:
    """A result partition written to local Arrow IPC files, readable once its producer
    finished, by any number of readers, until released (see the module docstring)."""

    blocking = True

    def __init__(
        self, partition_id: str, num_subpartitions: int, directory: str, job_id: str = "", tag: str = ""
    ) -> None:
        self.partition_id = partition_id
        self.job_id = job_id
        self.directory = directory
        self.tag = tag  # the producing task's correlation ids, for log lines
        self._cond = threading.Condition()
        self._finished = False
        self._released = False
        self._subpartitions = [BlockingSubpartition(self, i) for i in range(num_subpartitions)]

    @classmethod
    def create(
        cls, partitions: PartitionManager, job_id: str, partition_id: str, num_subpartitions: int, tag: str = ""
    ) -> BlockingResultPartition:
        """A blocking partition under the working directory of `partitions` (not registered yet)."""
        directory = partition_directory(partitions.local_dir, job_id, partition_id)
        return cls(partition_id, num_subpartitions, directory, job_id=job_id, tag=tag)

    @property
    def subpartitions(self) -> list[BlockingSubpartition]:
        return self._subpartitions

    @property
    def num_subpartitions(self) -> int:
        return len(self._subpartitions)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def released(self) -> bool:
        return self._released

    @property
    def bytes_written(self) -> int:
        return sum(s.bytes_written for s in self._subpartitions)

    @property
    def rows_written(self) -> int:
        return sum(s.rows_written for s in self._subpartitions)

    def reader(self, index: int) -> BlockingSubpartitionReader:
        if not 0 <= index < len(self._subpartitions):
            raise IndexError(f"subpartition {index} of {self.partition_id} (it has {len(self._subpartitions)})")
        return BlockingSubpartitionReader(self, index)

    def consumed(self, index: int) -> None:
        """A consumer read to the end: the partition stays for other (and repeated) reads."""

    def finish(self) -> None:
        """The producer ended its input: close what is still open; readable from now on."""
        with self._cond:
            if self._released:
                raise PartitionReleased()
            for s in self._subpartitions:
                if not s.ended:
                    s.add((END, None))
            self._finished = True
            self._cond.notify_all()
        log.info(
            "%s blocking partition %s finished: %d bytes, %d rows in %d subpartitions under %s",
            self.tag,
            self.partition_id,
            self.bytes_written,
            self.rows_written,
            len(self._subpartitions),
            self.directory,
        )

    def wait_finished(self, timeout: float) -> bool:
        """Wait up to `timeout` for the producer to finish; False at once when released."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._finished and not self._released:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return self._finished and not self._released

    def release(self) -> None:
        """Delete the files (readers still reading stop at their next poll)."""
        with self._cond:
            if self._released:
                return
            self._released = True
            finished = self._finished
            self._cond.notify_all()
        for s in self._subpartitions:
            s.discard()
        shutil.rmtree(self.directory, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self.directory))  # the job's directory, when this was its last partition
        except OSError:
            pass
        log.info(
            "%s blocking partition %s released%s: its files are deleted",
            self.tag,
            self.partition_id,
            "" if finished else " before its producer finished",
        )


class BlockingSubpartitionReader:
    """One consumer's pass over one subpartition's file, from its start: batches, then the
    last watermark the producer wrote (if any), then END."""

    def __init__(self, partition: BlockingResultPartition, index: int) -> None:
        self._partition = partition
        self._sub = partition.subpartitions[index]
        self._file: Any = None
        self._size = 0
        self._stream: Any = None  # the IPC stream being read
        self._tail: list[Item] = []  # at the end of the file: the final watermark, then END
        self._at_end = False
        self._done = False
        self.bytes_read = 0

    @property
    def released(self) -> bool:
        return self._partition.released

    def backlog(self) -> int:
        if self._done or self._file is None:
            return 0
        return 1 if self._file.tell() < self._size else len(self._tail)

    def poll(self, timeout: float) -> Item | None:
        """The next item; None when there is none yet (the producer has not finished within
        `timeout`), after END, or when the partition was released (check `released`)."""
        if self._done:
            return None
        if self._partition.released:
            self.close()
            return None
        if not self._partition.wait_finished(timeout):
            return None
        if not self._at_end:
            try:
                table = self._read_table()
            except OSError:
                if self._partition.released:  # deleted under the reader: it stops as a released one
                    self.close()
                    return None
                raise
            if table is not None:
                return (BATCH, table)
            self._at_end = True
            if self._sub.last_watermark is not None:
                self._tail.append((WATERMARK, self._sub.last_watermark))
            self._tail.append((END, None))
            self._close_file()
        item = self._tail.pop(0)
        if item[0] == END:
            self._done = True
        return item

    def _read_table(self) -> pa.Table | None:
        """Up to READ_TARGET_BYTES of consecutive record batches of one schema (None: the end)."""
        batches: list[pa.RecordBatch] = []
        size = 0
        while size < READ_TARGET_BYTES:
            if self._stream is None:
                if self._file is None:
                    if not os.path.exists(self._sub.path):
                        break  # no batch was written to this subpartition
                    self._file = pa.OSFile(self._sub.path, "rb")
                    self._size = self._file.size()
                if self._file.tell() >= self._size:
                    break
                if batches:
                    break  # the next stream may have another schema: it starts the next item
                self._stream = ipc.open_stream(self._file)
            try:
                batch = self._stream.read_next_batch()
            except StopIteration:
                self._stream = None
                continue
            batches.append(batch)
            size += batch.nbytes
        if not batches:
            return None
        self.bytes_read += size
        return pa.Table.from_batches(batches)

    def _close_file(self) -> None:
        self._stream = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        """The consumer is done (or gone): free the open file."""
        self._close_file()
        self._done = True
