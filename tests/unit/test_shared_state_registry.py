"""SharedStateRegistry: a shared state file is deleted once no retained checkpoint needs it,
never earlier; an aborted checkpoint's own uploads go; unknown files are left alone."""

from __future__ import annotations

from typing import Any

import pytest

from jobmanager.checkpoint import state_handles
from jobmanager.checkpoint.shared_registry import (
    SharedStateRegistry,
    left_behind,
    metadata_handles,
    new_files,
    shared_files,
)

DIR = "/c/job"


def handle(files: dict[str, str], new: list[str] | None = None) -> dict[str, Any]:
    """A task's state handle with one rocksdb operator referencing `files` (name -> shared path)."""
    return {
        "operators": {},
        "keyed": {
            "agg": {
                "backend": "rocksdb",
                "path": f"{DIR}/chk-1/agg/0",
                "key_groups": [0, 127],
                "private": {},
                "shared": files,
                "new": list(files) if new is None else new,
            }
        },
    }


def test_files_are_counted_across_retained_checkpoints_and_go_with_the_last() -> None:
    r = SharedStateRegistry()
    r.register(1, [handle({"1.sst": "s/a", "2.sst": "s/b"})])
    r.register(2, [handle({"1.sst": "s/a", "3.sst": "s/c"}, new=["3.sst"])])
    assert r.references("s/a") == 2 and len(r) == 3
    assert r.discard(1) == ["s/b"]  # subsumed: b only it needed
    r.register(3, [handle({"3.sst": "s/c", "4.sst": "s/d"}, new=["4.sst"])])
    assert r.discard(2) == ["s/a"]
    assert r.discard(3) == ["s/c", "s/d"]
    assert len(r) == 0 and r.registered() == []


def test_an_aborted_checkpoint_deletes_only_what_it_uploaded_and_nobody_holds() -> None:
    r = SharedStateRegistry()
    r.register(1, [handle({"1.sst": "s/a"})])
    aborted = [handle({"1.sst": "s/a", "2.sst": "s/new"}, new=["2.sst"])]
    assert r.discard(2, aborted) == ["s/new"]
    assert r.references("s/a") == 1


def test_after_a_failover_files_of_unknown_checkpoints_are_never_deleted() -> None:
    r = SharedStateRegistry()  # a new leader: it registered only the restored checkpoint 5
    r.register(5, [handle({"1.sst": "s/a"})])
    assert r.discard(4) == []  # an older leader's retained checkpoint: unknown, its files leak
    # an aborted checkpoint referencing a file of the restored one does not delete it
    assert r.discard(6, [handle({"1.sst": "s/a", "9.sst": "s/x"}, new=["9.sst"])]) == ["s/x"]
    r.register(7, [handle({"1.sst": "s/a"}, new=[])])
    assert r.discard(5) == []
    assert r.discard(7) == ["s/a"]


def test_registering_twice_counts_once_and_other_handles_have_no_shared_files() -> None:
    r = SharedStateRegistry()
    r.register(1, [handle({"1.sst": "s/a"})])
    r.register(1, [handle({"1.sst": "s/a"})])
    assert r.references("s/a") == 1
    arrow = {"operators": {}, "keyed": {"agg": {"path": f"{DIR}/chk-1/agg/0.arrow", "key_groups": [0, 1]}}}
    assert shared_files(arrow) == set() and new_files(arrow) == set() and shared_files("junk") == set()
    meta = {"tasks": {"c": {"0": handle({"1.sst": "s/a"}), "1": arrow}}}
    assert len(metadata_handles(meta)) == 2


def test_state_handles_keep_shared_files_inside_the_jobs_shared_directory() -> None:
    import json

    def parse(h: dict[str, Any]) -> dict[str, Any]:
        return state_handles.parse(json.dumps(h).encode(), f"{DIR}/chk-1", ["agg"], 128, lambda p: p)

    ok = handle({"000012.sst": f"{DIR}/shared/agg/u1.sst"})
    ok["keyed"]["agg"]["private"] = {"CURRENT": f"{DIR}/chk-1/agg/0/CURRENT"}
    assert parse(ok) == ok
    for bad, what in [
        ({"000012.sst": "/elsewhere/u1.sst"}, "is not inside /c/job/shared/"),
        ({"000012.sst": f"{DIR}/shared/../../x.sst"}, "expected a path"),
        ({"a/b": f"{DIR}/shared/agg/u1.sst"}, "is not a file name"),
    ]:
        with pytest.raises(state_handles.InvalidStateHandle, match="shared"):
            parse(handle(bad))
        with pytest.raises(state_handles.InvalidStateHandle, match=what.replace("/", ".")):
            parse(handle(bad))
    private_out = handle({})
    private_out["keyed"]["agg"]["private"] = {"CURRENT": f"{DIR}/chk-2/agg/0/CURRENT"}
    with pytest.raises(state_handles.InvalidStateHandle, match="private"):
        parse(private_out)
    with pytest.raises(state_handles.InvalidStateHandle, match="new"):
        parse(handle({"1.sst": f"{DIR}/shared/agg/u.sst"}, new=["2.sst"]))


def test_an_aborted_checkpoints_discard_carries_the_handles_acknowledged_so_far() -> None:
    from jobmanager.checkpoint.coordinator import (
        Acknowledge,
        CheckpointConfig,
        CheckpointCoordinator,
        Decline,
        DiscardCheckpoint,
        Tick,
        TriggerCheckpoint,
    )
    from jobmanager.checkpoint.id_counter import InMemoryCheckpointIDCounter

    c = CheckpointCoordinator("j", CheckpointConfig(10.0), InMemoryCheckpointIDCounter(), ["a"], ["a", "b"], 0.0)
    [trigger] = c.handle(Tick(10.0))
    assert isinstance(trigger, TriggerCheckpoint)
    cid = trigger.checkpoint_id
    mine = handle({"1.sst": "s/new"})
    c.handle(Acknowledge("a", cid, mine, 1, 10.5))
    [discard] = [a for a in c.handle(Decline("b", cid, "disk full", 11.0)) if isinstance(a, DiscardCheckpoint)]
    assert discard.checkpoint_id == cid and discard.handles == (mine,)
    assert SharedStateRegistry().discard(cid, discard.handles) == ["s/new"]


def test_after_a_failover_an_older_leaders_checkpoints_leave_only_the_files_the_restored_one_lacks() -> None:
    shared = f"{DIR}/shared"
    r = SharedStateRegistry()  # the new leader: it registered only the checkpoint it restores
    r.register(7, [handle({"1.sst": f"{shared}/agg/a", "3.sst": f"{shared}/agg/c"})])
    kept = r.files_of(7)
    assert kept == {f"{shared}/agg/a", f"{shared}/agg/c"} and r.files_of(6) == frozenset()
    older = [  # checkpoint 6's metadata, written by the old leader
        handle({"1.sst": f"{shared}/agg/a", "2.sst": f"{shared}/agg/b"}),
        handle({"9.sst": "/elsewhere/x.sst", "8.sst": f"{shared}/../../etc/y"}),  # never outside shared/
        {"operators": {}, "keyed": {"sum": {"path": f"{DIR}/chk-6/sum/0.arrow"}}},  # the memory backend's
    ]
    assert left_behind(older, kept, shared + "/") == [f"{shared}/agg/b"]
    assert left_behind([], kept, shared) == []
