"""How each kind's inline state at one parallelism becomes the states of another (pure).

Named in each kind's descriptor (`redistribute`, sluice/kinds/table.py) and called by
`sluice.checkpoints.rescale.redistribute` only when the parallelism changes and some old
subtask has state (docs/savepoints.md, "Rescaling"). Keyed state needs nothing here: every
new subtask reads the rows of its key-group range from all the old subtasks' files.

- file source, fixed listing: a new subtask gets every old subtask's position
  (`rescale_from`) and works out, from the same listing, which files were read; it reads the
  others, its share of them (FileSource.restore);
- file source, monitoring a directory: the names read, merged, each kept by the subtask that
  owns the name at the new parallelism (crc32(name) % parallelism);
- generator: the ids not emitted yet are arithmetic progressions ("streams": next id, step);
  they are split in two (ids of even and odd rank) until there are enough, then dealt out;
- collection: like the fixed file listing (`rescale_from`, CollectionSource.restore);
- file sink: old pending parts go to new subtask `old % new` and commit on restore;
- SQLite sink: each old subtask's pending epochs, with the (sink, subtask) identity that
  staged them, go to new subtask `old % new`, which commits them under that identity on
  restore (a no-op for epochs the old job committed already: its commit record says so);
- operators with a watermark (windows, process functions, joins, timestamp assigners): the
  smallest old watermark, so that no record becomes late by the change; counters go to
  subtask 0; broadcast state (the same on every subtask) is copied.
- any other kind (`refuse`): its inline state cannot move; RescaleError naming the operator.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from typing import Any

from sluice.kinds.common import RescaleError, State


@dataclasses.dataclass(frozen=True)
class Rescale:
    """An operator's inline states `old` (`old[i]` of old subtask i) going to `parallelism` subtasks."""

    operator: str
    kind: str
    old: Sequence[State]
    parallelism: int


def file_source(r: Rescale) -> list[State]:
    """A file source: monitored (the names read, by owner) or a fixed listing (every position)."""
    if any(s is not None and "done" in s for s in r.old):
        return _monitored_files(r.old, r.parallelism)
    return _positions(r.old, r.parallelism)


def collection_source(r: Rescale) -> list[State]:
    """A collection source: every old position to every new subtask (CollectionSource.restore)."""
    return _positions(r.old, r.parallelism)


def generator_source(r: Rescale) -> list[State]:
    """A generator: its ids not emitted yet, as progressions dealt out to the new subtasks."""
    return _generator(r.old, r.parallelism)


def file_sink(r: Rescale) -> list[State]:
    """A file sink: old subtask i's pending parts to new subtask i % parallelism."""
    pending: list[list[Any]] = [[] for _ in range(r.parallelism)]
    for i, s in enumerate(r.old):
        pending[i % r.parallelism].extend((s or {}).get("pending", []))
    return [{"pending": p} for p in pending]


def sqlite_sink(r: Rescale) -> list[State]:
    """A SQLite sink: each staging identity and its pending epochs to new subtask i % parallelism."""
    return _sqlite_owners(r.old, r.parallelism)


def stateless(r: Rescale) -> list[State]:
    """Nothing inline to move (print)."""
    return [None] * r.parallelism


def event_time(r: Rescale) -> list[State]:
    """Watermarks, timers' clocks and counters of operators with event time."""
    return _event_time(r.old, r.parallelism)


def refuse(r: Rescale) -> list[State]:
    """Inline state this version cannot move."""
    raise RescaleError(
        f"operator {r.operator!r} ({r.kind}) holds state this version cannot move from "
        f"parallelism {len(r.old)} to {r.parallelism}"
    )


def _sqlite_owners(old: Sequence[State], parallelism: int) -> list[State]:
    """Old subtask i's staging identity and pending epochs to new subtask i % parallelism; a
    state that names no identity (written before identities were recorded) is dropped, as
    it was then."""
    owners: list[list[dict[str, Any]]] = [[] for _ in range(parallelism)]
    for i, s in enumerate(old):
        if s is not None and "sink" in s:
            owners[i % parallelism].append(
                {"sink": s["sink"], "subtask": int(s["subtask"]), "pending": list(s.get("pending", []))}
            )
    return [{"owners": o} if o else None for o in owners]


def _positions(old: Sequence[State], parallelism: int) -> list[State]:
    """Every new subtask gets every old position; the source works out what was read."""
    positions = []
    for i, s in enumerate(old):
        s = s or {}
        positions.append(
            {
                "parallelism": len(old),
                "subtask": i,
                "offset": int(s.get("offset", 0)),
                "skip": list(s.get("skip", [])),
            }
        )
    return [{"offset": 0, "rescale_from": positions} for _ in range(parallelism)]


def _monitored_files(old: Sequence[State], parallelism: int) -> list[State]:
    done: dict[str, int] = {}
    newest = 0
    for s in old:
        s = s or {}
        d = s.get("done", {})
        done.update(d if isinstance(d, dict) else dict.fromkeys(d, 0))
        newest = max(newest, int(s.get("newest_mtime", 0)))
    shares: list[dict[str, int]] = [{} for _ in range(parallelism)]
    for name, mtime in sorted(done.items()):
        shares[zlib.crc32(name.encode()) % parallelism][name] = mtime
    return [{"offset": len(share), "done": share, "newest_mtime": newest} for share in shares]


def generator_streams(state: State, subtask: int, parallelism: int) -> list[tuple[int, int]]:
    """The (next id, step) progressions a generator subtask has still to emit."""
    state = state or {}
    if "streams" in state:
        return [(int(n), int(d)) for n, d in state["streams"]]
    return [(subtask + int(state.get("offset", 0)) * parallelism, parallelism)]


def _generator(old: Sequence[State], parallelism: int) -> list[State]:
    streams = [st for i, s in enumerate(old) for st in generator_streams(s, i, len(old))]
    streams.sort(key=lambda st: (st[1], st[0]))
    while len(streams) < parallelism:  # split the sparsest-stepped (densest) progression in two
        nxt, step = streams.pop(0)
        streams += [(nxt, 2 * step), (nxt + step, 2 * step)]
        streams.sort(key=lambda st: (st[1], st[0]))
    dealt: list[list[list[int]]] = [[] for _ in range(parallelism)]
    for k, (nxt, step) in enumerate(sorted(streams)):
        dealt[k % parallelism].append([nxt, step])
    return [{"offset": 0, "streams": s} for s in dealt]


def _event_time(old: Sequence[State], parallelism: int) -> list[State]:
    states = [s for s in old if s is not None]
    merged: dict[str, Any] = dict(states[0])
    watermarks = [int(s["watermark"]) for s in states if s.get("watermark") is not None]
    if watermarks:
        merged["watermark"] = min(watermarks)
    emitted = [int(s["emitted"]) for s in states if s.get("emitted") is not None]
    if emitted:  # a timestamp assigner's generator
        merged["emitted"] = min(emitted)
        stamps = [int(s["max_timestamp"]) for s in states if s.get("max_timestamp") is not None]
        merged["max_timestamp"] = min(stamps) if stamps else None
    if "columns" in merged:  # an interval join's buffered columns per side
        merged["columns"] = [
            next((s["columns"][side] for s in states if s.get("columns") and s["columns"][side]), None)
            for side in (0, 1)
        ]
    out: list[State] = []
    for j in range(parallelism):
        state = dict(merged)
        if "late_dropped" in state:
            state["late_dropped"] = sum(int(s.get("late_dropped", 0)) for s in states) if j == 0 else 0
        out.append(state)
    return out


def items_read(items: Sequence[str], positions: Sequence[dict[str, Any]]) -> set[str]:
    """Which of a source's `items` (the same listing every subtask sees, in order) the old
    subtasks had read: old subtask i of p read the first `offset` of its share
    `[x for x in items if x not in skip][i::p]`, and everything in its `skip`."""
    read: set[str] = set()
    for pos in positions:
        skip = set(pos.get("skip", []))
        share = [x for x in items if x not in skip][int(pos["subtask"]) :: int(pos["parallelism"])]
        read |= skip | set(share[: int(pos["offset"])])
    return read
