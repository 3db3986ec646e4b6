"""A TaskManager's metrics (docs/monitoring.md): its tasks' I/O metrics for heartbeats
(TaskIOMetrics) and for its Prometheus endpoint, and its own (slots, memory)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import psutil

from sluice.metrics import counters
from sluice.metrics.prometheus import Sample
from sluice.metrics.task_metrics import TaskIOSnapshot
from sluice.v1 import common_pb2

if TYPE_CHECKING:
    from taskmanager.task import Task

log = logging.getLogger("sluice.taskmanager.metrics")

# TaskIOSnapshot field -> (Flink's metric name, help); the counters (numRecordsIn, ...) come from
# the task's TaskCounters, each field named as sluice/metrics/counters.py says
TASK_METRICS: dict[str, tuple[str, str]] = {
    "bytes_in": ("numBytesIn", "Arrow bytes of the batches the task read from its inputs"),
    "bytes_out": ("numBytesOut", "Arrow bytes of the batches the task sent"),
    "records_in_per_second": ("numRecordsInPerSecond", "rows in per second over the last minute"),
    "records_out_per_second": ("numRecordsOutPerSecond", "rows out per second over the last minute"),
    "bytes_in_per_second": ("numBytesInPerSecond", "bytes in per second over the last minute"),
    "bytes_out_per_second": ("numBytesOutPerSecond", "bytes out per second over the last minute"),
    "busy_ms_per_second": ("busyTimeMsPerSecond", "ms per second neither idle nor backpressured"),
    "idle_ms_per_second": ("idleTimeMsPerSecond", "ms per second waiting for input"),
    "backpressured_ms_per_second": (
        "backPressuredTimeMsPerSecond",
        "ms per second waiting for room in a full output queue",
    ),
    "input_queue_usage": ("inPoolUsage", "queued input batches / input credit, 0..1"),
    "output_queue_usage": ("outPoolUsage", "queued output batches / output capacity, 0..1"),
    "checkpoint_alignment_ms": ("checkpointAlignmentTime", "ms from the first to the last barrier, last checkpoint"),
    "checkpoint_sync_ms": ("checkpointSyncDuration", "ms of the snapshot on the task thread, last checkpoint"),
    "checkpoint_async_ms": ("checkpointAsyncDuration", "ms writing the snapshot out, last checkpoint"),
}


def io_proto(snapshot: TaskIOSnapshot) -> common_pb2.TaskIOMetrics:
    fields = asdict(snapshot)
    fields.pop("records_in"), fields.pop("records_out")  # TaskMetrics has them (counters)
    return common_pb2.TaskIOMetrics(**fields)


def task_samples(task: Task, resource_id: str, now: float) -> Iterator[Sample]:
    labels = (
        ("job_id", task.job_id),
        ("task", task.name),
        ("subtask", str(task.tdd.subtask_index)),
        ("attempt", str(task.tdd.attempt)),
        ("tm_id", resource_id),
    )
    snapshot = asdict(task.io_snapshot(now))
    values = task.counters()
    for counter in counters.COUNTERS:
        yield Sample(
            f"taskmanager_job_task_{counter.metric}", counter.help, labels, float(getattr(values, counter.field))
        )
    for field, (name, help_text) in TASK_METRICS.items():
        yield Sample(f"taskmanager_job_task_{name}", help_text, labels, float(snapshot[field]))
    watermark = task.watermark
    if watermark is not None:
        yield Sample(
            "taskmanager_job_task_currentInputWatermark", "the task's input watermark (ms)", labels, float(watermark)
        )


class TaskManagerMetrics:
    """Collects a TaskManager's samples at every scrape."""

    def __init__(self, resource_id: str, slots: int, tasks: Any, engine: Any) -> None:
        self.resource_id, self.slots, self.tasks, self.engine = resource_id, slots, tasks, engine
        self._process = psutil.Process()

    def collect(self) -> Iterator[Sample]:
        now = time.monotonic()
        labels = (("tm_id", self.resource_id),)
        tasks = self.tasks.all()
        busy_slots = {t.tdd.slot_index for t in tasks}
        yield Sample("taskmanager_Status_taskSlotsTotal", "slots of this TaskManager", labels, self.slots)
        yield Sample(
            "taskmanager_Status_taskSlotsAvailable", "slots without a task", labels, self.slots - len(busy_slots)
        )
        yield Sample("taskmanager_Status_numRunningTasks", "tasks deployed here", labels, len(tasks))
        try:
            memory = self._process.memory_info()
            yield Sample(
                "taskmanager_Status_Python_Memory_RSS", "resident bytes of the Python process", labels, memory.rss
            )
        except psutil.Error:
            pass
        heap = self._jvm_heap()
        if heap is not None:
            yield Sample("taskmanager_Status_JVM_Memory_Heap_Used", "heap bytes used by Spark's JVM", labels, heap[0])
            yield Sample("taskmanager_Status_JVM_Memory_Heap_Max", "heap bytes Spark's JVM may use", labels, heap[1])
        for task in tasks:
            try:
                yield from task_samples(task, self.resource_id, now)
            except Exception:
                log.debug("metrics of %s unavailable", task.tag, exc_info=True)

    def _jvm_heap(self) -> tuple[int, int] | None:
        """(used, max) heap bytes of the local Spark JVM; None for Spark Connect or before Spark started."""
        spark = getattr(self.engine, "spark", None)
        jvm = getattr(spark, "_jvm", None) if spark is not None else None
        if jvm is None:
            return None
        try:
            runtime = jvm.java.lang.Runtime.getRuntime()
            return int(runtime.totalMemory() - runtime.freeMemory()), int(runtime.maxMemory())
        except Exception:  # noqa: BLE001 — a metric; the JVM may be stopping
            return None
