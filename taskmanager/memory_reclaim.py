"""Giving a finished task's memory back, so that the next job on this TaskManager starts from the
memory the process had before, not on top of the last job's state (docs/monitoring.md, "Memory").

A task's objects form reference cycles (the task and its thread, the task and its checkpointer),
so when a task ends its keyed state, buffers and snapshot tables are garbage that only Python's
full collection frees, and that collection runs rarely in a long-lived process. Until it runs, a
new job's state is allocated beside the old one: a TaskManager that ran four 1 M-key jobs in a row
peaked 50 % higher at the fourth. And what Python frees goes back to glibc's heaps, which keep it
(RSS stays) unless asked to trim.

So each ended task thread is handed to one background thread here, which waits for the thread to
be gone, then runs a full collection, releases the Arrow pool's unused memory and trims glibc's
heaps, once for all the tasks that ended together. It logs what the process held before and after
(the ended tasks' tags are the log line's correlation ids). The collection holds the interpreter
for tens of milliseconds, so it first waits (up to REPORTS_WAIT) for the ended tasks' reports to
reach the JobManager: run at once, it delayed a job's last FINISHED report by ~50 ms.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
import time
from collections.abc import Callable

import psutil
import pyarrow as pa

log = logging.getLogger("sluice.taskmanager")

MiB = 1 << 20
JOIN_TIMEOUT = 5.0  # an ended task's thread is past its exit hooks: it is gone within microseconds
REPORTS_WAIT = 1.0  # seconds to wait for the queued reports to be delivered before collecting


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0) (heap tops and free pages inside every arena back to the system), or
    nothing where the C library has none."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


_trim = _malloc_trim()


def reclaim() -> None:
    """Free what unreachable objects hold and give the process's free memory back to the system."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    _trim()


class MemoryReclaimer:
    """`task_ended(thread, tag)` from a task's exit hook; a daemon thread reclaims once the ended
    threads are gone and `reports_sent(timeout)` returned (the TaskManager's: its queued reports
    delivered). `rss` and `reclaim` are inputs so that tests can watch it work."""

    def __init__(
        self,
        rss: Callable[[], int] = lambda: psutil.Process().memory_info().rss,
        reclaim: Callable[[], None] = reclaim,
        reports_sent: Callable[[float], object] = lambda _timeout: True,
    ) -> None:
        self._rss = rss
        self._reclaim = reclaim
        self._reports_sent = reports_sent
        self._pending: list[tuple[threading.Thread, str]] = []
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self.rounds = 0  # reclaims done (for tests and logs)

    def task_ended(self, thread: threading.Thread, tag: str) -> None:
        with self._cond:
            self._pending.append((thread, tag))
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="memory-reclaim", daemon=True)
                self._worker.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                ended, self._pending = self._pending, []
            for thread, _ in ended:
                if thread is not threading.current_thread():
                    thread.join(JOIN_TIMEOUT)
            tags = " ".join(tag for _, tag in ended)
            try:
                self._reports_sent(REPORTS_WAIT)
                before, t0 = self._rss(), time.monotonic()
                self._reclaim()
                after = self._rss()
            except Exception:
                log.exception("%s reclaiming memory after the tasks ended failed", tags)
                continue
            self.rounds += 1
            log.info(
                "%s ended: reclaimed memory in %.0f ms, RSS %d -> %d MiB",
                tags,
                (time.monotonic() - t0) * 1000,
                before // MiB,
                after // MiB,
            )
