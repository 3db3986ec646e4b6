"""File systems through pyarrow.fs: a local path or any URI pyarrow knows
(file://, s3://, gs://, hdfs://). A local directory is listed with `os.scandir`
(the same files, times and sizes), so that a client checking a job's input at
submit does not import pyarrow (~0.14 s of every `sluice run`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or URI."""
    import pyarrow.fs as pafs

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


def _visible(name: str, suffix: str) -> bool:
    return not name.startswith((".", "_")) and name.endswith(suffix)


def list_file_infos(uri: str, suffix: str = "", what: str = "input") -> list[ListedFile]:
    """`list_files` with each file's modification time and size, from the same listing."""
    if "://" not in uri:
        return _list_local(uri, suffix, what)
    import pyarrow.fs as pafs

    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.Directory:
        raise _not_a_directory(uri, what, exists=info.type != pafs.FileType.NotFound)
    entries = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(
        ListedFile(e.path, int(e.mtime_ns // 1_000_000) if e.mtime_ns is not None else 0, max(e.size or 0, 0))
        for e in entries
        if e.type == pafs.FileType.File and _visible(e.base_name, suffix)
    )


def _not_a_directory(uri: str, what: str, exists: bool) -> FileNotFoundError:
    """The error of a listing whose `uri` is missing or (`exists`) not a directory."""
    if not exists:
        return FileNotFoundError(f"{what} directory {uri!r} does not exist")
    return FileNotFoundError(f"{what} path {uri!r} is not a directory")


def _list_local(uri: str, suffix: str, what: str) -> list[ListedFile]:
    """`list_file_infos` of a local directory (a file is what a symbolic link leads to, as with pyarrow)."""
    path = os.path.abspath(uri)
    if not os.path.isdir(path):
        raise _not_a_directory(uri, what, exists=os.path.exists(path))
    listed = []
    with os.scandir(path) as entries:
        for e in entries:
            if not _visible(e.name, suffix):
                continue
            try:
                if not e.is_file():
                    continue
                st = e.stat()
            except FileNotFoundError:  # removed since the listing
                continue
            listed.append(ListedFile(e.path, st.st_mtime_ns // 1_000_000, st.st_size))
    return sorted(listed)


def write_text_atomic(path: str, text: str) -> None:
    """Write a local file so readers see the old or the new content, never half."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
