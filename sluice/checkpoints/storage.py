"""Checkpoint storage through pyarrow.fs (a local directory or any URI).

Layout under `state.checkpoints.dir`:
    <dir>/<job-id>/chk-<n>/_metadata                      JSON, written last by the JobManager
    <dir>/<job-id>/chk-<n>/<operator>/<subtask>.arrow     keyed state of one subtask (Arrow IPC,
                                                          with its key group per row)
    <dir>/<job-id>/chk-<n>/<operator>/<subtask>/<file>    rocksdb backend: a database's own files
    <dir>/<job-id>/shared/<operator>/<n>-<uuid>.sst       rocksdb, incremental: SST files that later
                                                          checkpoints reference (docs/state-backends.md)
    <dir>/<job-id>/shared/<operator>/<n>-<uuid>.arrow     memory, incremental: a keyed aggregate's chain
                                                          of files (sluice/checkpoints/changelog_files.py)
    (<n>: the checkpoint a shared file was uploaded for: sluice/checkpoints/shared_names.py)
Small state (source offsets, pending sink commits) travels inline in the
task's state handle, which the JobManager stores in `_metadata`.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from sluice.checkpoints import changelog_files
from sluice.key_groups import KEY_GROUP
from sluice.storage import resolve


class CheckpointCorrupt(Exception):
    """A checkpoint cannot be read; the message names the file."""


class CheckpointStorage:
    def __init__(self, uri: str, job_id: str):
        self.uri = uri
        self.fs, base = resolve(uri)
        self.job_dir = f"{base.rstrip('/')}/{job_id}"

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        return f"{self.job_dir}/chk-{checkpoint_id}"

    def shared_dir(self) -> str:
        """Where incremental checkpoints upload state files that later checkpoints reference
        again (taskmanager/state/rocksdb_backend.py); the JobManager deletes each when no
        retained checkpoint needs it (jobmanager/checkpoint/shared_registry.py)."""
        return f"{self.job_dir}/shared"

    def list_shared(self) -> list[str]:
        """Every file under the shared directory (any depth), sorted."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.shared_dir(), recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(i.path for i in infos if i.type == pafs.FileType.File)

    def delete_files(self, paths: list[str]) -> None:
        """Delete shared state files (best effort: one already gone is fine)."""
        for path in paths:
            try:
                self.fs.delete_file(path)
            except (FileNotFoundError, OSError):
                pass

    def metadata_path(self, checkpoint_id: int) -> str:
        return f"{self.checkpoint_dir(checkpoint_id)}/_metadata"

    # -- TaskManager side ----------------------------------------------------------------
    def write_keyed_state(
        self, checkpoint_id: int, operator_id: str, subtask: int, table: pa.Table, key_groups: tuple[int, int]
    ) -> dict:
        """Write one subtask's keyed state; returns its handle (path, key-group range, rows)."""
        directory = f"{self.checkpoint_dir(checkpoint_id)}/{operator_id}"
        self.fs.create_dir(directory, recursive=True)
        path = f"{directory}/{subtask}.arrow"
        size = changelog_files.write_table(self.fs, path, table)
        return {"path": path, "key_groups": list(key_groups), "rows": table.num_rows, "size": size}

    def read_keyed_state(
        self, handles: list[dict], key_groups: tuple[int, int], owned: list[int] | None = None
    ) -> pa.Table | None:
        """Rows of every handle whose key group lies in [lo, hi] (the handles may come
        from another parallelism: a rescale reads the overlapping ranges); with `owned`
        (a subtask's key groups after a live rebalance, inside [lo, hi]), only those."""
        lo, hi = key_groups
        parts = []
        for h in handles:
            hlo, hhi = h["key_groups"]
            if hhi < lo or hlo > hi:
                continue
            if changelog_files.is_chain(h):
                files = [self._readable(h, i) for i in range(len(h["chain"]))]
                tables = [self._rows_of(fs, path, lo, hi, owned) for fs, path in files]
                merged = changelog_files.merge(tables, h["key_columns"])
                if merged is not None:
                    parts.append(merged)
                continue
            # A savepoint's file (sluice/checkpoints/savepoint.py) is named by "uri": the savepoint
            # may live on another file system than this job's checkpoints.
            fs, path = resolve(h["uri"]) if "uri" in h else (self.fs, h["path"])
            parts.append(self._rows_of(fs, path, lo, hi, owned, h.get("uri", path)))
        if not parts:
            return None
        return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]

    def _readable(self, h: dict, i: int) -> tuple[Any, str]:
        """The file system and path of chain file `i` of `h` (by URI in a savepoint or retained checkpoint)."""
        uris = h.get("chain_uris")
        return resolve(uris[i]) if uris else (self.fs, h["chain"][i])

    @staticmethod
    def _rows_of(fs: Any, path: str, lo: int, hi: int, owned: list[int] | None, name: str = "") -> pa.Table:
        try:
            table = changelog_files.read_table(fs, path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise CheckpointCorrupt(f"cannot read keyed state {name or path}: {exc}") from None
        kg = table.column(KEY_GROUP)
        if owned is not None:
            return table.filter(pc.is_in(kg, pa.array(owned, kg.type)))
        return table.filter(pc.and_(pc.greater_equal(kg, lo), pc.less_equal(kg, hi)))

    # -- JobManager side --------------------------------------------------------------------
    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        """Write `_metadata` atomically (temp file, then rename)."""
        directory = self.checkpoint_dir(checkpoint_id)
        self.fs.create_dir(directory, recursive=True)
        path, tmp = self.metadata_path(checkpoint_id), f"{directory}/._metadata.inprogress"
        with self.fs.open_output_stream(tmp) as out:
            out.write(json.dumps(metadata).encode())
        self.fs.move(tmp, path)
        return path

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]:
        path = self.metadata_path(checkpoint_id)
        try:
            with self.fs.open_input_stream(path) as f:
                data = json.loads(f.read().decode())
        except FileNotFoundError:
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id} metadata {path} does not exist") from None
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id} metadata {path} is unreadable: {exc}") from None
        if not isinstance(data, dict) or data.get("checkpoint_id") != checkpoint_id or "tasks" not in data:
            raise CheckpointCorrupt(f"checkpoint {checkpoint_id} metadata {path} is malformed")
        return data

    def has_metadata(self, checkpoint_id: int) -> bool:
        """Whether checkpoint `checkpoint_id` completed here (its `_metadata` exists)."""
        return bool(self.fs.get_file_info(self.metadata_path(checkpoint_id)).type != pafs.FileType.NotFound)

    def discard(self, checkpoint_id: int) -> None:
        try:
            self.fs.delete_dir(self.checkpoint_dir(checkpoint_id))
        except FileNotFoundError:
            pass

    def list_checkpoints(self) -> list[int]:
        """Checkpoint directories present (for tests and cleanup)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.job_dir, allow_not_found=True))
        except FileNotFoundError:
            return []
        return sorted(
            int(i.base_name[4:])
            for i in infos
            if i.type == pafs.FileType.Directory and i.base_name.startswith("chk-") and i.base_name[4:].isdigit()
        )
