"""Operator state moved to another parallelism (sluice/checkpoints/rescale.py): nothing read
twice, nothing skipped, for every kind of position, rescaled again and again."""

from __future__ import annotations

import random
import zlib
from typing import Any

import pytest

from sluice.checkpoints.rescale import RescaleError, State, generator_streams, items_read, redistribute
from sluice.graph import OperatorKind

K = OperatorKind


def given(state: State) -> dict[str, Any]:
    """A subtask's state, which the test expects to be there."""
    assert state is not None
    return state


def emitted_by_streams(streams, count, limit):
    """Emit from (next, step) progressions: the first `limit` ids of each, below count."""
    out, left = [], []
    for nxt, step in streams:
        ids = list(range(nxt, count, step))
        out += ids[:limit]
        left.append((ids[limit] if len(ids) > limit else count, step))
    return out, left


@pytest.mark.parametrize("chain", [(2, 3, 1), (4, 3, 5, 2), (1, 7), (3, 2)])
def test_generator_ids_are_each_emitted_once_across_rescales(chain):
    count, rng = 5_000, random.Random(sum(chain))
    seen: list[int] = []
    p = chain[0]
    states: list[State] = [None] * p
    for new_p in [*chain[1:], None]:
        # each subtask emits a random amount from its position, then snapshots
        snap = []
        for i, s in enumerate(states):
            streams = generator_streams(s, i, p)
            got, left = emitted_by_streams(streams, count, rng.randint(0, 400))
            seen += got
            snap.append({"offset": len(got), "streams": [list(st) for st in left]})
        if new_p is None:  # the last parallelism runs to the end
            for i, s in enumerate(snap):
                seen += emitted_by_streams(generator_streams(s, i, p), count, count)[0]
            break
        states = redistribute(K.SOURCE_GENERATOR, "gen", snap, new_p)
        assert len(states) == new_p and all(given(s)["streams"] for s in states)  # every subtask has work
        p = new_p
    assert sorted(seen) == list(range(count))


def test_a_generator_checkpoint_before_streams_existed_is_read_as_one_progression():
    assert generator_streams({"offset": 4}, 1, 3) == [(13, 3)]


def test_fixed_listings_are_read_once_across_rescales():
    files = [f"f{i:03d}" for i in range(50)]
    rng = random.Random(7)
    read: list[str] = []
    p = 2
    states: list[dict[str, Any]] = [{"offset": 0}, {"offset": 0}]
    for new_p in (3, 1, 4):
        snap = []
        for i, s in enumerate(states):
            skip = items_read(files, s["rescale_from"]) if "rescale_from" in s else set(s.get("skip", []))
            mine = [f for f in files if f not in skip][i::p]
            n = rng.randint(0, len(mine))
            read += mine[:n]
            snap.append({"offset": n, **({"skip": sorted(skip)} if skip else {})})
        states = list(map(given, redistribute(K.SOURCE_FILES, "files", snap, new_p)))
        p = new_p
    done = set(read)
    assert len(read) == len(done)  # nothing twice
    left = [f for f in files if f not in done]
    for i, s in enumerate(states):  # the last parallelism reads the rest, each file by one subtask
        skip = items_read(files, s["rescale_from"])
        assert skip == done
        read += [f for f in files if f not in skip][i::p]
    assert sorted(read) == files and sorted(set(read) - done) == left


def test_watched_directories_keep_each_name_with_its_new_owner():
    old = [
        {"offset": 2, "done": {"a": 1, "b": 2}, "newest_mtime": 5},
        {"offset": 1, "done": {"c": 9}, "newest_mtime": 9},
    ]
    new = redistribute(K.SOURCE_FILES, "files", old, 3)
    merged: dict[str, int] = {}
    for j, s in enumerate(map(given, new)):
        assert all(zlib.crc32(n.encode()) % 3 == j for n in s["done"])
        assert s["newest_mtime"] == 9
        merged |= s["done"]
    assert merged == {"a": 1, "b": 2, "c": 9}


def test_file_sink_pending_parts_all_go_somewhere():
    old = [{"pending": [["s0", "f0"]]}, {"pending": [["s1", "f1"], ["s2", "f2"]]}, None]
    new = redistribute(K.SINK_FILE, "sink", old, 2)
    assert sorted(p for s in map(given, new) for p in s["pending"]) == [["s0", "f0"], ["s1", "f1"], ["s2", "f2"]]


def test_watermarks_take_the_smallest_and_counters_are_not_doubled():
    old = [{"watermark": 50, "late_dropped": 3}, {"watermark": 20, "late_dropped": 4}]
    new = redistribute(K.WINDOW, "w", old, 3)
    assert [given(s)["watermark"] for s in new] == [20, 20, 20]
    assert sum(given(s)["late_dropped"] for s in new) == 7
    ts = redistribute(K.TIMESTAMPS, "t", [{"max_timestamp": 9, "emitted": 5}, {"max_timestamp": None, "emitted": 1}], 1)
    assert ts == [{"max_timestamp": 9, "emitted": 1}]


def test_unchanged_parallelism_keeps_each_subtask_state_and_unknown_state_is_refused():
    old = [{"offset": 3}, {"offset": 4}]
    assert redistribute(K.SOURCE_FILES, "f", old, 2) == old
    assert redistribute(K.AGGREGATE, "a", [None, None], 5) == [None] * 5  # keyed state needs nothing here
    with pytest.raises(RescaleError, match="cannot move"):
        redistribute(K.AGGREGATE, "a", [{"x": 1}, None], 3)
    with pytest.raises(RescaleError, match="parallelism must be >= 1"):
        redistribute(K.SINK_FILE, "s", old, 0)
