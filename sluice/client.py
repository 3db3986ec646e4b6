"""Python client for the leading JobManager.

Finds the leader from ZooKeeper (via cluster.json or a connect string) or
from a list of JobManager addresses, and follows it through a failover:
calls that fail with UNAVAILABLE re-resolve the leader and retry.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import grpc

from sluice.states import JobStatus, from_proto
from sluice.v1 import common_pb2, jobmanager_pb2, jobmanager_pb2_grpc


class SluiceError(Exception):
    """A client call failed; the message says what to fix."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code


class JobFailed(SluiceError):
    """An attached job ended FAILED or CANCELED."""


def read_cluster_json(cluster_dir: str) -> dict:
    path = os.path.join(cluster_dir, "cluster.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise SluiceError(
            f"no cluster found: {path} does not exist. Start one with `sluice cluster start --dir {cluster_dir}`, "
            "or point at one with --cluster-dir, --zookeeper or --jobmanager") from None


class JobManagerClient:
    def __init__(self, zookeeper: str | None = None, cluster_id: str = "default",
                 jobmanagers: list[str] | None = None, timeout: float = 30.0):
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
    def from_context(cls, ctx: dict[str, Any]) -> "JobManagerClient":
        """From CLI-style options: jobmanager, zookeeper (+cluster_id), or cluster_dir."""
        if ctx.get("jobmanager"):
            return cls(jobmanagers=[a.strip() for a in ctx["jobmanager"].split(",") if a.strip()])
        if ctx.get("zookeeper"):
            return cls(zookeeper=ctx["zookeeper"], cluster_id=ctx.get("cluster_id") or "default")
        info = read_cluster_json(ctx.get("cluster_dir") or os.environ.get("SLUICE_CLUSTER_DIR", ".sluice"))
        return cls(zookeeper=info["zookeeper"], cluster_id=info["cluster_id"],
                   jobmanagers=[p["address"] for p in info["processes"] if p["role"] == "jobmanager"])

    # -- leader resolution ----------------------------------------------------
    def _resolve(self) -> str:
        if self.zookeeper:
            from sluice.zk.leader_retrieval import find_leader
            try:
                address, _ = find_leader(self.zookeeper, self.cluster_id, timeout=min(self.timeout, 15.0))
                return address
            except Exception as exc:  # noqa: BLE001 — fall back to the address list
                if not self.jobmanagers:
                    raise SluiceError(f"cannot find the leading JobManager: {exc}", grpc.StatusCode.UNAVAILABLE) from None
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

    def _call(self, fn: Callable[[jobmanager_pb2_grpc.JobManagerStub], Any]) -> Any:
        """Run `fn(stub)`; on UNAVAILABLE find the leader again and retry until `timeout`."""
        deadline = time.monotonic() + self.timeout
        delay = 0.1
        while True:
            try:
                return fn(self._connect())
            except grpc.RpcError as err:
                if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise SluiceError(err.details() or str(err.code()), err.code()) from None
                last = f"{self._address}: {err.details()}"
            except SluiceError as err:
                if err.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                last = str(err)
            self._reset()
            if time.monotonic() + delay > deadline:
                raise SluiceError(f"the JobManager is unavailable ({last})", grpc.StatusCode.UNAVAILABLE)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- calls ----------------------------------------------------------------
    def submit(self, job: common_pb2.JobGraph) -> str:
        return self._call(lambda s: s.SubmitJob(jobmanager_pb2.SubmitJobRequest(job=job), timeout=30)).job_id

    def get(self, job_id: str) -> common_pb2.JobInfo:
        return self._call(lambda s: s.GetJob(jobmanager_pb2.GetJobRequest(job_id=job_id), timeout=10))

    def list(self) -> list[common_pb2.JobInfo]:
        return list(self._call(lambda s: s.ListJobs(jobmanager_pb2.ListJobsRequest(), timeout=10)).jobs)

    def cancel(self, job_id: str) -> JobStatus:
        """Request a cancel; the job's state right after it (CANCELED, or RUNNING while tasks stop)."""
        resp = self._call(lambda s: s.CancelJob(jobmanager_pb2.CancelJobRequest(job_id=job_id), timeout=10))
        return from_proto(JobStatus, resp.state)

    def cluster(self) -> jobmanager_pb2.ClusterOverview:
        return self._call(lambda s: s.GetCluster(jobmanager_pb2.GetClusterRequest(), timeout=10))

    def wait(self, job_id: str, timeout: float | None = None, progress: bool = False,
             poll: float = 0.5) -> common_pb2.JobInfo:
        """Poll until the job is FINISHED, FAILED or CANCELED."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_line = None
        while True:
            info = self.get(job_id)
            state = from_proto(JobStatus, info.state)
            if progress:
                line = f"{state}" + (f" — {info.message}" if info.message else "")
                if line != last_line:
                    print(f"  {job_id}: {line}", flush=True, file=__import__("sys").stderr)
                    last_line = line
            if state.terminal:
                return info
            if deadline is not None and time.monotonic() > deadline:
                raise SluiceError(f"job {job_id} still {state} after {timeout}s")
            time.sleep(poll)

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> "JobManagerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _leader_hint(err: grpc.RpcError) -> str | None:
    """A standby answers UNAVAILABLE with 'leader=<host:port>' in its details."""
    details = err.details() or ""
    if err.code() == grpc.StatusCode.UNAVAILABLE and "leader=" in details:
        hint = details.split("leader=", 1)[1].split()[0].strip(";,")
        return hint or None
    return None
