"""Savepoint directories (sluice/checkpoints/savepoint.py) on a real local file system: a
checkpoint's state copied out, moved, read back and mapped onto a job by operator uid, at
the same or another parallelism; and the clear errors for what does not fit. Also
`DataStream.uid` and `graph.rescaled`, which decide the ids and parallelism state maps to."""

from __future__ import annotations

import json
import shutil

import pytest
from savepoint_jobs import page_views, take_checkpoint

from sluice import graph, states
from sluice.api import StreamExecutionEnvironment
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointStorage
from sluice.key_groups import key_group_range


def test_a_savepoint_is_relocatable_and_restores_at_another_parallelism(tmp_path):
    job = page_views()
    storage, meta, chains = take_checkpoint(tmp_path, job)
    path = sp.write(sp.plan(meta, job), storage.fs, str(tmp_path / "sps"), "job-1")
    raw = (tmp_path / "sps" / path.rsplit("/", 1)[1] / "_metadata").read_text()
    assert str(tmp_path) not in raw  # no absolute path inside
    moved = tmp_path / "elsewhere"
    shutil.move(path, moved)
    shutil.rmtree(tmp_path / "chk")  # self-contained: the checkpoint may go

    saved = sp.read(str(moved))
    assert saved.checkpoint_id == 7 and set(saved.metadata["operators"]) >= {"counts", "counts-sink"}
    new_job = page_views(parallelism=3, extra_map=True)  # another version and parallelism, same uids
    states = sp.restore_states(saved, new_job, graph.build_chains(new_job), allow_non_restored=True)
    counts_chain = graph.chain_of(graph.build_chains(new_job))["counts"]
    keyed = [json.loads(states[(counts_chain.id, s)])["keyed"]["counts"] for s in range(3)]
    storage2 = CheckpointStorage(str(tmp_path / "chk2"), "job-2")
    rows: list[str] = []
    for s, handles in enumerate(keyed):  # each new subtask reads its own key-group range
        table = storage2.read_keyed_state(handles, key_group_range(s, 3, 128))
        rows += table.column("k").to_pylist() if table is not None else []
    assert sorted(rows) == ["K0", "K1", "k0", "k1"]


def test_state_no_operator_claims_is_refused_unless_allowed(tmp_path):
    job = page_views(uids=False)
    storage, meta, chains = take_checkpoint(tmp_path, job)
    saved = sp.read(sp.write(sp.plan(meta, job), storage.fs, str(tmp_path), "job-1"))
    shifted = page_views(uids=False, extra_map=True)  # default ids move with the new operator
    with pytest.raises(sp.SavepointError, match="does not have: .*--allow-non-restored-state"):
        sp.restore_states(saved, shifted, graph.build_chains(shifted), allow_non_restored=False)
    assert sp.restore_states(saved, shifted, graph.build_chains(shifted), allow_non_restored=True)


def test_a_kind_or_max_parallelism_that_does_not_fit_is_named(tmp_path):
    job = page_views()
    storage, meta, chains = take_checkpoint(tmp_path, job)
    saved = sp.read(sp.write(sp.plan(meta, job), storage.fs, str(tmp_path), "job-1"))
    other = page_views()
    other.max_parallelism = 64
    with pytest.raises(sp.SavepointError, match="max parallelism 128, the job has 64"):
        sp.restore_states(saved, other, graph.build_chains(other), False)
    swapped = page_views()
    next(o for o in swapped.operators if o.id == "counts").kind = states.to_proto(graph.OperatorKind.MAP)
    with pytest.raises(sp.SavepointError, match="'counts' was of kind aggregate .* is of kind map"):
        sp.restore_states(saved, swapped, graph.build_chains(swapped), False)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no _metadata there"),
        ("{nope", "not JSON"),
        ('{"format": "x"}', "not a Sluice savepoint"),
        ('{"format": "sluice-savepoint", "version": 2}', "format version 2"),
        (
            json.dumps(
                {
                    "format": "sluice-savepoint",
                    "version": 1,
                    "job_id": "j",
                    "checkpoint_id": 1,
                    "max_parallelism": 128,
                    "operators": {
                        "a": {
                            "kind": "aggregate",
                            "parallelism": 1,
                            "keyed": [{"file": "../../etc/passwd", "key_groups": [0, 1]}],
                        }
                    },
                }
            ),
            "must be a path inside the savepoint",
        ),
        (
            json.dumps(
                {
                    "format": "sluice-savepoint",
                    "version": 1,
                    "job_id": "j",
                    "checkpoint_id": 1,
                    "max_parallelism": 128,
                    "operators": {"a": {"kind": "aggregate", "parallelism": 1, "inline": {"5": {}}}},
                }
            ),
            "inline state must map subtasks below 1",
        ),
    ],
)
def test_a_bad_savepoint_is_rejected_before_anything_trusts_it(tmp_path, content, message):
    if content is not None:
        (tmp_path / "_metadata").write_text(content)
    with pytest.raises(sp.SavepointError, match=message):
        sp.read(str(tmp_path))


def test_an_oversized_metadata_is_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(sp, "MAX_METADATA_BYTES", 10)
    (tmp_path / "_metadata").write_text(" " * 100)
    with pytest.raises(sp.SavepointError, match="more than 10"):
        sp.read(str(tmp_path))


def test_uids_become_operator_ids_and_edges_and_references_follow():
    job = page_views()
    ids = [o.id for o in job.operators]
    assert "counts" in ids and "counts-sink" in ids
    assert {(e.source, e.target) for e in job.edges} >= {("counts", "counts-sink")}
    graph.validate(job, check_paths=False)
    env = StreamExecutionEnvironment()
    s = env.from_collection([{"a": 1}])
    with pytest.raises(ValueError, match="uid must be"):
        s.uid("../x")
    s.uid("x")
    with pytest.raises(ValueError, match="already the uid"):
        s.select("a").uid("x")


def test_rescaled_changes_parallelism_and_keeps_uneven_edges_out_of_a_keyed_operator_keyed():
    job = page_views()
    all3 = graph.rescaled(job, 3)
    assert {o.parallelism for o in all3.operators} == {3}
    one = graph.rescaled(job, 3, operator="counts-sink")
    edge = next(e for e in one.edges if e.target == "counts-sink")
    assert graph.partitioning_of(edge) == graph.Partitioning.HASH and list(edge.keys) == ["url"]
    graph.validate(one, check_paths=False)
    with pytest.raises(ValueError, match="between 1 and the job's max parallelism 128"):
        graph.rescaled(job, 0)
    with pytest.raises(ValueError, match="no operator with uid 'x'"):
        graph.rescaled(job, 2, operator="x")
