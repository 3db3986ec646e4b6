"""A user's own connectors, written only against sluice.connectors (docs/connectors.md):
`WordFileSource` reads words, one per line, from the files of a directory (new files
are found while the job runs); `CsvCommitSink` writes CSV parts that appear only when
the checkpoint covering them completes (two-phase: a hidden file, then a rename)."""

from __future__ import annotations

import csv
import os

import pyarrow as pa

from sluice.connectors import (
    END,
    NOTHING_YET,
    Committer,
    DeliveryGuarantee,
    DirectorySplitEnumerator,
    Poll,
    ReaderContext,
    Sink,
    SinkContext,
    SinkWriter,
    Source,
    SourceReader,
    SourceSplit,
    SplitEnumerator,
)


class WordFileSource(Source):
    """A split per file; its position is the number of lines read."""

    schema = "word string"

    def __init__(self, directory: str, interval_s: float | None = None, lines_per_batch: int = 50) -> None:
        self.directory, self.interval_s, self.lines_per_batch = directory, interval_s, lines_per_batch
        self.bounded = interval_s is None

    def create_enumerator(self) -> SplitEnumerator:
        return DirectorySplitEnumerator(self.directory, suffix=".txt", interval_s=self.interval_s)

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return WordFileReader(self.lines_per_batch)


class WordFileReader(SourceReader):
    def __init__(self, lines_per_batch: int) -> None:
        self.lines_per_batch = lines_per_batch
        self.splits: dict[str, dict] = {}  # id -> {"path", "line"}

    def add_splits(self, splits: list[SourceSplit]) -> None:
        for s in splits:
            self.splits[s.id] = {"path": s.data["path"], "line": int(s.data.get("line", 0))}

    def poll_next(self) -> pa.Table | Poll:
        for sid, split in sorted(self.splits.items()):
            with open(split["path"]) as f:
                lines = f.read().splitlines()
            chunk = lines[split["line"] : split["line"] + self.lines_per_batch]
            if not chunk:
                del self.splits[sid]  # read to its end
                continue
            split["line"] += len(chunk)
            return pa.table({"word": chunk})
        return END if self.no_more_splits else NOTHING_YET

    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]:
        return [SourceSplit(sid, dict(split)) for sid, split in self.splits.items()]


class CsvCommitSink(Sink):
    guarantee = DeliveryGuarantee.EXACTLY_ONCE

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, ctx: SinkContext) -> SinkWriter:
        return CsvWriter(self.directory, ctx.subtask)

    def create_committer(self) -> Committer:
        return RenameCommitter()


class CsvWriter(SinkWriter):
    def __init__(self, directory: str, subtask: int) -> None:
        self.directory, self.subtask = directory, subtask
        self.rows: list[list] = []
        os.makedirs(directory, exist_ok=True)

    def write(self, table: pa.Table) -> None:
        columns = [table.column(n).to_pylist() for n in table.column_names]
        self.rows.extend(list(r) for r in zip(*columns, strict=True))

    def prepare_commit(self, checkpoint_id: int) -> list:
        if not self.rows:
            return []
        name = f"part-{self.subtask}-{checkpoint_id}.csv"
        pending = os.path.join(self.directory, f".{name}.pending")
        with open(pending, "w", newline="") as f:
            csv.writer(f).writerows(self.rows)
            f.flush()
            os.fsync(f.fileno())
        self.rows = []
        return [{"pending": pending, "final": os.path.join(self.directory, name)}]


class RenameCommitter(Committer):
    def commit(self, committables: list) -> None:
        for c in committables:
            if os.path.exists(c["pending"]):  # else committed already: a repeated commit does nothing
                os.replace(c["pending"], c["final"])
