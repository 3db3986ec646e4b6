"""The rocksdb state backend: keyed state in an embedded RocksDB (docs/state-backends.md).

One database per (task, operator), under the TaskManager's working directory
(`<work dir>/state/<execution id>-<operator id>`, taskmanager/local_dir.py), opened in
rocksdict's raw-bytes mode. Its memory is bounded whatever the number of keys: a block
cache shared by every database of the process (`BLOCK_CACHE_BYTES`) and at most two write
buffers of `WRITE_BUFFER_BYTES` per database; the rest is on disk. No write-ahead log: a
failed task restores from its last checkpoint anyway.

Layout: key = 2-byte big-endian key group + the key's bytes, so the keys of a key-group
range are one contiguous range of the database. Key bytes: `\\x01` + 8-byte big-endian
int for a 64-bit int, `\\x02` + UTF-8 for a str, `\\x00` + pickle for anything else (a
composite key's tuple). Value: the pickle (protocol 5) of the tuple of plain values.

Snapshot: on the task thread, a RocksDB checkpoint (memtable flushed, SST files hard
linked) into `<db dir>-chk-<n>`; then, off the task thread, `RocksDBSnapshot.upload`:

* incremental (`state.backend.incremental`, the default): an SST file already uploaded
  for a *completed* checkpoint is referenced again; a new one is uploaded once to
  `<job dir>/shared/<operator>/<checkpoint id>-<uuid>.sst`. The rest (MANIFEST, CURRENT, OPTIONS, ...)
  goes to the checkpoint's own `chk-<n>/<operator>/<subtask>/`.
* full: every file goes to `chk-<n>/<operator>/<subtask>/`.

The handle (JSON, in the task's acknowledgement):

    {"backend": "rocksdb", "path": <private dir>, "key_groups": [lo, hi], "rows": ~keys,
     "size": bytes uploaded now, "full_size": bytes of every file,
     "private": {<file>: <path>}, "shared": {<file>: <path>}, "new": [<file>, ...]}

`new` names the shared files this checkpoint uploaded; the JobManager reference-counts the
shared files of retained checkpoints and deletes one when nothing needs it any more
(jobmanager/checkpoint/shared_registry.py). Only files of a checkpoint the task was told had
completed are referenced again, so no checkpoint depends on the files of an aborted one.

Restore: the handle with exactly this subtask's key-group range is downloaded and opened as
it is (and its shared files are not uploaded again); otherwise (a rescale, a live
rebalance) every overlapping database is downloaded to a temporary directory and the key
range copied into a fresh database. A savepoint's handle names a directory ("uri") and its
files ("files"): the same, from there. A retained checkpoint of another job (`no_claim`) is
downloaded as this job's are, but its shared files are uploaded again by the first checkpoint.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import pyarrow.fs as pafs
import rocksdict

from sluice.checkpoints.shared_names import new_shared_name
from sluice.storage import resolve
from taskmanager.state.backend import ROCKSDB, KeyedValues, StateBackendConfig

log = logging.getLogger("sluice.taskmanager")

BLOCK_CACHE_BYTES = 64 * 1024 * 1024  # shared by every database of the process
WRITE_BUFFER_BYTES = 16 * 1024 * 1024  # per database, at most two
L0_COMPACTION_TRIGGER = 10  # level-0 files before a compaction (RocksDB's default: 4)
COPY_CHUNK = 8 * 1024 * 1024
RESTORE_BATCH = 10_000  # entries per WriteBatch when copying a key range

_INT = struct.Struct(">HBq")
_KG = struct.Struct(">H")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_cache_lock = threading.Lock()
_cache: rocksdict.Cache | None = None


def _block_cache() -> rocksdict.Cache:
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = rocksdict.Cache(BLOCK_CACHE_BYTES)
        return _cache


def options() -> rocksdict.Options:
    """The options of every state database: raw bytes, bounded memory."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(_block_cache())
    table.set_cache_index_and_filter_blocks(True)
    table.set_bloom_filter(10, False)  # a lookup skips the files that cannot hold its key
    opts.set_block_based_table_factory(table)
    # Every checkpoint flushes the memtable into a new level-0 file; compacting them waits for
    # L0_COMPACTION_TRIGGER of them, so most incremental checkpoints upload one small file and
    # only every so many a compaction's rewritten ones (docs/state-backends.md)
    opts.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    opts.set_max_write_buffer_number(2)
    opts.set_max_open_files(256)
    opts.set_max_background_jobs(2)
    return opts


# -- encoding -------------------------------------------------------------------------------
def encode_key(kg: int, key: Any) -> bytes:
    t = type(key)
    if t is int and _INT_MIN <= key <= _INT_MAX:
        return _INT.pack(kg, 1, key)
    if t is str:
        return _KG.pack(kg) + b"\x02" + key.encode()
    return _KG.pack(kg) + b"\x00" + pickle.dumps(key, protocol=5)


def decode_key(raw: bytes) -> tuple[int, Any]:
    """(key group, key) of an encoded key."""
    kg, tag = raw[0] << 8 | raw[1], raw[2]
    if tag == 1:
        return kg, _INT.unpack(raw)[2]
    if tag == 2:
        return kg, raw[3:].decode()
    return kg, pickle.loads(raw[3:])  # our own state files, written by encode_key


def encode_value(value: tuple[Any, ...]) -> bytes:
    return pickle.dumps(value, protocol=5)


def decode_value(raw: bytes) -> tuple[Any, ...]:
    return tuple(pickle.loads(raw))  # our own state files, written by encode_value


SIGN_FLIP = 1 << 63  # a time in ms plus this, as an unsigned 64-bit number, sorts as the time does


def sortable_ms(ms: int) -> int:
    """A time in ms (negative ones too) as the unsigned 64-bit number whose big-endian bytes sort
    as the times do: timers and window panes in key order by time."""
    return (int(ms) + SIGN_FLIP) & 0xFFFFFFFFFFFFFFFF


def from_sortable_ms(raw: int) -> int:
    """The time in ms of a `sortable_ms` number."""
    return raw - SIGN_FLIP


def range_bounds(lo: int, hi: int) -> tuple[bytes, bytes]:
    """The keys of key groups [lo, hi]: from the first bound (inclusive) to the second (exclusive)."""
    return _KG.pack(lo), (_KG.pack(hi + 1) if hi + 1 < 1 << 16 else b"\xff\xff\xff")


# -- the database ---------------------------------------------------------------------------
class RocksDBKeyedValues(KeyedValues):
    def __init__(self, config: StateBackendConfig, tag: str = "") -> None:
        if config.kind != ROCKSDB:
            raise ValueError(f"not a rocksdb backend: {config!r}")
        self.config = config
        self.path = config.local_dir
        self.tag = tag
        self._lock = threading.Lock()
        # shared files of the last completed checkpoint (file -> path), and those of checkpoints
        # not yet known to be complete: only the former may be referenced again
        self._confirmed: dict[str, str] = {}
        self._pending: dict[int, dict[str, str]] = {}
        self.db: rocksdict.Rdict = self._open_fresh()

    def _open_fresh(self) -> rocksdict.Rdict:
        """An empty database: its file numbers start again, so no earlier upload is reused."""
        with self._lock:
            self._confirmed, self._pending = {}, {}
        shutil.rmtree(self.path, ignore_errors=True)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        return self._open()

    def _open(self) -> rocksdict.Rdict:
        db = rocksdict.Rdict(self.path, options())
        write = rocksdict.WriteOptions()
        setattr(write, "disable_wal", True)  # noqa: B010 — a property at run time; the stub calls it a method
        db.set_write_options(write)
        return db

    def get_many(self, keys: Sequence[Any], kgs: Sequence[int]) -> list[tuple[Any, ...] | None]:
        if not keys:
            return []
        # a list of keys: one multi-get, a list of values
        raw = cast(list[bytes | None], self.db.get([encode_key(kg, k) for k, kg in zip(keys, kgs, strict=True)]))
        return [None if v is None else decode_value(v) for v in raw]

    def put_many(self, keys: Sequence[Any], kgs: Sequence[int], values: Sequence[tuple[Any, ...]]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, kg, value in zip(keys, kgs, values, strict=True):
            batch.put(encode_key(kg, key), encode_value(value))
        self.db.write(batch)

    def items(self) -> Iterator[tuple[Any, int, tuple[Any, ...]]]:
        for k, v in self.db.items():
            kg, key = decode_key(cast(bytes, k))
            yield key, kg, decode_value(cast(bytes, v))

    def clear(self) -> None:
        self.db.close()
        self.db = self._open_fresh()

    def __bool__(self) -> bool:
        it = self.db.iter()
        it.seek_to_first()
        return bool(it.valid())

    def approximate_keys(self) -> int:
        return int(self.db.property_int_value("rocksdb.estimate-num-keys") or 0)

    # -- checkpoints --------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> RocksDBSnapshot:
        """A RocksDB checkpoint of the database now (cheap: a flush and hard links), for
        `RocksDBSnapshot.upload` to write off the task thread."""
        local = f"{self.path}-chk-{checkpoint_id}"
        shutil.rmtree(local, ignore_errors=True)
        rocksdict.Checkpoint(self.db).create_checkpoint(local)
        with self._lock:
            reuse = dict(self._confirmed) if self.config.incremental else {}
        return RocksDBSnapshot(self, local, checkpoint_id, self.config.incremental, reuse, self.approximate_keys())

    def _uploaded(self, checkpoint_id: int, shared: dict[str, str]) -> None:
        with self._lock:
            self._pending[checkpoint_id] = shared

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        with self._lock:
            if checkpoint_id in self._pending:
                self._confirmed = self._pending[checkpoint_id]
            for cid in [c for c in self._pending if c <= checkpoint_id]:
                del self._pending[cid]

    def restore(
        self,
        handles: Sequence[Mapping[str, Any]],
        fs: pafs.FileSystem,
        key_groups: tuple[int, int],
        owned: Sequence[int] | None = None,
    ) -> None:
        """Replace the database with the entries of `handles` in `key_groups` (and `owned`)."""
        lo, hi = key_groups
        mine = [h for h in handles if h["key_groups"][1] >= lo and h["key_groups"][0] <= hi]
        self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)
        if len(mine) == 1 and list(mine[0]["key_groups"]) == [lo, hi] and owned is None:
            _download(mine[0], fs, self.path)
            self.db = self._open()
            # a checkpoint of this job: its shared files stay referenced; a retained checkpoint of
            # another job ("no_claim", sluice/checkpoints/retained.py) is read, never referenced
            if "uri" not in mine[0] and not mine[0].get("no_claim"):
                with self._lock:
                    self._confirmed = dict(mine[0].get("shared", {}))
            log.info("%s rocksdb state restored from %s as it is", self.tag, mine[0].get("path"))
            return
        self.db = self._open_fresh()
        wanted = set(owned) if owned is not None else None
        batch, n = rocksdict.WriteBatch(raw_mode=True), 0
        for k, v in read_range(mine, fs, key_groups, f"{self.path}-restore"):
            if wanted is not None and (k[0] << 8 | k[1]) not in wanted:
                continue
            batch.put(k, v)
            n += 1
            if n % RESTORE_BATCH == 0:
                self.db.write(batch)
                batch = rocksdict.WriteBatch(raw_mode=True)
        self.db.write(batch)
        log.info("%s rocksdb state restored from %d databases: %d entries copied", self.tag, len(mine), n)

    def close(self) -> None:
        try:
            self.db.close()
        except Exception:  # noqa: BLE001 — best effort: already closed
            pass
        shutil.rmtree(self.path, ignore_errors=True)


def _files(handle: Mapping[str, Any], fs: pafs.FileSystem) -> tuple[pafs.FileSystem, list[tuple[str, str]]]:
    """(file system, [(file name, path)]) of every file of a handle's database."""
    if "uri" in handle:  # a savepoint: a directory and its file names
        sfs, base = resolve(handle["uri"])
        return sfs, [(name, f"{base.rstrip('/')}/{name}") for name in handle["files"]]
    files = {**handle.get("private", {}), **handle.get("shared", {})}
    return fs, sorted(files.items())


def _download(handle: Mapping[str, Any], fs: pafs.FileSystem, directory: str) -> None:
    sfs, files = _files(handle, fs)
    os.makedirs(directory, exist_ok=True)
    for name, path in files:
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"rocksdb state handle names a bad file {name!r}")
        with sfs.open_input_stream(path) as src, open(os.path.join(directory, name), "wb") as out:
            while chunk := src.read(COPY_CHUNK):
                out.write(chunk)


def read_range(
    handles: Sequence[Mapping[str, Any]], fs: pafs.FileSystem, key_groups: tuple[int, int], scratch: str
) -> Iterator[tuple[bytes, bytes]]:
    """Every raw (key, value) of `handles` in `key_groups`: each database downloaded to
    `scratch`, opened read-only and its key range iterated."""
    first, end = range_bounds(*key_groups)
    for i, h in enumerate(handles):
        directory = f"{scratch}-{i}"
        shutil.rmtree(directory, ignore_errors=True)
        try:
            _download(h, fs, directory)
            db = rocksdict.Rdict(directory, options())
            try:
                it = db.iter()
                it.seek(first)
                while it.valid():
                    k = it.key()
                    if k >= end:
                        break
                    yield k, it.value()
                    it.next()
                del it
            finally:
                db.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def read_entries(
    handles: Sequence[Mapping[str, Any]], fs: pafs.FileSystem, key_groups: tuple[int, int], scratch: str
) -> Iterator[tuple[Any, int, tuple[Any, ...]]]:
    """`read_range`, decoded: (key, key group, values) — a memory backend restoring rocksdb state."""
    for k, v in read_range(handles, fs, key_groups, scratch):
        kg, key = decode_key(k)
        yield key, kg, decode_value(v)


class RocksDBSnapshot:
    """A RocksDB checkpoint on local disk, waiting to be uploaded (any thread)."""

    def __init__(
        self,
        owner: RocksDBKeyedValues,
        local: str,
        checkpoint_id: int,
        incremental: bool,
        reuse: dict[str, str],
        rows: int,
    ) -> None:
        self.owner = owner
        self.local = local
        self.checkpoint_id = checkpoint_id
        self.incremental = incremental
        self.reuse = reuse
        self.rows = rows

    def upload(
        self,
        fs: pafs.FileSystem,
        checkpoint_dir: str,
        shared_dir: str,
        operator_id: str,
        subtask: int,
        key_groups: tuple[int, int],
    ) -> dict[str, Any]:
        """Write the files the checkpoint needs; returns the handle. The local copy goes."""
        try:
            private_dir = f"{checkpoint_dir}/{operator_id}/{subtask}"
            fs.create_dir(private_dir, recursive=True)
            private: dict[str, str] = {}
            shared: dict[str, str] = {}
            new: list[str] = []
            uploaded = total = 0
            for name in sorted(os.listdir(self.local)):
                local = os.path.join(self.local, name)
                size = os.path.getsize(local)
                total += size
                if self.incremental and name.endswith(".sst"):
                    if name in self.reuse:
                        shared[name] = self.reuse[name]
                        continue
                    directory = f"{shared_dir}/{operator_id}"
                    fs.create_dir(directory, recursive=True)
                    target = f"{directory}/{new_shared_name(self.checkpoint_id, '.sst')}"
                    shared[name] = target
                    new.append(name)
                else:
                    target = f"{private_dir}/{name}"
                    private[name] = target
                _copy(local, fs, target)
                uploaded += size
            self.owner._uploaded(self.checkpoint_id, shared)
            return {
                "backend": ROCKSDB,
                "path": private_dir,
                "key_groups": list(key_groups),
                "rows": self.rows,
                "size": uploaded,
                "full_size": total,
                "private": private,
                "shared": shared,
                "new": new,
            }
        finally:
            self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.local, ignore_errors=True)


def _copy(local: str, fs: pafs.FileSystem, target: str) -> None:
    with open(local, "rb") as src, fs.open_output_stream(target) as out:
        while chunk := src.read(COPY_CHUNK):
            out.write(chunk)
