"""High-availability stores in ZooKeeper (pointers) + storage (data).

Layout under /sluice/<cluster-id> (docs/protocols.md, "ZooKeeper layout"):
    jobgraphs/<job-id>                          -> path of the serialized JobGraph in storage
    jobs/<job-id>/checkpoint_id_counter         -> next checkpoint id (compare-and-set)
    jobs/<job-id>/checkpoints/<%019d>           -> path of chk-<n>/_metadata
    jobresults/<job-id>                         -> final JobInfo of a FINISHED/CANCELED/FAILED job, compacted

Every write of the leader runs in a ZooKeeper transaction that first checks
the leader's own latch node at the version of its grant, so a JobManager
that lost leadership (or whose leadership was re-granted under a newer
session) cannot overwrite a newer leader's pointers: its write fails with
LeadershipLostError.

Only small values go to ZooKeeper (sluice/zk/limits.py): a job graph is
stored in storage with a pointer in ZooKeeper (inline only without a
storage directory, and then only if it fits), and a job result is compacted
by ``compact_job_result`` — its failure cut to ``FAILURE_LIMIT`` characters
with the full text written to ``<storage>/jobresults/<job-id>.failure.txt``
and named in the cut text, tracebacks and task errors cut, and the per-task
list dropped when the record would still exceed ``JOB_RESULT_BUDGET``.  A
write that would still be too large raises ``ZNodeTooLargeError`` and fails
that one operation; the leader's session is never at stake.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry, RetryFailedError

from jobmanager.checkpoint.id_counter import CheckpointIDCounter
from jobmanager.leader.guarded_transaction import GuardedTransaction
from sluice.storage import resolve
from sluice.v1 import common_pb2
from sluice.zk.limits import MAX_WRITE_BYTES, ZNodeTooLargeError, check_size, truncate
from sluice.zk.paths import ZkPaths

log = logging.getLogger("sluice.jobmanager.ha")

Guard = Callable[[], GuardedTransaction]  # a transaction guarded by the current leader session

# Compare-and-set of the checkpoint id counter: another writer won the race
# (BadVersionError) or the connection blinked -> read again, for at most
# COUNTER_DEADLINE seconds (then kazoo's RetryFailedError reaches the caller).
COUNTER_DEADLINE = 10.0

FAILURE_LIMIT = 4096  # characters of a job's failure kept in its job result (the rest: in storage)
TRACEBACK_LIMIT = 2048  # characters of each exception history traceback kept in a job result
TASK_ERROR_LIMIT = 512  # characters of each task's error kept in a job result
JOB_RESULT_BUDGET = 64 * 1024  # bytes of a compacted job result, well below MAX_WRITE_BYTES


def compact_job_result(info: common_pb2.JobInfo, full_failure_at: str | None) -> common_pb2.JobInfo:
    """The JobInfo kept in ZooKeeper: ``info`` with its texts cut (the failure pointing to
    ``full_failure_at``, where its full text is written) and, if it still exceeds
    JOB_RESULT_BUDGET, without its per-task list and then its exception history."""
    out = common_pb2.JobInfo()
    out.CopyFrom(info)
    out.failure = truncate(info.failure, FAILURE_LIMIT, full_failure_at)
    for entry in out.exceptions:
        entry.cause = truncate(entry.cause, TASK_ERROR_LIMIT)
        entry.traceback = truncate(entry.traceback, TRACEBACK_LIMIT, full_failure_at if not entry.restarted else None)
    for task in out.tasks:
        task.error = truncate(task.error, TASK_ERROR_LIMIT)
    out.message = truncate(out.message, TASK_ERROR_LIMIT)
    for field in ("tasks", "checkpoints", "exceptions"):
        if out.ByteSize() <= JOB_RESULT_BUDGET:
            break
        dropped = len(getattr(out, field))
        out.ClearField(field)
        note = f"{dropped} {field} entries not kept in the job result store (it keeps small records only)"
        out.message = f"{out.message}; {note}" if out.message else note
    return out


class ZooKeeperCheckpointIDCounter(CheckpointIDCounter):
    """Shared counter: read the value and its version, write value+1 at that version."""

    def __init__(self, client: KazooClient, path: str, deadline: float = COUNTER_DEADLINE) -> None:
        self.client, self.path, self.deadline = client, path, deadline
        self._retry = KazooRetry(max_tries=-1, delay=0.001, backoff=2, max_jitter=0.5, max_delay=0.1, deadline=deadline)
        self._retry.retry_exceptions = (*self._retry.retry_exceptions, BadVersionError)
        client.ensure_path(path)

    def _read(self) -> tuple[int, int]:
        data, stat = self.client.get(self.path)
        return (int(data) if data else 1), stat.version

    def get(self) -> int:
        return self._read()[0]

    def get_and_increment(self) -> int:
        # KazooRetry resets its own attempt count on each call; a copy keeps
        # concurrent callers (threads of one JobManager) from sharing that state.
        try:
            return int(self._retry.copy()(self._compare_and_set))
        except RetryFailedError as exc:  # the path names the job: jobs/<job-id>/checkpoint_id_counter
            raise RetryFailedError(
                f"checkpoint id counter {self.path}: no compare-and-set succeeded within {self.deadline:g}s ({exc})"
            ) from exc

    def advance_to(self, value: int) -> None:
        def advance() -> None:
            current, version = self._read()
            if current < value:
                self.client.set(self.path, str(value).encode(), version=version)

        self._retry.copy()(advance)

    def _compare_and_set(self) -> int:
        value, version = self._read()
        self.client.set(self.path, str(value + 1).encode(), version=version)
        return value


def path_of(pointer: bytes) -> str:
    """The file a `file:` job graph pointer names ("" for an inline graph)."""
    kind, _, rest = pointer.partition(b":")
    return rest.decode() if kind == b"file" else ""


class ZooKeeperHaServices:
    def __init__(self, client: KazooClient, paths: ZkPaths, storage_dir: str | None) -> None:
        self.client, self.paths = client, paths
        self.storage_dir = storage_dir.rstrip("/") if storage_dir else None
        for p in (paths.jobgraphs, paths.jobs, self.results_root):
            client.ensure_path(p)

    @property
    def results_root(self) -> str:
        return f"{self.paths.root}/jobresults"

    # -- job graphs -------------------------------------------------------------------------
    def put_job_graph(self, guard: Guard, job_id: str, job: common_pb2.JobGraph, replace: bool = False) -> None:
        """Data to storage first, then the pointer (persist before announce). `replace`: the
        job's graph changed (a live reconfiguration committed): the new one goes to a file of
        its own and the pointer moves to it in one guarded write, so a crash in between leaves
        the old graph whole; the old file is deleted afterwards."""
        data = job.SerializeToString()
        if self.storage_dir:
            fs, base = resolve(self.storage_dir)
            directory = f"{base}/jobgraphs"
            fs.create_dir(directory, recursive=True)
            path = f"{directory}/{job_id}{f'.{uuid.uuid4().hex[:8]}' if replace else ''}.pb"
            with fs.open_output_stream(path) as out:
                out.write(data)
            pointer = b"file:" + path.encode()
        else:
            pointer = b"inline:" + data
            if len(pointer) > MAX_WRITE_BYTES:
                raise ZNodeTooLargeError(
                    f"job {job_id}'s job graph (kept in ZooKeeper: this JobManager has no "
                    "state.checkpoints.dir; set one and job graphs go to storage)",
                    len(pointer),
                )
        if not replace:
            guard().create(self.paths.jobgraph(job_id), pointer).commit()
            return
        previous, _ = self.client.get(self.paths.jobgraph(job_id))
        old_file = path_of(previous)
        guard().set_data(self.paths.jobgraph(job_id), pointer).commit()
        if old_file and old_file != path_of(pointer) and self.storage_dir:
            fs, _ = resolve(self.storage_dir)
            with contextlib.suppress(OSError):
                fs.delete_file(old_file)

    def job_graph_ids(self) -> list[str]:
        return sorted(self.client.get_children(self.paths.jobgraphs))

    def get_job_graph(self, job_id: str) -> common_pb2.JobGraph:
        pointer, _ = self.client.get(self.paths.jobgraph(job_id))
        path = path_of(pointer)
        if not path:  # inline
            data = pointer.partition(b":")[2]
        else:
            fs, _ = resolve(self.storage_dir or "/")
            with fs.open_input_stream(path) as f:
                data = f.read()
        job = common_pb2.JobGraph()
        job.ParseFromString(data)
        return job

    # -- job results ------------------------------------------------------------------------
    def failure_text_path(self, job_id: str) -> str | None:
        """Where the full failure text of an ended job is kept (None: no storage directory)."""
        return f"{self.storage_dir}/jobresults/{job_id}.failure.txt" if self.storage_dir else None

    def compact_failure(self, job_id: str, failure: str) -> str:
        """The failure text as the job result store keeps it (see ``compact_job_result``)."""
        return truncate(failure, FAILURE_LIMIT, self.failure_text_path(job_id) or "the JobManager's log")

    def put_job_result(self, guard: Guard, job_id: str, info: common_pb2.JobInfo) -> None:
        """Record the final state and drop the job graph pointer in one transaction, so a
        new leader never resurrects a FINISHED, CANCELED or FAILED job.  A failure longer
        than FAILURE_LIMIT is written in full to storage first (persist before announce)."""
        full_at = self.failure_text_path(job_id)
        if len(info.failure) > FAILURE_LIMIT and not info.failure.endswith(f"full text in {full_at})"):
            if full_at is None:
                log.error("[job %s] failure, in full (the job result store keeps its head):\n%s", job_id, info.failure)
            else:
                fs, path = resolve(full_at)
                fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                with fs.open_output_stream(path) as out:
                    out.write(info.failure.encode())
        record = compact_job_result(info, full_at or "the JobManager's log").SerializeToString()
        check_size(f"job {job_id}'s job result", len(record))
        txn = guard()
        path = f"{self.results_root}/{job_id}"
        if self.client.exists(path):
            txn.set_data(path, record)
        else:
            txn.create(path, record)
        if self.client.exists(self.paths.jobgraph(job_id)):
            txn.delete(self.paths.jobgraph(job_id))
        txn.commit()

    def job_results(self) -> dict[str, common_pb2.JobInfo]:
        out = {}
        for job_id in self.client.get_children(self.results_root):
            try:
                data, _ = self.client.get(f"{self.results_root}/{job_id}")
            except NoNodeError:
                continue
            info = common_pb2.JobInfo()
            info.ParseFromString(data)
            out[job_id] = info
        return out

    # -- completed checkpoints ----------------------------------------------------------------
    def add_checkpoint(
        self, guard: Guard, job_id: str, checkpoint_id: int, metadata_path: str, retained: int
    ) -> list[int]:
        """Publish the pointer of a completed checkpoint; drop pointers beyond `retained`.
        Returns the ids whose pointers were dropped (their files may be discarded)."""
        root = self.paths.checkpoints(job_id)
        self.client.ensure_path(root)
        ids = sorted(set(int(c) for c in self.client.get_children(root)) | {checkpoint_id})
        subsumed = [i for i in ids[:-retained] if i != checkpoint_id] if len(ids) > retained else []
        txn = guard().create(self.paths.checkpoint(job_id, checkpoint_id), metadata_path.encode())
        for i in subsumed:
            txn.delete(self.paths.checkpoint(job_id, i))
        try:
            txn.commit()
        except NodeExistsError:
            pass  # already published (a retried write)
        return subsumed

    def remove_checkpoint(self, guard: Guard, job_id: str, checkpoint_id: int) -> None:
        """Drop the pointer of a checkpoint about to be deleted (jobmanager/checkpoint/restart_sweep.py),
        guarded by our leadership; a pointer already gone is fine."""
        path = self.paths.checkpoint(job_id, checkpoint_id)
        if self.client.exists(path) is None:
            return
        try:
            guard().delete(path).commit()
        except NoNodeError:
            pass  # dropped meanwhile by a newer checkpoint's retention

    def put_job_metrics(self, guard: Guard, job_id: str, metrics: common_pb2.JobMetrics) -> None:
        """A job's counters (JobInfo.metrics), replaced as they change; a new leader reads them."""
        path = f"{self.paths.job(job_id)}/metrics"
        data = metrics.SerializeToString()
        if self.client.exists(path) is None:
            self.client.ensure_path(self.paths.job(job_id))
            try:
                guard().create(path, data).commit()
                return
            except NodeExistsError:
                pass
        guard().set_data(path, data).commit()

    def get_job_metrics(self, job_id: str) -> common_pb2.JobMetrics | None:
        try:
            data, _stat = self.client.get(f"{self.paths.job(job_id)}/metrics")
        except NoNodeError:
            return None
        out = common_pb2.JobMetrics()
        try:
            out.ParseFromString(data)
        except Exception:  # noqa: BLE001 — unreadable counters start again from 0; the job recovers anyway
            log.warning("[job %s] unreadable metrics in the HA store; counting from 0", job_id)
            return None
        return out

    def latest_checkpoint(self, job_id: str) -> int | None:
        try:
            ids = [int(c) for c in self.client.get_children(self.paths.checkpoints(job_id))]
        except NoNodeError:
            return None
        return max(ids) if ids else None

    def checkpoint_id_counter(self, job_id: str) -> ZooKeeperCheckpointIDCounter:
        return ZooKeeperCheckpointIDCounter(self.client, self.paths.checkpoint_id_counter(job_id))
