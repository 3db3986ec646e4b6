"""Keyed state kept as a chain of Arrow files: a base and the changes written after it
(docs/checkpoints.md, "Incremental memory-backend checkpoints").

An incremental memory-backend checkpoint of a keyed aggregate (taskmanager/state/changelog.py)
writes only the rows of the keys that changed since the last completed checkpoint, as one Arrow
file under the job's shared directory, and its handle lists every file that makes the state, oldest
first:

    {"chain": [<base>, <changes>, ...], "key_columns": [...], "key_groups": [lo, hi],
     "rows": <keys>, "size": <bytes written by this checkpoint>, "full_size": <bytes of the chain>,
     "shared": {<file name>: <path>}, "new": [<file names this checkpoint wrote>]}

Every file holds rows of the same columns (the key columns, `__kg`, the partials); a key's state
is its row in the newest file that has one. `merge` is that rule, used by a restore
(sluice/checkpoints/storage.py) and by the compaction that writes a new base.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROW = "__chain_row"  # the row number of the last-row-per-key step
MAX_CHAIN = 64  # files one handle may list (the writer compacts long before: taskmanager/state/changelog.py)
MAX_KEY_COLUMNS = 64


def is_chain(handle: Mapping[str, Any]) -> bool:
    """A keyed state handle that lists a chain of files (else: one file, or a rocksdb database)."""
    return "chain" in handle


def valid_key_columns(columns: object) -> bool:
    """A chain handle's key columns: 1 to MAX_KEY_COLUMNS non-empty names."""
    return (
        isinstance(columns, list)
        and 1 <= len(columns) <= MAX_KEY_COLUMNS
        and all(isinstance(c, str) and c for c in columns)
    )


def last_per_key(table: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """The last row of each key of `table` (rows later in the table are newer), in no
    particular order. Null key values form their own key, as in a group-by."""
    columns = list(key_columns)
    numbered = table.select(columns).append_column(ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    last = numbered.group_by(columns, use_threads=False).aggregate([(ROW, "max")])
    return table.take(last.column(f"{ROW}_max"))


def merge(tables: Sequence[pa.Table], key_columns: Sequence[str]) -> pa.Table | None:
    """The state a chain's tables (oldest first; the first one holds each key once) make: each
    key's newest row. The later tables' newest rows replace the first's by an anti-join, so the
    first, by far the largest, is neither hashed nor sorted: a filter and a concatenation."""
    parts = [t for t in tables if t.num_rows]
    if not parts:
        return tables[0] if tables else None
    if len(parts) == 1:
        return parts[0]
    columns = list(key_columns)
    base = parts[0]
    fresh = pa.concat_tables(parts[1:], promote_options="permissive")
    if len(parts) > 2:
        fresh = last_per_key(fresh, columns)
    try:
        if len(columns) == 1:
            present = pc.is_in(base.column(columns[0]), value_set=fresh.column(columns[0]), skip_nulls=False)
            kept = base.filter(pc.invert(present))
        elif any(fresh.column(c).null_count for c in columns):  # a null in a composite key joins nothing
            kept = None
        else:
            kept = base.join(fresh.select(columns), keys=columns, join_type="left anti").select(base.column_names)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):  # e.g. key types that differ
        kept = None
    if kept is None:
        return last_per_key(pa.concat_tables([base, fresh], promote_options="permissive"), columns)
    return pa.concat_tables([kept, fresh], promote_options="permissive")


def write_table(fs: Any, path: str, table: pa.Table) -> int:
    """Write `table` as one Arrow IPC file at `path` (a pyarrow file system's); returns its bytes."""
    with fs.open_output_stream(path) as out, pa.ipc.new_file(out, table.schema) as writer:
        writer.write_table(table)
    return int(fs.get_file_info(path).size)


def read_table(fs: Any, path: str) -> pa.Table:
    with fs.open_input_file(path) as f:
        return pa.ipc.open_file(f).read_all()
