"""The JobManager's Prometheus samples (docs/monitoring.md): the cluster as the leader
sees it, each job's counters (JobInfo.metrics, kept in the HA store so that a new leader
goes on from them), and per task the I/O metrics the TaskManagers' heartbeats carried.
A standby reports only `jobmanager_isLeader 0` and its own memory."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import psutil

from jobmanager.dispatcher import Dispatcher
from sluice.metrics.prometheus import Sample
from sluice.v1 import common_pb2

log = logging.getLogger("sluice.jobmanager.metrics")

# JobMetrics field -> (Flink's name, help)
JOB_METRICS: dict[str, tuple[str, str]] = {
    "num_restarts": ("numRestarts", "restarts of the job since it was submitted (across leaders)"),
    "number_of_completed_checkpoints": ("numberOfCompletedCheckpoints", "checkpoints completed"),
    "number_of_failed_checkpoints": ("numberOfFailedCheckpoints", "checkpoints that failed or expired"),
    "last_checkpoint_duration_ms": ("lastCheckpointDuration", "ms from trigger to completion, last checkpoint"),
    "last_checkpoint_size_bytes": ("lastCheckpointSize", "bytes of state, last completed checkpoint"),
    "uptime_ms": ("uptime", "ms the job has been running in its current attempt"),
}
TERMINAL = {common_pb2.JOB_STATE_FINISHED, common_pb2.JOB_STATE_FAILED, common_pb2.JOB_STATE_CANCELED}


class JobManagerMetrics:
    def __init__(self, dispatcher: Dispatcher, is_leader: Callable[[], bool]) -> None:
        self.dispatcher, self.is_leader = dispatcher, is_leader
        self._process = psutil.Process()

    def collect(self) -> Iterator[Sample]:
        leader = self.is_leader()
        yield Sample("jobmanager_isLeader", "1 on the leading JobManager", (), 1.0 if leader else 0.0)
        try:
            yield Sample("jobmanager_Status_Python_Memory_RSS", "resident bytes", (), self._process.memory_info().rss)
        except psutil.Error:
            pass
        if not leader:
            return
        try:
            overview = self.dispatcher.cluster_overview()
            infos = self._running_jobs()
        except Exception:
            log.debug("cluster metrics unavailable", exc_info=True)
            return
        yield Sample("jobmanager_numRegisteredTaskManagers", "TaskManagers registered", (), len(overview.taskmanagers))
        yield Sample("jobmanager_taskSlotsTotal", "slots of the registered TaskManagers", (), overview.total_slots)
        yield Sample("jobmanager_taskSlotsAvailable", "slots without a job", (), overview.free_slots)
        yield Sample("jobmanager_numRunningJobs", "jobs not ended", (), len(infos))
        for info in infos:
            labels = (("job_id", info.job_id), ("job_name", info.name))
            for field, (name, help_text) in JOB_METRICS.items():
                yield Sample(f"jobmanager_job_{name}", help_text, labels, float(getattr(info.metrics, field)))

    def _running_jobs(self) -> list[common_pb2.JobInfo]:
        infos: list[common_pb2.JobInfo] = []
        token = ""
        for _ in range(100):  # at most 100 pages of 1000
            page, token = self.dispatcher.list_jobs(1000, token)
            infos += [i for i in page if i.state not in TERMINAL]
            if not token:
                break
        return infos
