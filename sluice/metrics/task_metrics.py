"""One task's I/O and time metrics (docs/monitoring.md), pure: the task thread reports
what happened with the time it happened; readers (heartbeats, the Prometheus endpoint)
take a :class:`TaskIOSnapshot` at a time of their choosing.

Counts are written by the task thread only and read racily by others: a reader may see
a count one batch old, never a torn one (Python ints)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from sluice.metrics.meters import BACKPRESSURED, BUSY, IDLE, Meter, TimeShare


@dataclass(frozen=True)
class TaskIOSnapshot:
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    records_in_per_second: float
    records_out_per_second: float
    bytes_in_per_second: float
    bytes_out_per_second: float
    busy_ms_per_second: float
    idle_ms_per_second: float
    backpressured_ms_per_second: float
    input_queue_usage: float
    output_queue_usage: float
    checkpoint_id: int
    checkpoint_alignment_ms: int
    checkpoint_sync_ms: int
    checkpoint_async_ms: int


@dataclass
class TaskIO:
    records_in: Meter = field(default_factory=Meter)
    records_out: Meter = field(default_factory=Meter)
    bytes_in: Meter = field(default_factory=Meter)
    bytes_out: Meter = field(default_factory=Meter)
    time: TimeShare = field(default_factory=TimeShare)
    input_queue_usage: float = 0.0
    output_queue_usage: float = 0.0
    checkpoint_id: int = 0
    checkpoint_alignment_ms: int = 0
    checkpoint_sync_ms: int = 0
    checkpoint_async_ms: int = 0
    _alignment_started: dict[int, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def running(self, now: float) -> None:
        """The task started running: its time counts from here."""
        with self._lock:
            self.time.begin(now)

    def read(self, records: int, nbytes: int, now: float) -> None:
        with self._lock:
            self.records_in.mark(records, now)
            self.bytes_in.mark(nbytes, now)

    def wrote(self, records_total: int, bytes_total: int, now: float) -> None:
        """The chain's output counts so far (kept by its writers)."""
        with self._lock:
            self.records_out.set_count(records_total, now)
            self.bytes_out.set_count(bytes_total, now)

    def idle(self, seconds: float, now: float) -> None:
        with self._lock:
            self.time.add(IDLE, seconds, now)

    def backpressured(self, seconds: float, now: float) -> None:
        with self._lock:
            self.time.add(BACKPRESSURED, seconds, now)

    def queues(self, input_usage: float, output_usage: float) -> None:
        self.input_queue_usage = min(1.0, max(0.0, input_usage))
        self.output_queue_usage = min(1.0, max(0.0, output_usage))

    # -- checkpoints ------------------------------------------------------------------------------
    def first_barrier(self, checkpoint_id: int, now: float) -> None:
        """The first barrier of `checkpoint_id` arrived: alignment starts."""
        with self._lock:
            self._alignment_started.setdefault(checkpoint_id, now)
            for old in [c for c in self._alignment_started if c < checkpoint_id - 8]:
                del self._alignment_started[old]

    def snapshot_taken(self, checkpoint_id: int, sync_seconds: float, now: float) -> None:
        """The snapshot of `checkpoint_id` ran for `sync_seconds` and ended at `now`."""
        with self._lock:
            started = self._alignment_started.pop(checkpoint_id, None)
            aligned_at = now - sync_seconds
            self.checkpoint_id = checkpoint_id
            self.checkpoint_alignment_ms = int(max(0.0, aligned_at - started) * 1000) if started is not None else 0
            self.checkpoint_sync_ms = int(sync_seconds * 1000)
            self.checkpoint_async_ms = 0

    def snapshot_written(self, checkpoint_id: int, async_seconds: float) -> None:
        with self._lock:
            if checkpoint_id == self.checkpoint_id:
                self.checkpoint_async_ms = int(async_seconds * 1000)

    def snapshot(self, now: float) -> TaskIOSnapshot:
        with self._lock:
            shares = self.time.ms_per_second(now)
            return TaskIOSnapshot(
                records_in=self.records_in.count,
                records_out=self.records_out.count,
                bytes_in=self.bytes_in.count,
                bytes_out=self.bytes_out.count,
                records_in_per_second=self.records_in.rate(now),
                records_out_per_second=self.records_out.rate(now),
                bytes_in_per_second=self.bytes_in.rate(now),
                bytes_out_per_second=self.bytes_out.rate(now),
                busy_ms_per_second=shares[BUSY],
                idle_ms_per_second=shares[IDLE],
                backpressured_ms_per_second=shares[BACKPRESSURED],
                input_queue_usage=self.input_queue_usage,
                output_queue_usage=self.output_queue_usage,
                checkpoint_id=self.checkpoint_id,
                checkpoint_alignment_ms=self.checkpoint_alignment_ms,
                checkpoint_sync_ms=self.checkpoint_sync_ms,
                checkpoint_async_ms=self.checkpoint_async_ms,
            )
