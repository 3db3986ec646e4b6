"""Exactly-once, checked at the output: every committed line of a running count is accounted for.

The committed output of a running count per key is an update stream: lines `key,count`,
in commit order. Delivered exactly once, it has
  (a) no (key, count) line twice: a line committed twice is a duplicate delivery;
  (b) each key's counts strictly increasing in commit order: an update lost, replayed
      from an older state or committed out of order shows as a count that does not grow;
  (c) each key's last count equal to the expected count (the generator's), and no key
      missing or unexpected.
`check_updates` applies the three rules and stops at the first violation, which it
names precisely: file, line, key. Two readers give it the committed lines in commit order:

- `sluice_parts`: a Sluice file sink's output directory. The committed parts and their
  order are `sluice.output.committed_parts`' (file-name order is commit order, see
  sluice/output.py); each part is headerless CSV, as the sink writes it.
- `peer_parts`: bench/structured_streaming_bench.py's output: one file per micro-batch,
  `batch-<id>.csv` (a replayed batch overwrites its own file), lines `url,count`; commit
  order is batch id order.

bench/README.md ("How the figures are computed") says how the benchmarks use it.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from sluice.output import committed_parts
from sluice.storage import resolve

Line = tuple[int, list[str]]  # (line number from 1, the line's fields as written)
Part = tuple[str, Iterable[Line]]  # (file, its lines in order)

_PEER_BATCH = re.compile(r"batch-(\d+)\.csv$")
_SLUICE_PART = re.compile(r"part-(\d+)-(\d+)-")  # FileSinkWriter.committed_name: checkpoint id, subtask


@dataclass(frozen=True)
class Violation:
    rule: str  # duplicate line, count not increasing, final count, missing key, unexpected key, malformed, no output
    file: str | None
    line: int | None
    key: str | None
    detail: str

    def __str__(self) -> str:
        where = os.path.basename(self.file) if self.file else "output"
        if self.line is not None:
            where += f" line {self.line}"
        key = f", key {self.key!r}" if self.key is not None else ""
        return f"{self.rule} ({where}{key}): {self.detail}"


@dataclass
class OutputCheck:
    """The result: `ok`, the first violation if any, and what was read. `final`: per key, its
    last (count, file, line); `paths`: the files read, in commit order."""

    violation: Violation | None = None
    paths: list[str] = field(default_factory=list)
    lines: int = 0
    final: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    checked_final: bool = False

    @property
    def files(self) -> int:
        return len(self.paths)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def describe(self) -> str:
        if self.violation is not None:
            return f"VIOLATION: {self.violation}"
        rules = "no line twice, counts increasing" + (", final counts exact" if self.checked_final else "")
        return f"exactly once ({rules}): {self.lines:,} lines in {self.files} files, {len(self.final):,} keys"


def check_updates(parts: Iterable[Part], expected: Mapping[str, int] | None) -> OutputCheck:
    """Rules (a) and (b) over every line of `parts` (in commit order), then (c) against `expected`
    (None: (a) and (b) only)."""
    result = OutputCheck()
    seen: dict[tuple[str, int], tuple[str, int]] = {}  # (key, count) -> where first committed
    for path, lines in parts:
        result.paths.append(path)
        for lineno, fields in lines:
            result.lines += 1
            if len(fields) != 2 or not _is_int(fields[1]):
                result.violation = Violation(
                    "malformed", path, lineno, fields[0], f"{','.join(fields)!r} is not a line key,count"
                )
                return result
            key, count = fields[0], int(fields[1])
            first = seen.get((key, count))
            if first is not None:
                result.violation = Violation(
                    "duplicate line",
                    path,
                    lineno,
                    key,
                    f"{key},{count} was already committed in {os.path.basename(first[0])} line {first[1]}",
                )
                return result
            seen[(key, count)] = (path, lineno)
            last = result.final.get(key)
            if last is not None and count <= last[0]:
                result.violation = Violation(
                    "count not increasing",
                    path,
                    lineno,
                    key,
                    f"count {count} after {last[0]} ({os.path.basename(last[1])} line {last[2]})",
                )
                return result
            result.final[key] = (count, path, lineno)
    if expected is not None:
        result.checked_final = True
        result.violation = check_final(result.final, expected)
    return result


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def check_final(final: Mapping[str, tuple[int, str, int]], expected: Mapping[str, int]) -> Violation | None:
    """Rule (c): every expected key's last committed count is its expected count; no other key."""
    for key in sorted(expected):
        if key not in final:
            return Violation("missing key", None, None, key, f"expected count {expected[key]}, never committed")
        count, path, lineno = final[key]
        if count != expected[key]:
            return Violation(
                "final count", path, lineno, key, f"last committed count {count}, expected {expected[key]}"
            )
    for key in sorted(set(final) - set(expected)):
        count, path, lineno = final[key]
        return Violation("unexpected key", path, lineno, key, f"committed count {count} for a key never generated")
    return None


# -- readers -------------------------------------------------------------------------------------------
def _csv_lines(text: str) -> Iterator[Line]:
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if row:
            yield lineno, row


def sluice_parts(out: str) -> Iterator[Part]:
    """The committed parts of a Sluice file sink under `out`, in commit order, each with its lines."""
    fs, _ = resolve(out)
    for part in committed_parts(out):
        with fs.open_input_stream(part) as f:
            text = f.read().decode()
        yield part, _csv_lines(text)


def part_checkpoint(path: str) -> int | None:
    """The checkpoint id a Sluice part was committed by (0: a job without checkpoints)."""
    m = _SLUICE_PART.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def part_subtask(path: str) -> int | None:
    """The sink subtask that wrote a Sluice part."""
    m = _SLUICE_PART.search(os.path.basename(path))
    return int(m.group(2)) if m else None


def _peer_lines(path: str) -> Iterator[Line]:
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                key, comma, count = line.rstrip("\n").rpartition(",")  # the writer's `f"{u},{c}\n"`
                yield lineno, [key, count] if comma else [count]


def peer_parts(out: str) -> Iterator[Part]:
    """The peer's batch files under `out`, in batch id (commit) order, each with its lines."""
    batches = sorted((int(m.group(1)), name) for name in os.listdir(out) if (m := _PEER_BATCH.fullmatch(name)))
    for _batch, name in batches:
        path = os.path.join(out, name)
        yield path, _peer_lines(path)


def check_sluice_output(out: str, expected: Mapping[str, int] | None) -> OutputCheck:
    """The rules over a Sluice file sink's committed output under `out`."""
    return _check(sluice_parts, out, expected)


def check_peer_output(out: str, expected: Mapping[str, int] | None) -> OutputCheck:
    """The rules over the peer's batch files under `out`."""
    return _check(peer_parts, out, expected)


def _check(parts, out: str, expected: Mapping[str, int] | None) -> OutputCheck:
    try:
        return check_updates(parts(out), expected)
    except FileNotFoundError as exc:
        return OutputCheck(violation=Violation("no output", out, None, None, str(exc)))
