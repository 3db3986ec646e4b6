"""Sinks. The file sink writes each subtask's rows to a hidden in-progress
file and makes it visible with an atomic rename when it commits (at the end
of the input; with checkpoints, when a checkpoint completes)."""

from __future__ import annotations

import logging
import os
import uuid

import pyarrow as pa
import pyarrow.csv as pacsv

from sluice.storage import resolve
from taskmanager.spark_engine import Batch

log = logging.getLogger("sluice.taskmanager.sink")
INTERNAL_PREFIX = "__"


def _visible_columns(table: pa.Table, columns) -> pa.Table:
    if columns:
        return table.select(list(columns))
    return table.select([c for c in table.column_names if not c.startswith(INTERNAL_PREFIX)])


def _csv_bytes(table: pa.Table, options: pacsv.WriteOptions) -> bytes:
    buf = pa.BufferOutputStream()
    pacsv.write_csv(table, buf, write_options=options)
    return buf.getvalue().to_pybytes()


class FileSinkWriter:
    def __init__(self, payload: dict, subtask: int, job_id: str, attempt: int):
        self.fs, self.dir = resolve(payload["path"])
        self.columns = payload.get("columns")
        self.subtask = subtask
        self.prefix = f"part-{subtask}-{job_id[:8]}-{attempt}"
        self.fs.create_dir(self.dir, recursive=True)
        self.counter = 0
        self._stream = None
        self._staging = None
        self._plain = pacsv.WriteOptions(include_header=False, quoting_style="none")
        self._quoted = pacsv.WriteOptions(include_header=False, quoting_style="needed")

    def _open(self) -> None:
        self._staging = f"{self.dir}/.{self.prefix}-{self.counter}.{uuid.uuid4().hex[:6]}.inprogress"
        self._stream = self.fs.open_output_stream(self._staging)

    def process(self, batch: Batch) -> None:
        table = _visible_columns(batch.table(), self.columns)
        if table.num_rows == 0:
            return None
        if self._stream is None:
            self._open()
        try:  # plain `a,b` lines; quote only a batch holding a comma, quote or newline
            data = _csv_bytes(table, self._plain)
        except pa.ArrowInvalid:
            data = _csv_bytes(table, self._quoted)
        self._stream.write(data)
        return None

    def commit(self) -> str | None:
        """Close the in-progress file and make it visible; returns its path."""
        if self._stream is None:
            return None
        self._stream.close()
        final = f"{self.dir}/{self.prefix}-{self.counter}.csv"
        self.fs.move(self._staging, final)
        self._stream = self._staging = None
        self.counter += 1
        return final

    def end_input(self) -> Batch | None:
        path = self.commit()
        if path:
            log.info("committed %s", os.path.basename(path))
        return None

    def abort(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
                self.fs.delete_file(self._staging)
            except Exception:  # noqa: BLE001
                pass
            self._stream = None


class PrintSink:
    def __init__(self, subtask: int, parallelism: int):
        self.prefix = f"{subtask + 1}> " if parallelism > 1 else ""

    def process(self, batch: Batch) -> None:
        table = _visible_columns(batch.table(), None)
        for row in table.to_pylist():
            print(f"{self.prefix}{row}", flush=False)
        return None

    def end_input(self) -> None:
        import sys
        sys.stdout.flush()
        return None

    def abort(self) -> None:
        pass
