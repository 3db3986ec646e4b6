"""Retained checkpoints as a place to resume from: `sluice run --from-savepoint <dir>/<job id>/chk-<n>`.

A job's last `state.checkpoints.num-retained` completed checkpoints stay in its checkpoint
directory after it is cancelled, fails or finishes (docs/checkpoints.md, retention). Any of
them restores a new job as a savepoint does, at the same or another parallelism
(docs/savepoints.md): `read` in sluice/checkpoints/savepoint.py gives this module a
`_metadata` that is not a savepoint's, and `to_savepoint_metadata` turns a checkpoint's
`_metadata` (jobmanager/checkpoint/metadata.py) into the savepoint's shape: state by
operator id, keyed handles by absolute path (plus the URI to read them by).

The new job does not claim the checkpoint (Flink's NO_CLAIM mode): it never deletes a file
of it, and its rocksdb state references none of its shared files (handles are marked
`no_claim`, so the first checkpoint of the new job uploads every file again:
taskmanager/state/rocksdb_backend.py). The checkpoint stays the old job's, or the user's.

Pure: no I/O. The operator kinds and max parallelism are in the `_metadata` of checkpoints
taken since they were recorded (`operator_kinds`, `max_parallelism`); for older ones the
new job's kinds are taken, and every key group of the keyed state must lie below the new
job's max parallelism.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from sluice import graph, key_groups
from sluice.checkpoints import changelog_files
from sluice.states import StateBackend

METADATA = "_metadata"
FORMAT = "sluice-retained-checkpoint"  # what `to_savepoint_metadata` writes in "format"; never on disk
CHECKPOINT_DIR = re.compile(r"chk-(\d+)")
KINDS = frozenset(str(k) for k in graph.OperatorKind)
WHAT_TO_GIVE = (
    "give a savepoint directory (the path `sluice savepoint` or `sluice stop` printed) or a retained "
    "checkpoint directory, <checkpoint dir>/<job id>/chk-<n>, holding a _metadata file"
)


class NotACheckpoint(ValueError):
    """A retained checkpoint's `_metadata` that cannot be restored; the message says why."""


def normalize(path: str) -> str:
    """The directory of a savepoint or checkpoint given as it, or as its `_metadata` file."""
    path = path.rstrip("/") or "/"
    if posixpath.basename(path) == METADATA:
        path = posixpath.dirname(path) or "/"
    return path


def checkpoint_id_of(path: str) -> int | None:
    """n for a directory named `chk-<n>`, else None."""
    m = CHECKPOINT_DIR.fullmatch(posixpath.basename(normalize(path)))
    return int(m.group(1)) if m else None


def is_checkpoint(metadata: object) -> bool:
    """Whether a parsed `_metadata` is a checkpoint's (jobmanager/checkpoint/metadata.py), not a savepoint's."""
    return isinstance(metadata, dict) and "format" not in metadata and "tasks" in metadata


def latest_hint(names: list[str]) -> str:
    """What to say about a directory holding `names`: the retained checkpoints in it, if any."""
    ids = sorted(int(m.group(1)) for n in names if (m := CHECKPOINT_DIR.fullmatch(n)))
    if not ids:
        return ""
    listed = ", ".join(f"chk-{i}" for i in ids)
    return f"; it holds the retained checkpoints {listed}: give one of them, e.g. .../chk-{ids[-1]}"


def _uri(scheme: str, path: str) -> str:
    return f"{scheme}{path}" if scheme else path


def to_savepoint_metadata(path: str, m: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint `_metadata` `m` read from directory `path`, in a savepoint's shape
    (sluice/checkpoints/savepoint.py): NotACheckpoint when it is malformed. An operator's
    "kind" is None when the checkpoint did not record it, as is "max_parallelism"; then
    "key_group_top" (the highest key group of its keyed state, -1 without) must fit the job."""

    def bad(what: str) -> NotACheckpoint:
        return NotACheckpoint(f"retained checkpoint {path}: {METADATA} {what}")

    cid = m.get("checkpoint_id")
    if not isinstance(cid, int) or isinstance(cid, bool) or cid < 0:
        raise bad("has no valid 'checkpoint_id'")
    named = checkpoint_id_of(path)
    if named is not None and named != cid:
        raise bad(f"is checkpoint {cid}'s, in directory chk-{named}")
    if not isinstance(m.get("job_id"), str) or not isinstance(m.get("tasks"), dict):
        raise bad("has no valid 'job_id' or 'tasks'")
    kinds = m.get("operator_kinds", {})
    recorded_max = m.get("max_parallelism")
    if (
        not isinstance(kinds, dict)
        or not all(k in KINDS for k in kinds.values())
        or (recorded_max is not None and not (isinstance(recorded_max, int) and 1 <= recorded_max))
    ):
        raise bad("has malformed 'operator_kinds' or 'max_parallelism'")
    scheme = path.split("://", 1)[0] + "://" if "://" in path else ""
    operators: dict[str, dict[str, Any]] = {}
    top = -1  # the highest key group of any keyed handle
    for chain_id, by_subtask in m["tasks"].items():
        if not isinstance(by_subtask, dict) or not by_subtask:
            raise bad(f"task {chain_id!r}: expected its subtasks' state")
        parallelism = len(by_subtask)
        if sorted(by_subtask) != sorted(str(i) for i in range(parallelism)):
            raise bad(f"task {chain_id!r}: subtasks {sorted(by_subtask)} are not 0..{parallelism - 1}")
        for subtask in sorted(by_subtask, key=int):
            handle = by_subtask[subtask]
            if not isinstance(handle, dict):
                raise bad(f"task {chain_id!r} subtask {subtask}: expected an object")
            for part in ("operators", "keyed"):
                states = handle.get(part) or {}
                if not isinstance(states, dict):
                    raise bad(f"task {chain_id!r} subtask {subtask}: {part!r} must be an object")
                for op_id, state in states.items():
                    entry = operators.setdefault(
                        op_id,
                        {"kind": kinds.get(op_id), "parallelism": parallelism, "inline": {}, "keyed": []},
                    )
                    if part == "operators":
                        entry["inline"][subtask] = state
                        continue
                    if not isinstance(state, dict) or not key_groups.is_range(
                        state.get("key_groups"), graph.MAX_MAX_PARALLELISM
                    ):
                        raise bad(f"operator {op_id!r} subtask {subtask}: keyed state without a key-group range")
                    top = max(top, state["key_groups"][1])
                    if changelog_files.is_chain(state):  # an incremental memory checkpoint's files (changelog_files.py)
                        entry["keyed"].append(
                            _chain(
                                state,
                                scheme,
                                f"retained checkpoint {path}: {METADATA} operator {op_id!r} subtask {subtask}: ",
                            )
                        )
                        continue
                    if not isinstance(state.get("path"), str) or not state["path"]:
                        raise bad(f"operator {op_id!r} subtask {subtask}: keyed state without a path")
                    if state.get("backend") == StateBackend.ROCKSDB:
                        entry["keyed"].append({**state, "no_claim": True})  # read, never referenced again
                    else:
                        entry["keyed"].append(
                            {
                                "path": state["path"],
                                "uri": _uri(scheme, state["path"]),
                                "key_groups": state["key_groups"],
                                "rows": state.get("rows", 0),
                                "size": state.get("size", 0),
                            }
                        )
    if recorded_max is not None and top >= recorded_max:
        raise bad(f"has key group {top} at max parallelism {recorded_max}")
    return {
        "format": FORMAT,
        "job_id": m["job_id"],
        "checkpoint_id": cid,
        "timestamp_ms": m.get("timestamp_ms", 0),
        "max_parallelism": recorded_max,  # None: not recorded; then every key group must be below the job's
        "key_group_top": top,
        "operators": operators,
    }


def _chain(state: dict[str, Any], scheme: str, where: str) -> dict[str, Any]:
    """A chain handle of a retained checkpoint, its files read by URI."""
    chain, columns = state.get("chain"), state.get("key_columns")
    if not isinstance(chain, list) or not chain or not all(isinstance(p, str) and p for p in chain):
        raise NotACheckpoint(f"{where}keyed state with a malformed chain of files")
    if not changelog_files.valid_key_columns(columns):
        raise NotACheckpoint(f"{where}keyed state without its key columns")
    return {
        "chain": chain,
        "chain_uris": [_uri(scheme, p) for p in chain],
        "key_columns": columns,
        "key_groups": state["key_groups"],
        "rows": state.get("rows", 0),
        "size": state.get("full_size", state.get("size", 0)),
    }
