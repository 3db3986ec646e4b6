"""Savepoints: self-contained, relocatable copies of a completed checkpoint (docs/savepoints.md).

A savepoint is a directory:

    <target>/savepoint-<job8>-<token>/_metadata         JSON, written last (its presence = complete)
    <target>/savepoint-<job8>-<token>/state/<n>.arrow   keyed state files, copied from the checkpoint
    <target>/savepoint-<job8>-<token>/state/<n>/<file>  rocksdb state: every file of one database
                                                       (shared ones too: a savepoint is self-contained);
                                                       an incremental memory checkpoint's chain of
                                                       files, as <i>.arrow (its "chain" lists them)

`_metadata` holds no absolute path, so the directory may be copied or moved anywhere:

    {"format": "sluice-savepoint", "version": 1, "job_id": ..., "job_name": ...,
     "checkpoint_id": n, "timestamp_ms": ..., "max_parallelism": m,
     "operators": {<operator id>: {"kind": ..., "parallelism": p,
                                   "inline": {"<subtask>": {...}},
                                   "keyed": [{"file": "state/<n>.arrow", "key_groups": [lo, hi],
                                              "rows": r, "size": s}]}}}

State is kept by operator id, not by task: a new version of the job may chain operators
differently, and an operator keeps its state across versions by keeping its id
(`DataStream.uid`). `by_operator` reads a checkpoint's `_metadata` that way and `plan`
builds the savepoint from it (pure); `write` copies the files and writes `_metadata`; `read`
checks a savepoint before anything trusts it; `restore_states` maps it onto a job
(operators by id, parallelism by sluice/checkpoints/rescale.py) and says clearly what does
not fit. `map_states` does the mapping for checkpoints too: a job reconfigured live restores
from a checkpoint of its earlier topology (docs/reconfiguration.md).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow.fs as pafs

from sluice import graph, key_groups
from sluice.checkpoints import changelog_files, retained
from sluice.checkpoints.rescale import RescaleError, redistribute
from sluice.states import StateBackend
from sluice.storage import resolve
from sluice.v1 import common_pb2

FORMAT = "sluice-savepoint"
VERSION = 1
METADATA = "_metadata"
MAX_METADATA_BYTES = 64 * 1024 * 1024  # read no more than this from a path a client names
COPY_CHUNK = 8 * 1024 * 1024


class SavepointError(ValueError):
    """A savepoint that cannot be written, read or restored; the message says what to fix."""


@dataclasses.dataclass(frozen=True)
class Plan:
    metadata: dict[str, Any]
    files: list[tuple[str, str]]  # (path in checkpoint storage, path relative to the savepoint)


def by_operator(checkpoint: dict[str, Any], job: common_pb2.JobGraph) -> dict[str, dict[str, Any]]:
    """A checkpoint's state (its `_metadata`: sluice/checkpoints/storage.py) by operator id:
    kind (from `job`), the parallelism it ran at, inline state by subtask and keyed state
    handles as the checkpoint has them (absolute paths). Operators without state are left out."""
    ops = {op.id: op for op in job.operators}
    operators: dict[str, dict[str, Any]] = {}
    for by_subtask in checkpoint["tasks"].values():
        for subtask, handle in sorted(by_subtask.items(), key=lambda kv: int(kv[0])):
            for part in ("operators", "keyed"):
                for op_id, state in handle.get(part, {}).items():
                    if op_id not in ops:
                        continue
                    entry = operators.setdefault(
                        op_id,
                        {
                            "kind": str(graph.kind_of(ops[op_id])),
                            "parallelism": len(by_subtask),
                            "inline": {},
                            "keyed": [],
                        },
                    )
                    if part == "operators":
                        entry["inline"][subtask] = state
                    else:
                        entry["keyed"].append(state)
    return operators


def plan(checkpoint: dict[str, Any], job: common_pb2.JobGraph) -> Plan:
    """The savepoint of a completed checkpoint's `_metadata`: its state by operator, each keyed
    file to be copied under `state/`."""
    operators = by_operator(checkpoint, job)
    files: list[tuple[str, str]] = []
    for entry in operators.values():
        keyed = []
        for h in entry["keyed"]:
            if h.get("backend") == StateBackend.ROCKSDB:  # a full copy of every file of the database, shared ones too
                rel = f"state/{len(files)}"
                names = sorted({**h.get("private", {}), **h.get("shared", {})}.items())
                files += [(path, f"{rel}/{name}") for name, path in names]
                if not names:
                    files.append(("", rel))  # keeps the numbering unique (nothing to copy)
                keyed.append(
                    {
                        "backend": StateBackend.ROCKSDB,
                        "file": rel,
                        "files": [name for name, _path in names],
                        "key_groups": h["key_groups"],
                        "rows": h.get("rows", 0),
                        "size": h.get("full_size", h.get("size", 0)),
                    }
                )
                continue
            if changelog_files.is_chain(h):  # every file of the chain, in its order
                rel = f"state/{len(files)}"
                chain = [f"{i}.arrow" for i in range(len(h["chain"]))]
                files += [(path, f"{rel}/{name}") for path, name in zip(h["chain"], chain, strict=True)]
                keyed.append(
                    {
                        "file": rel,
                        "chain": chain,
                        "key_columns": h["key_columns"],
                        "key_groups": h["key_groups"],
                        "rows": h.get("rows", 0),
                        "size": h.get("full_size", h.get("size", 0)),
                    }
                )
                continue
            rel = f"state/{len(files)}.arrow"
            files.append((h["path"], rel))
            keyed.append(
                {"file": rel, "key_groups": h["key_groups"], "rows": h.get("rows", 0), "size": h.get("size", 0)}
            )
        entry["keyed"] = keyed
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "job_id": checkpoint["job_id"],
        "job_name": job.name,
        "checkpoint_id": checkpoint["checkpoint_id"],
        "timestamp_ms": checkpoint["timestamp_ms"],
        "max_parallelism": job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM,
        "operators": operators,
    }
    return Plan(metadata, files)


def write(p: Plan, source_fs: pafs.FileSystem, target: str, job_id: str) -> str:
    """Copy the state files and write `_metadata` last under a new directory of `target`;
    returns the savepoint's path (a local path or URI, as `target` was given)."""
    fs, base = resolve(target)
    name = f"savepoint-{job_id[:8]}-{uuid.uuid4().hex[:6]}"
    directory = f"{base.rstrip('/')}/{name}"
    fs.create_dir(f"{directory}/state", recursive=True)
    for src, rel in p.files:
        if not src:
            continue
        if "/" in rel[len("state/") :]:
            fs.create_dir(f"{directory}/{posixpath.dirname(rel)}", recursive=True)
        with source_fs.open_input_stream(src) as f, fs.open_output_stream(f"{directory}/{rel}") as out:
            while chunk := f.read(COPY_CHUNK):
                out.write(chunk)
    tmp = f"{directory}/.{METADATA}.inprogress"
    with fs.open_output_stream(tmp) as out:
        out.write(json.dumps(p.metadata, sort_keys=True).encode())
    fs.move(tmp, f"{directory}/{METADATA}")
    return f"{target.rstrip('/')}/{name}"


@dataclasses.dataclass(frozen=True)
class Savepoint:
    path: str  # as given
    metadata: dict[str, Any]
    retained: bool = False  # a retained checkpoint read as a savepoint (sluice/checkpoints/retained.py)

    @property
    def checkpoint_id(self) -> int:
        return int(self.metadata["checkpoint_id"])

    def file_uri(self, rel: str) -> str:
        return f"{self.path.rstrip('/')}/{rel}"


def read(path: str) -> Savepoint:
    """The savepoint at `path` (its directory, or its `_metadata`), checked; SavepointError otherwise.
    A retained checkpoint (`<checkpoint dir>/<job id>/chk-<n>`) is read as one too
    (sluice/checkpoints/retained.py): `Savepoint.retained` says which it was."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise SavepointError(f"savepoint path: expected a directory holding a _metadata file: {retained.WHAT_TO_GIVE}")
    path = retained.normalize(path)
    try:
        fs, base = resolve(path)
        info = fs.get_file_info(f"{base}/{METADATA}")
        if info.type == pafs.FileType.NotFound:
            raise SavepointError(
                f"savepoint {path}: no {METADATA} there (not a savepoint or retained checkpoint, or not complete); "
                f"{retained.WHAT_TO_GIVE}{_listing_hint(fs, base)}"
            )
        if info.size is not None and info.size > MAX_METADATA_BYTES:
            raise SavepointError(f"savepoint {path}: {METADATA} is {info.size} bytes, more than {MAX_METADATA_BYTES}")
        with fs.open_input_stream(f"{base}/{METADATA}") as f:
            raw = f.read(MAX_METADATA_BYTES + 1)
    except SavepointError:
        raise
    except (OSError, ValueError) as exc:
        raise SavepointError(f"savepoint {path}: cannot read {METADATA}: {exc}") from None
    if len(raw) > MAX_METADATA_BYTES:
        raise SavepointError(f"savepoint {path}: {METADATA} is more than {MAX_METADATA_BYTES} bytes")
    try:
        metadata = json.loads(raw)
    except (ValueError, RecursionError):
        raise SavepointError(f"savepoint {path}: {METADATA} is not JSON (corrupt?)") from None
    if retained.is_checkpoint(metadata):
        try:
            return Savepoint(path, retained.to_savepoint_metadata(path, metadata), retained=True)
        except retained.NotACheckpoint as exc:
            raise SavepointError(str(exc)) from None
    _check(path, metadata)
    return Savepoint(path, metadata)


def _listing_hint(fs: pafs.FileSystem, base: str) -> str:
    """The retained checkpoints in a directory given instead of one of them (a job's checkpoint directory)."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except (OSError, ValueError):
        return ""
    return retained.latest_hint([i.base_name for i in infos if i.type == pafs.FileType.Directory])


def _check(path: str, m: Any) -> None:
    def bad(what: str) -> SavepointError:
        return SavepointError(f"savepoint {path}: {METADATA} {what}")

    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise bad(
            f"is not a Sluice savepoint (format {FORMAT!r} expected) nor a retained checkpoint's; "
            + retained.WHAT_TO_GIVE
        )
    if m.get("version") != VERSION:
        raise bad(f"has format version {m.get('version')!r}; this Sluice reads version {VERSION}")
    for key, typ in (("checkpoint_id", int), ("max_parallelism", int), ("operators", dict), ("job_id", str)):
        if not isinstance(m.get(key), typ) or isinstance(m.get(key), bool):
            raise bad(f"has no valid {key!r}")
    if not 1 <= m["max_parallelism"] <= graph.MAX_MAX_PARALLELISM:
        raise bad(f"has max_parallelism {m['max_parallelism']} out of range")
    for op_id, entry in m["operators"].items():
        where = f"operator {op_id!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("parallelism"), int):
            raise bad(f"{where}: expected an object with a parallelism")
        p = entry["parallelism"]
        if not 1 <= p <= m["max_parallelism"]:
            raise bad(f"{where}: parallelism {p} out of range")
        try:
            graph.OperatorKind(str(entry.get("kind")))
        except ValueError:
            raise bad(f"{where}: unknown kind {entry.get('kind')!r}") from None
        inline = entry.get("inline", {})
        if not isinstance(inline, dict) or not all(
            k.isdigit() and int(k) < p and isinstance(v, dict) for k, v in inline.items()
        ):
            raise bad(f"{where}: inline state must map subtasks below {p} to objects")
        keyed = entry.get("keyed", [])
        if not isinstance(keyed, list):
            raise bad(f"{where}: keyed must be a list")
        for h in keyed:
            rel = h.get("file") if isinstance(h, dict) else None
            if (
                not isinstance(rel, str)
                or not rel
                or rel.startswith("/")
                or "\0" in rel
                or "://" in rel
                or ".." in rel.split("/")
            ):
                raise bad(f"{where}: keyed file {rel!r} must be a path inside the savepoint")
            if not key_groups.is_range(h.get("key_groups"), m["max_parallelism"]):
                raise bad(f"{where}: keyed key_groups {h.get('key_groups')!r} out of range")
            if h.get("backend") == StateBackend.ROCKSDB:
                if not _plain_names(h.get("files")):
                    raise bad(f"{where}: rocksdb state {rel!r} must list the plain names of its files")
            elif changelog_files.is_chain(h):
                if not _plain_names(h["chain"]) or not 1 <= len(h["chain"]) <= changelog_files.MAX_CHAIN:
                    raise bad(f"{where}: keyed state {rel!r} must list the plain names of its chain's files")
                if not changelog_files.valid_key_columns(h.get("key_columns")):
                    raise bad(f"{where}: keyed state {rel!r} must name its key columns")


def _plain_names(names: object) -> bool:
    return isinstance(names, list) and all(
        isinstance(n, str) and n and "/" not in n and n not in (".", "..") and "\0" not in n for n in names
    )


def restore_states(
    sp: Savepoint, job: common_pb2.JobGraph, chains: Iterable[graph.Chain], allow_non_restored: bool
) -> dict[tuple[str, int], bytes]:
    """The restore state of every (chain id, subtask) of `job` from savepoint `sp`; SavepointError
    naming the operator when the savepoint does not fit the job."""
    m = sp.metadata
    max_p = job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
    what = "retained checkpoint" if sp.retained else "savepoint"
    if sp.retained and m["max_parallelism"] is None and m["key_group_top"] >= max_p:
        raise SavepointError(
            f"retained checkpoint {sp.path} holds key group {m['key_group_top']}, the job's max parallelism is "
            f"{max_p}: key groups cannot be mapped (set the job's max parallelism to the old job's)"
        )
    if m["max_parallelism"] is not None and m["max_parallelism"] != max_p:
        raise SavepointError(
            f"{what} {sp.path} was taken with max parallelism {m['max_parallelism']}, the job has {max_p}: "
            "key groups cannot be mapped (set the job's max parallelism to the savepoint's)"
        )
    ops = {op.id for op in job.operators}
    saved: dict[str, Any] = m["operators"]
    unclaimed = sorted(op_id for op_id, e in saved.items() if op_id not in ops and (e.get("inline") or e.get("keyed")))
    if unclaimed and not allow_non_restored:
        raise SavepointError(
            f"{what} {sp.path} holds state of operators the job does not have: {', '.join(unclaimed)}. "
            "Give the operators the same uid as before (DataStream.uid), or pass --allow-non-restored-state "
            "to start without that state"
        )
    if sp.retained:  # kinds a checkpoint did not record: the job's own
        kinds = {op.id: str(graph.kind_of(op)) for op in job.operators}
        saved = {op_id: {**e, "kind": e["kind"] or kinds.get(op_id)} for op_id, e in saved.items()}
    return map_states(saved, f"{what} {sp.path}", job, chains, sp.file_uri)


def _restore_handle(h: dict[str, Any], file_uri: Callable[[str], str] | None) -> dict[str, Any]:
    """A keyed handle of a savepoint (relative "file") or checkpoint (absolute "path") as a
    task restores it (sluice/checkpoints/storage.py; rocksdb: taskmanager/state/rocksdb_backend.py)."""
    native = h.get("backend") == StateBackend.ROCKSDB
    if "file" in h and file_uri is not None:
        if native:
            return {
                "backend": StateBackend.ROCKSDB,
                "uri": file_uri(h["file"]),
                "files": h["files"],
                "key_groups": h["key_groups"],
            }
        if changelog_files.is_chain(h):
            paths = [f"{h['file']}/{name}" for name in h["chain"]]
            return {
                "chain": paths,
                "chain_uris": [file_uri(p) for p in paths],
                "key_columns": h["key_columns"],
                "key_groups": h["key_groups"],
            }
        return {"uri": file_uri(h["file"]), "path": h["file"], "key_groups": h["key_groups"]}
    if native:
        return dict(h)  # a checkpoint's database: its own and shared files by absolute path
    # a checkpoint's chain of files, read by absolute path (or URI: a retained checkpoint's)
    if changelog_files.is_chain(h):
        return {k: h[k] for k in ("chain", "chain_uris", "key_columns", "key_groups") if k in h}
    out = {"path": h["path"], "key_groups": h["key_groups"]}
    if "uri" in h:  # a retained checkpoint's file, possibly on another file system than the job's checkpoints
        out["uri"] = h["uri"]
    return out


def map_states(
    saved: dict[str, Any],
    where: str,
    job: common_pb2.JobGraph,
    chains: Iterable[graph.Chain],
    file_uri: Callable[[str], str] | None = None,
) -> dict[tuple[str, int], bytes]:
    """State by operator (`by_operator`'s shape; keyed handles with a relative "file", turned
    into a URI by `file_uri`, or an absolute "path") mapped onto `chains` of `job`: each
    operator's inline state redistributed to its new parallelism (sluice/checkpoints/rescale.py),
    its keyed handles given to every subtask, which reads its own key groups from them."""
    ops = {op.id: op for op in job.operators}
    out: dict[tuple[str, int], bytes] = {}
    for chain in chains:
        inline_by: list[dict[str, Any]] = [{} for _ in range(chain.parallelism)]
        keyed_by: dict[str, list[dict[str, Any]]] = {}
        for op_id in chain.operator_ids:
            entry = saved.get(op_id)
            if entry is None:
                continue
            kind = graph.kind_of(ops[op_id])
            if entry["kind"] != str(kind):
                raise SavepointError(
                    f"operator {op_id!r} was of kind {entry['kind']} in {where} "
                    f"and is of kind {kind} in this job: "
                    "its state does not fit (give the new operator another uid, with --allow-non-restored-state)"
                )
            old = [entry.get("inline", {}).get(str(i)) for i in range(entry["parallelism"])]
            try:
                new = redistribute(kind, op_id, old, chain.parallelism)
            except RescaleError as exc:
                raise SavepointError(f"{where}: {exc}") from None
            for s, state in enumerate(new):
                if state is not None:
                    inline_by[s][op_id] = state
            if entry.get("keyed"):
                keyed_by[op_id] = [_restore_handle(h, file_uri) for h in entry["keyed"]]
        for s in range(chain.parallelism):
            out[(chain.id, s)] = json.dumps({"operators": inline_by[s], "keyed": keyed_by}).encode()
    return out
