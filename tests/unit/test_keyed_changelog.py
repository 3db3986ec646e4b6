"""KeyedChangelog (taskmanager/state/changelog.py): incremental memory-backend checkpoints of a
keyed aggregate. Each completed checkpoint's chain of files merges to exactly the state at its
barrier, and no completed checkpoint ever references a file the JobManager's shared-state
registry has deleted, whatever the order of completions, aborts and late confirmations."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pyarrow as pa
import pytest

from jobmanager.checkpoint.shared_registry import SharedStateRegistry
from sluice.checkpoints.changelog_files import merge
from sluice.key_groups import KEY_GROUP
from taskmanager.state.changelog import ChainWrite, KeyedChangelog, Step

KEYS = ["k"]


def rows_of(state: dict[Any, int], keys: list[Any] | None = None) -> pa.Table:
    keys = list(state) if keys is None else keys
    return pa.table(
        {
            "k": pa.array(keys, pa.string()),
            KEY_GROUP: pa.array([0] * len(keys), pa.int32()),
            "n": pa.array([state[k] for k in keys], pa.int64()),
        }
    )


def as_dict(table: pa.Table | None) -> dict[Any, int]:
    if table is None:
        return {}
    return dict(zip(table.column("k").to_pylist(), table.column("n").to_pylist(), strict=True))


class Storage:
    """The shared directory of one operator: file name -> table; deleted names remembered."""

    def __init__(self) -> None:
        self.files: dict[str, pa.Table] = {}
        self.deleted: set[str] = set()

    def upload(self, w: ChainWrite) -> dict[str, Any]:
        """What ChainUpload does, in memory: a COMPACT reads the completed chain's files back."""
        if w.table is not None and w.name is not None:
            table = w.table
            if w.step == Step.COMPACT:
                missing = [f.name for f in w.read if f.name not in self.files]
                assert not missing, f"checkpoint {w.checkpoint_id} compacts deleted files {missing}"
                table = merge([*(self.files[f.name] for f in w.read), w.table], KEYS)
            self.files[w.name] = table
        names = [f.name for f in w.chain]
        new = [w.name] if w.table is not None and w.name is not None else []
        return {"keyed": {"agg": {"chain": names, "shared": {n: n for n in names}, "new": new}}}

    def delete(self, names: list[str]) -> None:
        for n in names:
            self.files.pop(n, None)
            self.deleted.add(n)

    def state_of(self, handle: dict[str, Any]) -> dict[Any, int]:
        chain = handle["keyed"]["agg"]["chain"]
        gone = [n for n in chain if n not in self.files]
        assert not gone, f"a completed checkpoint references deleted files {gone}"
        return as_dict(merge([self.files[n] for n in chain], KEYS))


@pytest.mark.parametrize("seed", range(40))
def test_every_completed_checkpoint_restores_its_barrier_state_under_random_outcomes(seed: int) -> None:
    rng = random.Random(seed)
    names = (f"f{i}.arrow" for i in itertools.count())
    log = KeyedChangelog(KEYS, new_name=lambda _id: next(names))
    log.MAX_FILES = rng.choice([2, 3, 8])
    storage, registry = Storage(), SharedStateRegistry()
    state: dict[Any, int] = {}
    completed: tuple[int, dict[str, Any], dict[str, Any]] | None = None
    late: list[int] = []  # confirmations not delivered yet
    universe = rng.choice([5, 50, 400])
    for n in range(1, 60):
        for _ in range(rng.randrange(0, 4)):  # batches between two barriers
            touched = sorted({f"u{rng.randrange(universe)}" for _ in range(rng.randrange(0, 30))})
            for k in touched:
                state[k] = state.get(k, 0) + 1
            log.changed(rows_of(state, touched), len(state))
        if late and rng.random() < 0.5:  # a confirmation may arrive after the next barrier
            log.confirm(late.pop(0))
        write = log.take(n, len(state), lambda: rows_of(state))
        expected = dict(state)
        handle = storage.upload(write)
        if rng.random() < 0.2:  # aborted (declined elsewhere, timed out): its own uploads go
            storage.delete(registry.discard(n, [handle]))
            continue
        registry.register(n, [handle])
        assert storage.state_of(handle) == expected, f"checkpoint {n} ({write.step})"
        if completed is not None:  # one retained checkpoint: the one before is subsumed
            storage.delete(registry.discard(completed[0], [completed[2]]))
        completed = (n, expected, handle)
        late.append(n)
        if rng.random() < 0.6:
            log.confirm(late.pop(0))
        # what a restore reads is still there after the subsumed checkpoint's files went
        assert storage.state_of(handle) == expected
    assert completed is not None and storage.state_of(completed[2]) == completed[1]
    assert storage.deleted, "files were deleted along the way"


def test_a_checkpoint_writes_only_the_changed_keys_and_compacts_when_changes_reach_the_state() -> None:
    names = (f"f{i}.arrow" for i in itertools.count())
    log = KeyedChangelog(KEYS, new_name=lambda _id: next(names))
    state = {f"u{i}": 1 for i in range(100)}
    first = log.take(1, len(state), lambda: rows_of(state))
    assert first.step == Step.WHOLE and first.table is not None and first.table.num_rows == 100
    log.confirm(1)
    steps = []
    for n in range(2, 20):
        touched = [f"u{(n * 7 + i) % 100}" for i in range(30)]
        for k in touched:
            state[k] += 1
        log.changed(rows_of(state, touched), len(state))
        log.changed(rows_of(state, touched[:10]), len(state))  # a key changed twice: once in the file
        w = log.take(n, len(state), lambda: rows_of(state))
        steps.append(w.step)
        if w.step == Step.DELTA:
            assert w.table is not None and w.table.num_rows == 30
        log.confirm(n)
    assert steps[:3] == [Step.DELTA, Step.DELTA, Step.DELTA]
    assert Step.COMPACT in steps and Step.WHOLE not in steps  # the state is never rebuilt from the dict


def test_nothing_changed_writes_nothing_and_keeps_the_chain() -> None:
    log = KeyedChangelog(KEYS)
    state = {"a": 1}
    log.take(1, 1, lambda: rows_of(state))
    log.confirm(1)
    quiet = log.take(2, 1, lambda: rows_of(state))
    assert quiet.step == Step.DELTA and quiet.table is None and quiet.chain == log.in_flight[2].chain


def test_a_new_base_still_unconfirmed_makes_the_next_checkpoint_whole() -> None:
    names = (f"f{i}.arrow" for i in itertools.count())
    log = KeyedChangelog(KEYS, new_name=lambda _id: next(names))
    log.MAX_FILES = 1
    state = {"a": 1, "b": 1}
    log.take(1, 2, lambda: rows_of(state))
    log.confirm(1)
    state["a"] = 2
    log.changed(rows_of(state, ["a"]), 2)
    assert log.take(2, 2, lambda: rows_of(state)).step == Step.COMPACT  # a second file: compacted
    state["b"] = 2
    log.changed(rows_of(state, ["b"]), 2)
    # 2 completed, its confirmation not here yet: 1's files may be gone; 3 must not reference them
    third = log.take(3, 2, lambda: rows_of(state))
    assert third.step == Step.WHOLE and as_dict(third.table) == {"a": 2, "b": 2}


def test_changes_beyond_the_bound_are_dropped_and_the_next_checkpoint_is_whole() -> None:
    log = KeyedChangelog(KEYS)
    state = {"a": 1}
    log.take(1, 1, lambda: rows_of(state))
    log.confirm(1)
    for i in range(5):
        state["a"] = i
        log.changed(rows_of(state, ["a"]), 1)
    assert not log.tracking and log.segments == []
    assert log.take(2, 1, lambda: rows_of(state)).step == Step.WHOLE
    assert log.tracking  # a new base: changes are wanted again


def test_rows_of_another_schema_make_a_whole_checkpoint() -> None:
    log = KeyedChangelog(KEYS)
    state = {"a": 1}
    log.take(1, 1, lambda: rows_of(state))
    log.confirm(1)
    odd = pa.table({"k": ["a"], KEY_GROUP: pa.array([0], pa.int32()), "n": ["not a number"]})
    log.changed(odd, 1)
    assert log.take(2, 1, lambda: rows_of(state)).step == Step.WHOLE


def test_a_late_confirmation_of_a_checkpoint_a_later_one_subsumed_is_not_built_on() -> None:
    names = (f"f{i}.arrow" for i in itertools.count())
    log = KeyedChangelog(KEYS, new_name=lambda _id: next(names))
    state = {"a": 1, "b": 1}
    log.take(1, 2, lambda: rows_of(state))
    log.confirm(1)
    state["a"] = 2
    log.changed(rows_of(state, ["a"]), 2)
    second = log.take(2, 2, lambda: rows_of(state))  # completes; its confirmation is late
    state["b"] = 2
    log.changed(rows_of(state, ["b"]), 2)
    third = log.take(3, 2, lambda: rows_of(state))  # builds on 1: its file lists 2's changes again
    assert third.step == Step.DELTA and second.name not in {f.name for f in third.chain}
    log.confirm(2)  # 3 completed meanwhile and subsumed 2, whose own file is gone
    state["a"] = 3
    log.changed(rows_of(state, ["a"]), 2)
    fourth = log.take(4, 2, lambda: rows_of(state))
    assert fourth.step == Step.WHOLE and as_dict(fourth.table) == {"a": 3, "b": 2}


@pytest.mark.parametrize("seed", range(20))
def test_merging_a_chain_keeps_each_keys_newest_row(seed: int) -> None:
    rng = random.Random(seed)
    composite = seed % 2 == 0
    keys = ["a", "b"] if composite else ["a"]

    def key() -> tuple[Any, ...]:
        a = rng.choice([None, "x", "y", "z"])
        return (a, rng.choice([None, 1, 2])) if composite else (a,)

    def table(entries: dict[tuple[Any, ...], int], wide: bool = False) -> pa.Table:
        cols: list[Any] = list(zip(*entries, strict=True)) if entries else [[] for _ in keys]
        kinds = [pa.large_string() if wide else pa.string(), pa.int64()]
        data = {k: pa.array(list(cols[i]), kinds[i]) for i, k in enumerate(keys)}
        return pa.table({**data, "v": pa.array(list(entries.values()), pa.int64())})

    expected: dict[tuple[Any, ...], int] = {}
    base = {key(): rng.randrange(100) for _ in range(10)}
    expected.update(base)
    chain = [table(base)]
    for _ in range(rng.randrange(1, 4)):
        delta = {key(): rng.randrange(100) for _ in range(rng.randrange(0, 5))}
        expected.update(delta)
        chain.append(table(delta, wide=rng.random() < 0.2))  # another string type: merged all the same
    merged = merge(chain, keys)
    assert merged is not None
    got = list(zip(*(merged.column(k).to_pylist() for k in keys), merged.column("v").to_pylist(), strict=True))
    assert len(got) == len(expected) and {g[:-1]: g[-1] for g in got} == expected


def test_a_state_that_grows_by_new_keys_compacts_only_at_the_chain_length() -> None:
    names = (f"f{i}.arrow" for i in itertools.count())
    log = KeyedChangelog(KEYS, new_name=lambda _id: next(names))
    state = {f"u{i}": 1 for i in range(10)}
    log.take(1, len(state), lambda: rows_of(state))
    log.confirm(1)
    steps = []
    for n in range(2, 2 + log.MAX_FILES):
        fresh = [f"n{n}-{i}" for i in range(50)]  # each checkpoint adds five times the first state
        state.update(dict.fromkeys(fresh, 1))
        log.changed(rows_of(state, fresh), len(state))
        steps.append(log.take(n, len(state), lambda: rows_of(state)).step)
        log.confirm(n)
    assert steps == [Step.DELTA] * (log.MAX_FILES - 1) + [Step.COMPACT]
