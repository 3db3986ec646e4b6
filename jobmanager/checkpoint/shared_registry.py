"""SharedStateRegistry: which shared state files the retained checkpoints of a job still need.

An incremental rocksdb checkpoint (taskmanager/state/rocksdb_backend.py) uploads an SST file
once, to `<dir>/<job-id>/shared/`, and every later checkpoint of the same database that still
has the file references it; an incremental memory-backend checkpoint of a keyed aggregate
(taskmanager/state/changelog.py) references its chain's files there the same way. A shared
file may be deleted only when no retained checkpoint references it. Pure (no I/O): the JobMaster
(jobmanager/job_master.py) registers every completed checkpoint's handles, asks what to delete
when it discards one, and deletes the files it is told to.

* `register(n, handles)`: checkpoint n completed (or a restore made it the job's base);
  each shared file it references gains one reference.
* `discard(n, handles)`: checkpoint n goes. If it was registered, each of its files loses one
  reference; those left with none are returned. If it was not (an aborted checkpoint), the
  files it uploaded itself (`new` in a handle) that no registered checkpoint references are
  returned: the task never references a file of a checkpoint it was not told had completed.
* A file no registered checkpoint ever referenced is never returned by a release: after a
  JobManager failover the registry knows only the restored checkpoint. The other checkpoints
  an older leader retained are cleaned from their own `_metadata` instead: when a new attempt
  starts from the restored checkpoint, `left_behind` gives the shared files they reference
  that the restored one does not (inside the job's `shared/` directory only), and those go
  with them. New uploads of the new attempt are never among them: they are in no old
  checkpoint's metadata.
* Uploads no registered checkpoint ever listed (a task's that never acknowledged, or whose
  checkpoint aborted before its acknowledgement arrived) go the same way: at that start,
  `orphaned` gives every shared file uploaded for an id handed out before the attempt that
  the restored checkpoint does not reference (the id is in the file's name).

Checkpoints are discarded oldest first, so a file is released only after every older
checkpoint that might hold it unregistered has already gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sluice.checkpoints.shared_names import checkpoint_of
from sluice.states import StateBackend


def shared_files(handle: object) -> set[str]:
    """The shared file paths a task's state handle references."""
    out: set[str] = set()
    if isinstance(handle, Mapping):
        for h in (handle.get("keyed") or {}).values():
            if _shares(h):
                out.update(str(p) for p in (h.get("shared") or {}).values())
    return out


def _shares(h: object) -> bool:
    """A keyed handle that references shared files: a rocksdb database's, or a memory-backend
    chain's (sluice/checkpoints/changelog_files.py)."""
    return isinstance(h, Mapping) and (h.get("backend") == StateBackend.ROCKSDB or "chain" in h)


def new_files(handle: object) -> set[str]:
    """The shared file paths a task's state handle uploaded for its own checkpoint."""
    out: set[str] = set()
    if isinstance(handle, Mapping):
        for h in (handle.get("keyed") or {}).values():
            if _shares(h):
                shared = h.get("shared") or {}
                out.update(str(shared[n]) for n in h.get("new") or [] if n in shared)
    return out


def metadata_handles(metadata: Mapping[str, Any]) -> list[object]:
    """Every task's state handle in a checkpoint's `_metadata` (jobmanager/checkpoint/metadata.py)."""
    return [h for by_subtask in metadata.get("tasks", {}).values() for h in by_subtask.values()]


def orphaned(paths: Iterable[str], kept: frozenset[str], upper: int, shared_dir: str) -> list[str]:
    """The shared files among `paths` (a listing of `shared_dir`) that no checkpoint can need once
    an attempt restored from a checkpoint whose files are `kept` starts with checkpoint ids from
    `upper`: uploaded for an id below `upper` (sluice/checkpoints/shared_names.py) and not kept.
    Every older checkpoint but the restored one is discarded then, and the new attempt's tasks
    build only on the restored one. A name without an id, or a path outside `shared_dir`, is
    never returned. Sorted."""
    out = []
    for path in paths:
        cid = checkpoint_of(path)
        if cid is not None and cid < upper and path not in kept and _inside(path, shared_dir):
            out.append(path)
    return sorted(out)


def left_behind(handles: Iterable[object], kept: frozenset[str], shared_dir: str) -> list[str]:
    """The shared files a dropped checkpoint's handles reference that the checkpoint kept does
    not, and that lie inside `shared_dir` (a path elsewhere is never deleted), sorted."""
    files = set().union(*(shared_files(h) for h in handles))
    return sorted(f for f in files if f not in kept and _inside(f, shared_dir))


def _inside(path: str, shared_dir: str) -> bool:
    """Whether `path` lies inside `shared_dir` (a path elsewhere is never deleted)."""
    return path.startswith(shared_dir.rstrip("/") + "/") and "/../" not in path


class SharedStateRegistry:
    def __init__(self) -> None:
        self._refs: dict[str, int] = {}  # shared file -> retained checkpoints referencing it
        self._files: dict[int, frozenset[str]] = {}  # registered checkpoint -> its shared files

    def register(self, checkpoint_id: int, handles: Iterable[object]) -> None:
        if checkpoint_id in self._files:
            return  # registered once (a restore of the checkpoint this registry completed)
        files = frozenset().union(*(shared_files(h) for h in handles))
        self._files[checkpoint_id] = files
        for f in files:
            self._refs[f] = self._refs.get(f, 0) + 1

    def discard(self, checkpoint_id: int, handles: Iterable[object] = ()) -> list[str]:
        """The shared files to delete now that checkpoint `checkpoint_id` goes, sorted."""
        files = self._files.pop(checkpoint_id, None)
        if files is None:  # never completed here: only what it uploaded itself, if nobody holds it
            uploaded = set().union(*(new_files(h) for h in handles))
            return sorted(f for f in uploaded if f not in self._refs)
        dead = []
        for f in files:
            left = self._refs[f] - 1
            if left:
                self._refs[f] = left
            else:
                del self._refs[f]
                dead.append(f)
        return sorted(dead)

    def references(self, path: str) -> int:
        return self._refs.get(path, 0)

    def registered(self) -> list[int]:
        return sorted(self._files)

    def files_of(self, checkpoint_id: int) -> frozenset[str]:
        """The shared files a registered checkpoint references (none for another)."""
        return self._files.get(checkpoint_id, frozenset())

    def __len__(self) -> int:
        """Shared files referenced."""
        return len(self._refs)
