"""What a new attempt restored from a checkpoint removes before it counts on storage: every
other checkpoint with an id handed out before the attempt (its `_metadata`, its directory, its
pointer in ZooKeeper and the shared files only it needed) and the shared uploads no checkpoint
lists (docs/checkpoints.md "Retention and clean-up", docs/state-backends.md "Shared-file
lifetime"); and what an ended job removes: the shared uploads none of its checkpoints lists
(`EndSweep`), its checkpoints themselves being kept.

A checkpoint of the previous attempt may still be persisting when the new attempt starts: its
`_metadata` and then its ZooKeeper pointer are written off the JobManager's lock. The sweep
waits for those writes before it lists anything, and it removes a dropped checkpoint's pointer
before its files, so that no pointer in ZooKeeper is ever left naming a deleted checkpoint
(a JobManager taking over restores from the highest pointer). If a write does not end within
`wait` seconds, the sweep keeps everything: a leftover costs disk, a dangling pointer a job.

Runs on the JobManager's I/O pool (jobmanager/master/checkpointing.py starts it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jobmanager.checkpoint.shared_registry import left_behind, metadata_handles, orphaned, shared_files
from sluice.checkpoints.storage import CheckpointCorrupt, CheckpointStorage

log = logging.getLogger("sluice.jobmanager.job")

PERSIST_WAIT = 60.0  # seconds the sweep waits for a previous attempt's checkpoint still persisting


@dataclass(frozen=True)
class RestartSweep:
    storage: CheckpointStorage
    keep: int  # the checkpoint the attempt restored from
    upper: int  # the first id of the new attempt: only lower ids are swept
    kept: frozenset[str]  # the shared files the registry holds for `keep`
    dropped_files: Sequence[str]  # the registry's files of its dropped checkpoints
    persisting: Sequence[threading.Event]  # set when each earlier persist ended, either way
    unpublish: Callable[[int], None] | None  # removes a checkpoint's ZooKeeper pointer (None: no HA)
    tag: str  # the job's log tag
    wait: float = PERSIST_WAIT

    def __call__(self) -> None:
        if not persists_ended(self.persisting, self.wait):
            log.warning(
                "%s a checkpoint of the previous attempt is still persisting after %.0f s: "
                "older checkpoints are kept this time",
                self.tag,
                self.wait,
            )
            return
        storage = self.storage
        for cid in storage.list_checkpoints():
            if cid != self.keep and cid < self.upper:
                self._drop(cid)
        storage.delete_files(list(self.dropped_files))
        # uploads no checkpoint listed (tasks that never acknowledged), by the id in their names;
        # the restored checkpoint's files from its own metadata as well, so that a registry that
        # does not know it cannot make its files look unneeded
        try:
            restored = listed_files(storage, self.keep)
        except CheckpointCorrupt:
            return  # its metadata is not here (a checkpoint of another job, or unreadable): keep all
        gone = orphaned(storage.list_shared(), self.kept | restored, self.upper, storage.shared_dir())
        if gone:
            log.info("%s %d orphaned shared state files go: %s", self.tag, len(gone), ", ".join(gone[:5]))
            storage.delete_files(gone)

    def _drop(self, cid: int) -> None:
        """Checkpoint `cid`: its pointer first, then its shared files (from its own metadata: an
        older leader's checkpoint the registry never knew) and its directory."""
        storage = self.storage
        if self.unpublish is not None:
            self.unpublish(cid)
        try:
            handles = metadata_handles(storage.read_metadata(cid))
        except CheckpointCorrupt:
            handles = []
        storage.delete_files(left_behind(handles, self.kept, storage.shared_dir()))
        storage.discard(cid)


def listed_files(storage: CheckpointStorage, checkpoint_id: int) -> frozenset[str]:
    """The shared files checkpoint `checkpoint_id`'s `_metadata` lists (CheckpointCorrupt when it
    cannot be read)."""
    return frozenset(f for h in metadata_handles(storage.read_metadata(checkpoint_id)) for f in shared_files(h))


def persists_ended(persisting: Sequence[threading.Event], wait: float) -> bool:
    """Whether every persist of `persisting` ended within `wait` seconds (waiting for them)."""
    deadline = time.monotonic() + wait
    return all(e.wait(max(0.0, deadline - time.monotonic())) for e in persisting)


@dataclass(frozen=True)
class EndSweep:
    """An ended job's shared uploads that no checkpoint in its directory lists (a task killed
    between its upload and its acknowledgement, in the last attempt): every checkpoint it kept
    stays whole. Waits for checkpoints still persisting, as RestartSweep does; keeps everything
    when one does not end or a checkpoint's `_metadata` cannot be read."""

    storage: CheckpointStorage
    upper: int  # ids below it were handed out: only their uploads can be orphans
    persisting: Sequence[threading.Event]
    tag: str
    wait: float = PERSIST_WAIT

    def __call__(self) -> None:
        if not persists_ended(self.persisting, self.wait):
            log.warning("%s a checkpoint is still persisting after %.0f s: shared files are kept", self.tag, self.wait)
            return
        storage = self.storage
        try:
            # one without _metadata never completed: it lists nothing
            listed = frozenset().union(
                *(listed_files(storage, cid) for cid in storage.list_checkpoints() if storage.has_metadata(cid))
            )
        except CheckpointCorrupt as exc:
            log.info("%s shared files kept: %s", self.tag, exc)
            return
        gone = orphaned(storage.list_shared(), listed, self.upper, storage.shared_dir())
        if gone:
            log.info("%s ended: %d orphaned shared state files go: %s", self.tag, len(gone), ", ".join(gone[:5]))
            storage.delete_files(gone)
