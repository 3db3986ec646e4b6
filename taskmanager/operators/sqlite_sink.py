"""An exactly-once upsert sink into an embedded SQLite database (stdlib sqlite3, WAL mode).

The two-phase protocol is the file sink's (`FileSinkWriter`, taskmanager/operators/sinks.py),
with the database in the place of the output directory:

- **write**: rows of the open epoch are buffered in memory, compacted to the last row per
  key; past `spill_bytes` they are spilled to the staging table `_sluice_staging` of the same
  database with no checkpoint id yet (memory stays bounded);
- **pre-commit** (`snapshot(n)`): the epoch's rows are staged durably under checkpoint id
  *n* in one transaction; *n* is *pending* and the pending ids are the sink's inline state;
- **commit** (`notify_checkpoint_complete(n)`): in ONE transaction, the staged rows of every
  pending checkpoint up to *n* are upserted into the table (`INSERT ... ON CONFLICT (key)
  DO UPDATE`), in checkpoint and staging order, their staging rows deleted, and the highest
  of their ids recorded for (sink, subtask) in `_sluice_commits`. A checkpoint id not above
  the recorded one is skipped: a replayed commit is never applied twice;
- **restore** (checkpoint *r*): the same transaction for the pending ids recorded in *r*
  (finishing a commit a crash interrupted after *r* completed), and every other staged row
  of this (sink, subtask) is deleted: epochs after *r* are aborted;
- without checkpointing, the rows are applied at the end of the input.

The sink's identity in `_sluice_commits` is `<job id>/<operator id>` (the job API puts the
operator id in the payload as `sink_id`): stable across the job's attempts and leaders.
Several subtasks (and TaskManagers on one machine) write one database: each transaction
starts with `BEGIN IMMEDIATE` and waits up to `timeout_s` for the write lock; readers see
the last committed transaction, a consistent table of final-so-far values.
"""

from __future__ import annotations

import collections.abc
import contextlib
import datetime
import json
import logging
import os
import sqlite3
import uuid
from typing import Any, ClassVar, Self

import pyarrow as pa
import pyarrow.compute as pc
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

from sluice.graph import OperatorKind
from sluice.serialization import ipc_to_table, table_to_ipc
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.operators.sinks import INTERNAL_PREFIX
from taskmanager.spark_engine import Batch

log = logging.getLogger("sluice.taskmanager.sqlite_sink")

COMMITS = "_sluice_commits"  # (sink, subtask) -> the last checkpoint id applied
STAGING = "_sluice_staging"  # staged epochs: Arrow IPC streams, by (sink, subtask, checkpoint id)
DEFAULT_TIMEOUT_S = 60.0
_SEQ = "__sluice_seq"

_INTERNAL_TABLES = (
    f"""CREATE TABLE IF NOT EXISTS {COMMITS} (
        sink TEXT NOT NULL,
        subtask INTEGER NOT NULL,
        checkpoint_id INTEGER NOT NULL,
        table_name TEXT NOT NULL,
        committed_at TEXT NOT NULL,
        PRIMARY KEY (sink, subtask))""",
    f"""CREATE TABLE IF NOT EXISTS {STAGING} (
        sink TEXT NOT NULL,
        subtask INTEGER NOT NULL,
        token TEXT NOT NULL,
        seq INTEGER NOT NULL,
        checkpoint_id INTEGER,
        rows INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (sink, subtask, token, seq))""",
)


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def quote(name: str) -> str:
    """An SQL identifier, double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def sqlite_type(t: pa.DataType) -> str:
    """The declared type (and so the affinity) of a column holding Arrow type `t`."""
    if pa.types.is_dictionary(t):
        return sqlite_type(t.value_type)
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_duration(t):
        return "INTEGER"
    if pa.types.is_floating(t):
        return "REAL"
    if pa.types.is_decimal(t):
        return "NUMERIC"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "BLOB"
    if pa.types.is_null(t):
        return ""  # no declared type: values keep their own
    return "TEXT"  # strings; dates and times as ISO text; nested values as JSON


def _column_values(col: pa.ChunkedArray) -> list[Any]:
    """One column as Python values sqlite3 binds (None for null)."""
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.cast(t.value_type)
        t = t.value_type
    if pa.types.is_duration(t):
        return col.cast(pa.int64()).to_pylist()
    if pa.types.is_temporal(t):
        return col.cast(pa.string()).to_pylist()
    if pa.types.is_decimal(t):
        return [None if v is None else str(v) for v in col.to_pylist()]
    if pa.types.is_nested(t):
        return [None if v is None else json.dumps(v, default=str) for v in col.to_pylist()]
    return col.to_pylist()


def sqlite_rows(table: pa.Table) -> collections.abc.Iterator[tuple[Any, ...]]:
    return zip(*(_column_values(c) for c in table.columns), strict=True)


def restored_owners(inline: dict[str, Any] | None, sink: str, subtask: int) -> list[tuple[str, int, list[int]]]:
    """(sink, subtask, pending checkpoint ids) of each identity whose staged epochs a restored
    state leaves to commit: one (a subtask's own state), several (states dealt out by a
    rescale, sluice/checkpoints/rescale.py) or, from a state that names no identity, the
    restoring subtask's own."""
    inline = inline or {}
    entries = inline["owners"] if "owners" in inline else [inline]
    out = []
    for entry in entries:
        pending = [int(c) for c in entry.get("pending", [])]
        if "sink" in entry:
            out.append((str(entry["sink"]), int(entry["subtask"]), pending))
        elif pending:
            out.append((sink, subtask, pending))
    return out


def last_per_key(table: pa.Table, key: list[str]) -> pa.Table:
    """The last row of each key, in the order of those last rows (an upsert of the result
    leaves what an upsert of every row would)."""
    if table.num_rows <= 1:
        return table
    seq = table.append_column(_SEQ, pa.array(range(table.num_rows), pa.int64()))
    try:
        last = seq.group_by(key, use_threads=False).aggregate([(_SEQ, "max")])[f"{_SEQ}_max"]
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return table  # a key type Arrow cannot group: upsert every row, in order
    return table.take(last.take(pc.sort_indices(last)))  # the last rows' positions, ascending


class SqliteSinkWriter(Operator):
    """Upserts rows into `table` of the SQLite database `db_path`, keyed by `key`, exactly
    once (see the module docstring)."""

    is_sink: ClassVar[bool] = True
    spill_bytes: ClassVar[int] = 16 << 20  # buffered Arrow bytes of the open epoch before a spill

    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        self.db_path = os.path.abspath(payload["db_path"])
        self.table: str = payload["table"]
        self.key: list[str] = list(payload["key"])
        self.columns: list[str] | None = list(payload["columns"]) if payload.get("columns") else None
        self.timeout = float(payload.get("timeout_s") or DEFAULT_TIMEOUT_S)
        self.sink = f"{ctx.job_id}/{payload.get('sink_id') or ctx.name}"
        self.subtask = ctx.subtask
        self.exactly_once = ctx.checkpointing
        self.name = ctx.name
        self.tag = ctx.tag
        self.token = uuid.uuid4().hex[:12]  # this deployment's staging rows
        self.pending: list[int] = []  # pre-committed checkpoint ids, not yet applied
        self._buffer: list[pa.Table] = []
        self._buffered_bytes = 0
        self._open_spilled = False  # the open epoch has rows in the staging table
        self._seq = 0
        if not os.path.isdir(os.path.dirname(self.db_path)):
            raise FileNotFoundError(
                f"sqlite sink {self.name!r}: the directory of {self.db_path} does not exist on this TaskManager"
            )
        self._use_wal()
        with self._transaction() as conn:
            for statement in _INTERNAL_TABLES:
                conn.execute(statement)
            if not ctx.restore_checkpoint_id:  # a fresh start: staged rows of an earlier attempt are void
                conn.execute(f"DELETE FROM {STAGING} WHERE sink = ? AND subtask = ?", (self.sink, self.subtask))

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one class per kind
        return cls(payload, ctx)

    # -- the database ----------------------------------------------------------------------
    def _use_wal(self) -> None:
        """Put the database in WAL mode (persistent: readers never block the writer, nor it
        them). Switching does not wait for the lock as transactions do, so subtasks opening a
        new database together retry until one of them switched it, for up to `timeout`."""
        for attempt in Retrying(
            stop=stop_after_delay(self.timeout),
            wait=wait_exponential_jitter(multiplier=0.01, max=0.5, jitter=0.01),
            retry=retry_if_exception(_locked),
            reraise=True,
        ):
            with attempt:
                conn = sqlite3.connect(self.db_path, timeout=self.timeout, isolation_level=None)
                try:
                    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                        conn.execute("PRAGMA journal_mode=WAL")
                finally:
                    conn.close()

    @contextlib.contextmanager
    def _transaction(self) -> collections.abc.Iterator[sqlite3.Connection]:
        """One write transaction on a connection of its own (a connection per transaction:
        nothing is held between them, and any thread may run them)."""
        conn = sqlite3.connect(self.db_path, timeout=self.timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")  # a commit survives a crash of the machine too
            conn.execute("BEGIN IMMEDIATE")  # the write lock now, waiting up to `timeout` for it
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _stage(self, conn: sqlite3.Connection, table: pa.Table, checkpoint_id: int | None) -> None:
        conn.execute(
            f"INSERT INTO {STAGING} (sink, subtask, token, seq, checkpoint_id, rows, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.sink, self.subtask, self.token, self._seq, checkpoint_id, table.num_rows, table_to_ipc(table)),
        )
        self._seq += 1

    def _ensure_table(self, conn: sqlite3.Connection, schema: pa.Schema) -> None:
        """Create the table from the first rows' types, or check that an existing one has the
        columns and a primary key or unique index on exactly the key columns (every time: a
        transaction that created it may have rolled back)."""
        existing = conn.execute("SELECT name, pk FROM pragma_table_info(?)", (self.table,)).fetchall()
        columns = schema.names
        if not existing:
            defs = [
                f"{quote(f.name)} {sqlite_type(f.type)}".rstrip() + (" NOT NULL" if f.name in self.key else "")
                for f in schema
            ]
            keys = ", ".join(quote(k) for k in self.key)
            conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(self.table)} ({', '.join(defs)}, PRIMARY KEY ({keys}))")
            log.info("%s created table %s in %s", self.tag, self.table, self.db_path)
        else:
            names = {name for name, _pk in existing}
            missing = [c for c in columns if c not in names]
            if missing:
                raise ValueError(
                    f"table {self.table!r} in {self.db_path} has no column {', '.join(map(repr, missing))}; "
                    f"it has {', '.join(sorted(names))}"
                )
            if not self._unique_on_key(conn, {name for name, pk in existing if pk}):
                raise ValueError(
                    f"table {self.table!r} in {self.db_path} has no primary key or unique index on exactly "
                    f"({', '.join(self.key)}): an upsert needs one"
                )

    def _unique_on_key(self, conn: sqlite3.Connection, primary_key: set[str]) -> bool:
        if primary_key == set(self.key):
            return True
        for _seq, index, unique, _origin, partial in conn.execute(f"PRAGMA index_list({quote(self.table)})"):
            if unique and not partial:
                cols = {row[2] for row in conn.execute(f"PRAGMA index_info({quote(index)})")}
                if cols == set(self.key):
                    return True
        return False

    def _upsert(self, conn: sqlite3.Connection, table: pa.Table) -> int:
        self._ensure_table(conn, table.schema)
        cols = table.column_names
        names = ", ".join(quote(c) for c in cols)
        values = ", ".join("?" for _ in cols)
        keys = ", ".join(quote(k) for k in self.key)
        updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in cols if c not in self.key)
        action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        sql = f"INSERT INTO {quote(self.table)} ({names}) VALUES ({values}) ON CONFLICT ({keys}) {action}"
        conn.executemany(sql, sqlite_rows(table))
        return int(table.num_rows)

    def _apply(
        self,
        conn: sqlite3.Connection,
        checkpoint_ids: list[int],
        everything: bool,
        owner: tuple[str, int] | None = None,
    ) -> None:
        """In the caller's transaction: apply the staged rows of `checkpoint_ids` not yet
        applied, record the highest, and delete the staged rows they leave void (all of the
        (sink, subtask)'s when `everything`, else those of ids up to the highest). `owner`:
        the (sink, subtask) that staged them, by default this one; a restore names the one
        recorded in the checkpoint (another job's, after a resume; another subtask's, after a
        rescale)."""
        sink, subtask = owner if owner is not None else (self.sink, self.subtask)
        where = "sink = ? AND subtask = ?"
        row = conn.execute(f"SELECT checkpoint_id FROM {COMMITS} WHERE {where}", (sink, subtask)).fetchone()
        recorded = row[0] if row else 0
        due = sorted(c for c in set(checkpoint_ids) if c > recorded)
        rows = 0
        for cid in due:
            staged = conn.execute(
                f"SELECT data FROM {STAGING} WHERE {where} AND checkpoint_id = ? ORDER BY seq",
                (sink, subtask, cid),
            ).fetchall()
            if not staged:
                raise RuntimeError(
                    f"the staged rows of checkpoint {cid} ({sink} subtask {subtask}) vanished "
                    f"from {self.db_path} before their commit"
                )
            for (data,) in staged:
                rows += self._upsert(conn, ipc_to_table(data))
        if everything:
            conn.execute(f"DELETE FROM {STAGING} WHERE {where}", (sink, subtask))
        elif checkpoint_ids:
            conn.execute(
                f"DELETE FROM {STAGING} WHERE {where} AND checkpoint_id <= ?",
                (sink, subtask, max(checkpoint_ids)),
            )
        if due:
            conn.execute(
                f"INSERT INTO {COMMITS} (sink, subtask, checkpoint_id, table_name, committed_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (sink, subtask) DO UPDATE SET "
                "checkpoint_id = excluded.checkpoint_id, committed_at = excluded.committed_at",
                (sink, subtask, due[-1], self.table, datetime.datetime.now(datetime.UTC).isoformat()),
            )
            log.info(
                "%s committed %d rows of checkpoint %s (staged by %s subtask %d) to %s in %s",
                self.tag,
                rows,
                ", ".join(map(str, due)),
                sink,
                subtask,
                self.table,
                self.db_path,
            )
        skipped = sorted(c for c in set(checkpoint_ids) if c <= recorded)
        if skipped:
            log.info("%s checkpoint %s already committed (up to %d): skipped", self.tag, skipped, recorded)

    # -- rows ------------------------------------------------------------------------------
    def _select(self, table: pa.Table) -> pa.Table:
        if self.columns is None:
            self.columns = [c for c in table.column_names if not c.startswith(INTERNAL_PREFIX)]
        missing = [c for c in dict.fromkeys([*self.key, *self.columns]) if c not in table.column_names]
        if missing:
            raise KeyError(
                f"sqlite sink {self.name!r}: no column {', '.join(map(repr, missing))} in the stream; "
                f"its columns are {', '.join(table.column_names)}"
            )
        if any(k not in self.columns for k in self.key):
            raise KeyError(f"sqlite sink {self.name!r}: the key {self.key} must be among the columns {self.columns}")
        return table.select(self.columns)

    def process(self, batch: Batch) -> None:
        table = self._select(batch.table())
        if table.num_rows == 0:
            return None
        for k in self.key:
            nulls = table.column(k).null_count
            if nulls:
                raise ValueError(
                    f"sqlite sink {self.name!r}: {nulls} rows without a value in key column {k!r}; "
                    "a row is upserted by its key, which cannot be null"
                )
        self._buffer.append(table)
        self._buffered_bytes += table.nbytes
        if self._buffered_bytes >= self.spill_bytes:
            spill = self._take_buffer()
            if spill is not None:
                with self._transaction() as conn:
                    self._stage(conn, spill, None)
                self._open_spilled = True
        return None

    def _take_buffer(self) -> pa.Table | None:
        if not self._buffer:
            return None
        table = pa.concat_tables(self._buffer, promote_options="default") if len(self._buffer) > 1 else self._buffer[0]
        self._buffer, self._buffered_bytes = [], 0
        return last_per_key(table, self.key)

    # -- checkpoints -----------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """Pre-commit: stage the epoch's rows durably under `checkpoint_id`."""
        table = self._take_buffer()
        if table is not None or self._open_spilled:
            try:
                with self._transaction() as conn:
                    if self._open_spilled:
                        conn.execute(
                            f"UPDATE {STAGING} SET checkpoint_id = ? "
                            "WHERE sink = ? AND subtask = ? AND token = ? AND checkpoint_id IS NULL",
                            (checkpoint_id, self.sink, self.subtask, self.token),
                        )
                    if table is not None:
                        self._stage(conn, table, checkpoint_id)
            except BaseException:
                if table is not None:  # declined: the rows stay in the open epoch
                    self._buffer.insert(0, table)
                    self._buffered_bytes += table.nbytes
                raise
            self._open_spilled = False
            self.pending.append(checkpoint_id)
        return OperatorSnapshot(inline={"pending": list(self.pending), "sink": self.sink, "subtask": self.subtask})

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit: the pending checkpoints up to `checkpoint_id`, in one transaction."""
        due = [c for c in self.pending if c <= checkpoint_id]
        if not due:
            return
        with self._transaction() as conn:
            self._apply(conn, due, everything=False)
        self.pending = [c for c in self.pending if c > checkpoint_id]

    def restore(self, state: OperatorSnapshot) -> None:
        """Finish the commit of the restored checkpoint's pending ids, under the (sink, subtask)
        that staged them (`restored_owners`), before this subtask writes anything; abort every
        other staged epoch of this job's identities. The staged rows of another job's
        identity (a resume from its savepoint or retained checkpoint) past the checkpoint are
        left alone: that job may still be running and commit them itself."""
        owners = restored_owners(state.inline, self.sink, self.subtask)
        with self._transaction() as conn:
            for sink, subtask, pending in owners:
                self._apply(conn, pending, everything=sink == self.sink, owner=(sink, subtask))
            if (self.sink, self.subtask) not in {(o[0], o[1]) for o in owners}:
                self._apply(conn, [], everything=True)
        self.pending = []

    def end_input(self) -> Batch | None:
        if not self.exactly_once:  # with checkpoints, the final checkpoint commits
            table = self._take_buffer()
            if table is not None or self._open_spilled:
                with self._transaction() as conn:
                    staged = conn.execute(
                        f"SELECT data FROM {STAGING} WHERE sink = ? AND subtask = ? AND token = ? ORDER BY seq",
                        (self.sink, self.subtask, self.token),
                    ).fetchall()
                    rows = sum(self._upsert(conn, ipc_to_table(data)) for (data,) in staged)
                    if table is not None:
                        rows += self._upsert(conn, table)
                    conn.execute(
                        f"DELETE FROM {STAGING} WHERE sink = ? AND subtask = ? AND token = ?",
                        (self.sink, self.subtask, self.token),
                    )
                self._open_spilled = False
                log.info("%s committed %d rows to %s in %s", self.tag, rows, self.table, self.db_path)
        return None

    def abort(self) -> None:
        self._buffer, self._buffered_bytes = [], 0  # staged rows are void; the next restore deletes them
