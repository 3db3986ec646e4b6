"""The memory backend's snapshot of keyed aggregate state, kept between checkpoints so that a
checkpoint costs what changed since the last one, not the whole state (docs/state-backends.md).

A memory snapshot is an Arrow table of every key's entry (taskmanager/operators/keyed_aggregate.py).
Building it from the state's dict is a Python loop over every key: at a million keys about a
second of the task thread at each barrier, growing with the state, not with the work. This cache
keeps the last snapshot's table and the rows the operator put since, as the Arrow tables it built
for its output anyway (`changed`: one table per batch, a row per key whose value changed). The next
snapshot is the last table without the changed keys' old rows plus their newest rows: a
concatenation, a last-row-per-key over the changes when several batches changed a key, and a
vectorized anti-join, all in Arrow's C++, no Python call per key. The state never drops a key
between snapshots (a keyed aggregate keeps every key; a restore starts the cache over), so the two
parts are every entry.

Pure: Arrow tables in, Arrow tables out; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Rows builds the snapshot rows of every key; the table it returns has the snapshot's columns, the
# key columns first.
Rows = Callable[[], pa.Table]
ROW = "__row"  # the row-number column of the last-row-per-key step


class SnapshotCache:
    """The last snapshot table and the rows changed since (`changed`); `take` makes the next."""

    # changes are dropped, and the next snapshot built whole, once they hold more rows than this
    # many times the state's keys (checkpoints that fail for long must not grow memory forever)
    MAX_PENDING_SHARE = 2.0
    MAX_CHUNKS = 16

    def __init__(self, key_columns: Sequence[str]) -> None:
        self.key_columns = list(key_columns)
        self.table: pa.Table | None = None  # the last snapshot
        self.pending: list[pa.Table] = []  # the rows put since it was taken, oldest first
        self.pending_rows = 0
        self.overflowed = False  # changes were dropped: the next snapshot is built whole
        self.whole = 0  # snapshots built from every key (statistics for tests and logs)
        self.incremental = 0  # snapshots built from the changed rows

    @property
    def tracking(self) -> bool:
        """Whether changes are wanted: there is a last snapshot to patch."""
        return self.table is not None and not self.overflowed

    def changed(self, rows: pa.Table, size: int) -> None:
        """`rows` (the snapshot's columns, one row per key) were put into a state of `size` keys."""
        if not self.tracking or rows.num_rows == 0:
            return
        self.pending.append(rows)
        self.pending_rows += rows.num_rows
        if self.pending_rows > self.MAX_PENDING_SHARE * max(size, 1):
            self.pending, self.pending_rows, self.overflowed = [], 0, True

    def reset(self) -> None:
        """The state was replaced (a restore, a clear): the next snapshot is built whole."""
        self.table, self.pending, self.pending_rows, self.overflowed = None, [], 0, False

    def take(self, rows: Rows) -> pa.Table:
        """The next snapshot: the last table patched with the changes, or every key's rows
        (`rows()`) when there is no last table, changes were dropped, or the changed rows do not
        fit the last table's schema."""
        table = self._patched(self.table) if self.tracking else None
        if table is None:
            table = rows()
            self.whole += 1
        else:
            self.incremental += 1
        self.table, self.pending, self.pending_rows, self.overflowed = table, [], 0, False
        return table

    def _patched(self, last: pa.Table | None) -> pa.Table | None:
        if last is None or not self.pending:
            return last
        try:
            fresh = pa.concat_tables(self.pending, promote_options="permissive")
            if fresh.schema != last.schema:
                fresh = fresh.select(last.column_names).cast(last.schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
            return None  # e.g. a column that was all nulls got values: built whole
        if len(self.key_columns) > 1 and any(fresh.column(c).null_count for c in self.key_columns):
            return None  # a null in a composite key matches nothing in a join: built whole
        try:
            if len(self.pending) > 1:  # a key changed in several batches: its newest row
                fresh = _last_per_key(fresh, self.key_columns)
            kept = _without(last, fresh.select(self.key_columns), self.key_columns)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None  # a key type Arrow cannot group or join: built whole
        table = pa.concat_tables([kept, fresh])
        # a chunk per patch; merged once there are many, so the anti-join scans few chunks
        return table.combine_chunks() if table.column(0).num_chunks > self.MAX_CHUNKS else table


def _last_per_key(table: pa.Table, columns: list[str]) -> pa.Table:
    """The last row of each key (`columns`) of `table`, in no particular order."""
    numbered = table.select(columns).append_column(ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    last = numbered.group_by(columns, use_threads=False).aggregate([(ROW, "max")])
    return table.take(last.column(f"{ROW}_max"))


def _without(table: pa.Table, keys: pa.Table, columns: list[str]) -> pa.Table:
    """The rows of `table` whose key (`columns`) is not a row of `keys`."""
    if len(columns) == 1:
        column = columns[0]
        present = pc.is_in(table.column(column), value_set=keys.column(column), skip_nulls=False)
        return table.filter(pc.invert(present))
    return table.join(keys, keys=columns, join_type="left anti").select(table.column_names)
