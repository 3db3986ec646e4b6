"""ListJobs pages and the cluster overview: pure functions of what the dispatcher holds.

A page lists job summaries oldest first (by submission time, then job id); its token is the
(submission time, job id) of its last job, and the next page continues after it. A summary
is the job's `JobInfo` without tasks, checkpoints, savepoints, reconfigurations and
exception history, its failure cut to `SUMMARY_FAILURE_LIMIT` characters.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobmanager.errors import InvalidRequest
from jobmanager.master.exception_history import bounded
from jobmanager.scheduler import slot_pool as sp
from sluice.v1 import common_pb2, jobmanager_pb2

DEFAULT_PAGE_SIZE = 100  # ListJobs without a page_size
MAX_PAGE_SIZE = 1000  # a larger page_size is served as this many
SUMMARY_FAILURE_LIMIT = 1024  # characters of a failure a ListJobs summary keeps

PageKey = tuple[int, str]  # (submission time, job id)


def page_size(requested: int) -> int:
    """The page size served for a requested one (0: the default); InvalidRequest below 0."""
    if requested < 0:
        raise InvalidRequest("page_size", f"must be >= 0, got {requested}")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def page_position(token: str) -> PageKey:
    """The (submission time, job id) a ListJobs page token continues after."""
    submitted, sep, job_id = token.partition("/")
    if not sep or not submitted.isdigit() or not job_id or len(token) > 128:
        raise InvalidRequest("page_token", "not a token a ListJobs reply returned; leave it empty for the first page")
    return int(submitted), job_id


def page(keys: Iterable[PageKey], size: int, after: PageKey | None) -> tuple[list[PageKey], str]:
    """The keys of one page, and the token of the next ("" after the last)."""
    remaining = sorted(k for k in keys if after is None or k > after)
    chosen, more = remaining[:size], len(remaining) > size
    return chosen, f"{chosen[-1][0]}/{chosen[-1][1]}" if more else ""


def summary(info: common_pb2.JobInfo) -> common_pb2.JobInfo:
    """`info` made a summary, in place."""
    for detail in ("tasks", "checkpoints", "exceptions", "savepoints", "reconfigurations"):
        info.ClearField(detail)
    info.failure = bounded(info.failure, SUMMARY_FAILURE_LIMIT)
    return info


def cluster_overview(pool: sp.SlotPool, leader: str, now: float) -> jobmanager_pb2.ClusterOverview:
    """The slot pool's TaskManagers and slots, as GetClusterOverview answers."""
    out = jobmanager_pb2.ClusterOverview(leader=leader, total_slots=pool.total_slots(), free_slots=pool.free_slots())
    for tm in pool.taskmanagers():
        out.taskmanagers.add(
            resource_id=tm.resource_id,
            address=tm.address,
            slots=tm.slots,
            free_slots=tm.free,
            seconds_since_heartbeat=max(0.0, now - tm.last_heartbeat),
        )
    return out
