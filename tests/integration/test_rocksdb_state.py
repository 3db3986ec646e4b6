"""The rocksdb state backend end to end, on a real cluster (docs/state-backends.md).

The job is examples/page_views.py with `state.backend: rocksdb`
(tests/integration/jobs/rocksdb_page_views.py) reading a watched directory:

- incremental checkpoints: a later checkpoint references SST files an earlier one uploaded to
  `<job>/shared/`, each checkpoint uploads less than its database's files, and the shared files
  on disk are exactly those the retained checkpoints reference (discarded ones disappear);
- stop with a savepoint, resume at parallelism 3 from it: each new subtask copies its key range
  out of the old databases; the savepoint is self-contained (every file copied) and the final
  counts are exact;
- kill -9 of a TaskManager: the job restores its RocksDB databases from the latest checkpoint
  and the committed counts are exact, no line twice; a shared file no checkpoint lists (a
  killed task's upload) is removed when the restored attempt starts.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
from harness import (
    JOBS,
    assert_update_stream,
    checkpoint_root,
    kill_process_tree,
    last_line,
    pid_at,
    read_counts,
    retained,
    sluice,
    taskmanager_log_lines,
    wait_for,
)
from helpers import wait_until
from page_view_jobs import Input, wait_counts

from sluice.checkpoints.shared_names import new_shared_name

pytestmark = pytest.mark.integration

JOB = os.path.join(JOBS, "rocksdb_page_views.py")


def run(cluster, inp: Input, out, *extra: str, parallelism: int = 2, job_args: tuple[str, ...] = ()) -> str:
    args = ["run", JOB, "--detach", "--cluster-dir", cluster.dir, "--parallelism", str(parallelism), *extra]
    argv = ["--input", str(inp.dir), "--output", str(out), "--monitor-interval", "200", *job_args]
    return last_line(sluice(*args, "--", *argv))


def rocksdb_handles(meta: dict) -> list[dict]:
    return [
        h
        for by_subtask in meta["tasks"].values()
        for handle in by_subtask.values()
        for h in handle.get("keyed", {}).values()
        if h.get("backend") == "rocksdb"
    ]


def test_incremental_checkpoints_reference_earlier_uploads_and_unreferenced_files_go(cluster, tmp_path):
    inp = Input(tmp_path)
    inp.add(events=40_000, files=10)
    out = tmp_path / "out"
    job = run(cluster, inp, out)
    wait_counts(out, inp.expected)
    root = checkpoint_root(cluster, job)
    # more input, more checkpoints: each adds a level-0 file, ten of them a compaction
    # (taskmanager/state/rocksdb_backend.py L0_COMPACTION_TRIGGER), whose inputs then go
    for _batch in range(12):
        inp.add(events=5_000, files=2)
        wait_counts(out, inp.expected)
    first = wait_for(cluster, job, lambda s: s["last_completed_checkpoint"], "a checkpoint")[
        "last_completed_checkpoint"
    ]
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] >= first + 2, "two more checkpoints")
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")

    metas = retained(root)
    assert len(metas) == 2, sorted(metas)  # state.checkpoints.num-retained
    older, newer = (metas[c] for c in sorted(metas))
    handles = rocksdb_handles(newer)
    assert len(handles) == 2  # one database per subtask of the keyed count
    for h in handles:
        assert h["shared"], h
        assert h["size"] < h["full_size"], "an incremental checkpoint uploads less than the whole database"
        assert set(h["new"]) < set(h["shared"]), "a later checkpoint references files uploaded before"
        for path in [*h["shared"].values(), *h["private"].values()]:
            assert os.path.isfile(path), path
    referenced = {p for m in metas.values() for h in rocksdb_handles(m) for p in h["shared"].values()}
    reused = {p for h in rocksdb_handles(older) for p in h["shared"].values()} & {
        p for h in handles for p in h["shared"].values()
    }
    assert reused, "the newer retained checkpoint shares files with the older"
    on_disk = set(glob.glob(os.path.join(root, "shared", "*", "*.sst")))
    assert on_disk == referenced, f"unreferenced: {sorted(on_disk - referenced)}; missing: {referenced - on_disk}"
    with open(glob.glob(os.path.join(cluster.dir, "log", "jobmanager*.log"))[0], errors="replace") as f:
        assert any(job in line and "shared state files go" in line for line in f), "no shared file was ever deleted"


def test_stop_with_savepoint_and_resume_at_another_parallelism(cluster, tmp_path):
    inp = Input(tmp_path)
    out = tmp_path / "out"
    inp.add(events=60_000, files=20)
    job = run(cluster, inp, out)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"], "a checkpoint")
    inp.add(events=30_000, files=10)
    path = last_line(sluice("stop", job, "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
    assert cluster.status(job)["state"] == "FINISHED"
    with open(os.path.join(path, "_metadata")) as f:
        saved = json.load(f)
    keyed = saved["operators"]["counts"]["keyed"]
    assert [h["backend"] for h in keyed] == ["rocksdb", "rocksdb"]
    for h in keyed:  # self-contained: every file of each database copied, shared ones too
        assert any(n.endswith(".sst") for n in h["files"]), h
        assert all(os.path.isfile(os.path.join(path, h["file"], n)) for n in h["files"])

    inp.add(events=30_000, files=10)
    job2 = run(cluster, inp, out, "--from-savepoint", path, parallelism=3)
    status = wait_for(cluster, job2, lambda s: s["state"] == "RUNNING", "the job at parallelism 3")
    assert {t["subtask"] for t in status["tasks"]} == {0, 1, 2}
    lines = wait_counts(out, inp.expected)
    assert_update_stream(lines)


@pytest.mark.chaos
def test_kill_9_of_a_taskmanager_restores_rocksdb_state_exactly(cluster, tmp_path):
    """Last in the module: the cluster keeps one TaskManager afterwards."""
    inp = Input(tmp_path)
    out = tmp_path / "out"
    inp.add(events=60_000, files=20)
    job = run(cluster, inp, out, parallelism=2)
    wait_counts(out, inp.expected)
    wait_for(cluster, job, lambda s: s["last_completed_checkpoint"] and s["state"] == "RUNNING", "a checkpoint")
    inp.add(events=60_000, files=30)
    # what a task killed between its upload and its acknowledgement leaves: a shared file that no
    # checkpoint lists, uploaded for checkpoint 1; beside it one of a name without an id (kept)
    (shared,) = glob.glob(os.path.join(checkpoint_root(cluster, job), "shared", "*"))  # the keyed count's
    orphan = os.path.join(shared, new_shared_name(1, ".sst"))
    legacy = os.path.join(shared, "0123456789abcdef0123456789abcdef.sst")
    for path in (orphan, legacy):
        with open(path, "wb") as f:
            f.write(b"not a table")
    status = cluster.status(job)
    address = next(t["taskmanager"] for t in status["tasks"])
    kill_process_tree(pid_at(cluster, address))
    status = wait_for(
        cluster,
        job,
        lambda s: s["restarts"] >= 1 and s["state"] == "RUNNING" and s["restored_checkpoint"],
        "the job to restart from a checkpoint",
        timeout=240,
    )
    # the restored attempt's start removes the orphan, and nothing a retained checkpoint lists
    assert wait_until(lambda: not os.path.exists(orphan), timeout=60, message="the orphaned shared file removed")
    assert os.path.exists(legacy)
    for meta in retained(checkpoint_root(cluster, job)).values():
        for h in rocksdb_handles(meta):
            assert all(os.path.isfile(p) for p in h["shared"].values()), h
    inp.add(events=20_000, files=5)
    lines = wait_counts(out, inp.expected, timeout=240)
    assert_update_stream(lines)
    final, _ = read_counts(str(out))
    assert final == dict(inp.expected)

    assert wait_until(
        lambda: taskmanager_log_lines(cluster.dir, "rocksdb state restored", job),
        timeout=30,
        message="a rocksdb restore logged",
    )
