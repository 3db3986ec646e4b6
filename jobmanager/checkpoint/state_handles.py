"""The state handle of an acknowledgement, checked before a checkpoint keeps it.

A task acknowledges a checkpoint with a JSON state handle
(`Checkpointer._upload` in taskmanager/checkpointer.py; the layout in
sluice/checkpoints/storage.py):

    {"operators": {<operator id>: {...inline state, JSON...}},
     "keyed": {<operator id>: {"path": <file>, "key_groups": [lo, hi], "rows": n, "size": n}}}

(a rocksdb handle, taskmanager/state/rocksdb_backend.py, adds "backend", "private",
"shared" and "new": its "path" is a directory, its private files lie inside the
checkpoint's directory and its shared ones inside the job's `<dir>/<job-id>/shared/`;
a memory-backend chain, sluice/checkpoints/changelog_files.py, has no "path" but a "chain"
of its shared files)

The JobManager writes the handles into `_metadata` and a restore hands them
to the tasks, which read the keyed state files they name. So a handle is
accepted only when every keyed state file lies inside this checkpoint's own
directory, `<dir>/<job-id>/chk-<n>/`: its path has no `..` component, and
resolved (on a local file system: `os.path.realpath`, so a symlink out of the
directory is caught) it is still under that directory resolved the same way.
Operator ids must be the acknowledging task's own; key-group ranges lie in
`[0, max_parallelism)`. Anything else raises `InvalidStateHandle` naming the
field, and the acknowledgement is rejected (docs/protocols.md, "Fencing").

Pure functions; the path resolver is passed in (`resolver_for`).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable, Collection
from typing import Any

from sluice import key_groups
from sluice.checkpoints import changelog_files
from sluice.states import StateBackend

MAX_STATE_HANDLE_BYTES = 4 * 1024 * 1024  # a handle carries pointers and small inline state only


class InvalidStateHandle(ValueError):
    """An acknowledged state handle that no checkpoint may keep; the message names the field."""


def resolver_for(fs: Any) -> Callable[[str], str]:
    """How paths of the file system `fs` (a pyarrow.fs.FileSystem) are resolved: symlinks
    followed on a local file system, `..` folded elsewhere (object stores have no links)."""
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        return os.path.realpath
    return posixpath.normpath


def parse(
    raw: bytes,
    checkpoint_dir: str,
    operator_ids: Collection[str],
    max_parallelism: int,
    resolve: Callable[[str], str],
) -> dict[str, Any]:
    """The handle `raw` as a dict, or InvalidStateHandle saying what is wrong with it."""
    if len(raw) > MAX_STATE_HANDLE_BYTES:
        raise InvalidStateHandle(f"state_handle: {len(raw)} bytes, more than {MAX_STATE_HANDLE_BYTES}")
    try:
        handle = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        raise InvalidStateHandle("state_handle: not a JSON object") from None
    if not isinstance(handle, dict) or not set(handle) <= {"operators", "keyed"}:
        raise InvalidStateHandle('state_handle: expected an object with "operators" and "keyed"')
    operators, keyed = handle.get("operators", {}), handle.get("keyed", {})
    if not isinstance(operators, dict) or not isinstance(keyed, dict):
        raise InvalidStateHandle('state_handle: "operators" and "keyed" must be objects')
    for op_id, state in operators.items():
        if op_id not in operator_ids:
            raise InvalidStateHandle(f"state_handle.operators: {op_id!r} is not an operator of this task")
        if not isinstance(state, dict):
            raise InvalidStateHandle(f"state_handle.operators.{op_id}: expected an object")
    base = resolve(checkpoint_dir).rstrip("/") + "/"
    for op_id, h in keyed.items():
        where = f"state_handle.keyed.{op_id}"
        if op_id not in operator_ids:
            raise InvalidStateHandle(f"state_handle.keyed: {op_id!r} is not an operator of this task")
        if isinstance(h, dict) and changelog_files.is_chain(h):
            _check_chain(h, where, shared_base(checkpoint_dir, resolve), resolve)
        else:
            if not isinstance(h, dict) or not isinstance(h.get("path"), str):
                raise InvalidStateHandle(f"{where}: expected an object with a path")
            path = h["path"]
            if "\0" in path or ".." in path.split("/") or not resolve(path).startswith(base):
                raise InvalidStateHandle(f"{where}.path: {path!r} is not inside the checkpoint directory {base}")
        if not key_groups.is_range(h.get("key_groups"), max_parallelism):
            raise InvalidStateHandle(f"{where}.key_groups: expected [lo, hi] with 0 <= lo <= hi < {max_parallelism}")
        for count in ("rows", "size", "full_size"):
            value = h.get(count, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidStateHandle(f"{where}.{count}: expected a count >= 0")
        if h.get("backend") == StateBackend.ROCKSDB:
            _check_native(h, where, base, shared_base(checkpoint_dir, resolve), resolve)
    return handle


def shared_base(checkpoint_dir: str, resolve: Callable[[str], str]) -> str:
    """The job's shared state directory (`<dir>/<job-id>/shared/`), resolved, with a slash."""
    return resolve(posixpath.dirname(checkpoint_dir.rstrip("/")) + "/shared").rstrip("/") + "/"


def _check_chain(h: dict[str, Any], where: str, shared: str, resolve: Callable[[str], str]) -> None:
    """A memory-backend chain (sluice/checkpoints/changelog_files.py): its files shared ones,
    oldest first, and the key columns they are merged by."""
    chain, columns = h["chain"], h.get("key_columns")
    if (
        not isinstance(chain, list)
        or not 1 <= len(chain) <= changelog_files.MAX_CHAIN
        or not all(isinstance(p, str) for p in chain)
    ):
        raise InvalidStateHandle(f"{where}.chain: expected a list of 1 to {changelog_files.MAX_CHAIN} paths")
    if not changelog_files.valid_key_columns(columns):
        raise InvalidStateHandle(f"{where}.key_columns: expected a list of column names")
    _check_files(h, where, {"shared": shared}, resolve)
    if not set(chain) <= set(h.get("shared", {}).values()):
        raise InvalidStateHandle(f"{where}.chain: every file must be one of its shared files")


def _check_native(h: dict[str, Any], where: str, base: str, shared: str, resolve: Callable[[str], str]) -> None:
    """A rocksdb handle (taskmanager/state/rocksdb_backend.py): its own files inside the
    checkpoint directory, its shared files inside the job's shared directory, plain file names."""
    _check_files(h, where, {"private": base, "shared": shared}, resolve)


def _check_files(h: dict[str, Any], where: str, parts: dict[str, str], resolve: Callable[[str], str]) -> None:
    """Each of `parts` (name -> the directory its files lie in) an object of plain file name ->
    path inside that directory; "new" names some of the shared ones."""
    for part, inside in parts.items():
        files = h.get(part, {})
        if not isinstance(files, dict):
            raise InvalidStateHandle(f"{where}.{part}: expected an object of file name -> path")
        for name, path in files.items():
            if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
                raise InvalidStateHandle(f"{where}.{part}: {name!r} is not a file name")
            if not isinstance(path, str) or "\0" in path or ".." in path.split("/"):
                raise InvalidStateHandle(f"{where}.{part}.{name}: expected a path")
            if not resolve(path).startswith(inside):
                raise InvalidStateHandle(f"{where}.{part}.{name}: {path!r} is not inside {inside}")
    new = h.get("new", [])
    if not isinstance(new, list) or not set(new) <= set(h.get("shared", {})):
        raise InvalidStateHandle(f"{where}.new: expected a list of names of its shared files")
