"""File systems through pyarrow.fs: a local path or any URI pyarrow knows
(file://, s3://, gs://, hdfs://)."""

from __future__ import annotations

import os
from typing import NamedTuple

import pyarrow.fs as pafs


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or URI."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return pafs.FileSystem.from_uri(uri)


def list_files(uri: str, suffix: str = "", what: str = "input") -> list[str]:
    """Sorted visible files directly under `uri` ending in `suffix`
    (names starting with '.' or '_' are skipped, as Spark and Hadoop do).
    `what` names the directory in errors ("input", "output")."""
    return [p for p, _mtime in list_files_with_mtime(uri, suffix, what)]


def list_files_with_mtime(uri: str, suffix: str = "", what: str = "input") -> list[tuple[str, int]]:
    """`list_files` with each file's modification time in epoch ms (0 when unknown)."""
    return [(f.path, f.mtime_ms) for f in list_file_infos(uri, suffix, what)]


class ListedFile(NamedTuple):
    path: str
    mtime_ms: int  # 0 when unknown
    size: int  # bytes; 0 when unknown


def list_file_infos(uri: str, suffix: str = "", what: str = "input") -> list[ListedFile]:
    """`list_files` with each file's modification time and size, from the same listing."""
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{what} directory {uri!r} does not exist")
    if info.type != pafs.FileType.Directory:
        raise FileNotFoundError(f"{what} path {uri!r} is not a directory")
    entries = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(
        ListedFile(e.path, int(e.mtime_ns // 1_000_000) if e.mtime_ns is not None else 0, max(e.size or 0, 0))
        for e in entries
        if e.type == pafs.FileType.File and not e.base_name.startswith((".", "_")) and e.base_name.endswith(suffix)
    )


def write_text_atomic(path: str, text: str) -> None:
    """Write a local file so readers see the old or the new content, never half."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
