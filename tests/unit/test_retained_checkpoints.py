"""Retained checkpoints as a place to resume from (sluice/checkpoints/retained.py, docs/savepoints.md):
the paths accepted (`chk-<n>`, its `_metadata`), a checkpoint's `_metadata` read as a savepoint and
mapped onto a job at another parallelism, the NO_CLAIM marks, and the errors for a path that is
neither a savepoint nor a retained checkpoint."""

from __future__ import annotations

import json

import pytest
from savepoint_jobs import no_run_context, page_views, take_checkpoint

from jobmanager.checkpoint import metadata as ckpt_metadata
from sluice import graph
from sluice.checkpoints import retained
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointStorage
from sluice.key_groups import key_group_range

__all__ = ["no_run_context"]  # the fixture, used by every test here


@pytest.mark.parametrize(
    ("given", "directory", "checkpoint_id"),
    [
        ("/c/job/chk-5", "/c/job/chk-5", 5),
        ("/c/job/chk-5/", "/c/job/chk-5", 5),
        ("/c/job/chk-5/_metadata", "/c/job/chk-5", 5),
        ("s3://bucket/c/job/chk-12/_metadata", "s3://bucket/c/job/chk-12", 12),
        ("/sp/savepoint-abcd1234-123456", "/sp/savepoint-abcd1234-123456", None),
        ("/c/job/chk-x", "/c/job/chk-x", None),
        ("/c/job/chk-5-old", "/c/job/chk-5-old", None),
    ],
)
def test_paths_name_the_directory_and_its_checkpoint(given, directory, checkpoint_id):
    assert retained.normalize(given) == directory
    assert retained.checkpoint_id_of(given) == checkpoint_id


def test_a_checkpoint_metadata_is_told_from_a_savepoints():
    assert retained.is_checkpoint({"job_id": "j", "checkpoint_id": 1, "tasks": {}})
    assert not retained.is_checkpoint({"format": "sluice-savepoint", "tasks": {}})
    assert not retained.is_checkpoint([1])
    assert retained.latest_hint(["chk-3", "shared", "chk-10", "chk-x"]).endswith("e.g. .../chk-10")
    assert retained.latest_hint(["shared"]) == ""


def retained_checkpoint(tmp_path, job, record=True):
    """A completed checkpoint of `job` in `<tmp>/chk/job-1/chk-7`, as the JobMaster writes it."""
    storage, meta, chains = take_checkpoint(tmp_path, job)
    if record:  # what jobmanager/checkpoint/metadata.py records now
        recorded = ckpt_metadata.build("job-1", 7, False, 1, 0, {}, lambda _eid: ("", 0), job)
        meta = {**meta, "operator_kinds": recorded["operator_kinds"], "max_parallelism": recorded["max_parallelism"]}
    storage.write_metadata(7, meta)
    return storage, meta


@pytest.mark.parametrize("record", [True, False])
@pytest.mark.parametrize("as_file", [False, True])
def test_a_retained_checkpoint_restores_at_another_parallelism(tmp_path, record, as_file):
    job = page_views()
    storage, _meta = retained_checkpoint(tmp_path, job, record)
    path = storage.checkpoint_dir(7) + ("/_metadata" if as_file else "")
    saved = sp.read(path)
    assert saved.retained and saved.checkpoint_id == 7 and saved.path == storage.checkpoint_dir(7)
    new_job = page_views(parallelism=3, extra_map=True)  # another version and parallelism, same uids
    states = sp.restore_states(saved, new_job, graph.build_chains(new_job), allow_non_restored=True)
    chains = graph.build_chains(new_job)
    counts_chain = graph.chain_of(chains)["counts"]
    keyed = [json.loads(states[(counts_chain.id, s)])["keyed"]["counts"] for s in range(3)]
    assert all(h["uri"].startswith(str(tmp_path)) for hs in keyed for h in hs)  # read where they are
    other = CheckpointStorage(str(tmp_path / "chk2"), "job-2")  # the new job's own storage
    rows: list[str] = []
    for s, handles in enumerate(keyed):
        table = other.read_keyed_state(handles, key_group_range(s, 3, 128))
        rows += table.column("k").to_pylist() if table is not None else []
    assert sorted(rows) == ["K0", "K1", "k0", "k1"]
    sink_chain = graph.chain_of(chains)["counts-sink"]
    pending = [json.loads(states[(sink_chain.id, s)])["operators"].get("counts-sink") for s in range(3)]
    assert any(p is not None for p in pending)


def test_a_kind_or_max_parallelism_that_does_not_fit_is_named(tmp_path):
    job = page_views()
    storage, _meta = retained_checkpoint(tmp_path, job)
    saved = sp.read(storage.checkpoint_dir(7))
    other = page_views()
    other.max_parallelism = 64
    with pytest.raises(sp.SavepointError, match="retained checkpoint .* max parallelism 128, the job has 64"):
        sp.restore_states(saved, other, graph.build_chains(other), False)
    shifted = page_views(uids=False)
    with pytest.raises(sp.SavepointError, match="retained checkpoint .* does not have: counts, counts-sink"):
        sp.restore_states(saved, shifted, graph.build_chains(shifted), False)


def test_an_older_checkpoint_without_max_parallelism_must_fit_its_key_groups(tmp_path):
    job = page_views()
    storage, _meta = retained_checkpoint(tmp_path, job, record=False)
    saved = sp.read(storage.checkpoint_dir(7))
    assert saved.metadata["max_parallelism"] is None and saved.metadata["key_group_top"] == 127
    other = page_views()
    other.max_parallelism = 64
    with pytest.raises(sp.SavepointError, match="holds key group 127, the job's max parallelism is 64"):
        sp.restore_states(saved, other, graph.build_chains(other), False)


def test_rocksdb_handles_are_read_but_not_claimed():
    handle = {
        "backend": "rocksdb",
        "path": "/c/job-1/chk-7/counts/0",
        "key_groups": [0, 127],
        "private": {"MANIFEST-1": "/c/job-1/chk-7/counts/0/MANIFEST-1"},
        "shared": {"000009.sst": "/c/job-1/shared/counts/u.sst"},
        "new": [],
    }
    meta = {"job_id": "job-1", "checkpoint_id": 7, "tasks": {"c": {"0": {"keyed": {"counts": handle}}}}}
    out = retained.to_savepoint_metadata("/c/job-1/chk-7", meta)
    [h] = out["operators"]["counts"]["keyed"]
    assert h["no_claim"] is True and h["shared"] == handle["shared"]  # the new job uploads them again


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"job_id": "j", "checkpoint_id": 8, "tasks": {}}, "is checkpoint 8's, in directory chk-7"),
        ({"job_id": "j", "checkpoint_id": True, "tasks": {}}, "no valid 'checkpoint_id'"),
        ({"job_id": 3, "checkpoint_id": 7, "tasks": {}}, "no valid 'job_id' or 'tasks'"),
        ({"job_id": "j", "checkpoint_id": 7, "tasks": {"c": {"1": {}}}}, "are not 0..0"),
        (
            {"job_id": "j", "checkpoint_id": 7, "tasks": {"c": {"0": {"keyed": {"o": {"path": "/x"}}}}}},
            "keyed state without a key-group range",
        ),
        (
            {"job_id": "j", "checkpoint_id": 7, "max_parallelism": 4, "tasks": {}, "operator_kinds": []},
            "malformed 'operator_kinds'",
        ),
    ],
)
def test_a_malformed_checkpoint_is_refused_naming_it(tmp_path, meta, message):
    directory = tmp_path / "job-1" / "chk-7"
    directory.mkdir(parents=True)
    (directory / "_metadata").write_text(json.dumps(meta))
    with pytest.raises(sp.SavepointError, match=f"retained checkpoint {directory}: _metadata .*{message}"):
        sp.read(str(directory))


def test_a_path_that_is_neither_says_what_to_give(tmp_path):
    job_dir = tmp_path / "job-1"
    for n in (4, 5):
        (job_dir / f"chk-{n}").mkdir(parents=True)
    with pytest.raises(sp.SavepointError, match=r"no _metadata there .*chk-<n>.*chk-4, chk-5: give one of them"):
        sp.read(str(job_dir))  # the job's checkpoint directory instead of one of its checkpoints
    with pytest.raises(sp.SavepointError, match="no _metadata there .*holding a _metadata file$"):
        sp.read(str(tmp_path / "missing"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "_metadata").write_text('{"format": "x"}')
    with pytest.raises(sp.SavepointError, match="not a Sluice savepoint .* nor a retained checkpoint's; give"):
        sp.read(str(tmp_path / "other"))
