"""The memory backend's snapshot of keyed aggregate state, kept between checkpoints so that a
checkpoint costs what changed since the last one, not the whole state (docs/state-backends.md).

A memory snapshot is an Arrow table of every key's entry (taskmanager/operators/keyed_aggregate.py).
Building it from the state's dict is a Python loop over every key: at a million keys about a
second of the task thread at each barrier, growing with the state, not with the work. This cache
keeps the last snapshot's table and the keys updated since; the next snapshot is that table
without the updated keys' old rows (a vectorized anti-join in Arrow's C++) plus their new rows,
built in Python from those keys alone. The state never drops a key between snapshots (a keyed
aggregate keeps every key; a restore starts the cache over), so the two parts are every entry.

Pure: Arrow tables in, Arrow tables out; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

# Rows builds the snapshot rows of the given keys (every key: None); the table it returns has the
# snapshot's columns, the key columns first.
Rows = Callable[[Collection[Hashable] | None], pa.Table]


class SnapshotCache:
    """The last snapshot table and the keys changed since (`changed`); `take` makes the next."""

    # a snapshot is built whole when at least this share of the keys changed: the anti-join and
    # the concatenation then cost more than they save
    WHOLE_SHARE = 0.5
    MAX_CHUNKS = 16

    def __init__(self, key_columns: Sequence[str]) -> None:
        self.key_columns = list(key_columns)
        self.table: pa.Table | None = None  # the last snapshot
        self.dirty: set[Hashable] = set()  # keys put since it was taken
        self.whole = 0  # snapshots built from every key (statistics for tests and logs)
        self.incremental = 0  # snapshots built from the changed keys

    def changed(self, keys: Collection[Hashable]) -> None:
        """`keys` were put into the state (new keys or new values)."""
        if self.table is not None:
            self.dirty.update(keys)

    def reset(self) -> None:
        """The state was replaced (a restore, a clear): the next snapshot is built whole."""
        self.table = None
        self.dirty = set()

    def take(self, rows: Rows, size: int) -> pa.Table:
        """The snapshot of a state of `size` keys: the last table with the changed keys' rows
        replaced, or every key's rows (`rows(None)`) when there is no last table, most keys
        changed, or the new rows do not fit the last table's schema."""
        table = None
        if self.table is not None and len(self.dirty) < self.WHOLE_SHARE * max(size, 1):
            table = self._patched(self.table, rows)
        if table is None:
            table = rows(None)
            self.whole += 1
        else:
            self.incremental += 1
        self.table, self.dirty = table, set()
        return table

    def _patched(self, last: pa.Table, rows: Rows) -> pa.Table | None:
        if not self.dirty:
            return last
        keys = self.dirty
        if len(self.key_columns) > 1 and any(k is None or (isinstance(k, tuple) and None in k) for k in keys):
            return None  # a null in a composite key matches nothing in a join: built whole
        fresh = rows(keys)
        if fresh.schema != last.schema:
            try:
                fresh = fresh.cast(last.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
                return None  # e.g. a column that was all nulls got values: built whole
        kept = _without(last, fresh.select(self.key_columns), self.key_columns)
        table = pa.concat_tables([kept, fresh])
        # a chunk per patch; merged once there are many, so the anti-join scans few chunks
        return table.combine_chunks() if table.column(0).num_chunks > self.MAX_CHUNKS else table


def _without(table: pa.Table, keys: pa.Table, columns: list[str]) -> pa.Table:
    """The rows of `table` whose key (`columns`) is not a row of `keys`."""
    if len(columns) == 1:
        column = columns[0]
        present = pc.is_in(table.column(column), value_set=keys.column(column), skip_nulls=False)
        return table.filter(pc.invert(present))
    return table.join(keys, keys=columns, join_type="left anti").select(table.column_names)
