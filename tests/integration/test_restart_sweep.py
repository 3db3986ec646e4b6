"""A restored attempt's sweep of older checkpoints (jobmanager/checkpoint/restart_sweep.py) against
real ZooKeeper pointers and real checkpoint files: a checkpoint of the previous attempt still
persisting at the restart must not end up as a ZooKeeper pointer to deleted files, which a
JobManager taking over would restore from (the highest pointer) and fail on. And an ended job's
sweep: the uploads none of its checkpoints lists go, on real files and on a cluster."""

from __future__ import annotations

import os
import sys
import threading
import time

from harness import EXAMPLES, wait_ended
from helpers import wait_until

from jobmanager.checkpoint.restart_sweep import EndSweep, RestartSweep
from jobmanager.checkpoint.shared_registry import metadata_handles, shared_files
from jobmanager.ha.zookeeper import ZooKeeperHaServices
from jobmanager.leader.guarded_transaction import GuardedTransaction
from sluice.checkpoints.shared_names import new_shared_name
from sluice.checkpoints.storage import CheckpointStorage
from sluice.zk.paths import ZkPaths

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

JOB = "0123456789abcdef0123456789abcdef"
GUARD = "/leader-latch"


def _setup(tmp_path, zk_client):
    storage = CheckpointStorage(str(tmp_path / "checkpoints"), JOB)
    ha = ZooKeeperHaServices(zk_client, ZkPaths("sweep"), str(tmp_path / "ha"))
    zk_client.ensure_path(GUARD)
    return storage, ha, (lambda: GuardedTransaction(zk_client, GUARD))


def _upload(storage: CheckpointStorage, checkpoint_id: int) -> str:
    path = f"{storage.shared_dir()}/{new_shared_name(checkpoint_id, '.arrow')}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"state")
    return path


def _write_metadata(storage: CheckpointStorage, checkpoint_id: int, files: list[str]) -> str:
    """A checkpoint's `_metadata`: one task whose memory chain references `files`."""
    shared = {os.path.basename(f): f for f in files}
    handle = {"keyed": {"op-1": {"chain": [0], "shared": shared}}}
    return storage.write_metadata(checkpoint_id, {"checkpoint_id": checkpoint_id, "tasks": {"c1": {"0": handle}}})


def _persist(storage, ha, guard, checkpoint_id: int, files: list[str]) -> None:
    """What the JobManager's persist writes: `_metadata`, then the ZooKeeper pointer."""
    ha.add_checkpoint(guard, JOB, checkpoint_id, _write_metadata(storage, checkpoint_id, files), retained=3)


def _pointers(zk_client, ha) -> list[int]:
    return sorted(int(c) for c in zk_client.get_children(ha.paths.checkpoints(JOB)))


def test_a_checkpoint_persisting_at_the_restart_is_waited_for_and_removed_pointer_first(tmp_path, zk_client):
    storage, ha, guard = _setup(tmp_path, zk_client)
    kept_file = _upload(storage, 1)
    _persist(storage, ha, guard, 1, [kept_file])  # the checkpoint the new attempt restored from
    late_file = _upload(storage, 2)  # checkpoint 2's upload; its _metadata and pointer are still to come
    ended = threading.Event()

    def late_persist() -> None:
        time.sleep(0.3)  # the sweep starts while checkpoint 2 is still being written
        try:
            _persist(storage, ha, guard, 2, [kept_file, late_file])
        finally:
            ended.set()

    writer = threading.Thread(target=late_persist)
    writer.start()
    sweep = RestartSweep(
        storage, 1, 3, frozenset({kept_file}), [], [ended],
        lambda cid: ha.remove_checkpoint(guard, JOB, cid), "[job test]", wait=30,
    )  # fmt: skip
    sweep()
    writer.join(10)

    assert _pointers(zk_client, ha) == [1], "a pointer outlived the checkpoint it names"
    assert ha.latest_checkpoint(JOB) == 1
    assert storage.list_checkpoints() == [1]
    assert storage.read_metadata(1)["checkpoint_id"] == 1
    assert os.path.exists(kept_file) and not os.path.exists(late_file)


def test_a_persist_that_does_not_end_keeps_every_older_checkpoint(tmp_path, zk_client):
    storage, ha, guard = _setup(tmp_path, zk_client)
    kept_file = _upload(storage, 1)
    _persist(storage, ha, guard, 1, [kept_file])
    _persist(storage, ha, guard, 2, [kept_file, (orphan := _upload(storage, 2))])
    stray = _upload(storage, 2)
    sweep = RestartSweep(
        storage, 1, 3, frozenset({kept_file}), [], [threading.Event()],
        lambda cid: ha.remove_checkpoint(guard, JOB, cid), "[job test]", wait=0.3,
    )  # fmt: skip
    sweep()

    assert _pointers(zk_client, ha) == [1, 2]
    assert storage.list_checkpoints() == [1, 2]
    assert all(os.path.exists(f) for f in (kept_file, orphan, stray))


def test_without_persists_the_sweep_drops_older_checkpoints_and_orphans_but_not_the_restored_one(tmp_path, zk_client):
    storage, ha, guard = _setup(tmp_path, zk_client)
    kept_file = _upload(storage, 1)
    _persist(storage, ha, guard, 1, [kept_file])
    older = _upload(storage, 0)
    _persist(storage, ha, guard, 0, [older])
    stray, newer = _upload(storage, 2), _upload(storage, 3)  # 3: the new attempt's own upload
    RestartSweep(
        storage, 1, 3, frozenset(), [], [], lambda cid: ha.remove_checkpoint(guard, JOB, cid), "[job test]"
    )()  # the registry does not know checkpoint 1: its files come from its own metadata

    assert _pointers(zk_client, ha) == [1]
    assert storage.list_checkpoints() == [1]
    assert os.path.exists(kept_file) and os.path.exists(newer)
    assert not os.path.exists(older) and not os.path.exists(stray)


def test_an_ended_jobs_sweep_removes_only_uploads_no_checkpoint_lists(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "checkpoints"), JOB)
    listed, late = _upload(storage, 4), _upload(storage, 5)
    _write_metadata(storage, 4, [listed])
    orphan, aborted, newer = _upload(storage, 3), _upload(storage, 6), _upload(storage, 9)
    os.makedirs(storage.checkpoint_dir(6))  # an aborted checkpoint: a directory without _metadata
    ended = threading.Event()

    def late_persist() -> None:  # checkpoint 5 was persisting when the job ended
        time.sleep(0.3)
        _write_metadata(storage, 5, [listed, late])
        ended.set()

    writer = threading.Thread(target=late_persist)
    writer.start()
    EndSweep(storage, 7, [ended], "[job test]", wait=30)()
    writer.join(10)

    assert sorted(storage.list_checkpoints()) == [4, 5, 6], "an ended job's checkpoints stay"
    assert os.path.exists(listed) and os.path.exists(late) and os.path.exists(newer)
    assert not os.path.exists(orphan) and not os.path.exists(aborted)


def test_an_ended_job_with_an_unreadable_checkpoint_keeps_its_shared_files(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "checkpoints"), JOB)
    orphan = _upload(storage, 1)
    os.makedirs(storage.checkpoint_dir(2))
    with open(storage.metadata_path(2), "w") as f:
        f.write("{not json")
    EndSweep(storage, 3, [], "[job test]")()
    assert os.path.exists(orphan)


def test_a_finished_jobs_orphaned_upload_goes_and_its_checkpoints_files_stay(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=20_000, files=4, urls=500, seed=3)
    job_id = cluster.run(
        os.path.join(EXAMPLES, "page_views.py"), "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")
    )
    storage = CheckpointStorage(os.path.join(cluster.dir, "checkpoints"), job_id)
    orphan = _upload(storage, 1)  # as a task killed between its upload and its acknowledgement leaves it
    assert wait_ended(cluster, job_id)["state"] == "FINISHED"
    wait_until(lambda: not os.path.exists(orphan), timeout=30, message="the orphaned upload to go")
    kept = storage.list_checkpoints()
    assert kept, "the job kept no checkpoint"
    for cid in kept:
        for handle in metadata_handles(storage.read_metadata(cid)):
            assert all(os.path.exists(f) for f in shared_files(handle)), f"checkpoint {cid} lost a file"
