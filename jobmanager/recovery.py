"""What a new leader reads before it takes over: the HA stores' jobs, off the dispatcher's lock.

`read_ha_stores` reads the job result store and, for every job graph without a result, its
graph, latest completed checkpoint pointer, counters and the savepoint it started from
(ZooKeeper, checkpoint storage): the dispatcher (dispatcher.py) calls it before it takes its
lock, then builds and starts a JobMaster per `StoredJob` under the lock. A job whose records
cannot be read is logged with its correlation id and left out; the others are still recovered.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from sluice import job_options
from sluice.checkpoints.savepoint import Savepoint
from sluice.checkpoints.savepoint import read as read_savepoint
from sluice.v1 import common_pb2

log = logging.getLogger("sluice.jobmanager")


@dataclasses.dataclass(frozen=True)
class StoredJob:
    """A job graph of the HA store without a result: one the previous leader was running."""

    job_id: str
    job: common_pb2.JobGraph
    latest: int | None  # its latest completed checkpoint (the pointer in ZooKeeper)
    counters: common_pb2.JobMetrics | None  # its counters as the previous leader last saved them
    savepoint: Savepoint | None  # the savepoint it started from


@dataclasses.dataclass(frozen=True)
class HaStores:
    results: dict[str, common_pb2.JobInfo]  # ended jobs
    jobs: list[StoredJob]


def savepoint_of(job: common_pb2.JobGraph) -> Savepoint | None:
    """The savepoint a job starts from (execution.savepoint.path), read and checked; None without one."""
    path = job_options.SAVEPOINT_PATH.read(dict(job.config))
    return read_savepoint(path) if path else None


def read_ha_stores(ha: Any) -> HaStores | None:
    """The HA stores' jobs; None when they cannot be read at all."""
    try:
        results = ha.job_results()
        job_ids = ha.job_graph_ids()
    except Exception as exc:  # noqa: BLE001 — ZooKeeper trouble: the election will revoke us
        log.error("cannot read the HA stores: %s", exc)
        return None
    jobs = []
    for job_id in job_ids:
        if job_id in results:
            continue
        try:
            job = ha.get_job_graph(job_id)
            latest = ha.latest_checkpoint(job_id)
            savepoint = savepoint_of(job)
            counters = ha.get_job_metrics(job_id)
        except Exception as exc:  # noqa: BLE001 — one unreadable job must not stop recovering the others
            log.error("[job %s] cannot recover: %s", job_id, exc)
            continue
        jobs.append(StoredJob(job_id, job, latest, counters, savepoint))
    return HaStores(results, jobs)
