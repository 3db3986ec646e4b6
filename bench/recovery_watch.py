"""How the recovery suite (bench/recovery_suite.py) watches committed output from the outside,
identically for both systems: a thread lists the output directory every DIR_POLL s and reads every
new version of a committed file (a new name, or a name rewritten) when it first sees it; the kill's
moment; and the two latencies taken from the versions seen (`recovery_times`):

  first output   kill -> the first committed file version first seen after the kill
  progressing    kill -> the first committed file version first seen after the kill that was written
                 after the kill (mtime) and holds a (key, count) line above every count of that key
                 committed before the kill

No Spark, no cluster: files and a thread only.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DIR_POLL = 0.02  # seconds between output directory listings


@dataclass
class Version:
    """One version of a committed output file, read when first seen."""

    name: str
    seen: float  # monotonic time first seen
    mtime: float  # wall clock, when it was written
    maxima: dict[str, int]  # key -> highest count in it


def file_maxima(text: str) -> dict[str, int]:
    """Per key, the highest count in `key,count` lines (lines that are not such are skipped:
    the output check judges them)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, comma, count = line.rpartition(",")
        if not comma:
            continue
        try:
            n = int(count)
        except ValueError:
            continue
        if n > out.get(key, -1):
            out[key] = n
    return out


def sluice_committed(name: str) -> bool:
    return name.startswith("part-")  # the file sink's visible (committed) parts; pending ones are hidden


def peer_committed(name: str) -> bool:
    return name.startswith("batch-") and name.endswith(".csv")


class OutputWatch(threading.Thread):
    """Lists `path` every DIR_POLL s; each new version of a committed file (a new name, or a new
    inode/mtime under a known name) is read at once and kept as a Version, in the order seen."""

    def __init__(self, path: str, committed: Callable[[str], bool]):
        super().__init__(daemon=True)
        self.path, self.committed = path, committed
        self.versions: list[Version] = []
        self._ids: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def scan(self) -> int:
        """One listing now; returns how many versions are known after it."""
        with self._lock:
            try:
                entries = list(os.scandir(self.path))
            except FileNotFoundError:
                return len(self.versions)
            now = time.monotonic()
            for e in sorted(entries, key=lambda e: e.name):
                if not self.committed(e.name):
                    continue
                try:
                    st = e.stat()
                    ident = (st.st_ino, st.st_mtime_ns)
                    if self._ids.get(e.name) == ident:
                        continue
                    with open(e.path) as f:
                        text = f.read()
                except FileNotFoundError:
                    continue
                self._ids[e.name] = ident
                self.versions.append(Version(e.name, now, st.st_mtime, file_maxima(text)))
            return len(self.versions)

    def run(self) -> None:
        while not self._stop_event.wait(DIR_POLL):
            self.scan()

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:  # started
            self.join(5)
        self.scan()

    def first_seen(self) -> float | None:
        with self._lock:
            return self.versions[0].seen if self.versions else None


def recovery_times(versions: Sequence[Version], n_before: int, t_kill: float, t_kill_wall: float) -> dict:
    """The two latencies from the versions in the order seen, the first `n_before` of them seen
    before the kill (at monotonic t_kill, wall t_kill_wall): see the module docstring."""
    before: dict[str, int] = {}
    for v in versions[:n_before]:
        for k, c in v.maxima.items():
            if c > before.get(k, -1):
                before[k] = c
    after = versions[n_before:]
    first = min((v.seen for v in after), default=None)
    progressing = None
    progressing_name = None
    for v in sorted(after, key=lambda v: v.seen):
        if v.mtime >= t_kill_wall and any(c > before.get(k, -1) for k, c in v.maxima.items()):
            progressing, progressing_name = v.seen, v.name
            break
    return {
        "first_output": None if first is None else first - t_kill,
        "progressing": None if progressing is None else progressing - t_kill,
        "progressing_file": progressing_name,
        "versions_before": n_before,
        "versions_after": len(after),
        "last_seen": max((v.seen for v in versions), default=None),
    }


@dataclass(frozen=True)
class Kill:
    """The moment of a kill: how many versions were seen before it, its monotonic and wall time."""

    versions_before: int
    t: float
    wall: float

    @classmethod
    def now(cls, watch: OutputWatch) -> Kill:
        """A last listing, then the clocks: call right before the kill."""
        n = watch.scan()
        return cls(n, time.monotonic(), time.time())

    def figures(self, watch: OutputWatch, t_launch: float) -> dict:
        """A run's measured times: kill_at and total from the launch, the two latencies from the kill."""
        r: dict = {"kill_at": self.t - t_launch}
        r.update(recovery_times(watch.versions, self.versions_before, self.t, self.wall))
        r["total"] = None if r["last_seen"] is None else r["last_seen"] - t_launch
        return r
