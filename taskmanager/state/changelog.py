"""Incremental checkpoints of a keyed aggregate on the memory backend: which files make the
state at each checkpoint, and what a checkpoint writes (docs/checkpoints.md, "Incremental
memory-backend checkpoints"; the file layout in sluice/checkpoints/changelog_files.py).

A checkpoint's state is a chain of Arrow files: a base, then the rows of the keys that changed
after it. At a barrier the task thread takes one of three steps, decided here:

* DELTA: the rows of the keys changed since the last checkpoint this task knows completed
  (`confirm`), each key's newest row; the chain is that checkpoint's chain plus one file. Costs
  what changed, not the state.
* COMPACT: the same rows, merged with the completed chain's files into one new base by the upload
  thread (reading them back), once the chain holds as many replaced rows as the state has keys
  (a state that grows by new keys adds none) or is `MAX_FILES` long. The task thread pays what
  changed; the O(state) merge runs off it.
* WHOLE: every key's row, built from the state on the task thread (`rows()`): the first
  checkpoint (building it from the changes instead would hold every row put since the start:
  measured, a 5 M-key job's TaskManager peaked 0.2 GiB higher, bench/README.md), after a
  restore, after changes were dropped (`MAX_PENDING_SHARE`), when the changed rows do not fit the chain's
  schema, and when a later checkpoint, still unconfirmed, dropped a file of the confirmed chain
  (below).

Why no checkpoint references a deleted file: the JobManager deletes a shared file when no
retained checkpoint references it, and the files of an aborted checkpoint at once
(jobmanager/checkpoint/shared_registry.py). So a chain only ever builds on the last checkpoint
this task knows completed, never on one that may still abort; and since one checkpoint is pending
at a time (jobmanager/checkpoint/coordinator.py), every checkpoint that may have completed since
without this task hearing of it yet (confirmations can lag, arrive out of order or not at all) is
one it took later. Each of those must list every file of the confirmed chain, or it may have
subsumed that checkpoint and taken files with it: then the checkpoint is WHOLE, on no file.

Pure: Arrow tables in, plans out; no clock, no I/O (the upload is changelog_upload.py).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence

import pyarrow as pa

from sluice.checkpoints.changelog_files import last_per_key
from sluice.checkpoints.shared_names import new_shared_name


class Step(enum.StrEnum):
    DELTA = "delta"
    COMPACT = "compact"
    WHOLE = "whole"


@dataclasses.dataclass(frozen=True)
class ChainFile:
    name: str  # the file's name in the operator's shared directory
    rows: int


@dataclasses.dataclass(frozen=True)
class ChainWrite:
    """What one checkpoint writes and the chain it makes."""

    checkpoint_id: int
    step: Step
    table: pa.Table | None  # the rows to write (None: nothing changed, nothing written)
    name: str | None  # the new file's name
    read: tuple[ChainFile, ...]  # COMPACT: the completed chain's files merged with `table`
    chain: tuple[ChainFile, ...]  # the checkpoint's files, oldest first
    rows: int  # keys of the state
    key_columns: tuple[str, ...]

    @property
    def new_base(self) -> bool:
        return self.step != Step.DELTA


@dataclasses.dataclass(frozen=True)
class Taken:
    """A checkpoint as the changelog remembers it (the rows written are not kept)."""

    checkpoint_id: int
    chain: tuple[ChainFile, ...]
    new_base: bool


class KeyedChangelog:
    """The chains of this task's checkpoints and the rows changed since the last completed one."""

    MAX_FILES = 8  # a chain this long is compacted (a restore reads at most this many files)
    COMPACT_SHARE = 1.0  # ... as is one holding this many times the state's keys in replaced rows
    MAX_PENDING_SHARE = 2.0  # changes beyond this many times the state's keys are dropped (WHOLE next)
    MAX_IN_FLIGHT = 16  # unconfirmed checkpoints remembered (failed ones are never confirmed)

    def __init__(self, key_columns: Sequence[str], new_name: Callable[[int], str] | None = None) -> None:
        self.key_columns = tuple(key_columns)
        # a checkpoint's new file's name, from its id (sluice/checkpoints/shared_names.py)
        self.new_name = new_name or (lambda checkpoint_id: new_shared_name(checkpoint_id, ".arrow"))
        self.confirmed: Taken | None = None  # the last checkpoint known complete
        self.in_flight: dict[int, Taken] = {}  # taken, not confirmed (yet)
        # rows put since the confirmed checkpoint, oldest first, each tagged with the checkpoint
        # that took it (None: the next one)
        self.segments: list[tuple[int | None, pa.Table]] = []
        self.pending_rows = 0
        self.valid = False  # the segments hold every change since `confirmed`
        self.schema: pa.Schema | None = None  # the chain's files' schema
        self.steps: dict[Step, int] = dict.fromkeys(Step, 0)  # statistics for tests and logs

    @property
    def tracking(self) -> bool:
        """Whether changes are wanted: a later checkpoint may be a DELTA."""
        return self.valid and (self.confirmed is not None or bool(self.in_flight))

    def changed(self, rows: pa.Table, size: int) -> None:
        """`rows` (a checkpoint file's columns, one row per key) were put into a state of `size` keys."""
        if not self.tracking or rows.num_rows == 0:
            return
        self.segments.append((None, rows))
        self.pending_rows += rows.num_rows
        if self.pending_rows > self.MAX_PENDING_SHARE * max(size, 1):
            self.segments, self.pending_rows, self.valid = [], 0, False

    def reset(self) -> None:
        """The state was replaced (a restore, a clear): the next checkpoint is WHOLE."""
        self.confirmed, self.in_flight, self.segments, self.pending_rows, self.valid = None, {}, [], 0, False

    def take(self, checkpoint_id: int, size: int, rows: Callable[[], pa.Table]) -> ChainWrite:
        """The plan of checkpoint `checkpoint_id` of a state of `size` keys; `rows()` builds every
        key's row (WHOLE)."""
        delta = self._delta() if self._can_build_on_confirmed() else None
        if delta is None:
            write = self._whole(checkpoint_id, size, rows())
        else:
            write = self._on_confirmed(checkpoint_id, size, delta)
        self.steps[write.step] += 1
        self.segments = [(checkpoint_id if tag is None else tag, t) for tag, t in self.segments]
        self.in_flight[checkpoint_id] = Taken(checkpoint_id, write.chain, write.new_base)
        while len(self.in_flight) > self.MAX_IN_FLIGHT:
            del self.in_flight[min(self.in_flight)]  # forgotten, it can no longer hold DELTAs back: WHOLE next
            self.segments, self.pending_rows, self.valid = [], 0, False
        return write

    def confirm(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` completed: later ones build on its chain."""
        taken = self.in_flight.get(checkpoint_id)
        if taken is None:
            return  # not taken here, or forgotten: nothing to build on
        self.confirmed = taken
        self.in_flight = {n: w for n, w in self.in_flight.items() if n > checkpoint_id}
        kept = [(tag, t) for tag, t in self.segments if tag is None or tag > checkpoint_id]
        self.segments, self.pending_rows = kept, sum(t.num_rows for _tag, t in kept)

    # -- the three steps ---------------------------------------------------------------------------
    def _can_build_on_confirmed(self) -> bool:
        if self.confirmed is None or not self.valid:
            return False
        # a later checkpoint may have completed unconfirmed: it dropped the files it does not list
        files = set(self.confirmed.chain)
        return all(files <= set(t.chain) for n, t in self.in_flight.items() if n > self.confirmed.checkpoint_id)

    def _delta(self) -> pa.Table | None:
        """Each changed key's newest row since the confirmed checkpoint, in the chain's schema;
        None when the rows do not fit it (or a key type Arrow cannot group)."""
        assert self.confirmed is not None
        tables = [t for _tag, t in self.segments]
        if not tables:
            return pa.table({}) if self.schema is None else self.schema.empty_table()
        try:
            fresh = pa.concat_tables(tables, promote_options="permissive")
            if self.schema is not None and fresh.schema != self.schema:
                fresh = fresh.select(self.schema.names).cast(self.schema)
            return last_per_key(fresh, self.key_columns) if len(tables) > 1 else fresh
        except (KeyError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None

    def _whole(self, checkpoint_id: int, size: int, table: pa.Table) -> ChainWrite:
        self.schema = table.schema
        self.segments, self.pending_rows, self.valid = [], 0, True
        base = ChainFile(self.new_name(checkpoint_id), table.num_rows)
        return ChainWrite(checkpoint_id, Step.WHOLE, table, base.name, (), (base,), size, self.key_columns)

    def _on_confirmed(self, checkpoint_id: int, size: int, delta: pa.Table) -> ChainWrite:
        assert self.confirmed is not None
        chain = self.confirmed.chain
        if delta.num_rows == 0:
            return ChainWrite(checkpoint_id, Step.DELTA, None, None, (), chain, size, self.key_columns)
        # rows in the chain's change files that a newer row replaced: every change row but one per
        # key added since the base (a keyed aggregate never drops a key, so those are size - base rows)
        replaced = sum(f.rows for f in chain[1:]) + delta.num_rows - (size - (chain[0].rows if chain else 0))
        if len(chain) + 1 > self.MAX_FILES or replaced > self.COMPACT_SHARE * max(size, 1):
            base = ChainFile(self.new_name(checkpoint_id), size)
            return ChainWrite(checkpoint_id, Step.COMPACT, delta, base.name, chain, (base,), size, self.key_columns)
        file = ChainFile(self.new_name(checkpoint_id), delta.num_rows)
        return ChainWrite(checkpoint_id, Step.DELTA, delta, file.name, (), (*chain, file), size, self.key_columns)
