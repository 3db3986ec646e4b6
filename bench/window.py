"""One measurement window for both systems, taken from the outside in the same way:
**first record read → last result committed**.

`WindowWatch` watches two directories with inotify (a thread reading `inotify_simple` events
and stamping each with `time.monotonic()` when it is read):

- the input directory, for IN_ACCESS on its files: the first read(2) of any input file, by any
  process, starts the window. A directory listing is an IN_ACCESS of the directory itself (the
  ISDIR flag, no name) and does not count, so a system may list its input before it reads it;
  neither system may read the files before its job runs (both pass an explicit schema: no
  inference). Once the first read is seen the input watch is removed (a read is an event per
  read(2) call; the rest would only flood the queue).
- the output directory, for IN_MOVED_TO, IN_CLOSE_WRITE and IN_CREATE: when each visible file
  (a name not starting with '.' or '_') was committed. Both systems commit by rename: Sluice's
  file sink renames a hidden `.part-...inprogress` to `part-<checkpoint>-<subtask>-...csv` when
  its checkpoint completes (or at the end of the input), the peer's foreachBatch writer renames
  `.batch-<id>.csv.tmp` to `batch-<id>.csv`. So a visible name's commit time is its first
  IN_MOVED_TO; a file written in place under its visible name would count at its IN_CLOSE_WRITE
  (IN_CREATE only when neither was seen).

After the run, `measure()` ends the window at the commit after which the committed output equals
the final expected counts: bench/output_check.py's parsers read the committed output in commit
order, and its `final` map names, for every key, the file holding the key's last (final) line;
the window ends at the latest commit time among those files. The launch time (job submitted /
query started by the harness) is recorded by the caller: startup = launch → first read, reported
apart from the window.

The pure part (`first_read`, `commit_times`, `window_end`, `measure`) takes plain event lists, so
it is unit-tested without inotify (tests/unit/test_bench_window.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

INPUT = "input"
OUTPUT = "output"
# what an output event's mask means, in the order of preference for a commit time
COMMIT_KINDS = ("moved_to", "close_write", "create")


@dataclass(frozen=True)
class FsEvent:
    t: float  # time.monotonic() when the watcher read it
    where: str  # INPUT or OUTPUT
    name: str  # file name inside the watched directory ('' for the directory itself)
    kinds: tuple[str, ...]  # "access", "moved_to", "close_write", "create"
    is_dir: bool = False


@dataclass
class Window:
    """One run's window. Times are time.monotonic() seconds; None where not seen."""

    launch: float | None
    first_read: float | None
    end: float | None
    end_part: str | None = None
    commits: int = 0  # visible output files committed (commit events seen)
    error: str | None = None  # why the window could not be taken
    missing: list[str] = field(default_factory=list)  # parts holding a final line without a commit event

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_read is not None and self.end is not None

    @property
    def seconds(self) -> float | None:
        """First read → last result committed."""
        if self.first_read is None or self.end is None:
            return None
        return self.end - self.first_read

    @property
    def startup(self) -> float | None:
        """Launch → first read."""
        if self.launch is None or self.first_read is None:
            return None
        return self.first_read - self.launch

    def rate(self, events: int) -> float | None:
        s = self.seconds
        return events / s if s and s > 0 and self.ok else None


def visible(name: str) -> bool:
    return bool(name) and not name.startswith((".", "_"))


def first_read(events: Iterable[FsEvent]) -> FsEvent | None:
    """The first read of a file of the input directory (directory listings do not count)."""
    reads = [e for e in events if e.where == INPUT and "access" in e.kinds and e.name and not e.is_dir]
    return min(reads, key=lambda e: e.t) if reads else None


def commit_times(events: Iterable[FsEvent]) -> dict[str, float]:
    """Visible output name -> its commit time: first IN_MOVED_TO, else first IN_CLOSE_WRITE, else
    first IN_CREATE."""
    seen: dict[str, dict[str, float]] = {}
    for e in events:
        if e.where != OUTPUT or e.is_dir or not visible(e.name):
            continue
        kinds = seen.setdefault(e.name, {})
        for k in e.kinds:
            if k in COMMIT_KINDS and (k not in kinds or e.t < kinds[k]):
                kinds[k] = e.t
    out = {}
    for name, kinds in seen.items():
        for k in COMMIT_KINDS:
            if k in kinds:
                out[name] = kinds[k]
                break
    return out


def window_end(
    final: Mapping[str, tuple[int, str, int]], commits: Mapping[str, float]
) -> tuple[float | None, str | None, list[str]]:
    """The commit after which the committed output holds every key's final line: the latest
    commit time among the files holding a final line (`final`: output_check's key -> (count,
    file, line)). Returns (time, file name, files holding a final line with no commit event)."""
    parts = {os.path.basename(path) for _count, path, _line in final.values()}
    missing = sorted(p for p in parts if p not in commits)
    known = [(commits[p], p) for p in parts if p in commits]
    if missing or not known:
        return None, None, missing
    t, name = max(known)
    return t, name, missing


def measure(launch: float | None, events: Iterable[FsEvent], check, overflowed: bool = False) -> Window:
    """The window of a run whose committed output `check` (bench/output_check.OutputCheck) passed
    the exactly-once check, from the events its WindowWatch saw."""
    events = list(events)
    read = first_read(events)
    commits = commit_times(events)
    w = Window(launch, read.t if read else None, None, commits=len(commits))
    if overflowed:
        w.error = "inotify queue overflowed: events were lost"
    elif read is None:
        w.error = "no read of an input file seen"
    elif check is None or not check.ok:
        w.error = "output check failed: no final counts to end the window at"
    else:
        w.end, w.end_part, w.missing = window_end(check.final, commits)
        if w.missing:
            w.error = f"no commit event for {len(w.missing)} output files, e.g. {w.missing[0]}"
        elif w.end is None:
            w.error = "no committed output"
    return w


# -- the watcher ---------------------------------------------------------------------------------------
class WindowWatch:
    """inotify on `input_dir` (first read) and `output_dir` (commits), from `start` to `stop`.
    Both directories must exist. `on_first_read(t)` is called from the watcher thread once, at the
    first read (e.g. to start a ResourceMeter). Use as a context manager, or call stop() in a
    finally: the thread and the inotify descriptor are released there."""

    def __init__(self, input_dir: str, output_dir: str, on_first_read: Callable[[float], None] | None = None):
        self.input_dir, self.output_dir = input_dir, output_dir
        self.on_first_read = on_first_read
        self.events: list[FsEvent] = []
        self.overflowed = False
        self.callback_error: BaseException | None = None
        self.first_read_t: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ino: Any = None  # an inotify_simple.INotify while watching
        self._wd_in: int | None = None
        self._wd_out: int | None = None

    def start(self) -> WindowWatch:
        from inotify_simple import INotify, flags

        self._flags = flags
        self._ino = INotify()
        try:
            self._wd_in = self._ino.add_watch(self.input_dir, flags.ACCESS)
            self._wd_out = self._ino.add_watch(self.output_dir, flags.MOVED_TO | flags.CLOSE_WRITE | flags.CREATE)
        except BaseException:
            self._ino.close()
            raise
        self._thread = threading.Thread(target=self._loop, name="window-watch", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        f = self._flags
        assert self._ino is not None
        while not self._stop.is_set():
            try:
                batch = self._ino.read(timeout=50)
            except OSError:
                if self._stop.is_set():
                    return
                raise
            t = time.monotonic()
            for ev in batch:
                if ev.mask & f.Q_OVERFLOW:
                    self.overflowed = True
                    continue
                where = INPUT if ev.wd == self._wd_in else OUTPUT if ev.wd == self._wd_out else None
                if where is None:
                    continue
                kinds = tuple(
                    k
                    for k, bit in (
                        ("access", f.ACCESS),
                        ("moved_to", f.MOVED_TO),
                        ("close_write", f.CLOSE_WRITE),
                        ("create", f.CREATE),
                    )
                    if ev.mask & bit
                )
                if not kinds:
                    continue  # IN_IGNORED after the input watch is removed
                e = FsEvent(t, where, ev.name, kinds, bool(ev.mask & f.ISDIR))
                self.events.append(e)
                if where == INPUT and self.first_read_t is None and e.name and not e.is_dir:
                    self.first_read_t = t
                    try:
                        self._ino.rm_watch(self._wd_in)  # the rest of the reads would only flood the queue
                    except OSError:
                        pass
                    if self.on_first_read is not None:
                        try:
                            self.on_first_read(t)
                        except BaseException as exc:  # noqa: BLE001 — reported by the caller, never kills the watch
                            self.callback_error = exc

    def stop(self) -> list[FsEvent]:
        """Stop the thread (after draining what the kernel already queued) and close inotify."""
        if self._thread is not None:
            time.sleep(0.06)  # one more read: events queued just before stop
            self._stop.set()
            self._thread.join(5)
            self._thread = None
        if self._ino is not None:
            try:
                self._ino.close()
            except OSError:
                pass
            self._ino = None
        return list(self.events)

    def __enter__(self) -> WindowWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
