"""Sinks. The file sink writes each subtask's rows to a hidden in-progress
file and makes it visible with an atomic rename when it commits (at the end
of the input; with checkpoints, when a checkpoint completes; in BATCH mode at
the end of the input, first-wins under one name per subtask). A part is
written in the sink's format (`PartEncoder`: csv, json, parquet or text,
docs/file-formats.md); committing does not depend on it. The upsert sink
into SQLite is in taskmanager/operators/sqlite_sink.py."""

from __future__ import annotations

import datetime
import decimal
import errno
import json
import logging
import os
import posixpath
import re
import sys
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs

from sluice.graph import OperatorKind
from sluice.schema_inference import SINK_FORMATS
from sluice.storage import resolve
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch

log = logging.getLogger("sluice.taskmanager.sink")
_PART_OWNER = re.compile(r"^\.part-[0-9]+-[0-9a-f]{1,8}-")  # a hidden part's name: ".part-<subtask>-<job8>-"
INTERNAL_PREFIX = "__"
BATCH_TOKEN = "batch"  # the token of a BATCH part's name: the same for every attempt of a subtask
# os.link failing with these: the local file system has no hard links (commit by check, then rename)
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK}


def _visible_columns(table: pa.Table, columns: Sequence[str] | None) -> pa.Table:
    if columns:
        return table.select(list(columns))
    return table.select([c for c in table.column_names if not c.startswith(INTERNAL_PREFIX)])


def _csv_bytes(table: pa.Table, options: pacsv.WriteOptions) -> bytes:
    buf = pa.BufferOutputStream()
    pacsv.write_csv(table, buf, write_options=options)
    return buf.getvalue().to_pybytes()


# A Parquet part's row groups hold at most this many rows: batches are gathered up to it (so
# small batches do not make tiny row groups) and a larger batch is cut into groups of it.
PARQUET_ROW_GROUP_ROWS = 128 * 1024
# ... and the rows gathered are written out once they take this much memory, whatever their number
PARQUET_BUFFER_BYTES = 64 * 1024 * 1024


class PartEncoder:
    """Writes the rows of one part to its open output stream in one format. `write` takes each
    batch's visible columns; `close` finishes the part (a Parquet footer) and closes the stream.
    `for_format` picks the class."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    @staticmethod
    def for_format(format: str, stream: Any) -> PartEncoder:
        return _ENCODERS[format](stream)

    def write(self, table: pa.Table) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stream.close()


class CsvEncoder(PartEncoder):
    """Comma-separated lines without a header: plain `a,b`, quoting only a batch that holds a
    comma, a quote or a newline."""

    _plain = pacsv.WriteOptions(include_header=False, quoting_style="none")
    _quoted = pacsv.WriteOptions(include_header=False, quoting_style="needed")

    def write(self, table: pa.Table) -> None:
        try:
            data = _csv_bytes(table, self._plain)
        except pa.ArrowInvalid:
            data = _csv_bytes(table, self._quoted)
        self.stream.write(data)


def _json_value(value: Any) -> Any:
    """A value json.dumps does not know, as JSON: times in ISO 8601, durations in seconds,
    decimals as numbers (doubles), bytes as text (UTF-8, undecodable bytes replaced)."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"a value of type {type(value).__name__} has no JSON form")


class JsonEncoder(PartEncoder):
    """One JSON object per line, the columns in order (nulls as null). Built column by column
    with Arrow compute (`_json_fragments`), not row by row: json.dumps per row wrote about
    0.1 M rows/s where this writes several times that (docs/file-formats.md)."""

    def write(self, table: pa.Table) -> None:
        if table.num_columns == 0:
            self.stream.write(b"{}\n" * table.num_rows)
            return
        parts: list[Any] = []
        for i, name in enumerate(table.column_names):
            parts += [
                ("{" if i == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":",
                _json_fragments(table.column(i)),
            ]
        lines = pc.binary_join_element_wise(*parts, "}\n", "")  # never null: every fragment is filled
        _offsets, data = lines.buffers()[1:3]
        ends = memoryview(_offsets).cast("i")  # int32 offsets of the strings into `data`
        self.stream.write(data[ends[lines.offset] : ends[lines.offset + len(lines)]])  # the lines as they are


_CONTROL = r"[\x00-\x1f]"  # characters a JSON string must escape as \uXXXX (json.dumps does it)


def _json_fragments(column: Any) -> pa.Array:
    """Each value of `column` as JSON text: integers and booleans as Arrow writes them, floats
    with a `.0` when integral (so they read back as floats) and null when not finite, strings
    quoted and escaped; other types (times, decimals, binaries, nested) value by value through
    json.dumps and `_json_value`."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = values.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        text = pc.cast(values, pa.string())
    elif pa.types.is_floating(t) and not pa.types.is_float16(t):
        text = pc.cast(values, pa.string())
        integral = pc.match_substring_regex(text, r"^-?[0-9]+$")
        text = pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)
        text = pc.if_else(pc.is_finite(values), text, pa.scalar(None, pa.string()))
    elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and not pc.any(
        pc.match_substring_regex(values, _CONTROL)
    ).as_py():
        escaped = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
        text = pc.cast(pc.binary_join_element_wise('"', escaped, '"', ""), pa.string())
    else:
        dumped = [json.dumps(v, ensure_ascii=False, default=_json_value) for v in values.to_pylist()]
        return pa.array(dumped, pa.string())
    return pc.fill_null(text, "null")


class TextEncoder(PartEncoder):
    """The one column's values as text, one per line (a null as an empty line)."""

    def write(self, table: pa.Table) -> None:
        check_text_columns(table.column_names)
        column = table.column(0)
        if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
            column = column.cast(pa.string())
        values = ["" if v is None else v for v in column.to_pylist()]
        self.stream.write(("\n".join(values) + "\n").encode())


def check_text_columns(columns: Sequence[str]) -> None:
    """A text sink writes exactly one column: ValueError naming the columns otherwise."""
    if len(columns) != 1:
        raise ValueError(
            f"a text file sink writes exactly one column per line; the rows have {len(columns)}: "
            f"{', '.join(columns) or '(none)'}. Give FileSink(columns=[...]) one column, or use format='csv' or 'json'"
        )


class ParquetEncoder(PartEncoder):
    """One Parquet file per part, written with pyarrow: row groups of at most
    PARQUET_ROW_GROUP_ROWS rows (fewer when wide rows reach PARQUET_BUFFER_BYTES first),
    timestamps in microseconds (what Spark reads), the schema of the first batch (later
    batches are cast to it; one that cannot be is an error naming the columns)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._writer: Any = None
        self._schema: pa.Schema | None = None
        self._buffered: list[pa.Table] = []
        self._rows = 0
        self._bytes = 0

    def write(self, table: pa.Table) -> None:
        if self._schema is None:
            self._schema = table.schema
        elif table.schema != self._schema:
            try:
                table = table.cast(self._schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                first, this = (t.to_string(show_schema_metadata=False) for t in (self._schema, table.schema))
                raise ValueError(
                    f"a Parquet file sink writes one schema per part ({first}); a batch has {this}: {exc}"
                ) from None
        self._buffered.append(table)
        self._rows += table.num_rows
        self._bytes += table.nbytes
        if self._rows >= PARQUET_ROW_GROUP_ROWS or self._bytes >= PARQUET_BUFFER_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        import pyarrow.parquet as pq

        assert self._schema is not None  # set by the first write
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self.stream, self._schema, coerce_timestamps="us", allow_truncated_timestamps=True
            )
        table = pa.concat_tables(self._buffered)
        self._buffered, self._rows, self._bytes = [], 0, 0
        self._writer.write_table(table, row_group_size=PARQUET_ROW_GROUP_ROWS)

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()  # the footer; the stream stays open (ParquetWriter did not open it)
        self.stream.close()


_ENCODERS: dict[str, type[PartEncoder]] = {
    "csv": CsvEncoder,
    "json": JsonEncoder,
    "parquet": ParquetEncoder,
    "text": TextEncoder,
}


class FileSinkWriter(Operator):
    """Two-phase commit file sink.

    Rows of an epoch go to a hidden in-progress file. At a checkpoint barrier
    the file is closed and becomes *pending* (pre-commit; it is in the
    snapshot). When the checkpoint completes, pending files up to it are
    renamed to their visible names (commit). On restore, the pending files of
    the restored checkpoint are committed (idempotent) and every other hidden
    file of this subtask is deleted (abort). Without checkpointing, a part is
    committed at the end of the input.

    BATCH mode (`OperatorContext.batch`, no checkpoints): the part commits at the end of the
    input under `committed_name(0, BATCH_TOKEN)`, the same name for every attempt of the
    subtask, first-wins (`_commit_first_wins`): when two attempts of one subtask run (a
    speculative backup, a re-run after a failure) the first to commit makes its part visible,
    and the other deletes its own. A subtask that wrote no rows commits nothing.

    A part in progress or pending is `.part-<subtask>-<job8>-<token>-<n>.inprogress`;
    committed, it is `part-<checkpoint id, 12 digits>-<subtask, 5 digits>-<job8>-<token><ext>`
    (`committed_name`; the extension is the format's, SINK_FORMATS: .csv, .jsonl, .parquet,
    .txt), so file-name order is commit order. The payload's `format` (default csv) says how a
    part is written (`PartEncoder`); a Parquet part is whole only once closed (its footer is
    written at the barrier), which the pre-commit does before the part is pending.
    """

    is_sink: ClassVar[bool] = True

    def __init__(
        self,
        payload: Payload,
        subtask: int,
        job_id: str,
        restored: int,
        exactly_once: bool,
        tag: str = "",
        batch: bool = False,
    ) -> None:
        self.tag = tag  # the task's correlation ids, on each log line
        self.batch = batch  # BATCH mode: commit first-wins under one name per subtask at the end of the input
        self.fs, self.dir = resolve(payload["path"])
        self.columns = payload.get("columns")
        self.format = payload.get("format") or "csv"
        if self.format not in SINK_FORMATS:
            raise ValueError(f"file sink: unknown format {self.format!r}; use one of {', '.join(SINK_FORMATS)}")
        if self.format == "text" and self.columns:
            check_text_columns(self.columns)
        self.extension = SINK_FORMATS[self.format]
        self.subtask = subtask
        self.exactly_once = exactly_once
        self.job8 = job_id[:8]
        # Hidden names of every attempt of this subtask start with "." + owner (restore deletes
        # them); the token keeps names of different deployments apart.
        self.owner = f"part-{subtask}-{self.job8}"
        self.token = uuid.uuid4().hex[:6]
        self.restored = restored  # the checkpoint this deployment restored from (0: none)
        self.fs.create_dir(self.dir, recursive=True)
        self.counter = 0
        self._stream: PartEncoder | None = None  # the open part's encoder (over a pyarrow output stream)
        self._staging: str | None = None
        self.pending: list[tuple[str, str, int]] = []  # (staging, final, checkpoint id)

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one class per kind
        return cls(
            payload,
            ctx.subtask,
            ctx.job_id,
            ctx.restore_checkpoint_id,
            ctx.checkpointing,
            tag=ctx.tag,
            batch=ctx.batch,
        )

    def _open(self) -> None:
        self._staging = f"{self.dir}/.{self.owner}-{self.token}-{self.counter:06d}.inprogress"
        self._stream = PartEncoder.for_format(self.format, self.fs.open_output_stream(self._staging))

    def process(self, batch: Batch) -> None:
        table = _visible_columns(batch.table(), self.columns)
        if table.num_rows == 0:
            return None
        if self.format == "text":
            check_text_columns(table.column_names)
        if self._stream is None:
            self._open()
        assert self._stream is not None  # opened above
        self._stream.write(table)
        return None

    def committed_name(self, checkpoint_id: int, token: str | None = None) -> str:
        """The visible name of the part closed by checkpoint `checkpoint_id` (0: no checkpoints).

        Names sort in commit order: the checkpoint id comes first, zero-padded. Ids only grow
        across attempts and leaders (the counter is in ZooKeeper), an attempt restored from
        checkpoint c commits only parts of ids above c, and nothing of an id above c was
        committed before (c is the latest completed one). So reading every visible part in
        file-name order, line by line, replays the update stream in commit order, and the
        last line of a key is its latest committed value (sluice/output.py relies on it).
        `token`: instead of this deployment's random one (BATCH_TOKEN: one name for every
        attempt of the subtask).
        """
        name = f"part-{checkpoint_id:012d}-{self.subtask:05d}-{self.job8}-{token or self.token}{self.extension}"
        return f"{self.dir}/{name}"

    def _close_part(self, checkpoint_id: int) -> tuple[str, str] | None:
        if self._stream is None:
            return None
        self._stream.close()
        final = self.committed_name(checkpoint_id)
        staged = self._staging
        assert staged is not None  # set with the stream
        self._stream = self._staging = None
        self.counter += 1
        return staged, final

    def _commit(self, staged: str, final: str) -> None:
        if self.fs.get_file_info(staged).type != pafs.FileType.NotFound:
            self.fs.move(staged, final)
        elif self.fs.get_file_info(final).type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"pending part {staged} vanished before its commit to {final}")

    # -- checkpoints ------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """Pre-commit: close the part of this epoch; it commits when checkpoint_id completes."""
        part = self._close_part(checkpoint_id)
        if part is not None:
            self.pending.append((*part, checkpoint_id))
        return OperatorSnapshot(inline={"pending": [[staged, final] for staged, final, _ in self.pending]})

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.notify_complete(checkpoint_id)

    def notify_complete(self, checkpoint_id: int) -> None:
        """Commit: the pending parts of checkpoints up to `checkpoint_id` become visible."""

        keep = []
        for staged, final, cid in self.pending:
            if cid <= checkpoint_id:
                self._commit(staged, final)
                log.info("%s committed %s (checkpoint %d)", self.tag, os.path.basename(final), cid)
            else:
                keep.append((staged, final, cid))
        self.pending = keep

    def _check_own_part(self, staged: Any, final: Any) -> None:
        """A pending part named in restored state must be one a subtask of this sink writes: a
        hidden part in the output directory, committed to a visible part name there (of
        another subtask or job when a savepoint was restored at another parallelism or into
        a new job: docs/savepoints.md). Checkpoint state crosses the wire in acks, so a restore never renames
        anything else (docs/security.md, Fencing and limits)."""
        ok = (
            isinstance(staged, str)
            and isinstance(final, str)
            and posixpath.normpath(posixpath.dirname(staged)) == posixpath.normpath(self.dir)
            and posixpath.normpath(posixpath.dirname(final)) == posixpath.normpath(self.dir)
            and _PART_OWNER.match(posixpath.basename(staged)) is not None
            and staged.endswith(".inprogress")
            and posixpath.basename(final).startswith("part-")
            and final.endswith(tuple(SINK_FORMATS.values()))
            and ".." not in (staged + final)
        )
        if not ok:
            raise ValueError(
                f"restored file sink state names a part outside its own output {self.dir}: {staged!r} -> {final!r}"
            )

    def restore(self, state: OperatorSnapshot) -> None:
        handle = state.inline or {}
        committed = set()
        for staged, final in handle.get("pending", []):
            self._check_own_part(staged, final)
            self._commit(staged, final)
            committed.add(staged)
        for info in self.fs.get_file_info(pafs.FileSelector(self.dir)):
            if info.base_name.startswith(f".{self.owner}-") and info.path not in committed:
                self.fs.delete_file(info.path)  # written after the restored checkpoint: abort

    def _commit_first_wins(self, staged: str, final: str) -> bool:
        """Commit a BATCH part under its attempt-independent name unless another attempt of
        this subtask did first (then delete our own). True when this attempt's part is visible."""
        if isinstance(self.fs, pafs.LocalFileSystem):
            try:
                os.link(staged, final)  # atomic, and fails when `final` exists: the first attempt wins
            except FileExistsError:
                return self._lost(staged, final)
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                return self._check_then_move(staged, final)
            os.unlink(staged)
            return True
        return self._check_then_move(staged, final)

    def _check_then_move(self, staged: str, final: str) -> bool:
        # Not atomic: two attempts committing at the same moment may both find no part, and the
        # later move then replaces the earlier part (object stores rename by copy). There is still
        # one visible part for the subtask (the name is the same), a complete one of either attempt.
        if self.fs.get_file_info(final).type != pafs.FileType.NotFound:
            return self._lost(staged, final)
        self.fs.move(staged, final)
        return True

    def _lost(self, staged: str, final: str) -> bool:
        """Another attempt of this subtask committed first: our part goes."""
        self.fs.delete_file(staged)
        log.info(
            "%s did not commit: another attempt of subtask %d committed %s first; deleted its own part %s",
            self.tag,
            self.subtask,
            os.path.basename(final),
            os.path.basename(staged),
        )
        return False

    def end_input(self) -> Batch | None:
        if self.batch:  # BATCH: one part per subtask, whichever attempt commits first
            part = self._close_part(0)
            if part is not None:
                staged, _final = part
                final = self.committed_name(0, BATCH_TOKEN)
                if self._commit_first_wins(staged, final):
                    log.info("%s committed %s", self.tag, os.path.basename(final))
        elif not self.exactly_once:  # with checkpoints, the final checkpoint commits
            part = self._close_part(self.restored)  # no checkpoints: 0, the id of no checkpoint
            if part:
                self._commit(*part)
                log.info("%s committed %s", self.tag, os.path.basename(part[1]))
        return None

    def abort(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
                self.fs.delete_file(self._staging)
            except Exception:  # noqa: BLE001 — best effort: the part is not committed either way
                pass
            self._stream = None


class PrintSink(Operator):
    """Rows to the TaskManager's stdout, prefixed by the subtask when there are several."""

    is_sink: ClassVar[bool] = True

    def __init__(self, subtask: int, parallelism: int) -> None:
        self.prefix = f"{subtask + 1}> " if parallelism > 1 else ""

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one class per kind
        return cls(ctx.subtask, ctx.parallelism)

    def process(self, batch: Batch) -> None:
        table = _visible_columns(batch.table(), None)
        for row in table.to_pylist():
            print(f"{self.prefix}{row}", flush=False)
        return None

    def end_input(self) -> None:
        sys.stdout.flush()
        return None
