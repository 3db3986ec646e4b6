"""The upload of one incremental memory-backend checkpoint (a plan of taskmanager/state/changelog.py),
run by the checkpointer's upload thread like a rocksdb snapshot: it writes the new file into the
job's shared directory (COMPACT: merged with the completed chain's files, read back) and returns the
handle sluice/checkpoints/changelog_files.py describes."""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow.fs as pafs

from sluice.checkpoints import changelog_files
from taskmanager.state.changelog import ChainWrite, Step

log = logging.getLogger("sluice.taskmanager.state")


class ChainUpload:
    def __init__(self, write: ChainWrite, tag: str = "") -> None:
        self.write = write
        self.tag = tag
        self.written: list[tuple[pafs.FileSystem, str]] = []

    def upload(
        self,
        fs: pafs.FileSystem,
        checkpoint_dir: str,  # noqa: ARG002 — a chain's files are all shared
        shared_dir: str,
        operator_id: str,
        subtask: int,  # noqa: ARG002 — the file names are unique
        key_groups: tuple[int, int],
    ) -> dict[str, Any]:
        w = self.write
        directory = f"{shared_dir}/{operator_id}"
        uploaded = 0
        if w.table is not None and w.name is not None:
            started = time.monotonic()
            table = w.table
            if w.step == Step.COMPACT:
                parts = [changelog_files.read_table(fs, f"{directory}/{f.name}") for f in w.read]
                merged = changelog_files.merge([*parts, table], w.key_columns)
                assert merged is not None
                table = merged.cast(table.schema) if merged.schema != table.schema else merged
            fs.create_dir(directory, recursive=True)
            path = f"{directory}/{w.name}"
            self.written.append((fs, path))
            uploaded = changelog_files.write_table(fs, path, table)
            if w.step != Step.DELTA:
                log.info(
                    "%s checkpoint %d: %s base of %d keys written in %.3f s (%d bytes)",
                    self.tag,
                    w.checkpoint_id,
                    w.step,
                    table.num_rows,
                    time.monotonic() - started,
                    uploaded,
                )
        self.written = []
        paths = {f.name: f"{directory}/{f.name}" for f in w.chain}
        full = 0
        for f in w.chain:
            info = fs.get_file_info(paths[f.name])
            if info.type != pafs.FileType.File:
                raise FileNotFoundError(f"checkpoint {w.checkpoint_id}: state file {paths[f.name]} is gone")
            full += int(info.size or 0)
        return {
            "chain": [paths[f.name] for f in w.chain],
            "key_columns": list(w.key_columns),
            "key_groups": list(key_groups),
            "rows": w.rows,
            "size": uploaded,
            "full_size": full,
            "shared": paths,
            "new": [w.name] if w.table is not None and w.name is not None else [],
        }

    def discard(self) -> None:
        """The checkpoint failed: its new file goes (no checkpoint references it)."""
        for fs, path in self.written:
            try:
                fs.delete_file(path)
            except OSError:
                pass
        self.written = []
