"""Python client for the leading JobManager.

Finds the leader from ZooKeeper (via cluster.json or a connect string) or
from a list of JobManager addresses, and follows it through a failover:
calls that fail with UNAVAILABLE or DEADLINE_EXCEEDED re-resolve the leader
and retry (tenacity, exponential backoff with jitter) until the client's
`timeout`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_before_delay, wait_exponential_jitter

from sluice import config
from sluice.cluster_file import ClusterFile, ClusterFileError, ClusterFileNotFound
from sluice.states import JobStatus, from_proto
from sluice.v1 import common_pb2, jobmanager_pb2, jobmanager_pb2_grpc

log = logging.getLogger("sluice.client")
R = TypeVar("R")
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class SluiceError(Exception):
    """A client call failed; the message says what to fix."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code


class JobFailed(SluiceError):
    """An attached job ended FAILED or CANCELED."""


class _LeaderUnavailable(Exception):
    """One attempt found no serving leader; `reason` says why (retried until the timeout)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def read_cluster_json(cluster_dir: str) -> ClusterFile:
    """The cluster.json of `cluster_dir` (sluice/cluster_file.py), or a SluiceError saying how to get one."""
    try:
        return ClusterFile.read(cluster_dir)
    except ClusterFileNotFound as exc:
        raise SluiceError(
            f"no cluster found: {exc.path} does not exist. Start one with `sluice cluster start --dir {cluster_dir}`, "
            "or point at one with --cluster-dir, --zookeeper or --jobmanager"
        ) from None
    except ClusterFileError as exc:
        raise SluiceError(str(exc)) from None


class JobManagerClient:
    def __init__(
        self,
        zookeeper: str | None = None,
        cluster_id: str = config.CLUSTER_ID.default,
        jobmanagers: list[str] | None = None,
        timeout: float = 30.0,
    ):
        if not zookeeper and not jobmanagers:
            raise SluiceError("give a ZooKeeper connect string or JobManager addresses")
        self.zookeeper = zookeeper
        self.cluster_id = cluster_id
        self.jobmanagers = jobmanagers or []
        self.timeout = timeout
        self._address: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: jobmanager_pb2_grpc.JobManagerStub | None = None

    @classmethod
    def from_context(cls, ctx: dict[str, Any]) -> JobManagerClient:
        """From CLI-style options: jobmanager, zookeeper (+cluster_id), or cluster_dir."""
        if ctx.get("jobmanager"):
            return cls(jobmanagers=[a.strip() for a in ctx["jobmanager"].split(",") if a.strip()])
        if ctx.get("zookeeper"):
            return cls(zookeeper=ctx["zookeeper"], cluster_id=ctx.get("cluster_id") or config.CLUSTER_ID.default)
        info = read_cluster_json(ctx.get("cluster_dir") or os.environ.get("SLUICE_CLUSTER_DIR", ".sluice"))
        return cls(
            zookeeper=info.zookeeper,
            cluster_id=info.cluster_id,
            jobmanagers=[p.address for p in info.of_role("jobmanager")],
        )

    # -- leader resolution ----------------------------------------------------
    def _resolve(self) -> str:
        if self.zookeeper:
            from sluice.zk.leader_retrieval import find_leader

            try:
                address, _ = find_leader(self.zookeeper, self.cluster_id, timeout=min(self.timeout, 15.0))
                return address
            except Exception as exc:  # noqa: BLE001 — fall back to the address list
                if not self.jobmanagers:
                    raise SluiceError(
                        f"cannot find the leading JobManager: {exc}", grpc.StatusCode.UNAVAILABLE
                    ) from None
        for address in self.jobmanagers:
            channel = grpc.insecure_channel(address)
            try:
                jobmanager_pb2_grpc.JobManagerStub(channel).ListJobs(jobmanager_pb2.ListJobsRequest(), timeout=2)
                return address
            except grpc.RpcError as err:
                leader = _leader_hint(err)
                if leader:
                    return leader
            finally:
                channel.close()
        raise SluiceError(f"no JobManager at {', '.join(self.jobmanagers)} is leading", grpc.StatusCode.UNAVAILABLE)

    def _connect(self) -> jobmanager_pb2_grpc.JobManagerStub:
        if self._stub is None:
            self._address = self._resolve()
            self._channel = grpc.insecure_channel(self._address)
            self._stub = jobmanager_pb2_grpc.JobManagerStub(self._channel)
        return self._stub

    def _reset(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None

    @property
    def leader(self) -> str | None:
        return self._address

    def _call(self, what: str, fn: Callable[[jobmanager_pb2_grpc.JobManagerStub], R]) -> R:
        """Run `fn(stub)`; on UNAVAILABLE or DEADLINE_EXCEEDED find the leader again and retry,
        backing off 0.1 s doubling to 1 s with jitter, while the next attempt would start
        within `timeout` of the first. `what` (the call and its job id) names it in the log."""
        retrying = Retrying(
            stop=stop_before_delay(self.timeout),  # never sleep past the caller's timeout
            wait=wait_exponential_jitter(multiplier=0.1, max=1.0, jitter=0.1),  # "initial" is deprecated in 9.2
            retry=retry_if_exception_type(_LeaderUnavailable),
            before_sleep=lambda state: _log_retry(what, state),
            reraise=True,
        )
        try:
            return retrying(self._attempt, fn)
        except _LeaderUnavailable as exc:
            raise SluiceError(f"the JobManager is unavailable ({exc.reason})", grpc.StatusCode.UNAVAILABLE) from None

    def _attempt(self, fn: Callable[[jobmanager_pb2_grpc.JobManagerStub], R]) -> R:
        """One try of `fn` against the leader; _LeaderUnavailable when another may succeed."""
        try:
            return fn(self._connect())
        except grpc.RpcError as err:
            if err.code() not in RETRYABLE:
                raise SluiceError(err.details() or str(err.code()), err.code()) from None
            reason = f"{self._address}: {err.details()}"
        except SluiceError as err:
            if err.code != grpc.StatusCode.UNAVAILABLE:
                raise
            reason = str(err)
        self._reset()
        raise _LeaderUnavailable(reason)

    # -- calls ----------------------------------------------------------------
    def submit(self, job: common_pb2.JobGraph) -> str:
        request = jobmanager_pb2.SubmitJobRequest(job=job)
        reply: jobmanager_pb2.SubmitJobResponse = self._call(
            f"SubmitJob {job.name!r}", lambda s: s.SubmitJob(request, timeout=30)
        )
        return reply.job_id

    def get(self, job_id: str) -> common_pb2.JobInfo:
        request = jobmanager_pb2.GetJobRequest(job_id=job_id)
        info: common_pb2.JobInfo = self._call(f"GetJob {job_id}", lambda s: s.GetJob(request, timeout=10))
        return info

    def list(self) -> list[common_pb2.JobInfo]:
        reply: jobmanager_pb2.ListJobsResponse = self._call(
            "ListJobs", lambda s: s.ListJobs(jobmanager_pb2.ListJobsRequest(), timeout=10)
        )
        return list(reply.jobs)

    def cancel(self, job_id: str) -> JobStatus:
        """Request a cancel; the job's state right after it (CANCELED, or RUNNING while tasks stop)."""
        request = jobmanager_pb2.CancelJobRequest(job_id=job_id)
        reply: jobmanager_pb2.CancelJobResponse = self._call(
            f"CancelJob {job_id}", lambda s: s.CancelJob(request, timeout=10)
        )
        return from_proto(JobStatus, reply.state)

    def cluster(self) -> jobmanager_pb2.ClusterOverview:
        overview: jobmanager_pb2.ClusterOverview = self._call(
            "GetCluster", lambda s: s.GetCluster(jobmanager_pb2.GetClusterRequest(), timeout=10)
        )
        return overview

    def wait(
        self, job_id: str, timeout: float | None = None, progress: bool = False, poll: float = 0.5
    ) -> common_pb2.JobInfo:
        """Poll until the job is FINISHED, FAILED or CANCELED."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_line = None
        while True:
            info = self.get(job_id)
            state = from_proto(JobStatus, info.state)
            if progress:
                line = f"{state}" + (f" — {info.message}" if info.message else "")
                if line != last_line:
                    print(f"  {job_id}: {line}", flush=True, file=sys.stderr)
                    last_line = line
            if state.terminal:
                return info
            if deadline is not None and time.monotonic() > deadline:
                raise SluiceError(f"job {job_id} still {state} after {timeout}s")
            time.sleep(poll)

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> JobManagerClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _log_retry(what: str, state: RetryCallState) -> None:
    """tenacity's before_sleep: what the client waits for, and how long."""
    exc = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    log.debug(
        "%s: no serving JobManager (%s); finding the leader again in %.2fs (attempt %d)",
        what,
        exc,
        wait,
        state.attempt_number + 1,
    )


def _leader_hint(err: grpc.RpcError) -> str | None:
    """A standby answers UNAVAILABLE with 'leader=<host:port>' in its details."""
    details = err.details() or ""
    if err.code() == grpc.StatusCode.UNAVAILABLE and "leader=" in details:
        hint = details.split("leader=", 1)[1].split()[0].strip(";,")
        return hint or None
    return None
