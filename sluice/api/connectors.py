"""Sinks a job writes to."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

# A file sink's formats and their parts' extensions (as sluice/schema_inference.py's SINK_FORMATS,
# which the TaskManager's writer and sluice/output.py use; kept here so the API imports no pyarrow)
FILE_SINK_FORMATS = ("csv", "json", "parquet", "text")


@dataclasses.dataclass(frozen=True)
class FileSink:
    """Writes rows into parts under `path`, in `format`:

    - `"csv"` (the default): comma-separated lines, no header (`.csv`);
    - `"json"`: one JSON object per line, the columns by name (`.jsonl`);
    - `"parquet"`: one Parquet file per part, bounded row groups (`.parquet`);
    - `"text"`: the value of the rows' one column per line (`.txt`); rows of
      any other number of columns are an error naming them.

    Files being written are hidden (names start with '.'); a part becomes visible
    by an atomic rename when it commits, as
    `part-<checkpoint id, 12 digits>-<subtask, 5 digits>-<job8>-<token><ext>`
    (checkpoint id 0 without checkpointing), in every format. File-name order is
    commit order: the last row of a key in file-name order is its latest value
    (`sluice.read_output`, `sluice output --final`). `columns` picks and orders the
    written columns (default: all but internal ones). docs/file-formats.md.
    """

    path: str
    columns: tuple[str, ...] | None = None
    format: str = "csv"

    def __post_init__(self) -> None:
        if self.format not in FILE_SINK_FORMATS:
            raise ValueError(f"FileSink format: one of {', '.join(FILE_SINK_FORMATS)}, got {self.format!r}")
        if self.columns is not None:
            if isinstance(self.columns, str) or not all(isinstance(c, str) and c for c in self.columns):
                raise ValueError(f"FileSink columns: a sequence of column names, got {self.columns!r}")
            if self.format == "text" and len(tuple(self.columns)) != 1:
                raise ValueError(
                    "FileSink columns: a text sink writes exactly one column per line, "
                    f"got {len(tuple(self.columns))}: {', '.join(self.columns)}"
                )

    def payload(self) -> dict[str, Any]:
        # plain data only (the job graph's JSON config): a pathlib.Path becomes its string
        payload = {"path": os.fspath(self.path), "columns": list(self.columns) if self.columns else None}
        if self.format != "csv":  # a csv sink's config is what it was before formats
            payload["format"] = self.format
        return payload


@dataclasses.dataclass(frozen=True, init=False)
class SqliteSink:
    """Upserts rows into `table` of the SQLite database file `db_path`, one row per key,
    exactly once: the rows of each checkpoint are applied in one transaction together
    with the checkpoint id in the table `_sluice_commits`, so a replayed checkpoint is
    skipped and a reader (the `sqlite3` shell, pandas) always sees a consistent table of
    final-so-far values. Without checkpointing the rows are applied at the end of the input.

    `key`: the column(s) a row is upserted by (a column name or several); `columns`: the
    columns written, in order (default: all but internal ones); the key must be among them.
    The table is created on the first commit when missing (primary key: `key`; types from
    the data); an existing table needs those columns and a primary key or unique index on
    exactly `key`. A relative `db_path` is resolved here, in the client; its directory must
    exist, on the machine of the TaskManagers. Several subtasks write one database: a
    transaction waits up to `timeout_s` seconds for the write lock.
    """

    db_path: str
    table: str
    key: tuple[str, ...]
    columns: tuple[str, ...] | None
    timeout_s: float

    def __init__(
        self,
        db_path: str,
        table: str,
        key: str | Sequence[str],
        columns: Sequence[str] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        keys = (key,) if isinstance(key, str) else tuple(key)
        if not keys or not all(isinstance(k, str) and k for k in keys) or len(set(keys)) != len(keys):
            raise ValueError(f"SqliteSink key: one or more distinct column names, got {key!r}")
        cols = None if columns is None else tuple(columns)
        if cols is not None:
            if isinstance(columns, str) or not cols or not all(isinstance(c, str) and c for c in cols):
                raise ValueError(f"SqliteSink columns: a sequence of column names, got {columns!r}")
            if missing := [k for k in keys if k not in cols]:
                raise ValueError(f"SqliteSink key: {', '.join(missing)} not among the columns {', '.join(cols)}")
        if not (isinstance(table, str) and table.isascii() and table.isidentifier()):
            raise ValueError(f"SqliteSink table: letters, digits and '_', not starting with a digit; got {table!r}")
        object.__setattr__(self, "db_path", os.path.abspath(db_path))
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "key", keys)
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "timeout_s", float(timeout_s))

    def payload(self) -> dict[str, Any]:
        return {
            "db_path": self.db_path,
            "table": self.table,
            "key": list(self.key),
            "columns": list(self.columns) if self.columns else None,
            "timeout_s": self.timeout_s,
        }
