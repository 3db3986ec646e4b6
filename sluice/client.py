"""Python client for the leading JobManager.

Finds the leader from ZooKeeper (via cluster.json or a connect string) or
from a list of JobManager addresses, and follows it through a failover:
calls that fail with UNAVAILABLE or DEADLINE_EXCEEDED re-resolve the leader
and retry (tenacity, exponential backoff with jitter). A call the leader
refused for its client-call limits (RESOURCE_EXHAUSTED with a retry hint,
sluice/rpc_admission.py) is retried the same way on the same channel.

How long it retries depends on what it has seen. Until a JobManager answered
or ZooKeeper named a leader, nothing says a cluster is there (nothing
listening, ZooKeeper down or without a leader, a dead address): the client
gives up after `connect_timeout` (`CONNECT_TIMEOUT`, 5 s; `--timeout` on the
CLI) with an error saying so. Once it has seen a JobManager, an unavailable
one is a failover in progress: it retries for `timeout` (30 s) — a new
leader takes a ZooKeeper session timeout to be elected.
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

from sluice import config, rpc
from sluice.cluster_file import ClusterFile, ClusterFileError, ClusterFileNotFound
from sluice.security.tls import TlsError, TlsFiles
from sluice.states import JobStatus, ReconfigurationStatus, SavepointStatus, from_proto
from sluice.v1 import common_pb2, jobmanager_pb2, jobmanager_pb2_grpc

log = logging.getLogger("sluice.client")
# kazoo logs every refused connection while the client looks for ZooKeeper; the client reports
# the outcome itself (SluiceError). Without logging set up, nothing of kazoo's reaches stderr.
logging.getLogger("kazoo.client").addHandler(logging.NullHandler())
R = TypeVar("R")
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
CONNECT_TIMEOUT = 5.0  # seconds to find a JobManager before a cluster has been seen (`--timeout`)
PROBE_TIMEOUT = 2.0  # seconds for one JobManager of an address list to answer


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


class _Busy(_LeaderUnavailable):
    """The leader refused the call for its client-call limits (RESOURCE_EXHAUSTED with a
    retry hint, sluice/rpc_admission.py): retried like an unavailable leader, on the same
    channel, until the timeout."""


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
        connect_timeout: float = CONNECT_TIMEOUT,
        zookeeper_auth_file: str | None = None,
        tls: TlsFiles | None = None,
        token: str | None = None,
    ):
        """`connect_timeout`: how long to look for a JobManager until one answered or ZooKeeper
        named a leader; `timeout`: how long to follow a failover after that (both in seconds).
        `tls`: the cluster's CA and a client certificate (None: plaintext, an `--insecure`
        cluster); `token`: a bearer token instead of the certificate (with `tls` holding the CA
        only, and `jobmanagers` the JobManagers' token ports; docs/security.md)."""
        if not zookeeper and not jobmanagers:
            raise SluiceError("give a ZooKeeper connect string or JobManager addresses")
        if not connect_timeout > 0 or not timeout > 0:
            raise SluiceError(f"timeouts must be positive, got connect_timeout={connect_timeout}, timeout={timeout}")
        self.zookeeper = zookeeper
        self.cluster_id = cluster_id
        self.zookeeper_auth_file = zookeeper_auth_file  # the cluster's ZooKeeper credentials (sluice/zk/auth.py)
        self.tls, self.token = tls, token
        self.jobmanagers = jobmanagers or []
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._address: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: jobmanager_pb2_grpc.JobManagerStub | None = None
        self._seen_cluster = False  # a JobManager answered, or ZooKeeper named a leader
        self._call_started = 0.0
        self._answered_by: str | None = None  # the JobManager that answered last
        # Told (on the caller's thread) when another JobManager answers than the last one, and
        # when a call first finds its JobManager unavailable; `wait(progress=True)` prints them.
        self.on_leader_change: Callable[[str], None] | None = None
        self.on_unavailable: Callable[[str], None] | None = None

    @classmethod
    def from_context(cls, ctx: dict[str, Any]) -> JobManagerClient:
        """From CLI-style options: jobmanager, zookeeper (+cluster_id), or cluster_dir; and
        timeout (the connect timeout, seconds)."""
        connect_timeout = float(ctx.get("timeout") or CONNECT_TIMEOUT)
        if ctx.get("jobmanager"):
            return cls(
                jobmanagers=[a.strip() for a in ctx["jobmanager"].split(",") if a.strip()],
                connect_timeout=connect_timeout,
                **_security(ctx),
            )
        if ctx.get("zookeeper"):
            return cls(
                zookeeper=ctx["zookeeper"],
                cluster_id=ctx.get("cluster_id") or config.CLUSTER_ID.default,
                connect_timeout=connect_timeout,
                zookeeper_auth_file=ctx.get("zk_auth_file") or os.environ.get(config.ZOOKEEPER_AUTH_FILE.env) or None,
                **_security(ctx),
            )
        info = read_cluster_json(ctx.get("cluster_dir") or os.environ.get("SLUICE_CLUSTER_DIR", ".sluice"))
        return cls(
            zookeeper=info.zookeeper,
            cluster_id=info.cluster_id,
            jobmanagers=[p.address for p in info.of_role("jobmanager")],
            connect_timeout=connect_timeout,
            zookeeper_auth_file=info.zookeeper_auth_file,
            **_security(ctx, info.tls),
        )

    @property
    def budget(self) -> float:
        """Seconds a call keeps retrying: `connect_timeout` until a cluster was seen, then `timeout`."""
        return self.timeout if self._seen_cluster else min(self.connect_timeout, self.timeout)

    def _remaining(self) -> float:
        return max(0.0, self._call_started + self.budget - time.monotonic())

    # -- leader resolution ----------------------------------------------------
    def _resolve(self) -> str:
        """The leader's address, within the time left of the current call."""
        if self.zookeeper:
            from sluice.zk.leader_retrieval import find_leader

            left = self._remaining() * (0.6 if self.jobmanagers else 1.0)  # leave time for the address list
            try:
                address, _ = find_leader(
                    self.zookeeper,
                    self.cluster_id,
                    timeout=round(max(0.5, min(left, 15.0)), 1),
                    auth_file=self.zookeeper_auth_file,
                )
                self._seen_cluster = True
                return address
            except Exception as exc:  # noqa: BLE001 — fall back to the address list
                if not self.jobmanagers:
                    raise SluiceError(
                        f"cannot find the leading JobManager: {exc}", grpc.StatusCode.UNAVAILABLE
                    ) from None
        for address in self.jobmanagers:
            channel = rpc.channel(address, self.tls, self.token)
            try:
                jobmanager_pb2_grpc.JobManagerStub(channel).ListJobs(
                    jobmanager_pb2.ListJobsRequest(page_size=1),
                    timeout=max(0.2, min(PROBE_TIMEOUT, self._remaining())),
                )
                self._seen_cluster = True
                return address
            except grpc.RpcError as err:
                if _from_standby(err):
                    self._seen_cluster = True
                leader = _leader_hint(err) if self.token is None else None  # hints name certificate ports
                if leader:
                    return leader
            finally:
                channel.close()
        raise SluiceError(f"no JobManager at {', '.join(self.jobmanagers)} is leading", grpc.StatusCode.UNAVAILABLE)

    def _connect(self) -> jobmanager_pb2_grpc.JobManagerStub:
        if self._stub is None:
            self._address = self._resolve()
            self._channel = rpc.channel(self._address, self.tls, self.token)
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
        within `budget` of the first. `what` (the call and its job id) names it in the log."""
        self._call_started = time.monotonic()
        retrying = Retrying(
            stop=lambda state: stop_before_delay(self.budget)(state),  # never sleep past the budget
            wait=wait_exponential_jitter(multiplier=0.1, max=1.0, jitter=0.1),  # "initial" is deprecated in 9.2
            retry=retry_if_exception_type(_LeaderUnavailable),
            before_sleep=lambda state: self._before_retry(what, state),
            reraise=True,
        )
        try:
            return retrying(self._attempt, fn)
        except _Busy as exc:
            raise SluiceError(
                f"the JobManager is busy ({exc.reason}); still refused after {self.budget:g}s",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            ) from None
        except _LeaderUnavailable as exc:
            if not self._seen_cluster:
                raise SluiceError(
                    f"cannot reach a JobManager within {self.budget:g}s ({exc.reason}). Is the cluster running? "
                    "(--timeout SECONDS waits longer)",
                    grpc.StatusCode.UNAVAILABLE,
                ) from None
            raise SluiceError(
                f"the JobManager is unavailable ({exc.reason}); no leader answered within {self.budget:g}s",
                grpc.StatusCode.UNAVAILABLE,
            ) from None

    def _before_retry(self, what: str, state: RetryCallState) -> None:
        _log_retry(what, state)
        if self.on_unavailable is not None and state.attempt_number == 1:
            exc = state.outcome.exception() if state.outcome is not None else None
            self.on_unavailable(str(exc))

    def _answered(self) -> None:
        """The JobManager at `_address` answered: a cluster is there; tell a leader change."""
        self._seen_cluster = True
        previous, self._answered_by = self._answered_by, self._address
        if previous is not None and self._address is not None and self._address != previous:
            log.info("leader changed: now %s (was %s)", self._address, previous)
            if self.on_leader_change is not None:
                self.on_leader_change(self._address)

    def _attempt(self, fn: Callable[[jobmanager_pb2_grpc.JobManagerStub], R]) -> R:
        """One try of `fn` against the leader; _LeaderUnavailable when another may succeed."""
        try:
            result = fn(self._connect())
            self._answered()
            return result
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and _has_pushback(err):
                self._answered()
                raise _Busy(f"{self._address}: {err.details()}") from None
            if err.code() not in RETRYABLE:
                self._answered()
                raise SluiceError(err.details() or str(err.code()), err.code()) from None
            if _from_standby(err):
                self._seen_cluster = True
            reason = f"{self._address}: {err.details()}"
        except SluiceError as err:
            if err.code != grpc.StatusCode.UNAVAILABLE:
                raise
            reason = str(err)
        self._reset()
        raise _LeaderUnavailable(reason)

    # -- calls ----------------------------------------------------------------
    def submit(self, job: common_pb2.JobGraph, restore_path: str = "", allow_non_restored_state: bool = False) -> str:
        """Submit `job`; with `restore_path`, it starts from that savepoint (docs/savepoints.md)."""
        request = jobmanager_pb2.SubmitJobRequest(
            job=job, restore_path=restore_path, allow_non_restored_state=allow_non_restored_state
        )
        reply: jobmanager_pb2.SubmitJobResponse = self._call(
            f"SubmitJob {job.name!r}", lambda s: s.SubmitJob(request, timeout=30)
        )
        return reply.job_id

    def get(self, job_id: str) -> common_pb2.JobInfo:
        request = jobmanager_pb2.GetJobRequest(job_id=job_id)
        info: common_pb2.JobInfo = self._call(f"GetJob {job_id}", lambda s: s.GetJob(request, timeout=10))
        return info

    def list(self, page_size: int = 0) -> list[common_pb2.JobInfo]:
        """Every job, oldest first, as summaries (no tasks, checkpoints or exception history:
        `get` has them), read page by page (`page_size` 0: the server's default)."""
        jobs: list[common_pb2.JobInfo] = []
        token = ""
        while True:
            reply = self._list_page(jobmanager_pb2.ListJobsRequest(page_size=page_size, page_token=token))
            jobs.extend(reply.jobs)
            token = reply.next_page_token
            if not token:
                return jobs

    def _list_page(self, request: jobmanager_pb2.ListJobsRequest) -> jobmanager_pb2.ListJobsResponse:
        reply: jobmanager_pb2.ListJobsResponse = self._call("ListJobs", lambda s: s.ListJobs(request, timeout=10))
        return reply

    def cancel(self, job_id: str) -> JobStatus:
        """Request a cancel; the job's state right after it (CANCELED, or RUNNING while tasks stop)."""
        request = jobmanager_pb2.CancelJobRequest(job_id=job_id)
        reply: jobmanager_pb2.CancelJobResponse = self._call(
            f"CancelJob {job_id}", lambda s: s.CancelJob(request, timeout=10)
        )
        return from_proto(JobStatus, reply.state)

    def trigger_savepoint(self, job_id: str, directory: str = "", stop: bool = False) -> str:
        """Request a savepoint (`stop`: stop the job with it); the request id (`wait_savepoint`)."""
        if stop:
            stop_request = jobmanager_pb2.StopJobRequest(job_id=job_id, target_directory=directory)
            stopped: jobmanager_pb2.StopJobResponse = self._call(
                f"StopJob {job_id}", lambda s: s.StopJob(stop_request, timeout=10)
            )
            return stopped.request_id
        request = jobmanager_pb2.TriggerSavepointRequest(job_id=job_id, target_directory=directory)
        reply: jobmanager_pb2.TriggerSavepointResponse = self._call(
            f"TriggerSavepoint {job_id}", lambda s: s.TriggerSavepoint(request, timeout=10)
        )
        return reply.request_id

    def wait_savepoint(self, job_id: str, request_id: str, timeout: float = 600.0, poll: float = 0.2) -> str:
        """The path of savepoint `request_id` once it completed; SluiceError when it failed, the
        job ended without it, or `timeout` seconds passed. A stop waits for the job to end too."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.get(job_id)
            request = next((r for r in info.savepoints if r.request_id == request_id), None)
            state = from_proto(JobStatus, info.state)
            if request is None:
                raise SluiceError(f"job {job_id} has no savepoint request {request_id} (a JobManager failover?)")
            status = from_proto(SavepointStatus, request.status)
            if status == SavepointStatus.FAILED:
                raise SluiceError(f"savepoint of job {job_id} failed: {request.failure}")
            if status == SavepointStatus.COMPLETED and (not request.stop or state.terminal):
                if request.stop and state != JobStatus.FINISHED:
                    raise SluiceError(f"job {job_id} ended {state} after its savepoint {request.path}")
                return request.path
            if state.terminal and status != SavepointStatus.COMPLETED:
                raise SluiceError(f"job {job_id} ended {state} before its savepoint completed")
            if time.monotonic() > deadline:
                raise SluiceError(f"savepoint of job {job_id} not done after {timeout:g}s ({status})")
            time.sleep(poll)

    def reconfigure(
        self,
        job_id: str,
        operator: str,
        parallelism: int = 0,
        new_job: common_pb2.JobGraph | None = None,
        rebalance_keys: bool = False,
    ) -> str:
        """Start a live reconfiguration (docs/reconfiguration.md); its id (`wait_reconfiguration`)."""
        request = jobmanager_pb2.ReconfigureJobRequest(
            job_id=job_id, operator_uid=operator, parallelism=parallelism, rebalance_keys=rebalance_keys
        )
        if new_job is not None:
            request.new_job.CopyFrom(new_job)
        reply: jobmanager_pb2.ReconfigureJobResponse = self._call(
            f"ReconfigureJob {job_id}", lambda s: s.ReconfigureJob(request, timeout=30)
        )
        return reply.reconfiguration_id

    def wait_reconfiguration(
        self, job_id: str, rid: str, timeout: float = 600.0, poll: float = 0.2
    ) -> common_pb2.ReconfigurationInfo:
        """Reconfiguration `rid` once it ended (COMPLETED, FAILED or ABORTED); SluiceError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.get(job_id)
            r = next((r for r in info.reconfigurations if r.id == rid), None)
            if r is None:
                raise SluiceError(f"job {job_id} has no reconfiguration {rid} (a JobManager failover?)")
            if from_proto(ReconfigurationStatus, r.status) != ReconfigurationStatus.IN_PROGRESS:
                return r
            if time.monotonic() > deadline:
                raise SluiceError(f"reconfiguration {rid} of job {job_id} not done after {timeout:g}s")
            time.sleep(poll)

    def job_graph(self, job_id: str) -> common_pb2.JobGraph:
        request = jobmanager_pb2.GetJobGraphRequest(job_id=job_id)
        job: common_pb2.JobGraph = self._call(f"GetJobGraph {job_id}", lambda s: s.GetJobGraph(request, timeout=30))
        return job

    def cluster(self) -> jobmanager_pb2.ClusterOverview:
        overview: jobmanager_pb2.ClusterOverview = self._call(
            "GetCluster", lambda s: s.GetCluster(jobmanager_pb2.GetClusterRequest(), timeout=10)
        )
        return overview

    def wait(
        self, job_id: str, timeout: float | None = None, progress: bool = False, poll: float = 0.5
    ) -> common_pb2.JobInfo:
        """Poll until the job is FINISHED, FAILED or CANCELED, following the leader through a
        failover. With `progress`, print to stderr each change of state or message, each new
        entry of the job's exception history, and `leader changed: now <address>`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_line = None
        printed: set[tuple[int, int, str, str]] = set()

        def say(line: str) -> None:
            print(f"  {job_id}: {line}", flush=True, file=sys.stderr)

        hooks = self.on_leader_change, self.on_unavailable
        if progress:
            self.on_leader_change = lambda address: say(f"leader changed: now {address}")
            self.on_unavailable = lambda reason: say(f"JobManager unavailable ({reason}); finding the leader")
        try:
            while True:
                info = self.get(job_id)
                state = from_proto(JobStatus, info.state)
                if progress:
                    for e in info.exceptions:
                        key = (e.time_ms, e.attempt, e.task, e.cause)
                        if key not in printed:
                            printed.add(key)
                            say(_exception_line(e))
                    line = f"{state}" + (f" — {info.message}" if info.message else "")
                    if line != last_line:
                        say(line)
                        last_line = line
                if state.terminal:
                    return info
                if deadline is not None and time.monotonic() > deadline:
                    raise SluiceError(f"job {job_id} still {state} after {timeout}s")
                time.sleep(poll)
        finally:
            self.on_leader_change, self.on_unavailable = hooks

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> JobManagerClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _security(ctx: dict[str, Any], cluster_tls: TlsFiles | None = None) -> dict[str, Any]:
    """`tls` and `token` for a client: the CLI's --tls-ca/--tls-cert/--tls-key/--token-file
    (ctx keys tls_ca, tls_cert, tls_key, token_file), else the variables SLUICE_SECURITY_SSL_CA,
    _CERT, _KEY and SLUICE_SECURITY_TOKEN_FILE, else cluster.json's `tls`."""
    given = {
        key: ctx.get(key) or os.environ.get(option.env) or None
        for key, option in (
            ("tls_ca", config.SECURITY_SSL_CA),
            ("tls_cert", config.SECURITY_SSL_CERT),
            ("tls_key", config.SECURITY_SSL_KEY),
            ("token_file", config.SECURITY_TOKEN_FILE),
        )
    }
    token = None
    if given["token_file"]:
        try:
            with open(given["token_file"], encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise SluiceError(f"cannot read the token file {given['token_file']}: {exc.strerror or exc}") from None
    if not given["tls_ca"]:
        if given["tls_cert"] or given["tls_key"] or token:
            raise SluiceError("--tls-cert, --tls-key and --token-file need --tls-ca, the cluster's CA certificate")
        return {"tls": cluster_tls}
    try:
        tls = TlsFiles(given["tls_ca"], given["tls_cert"], given["tls_key"])
        tls.read()
    except TlsError as exc:
        raise SluiceError(str(exc)) from None
    if tls.cert is None and token is None:
        raise SluiceError("--tls-ca needs --tls-cert and --tls-key (a client certificate) or --token-file")
    return {"tls": tls, "token": token}


def _has_pushback(err: grpc.RpcError) -> bool:
    """Whether a refused call carries gRPC's retry hint (an admission limit, not a hard error)."""
    trailers = getattr(err, "trailing_metadata", lambda: None)() or ()
    return any(key == "grpc-retry-pushback-ms" for key, _value in trailers)


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


def _exception_line(e: common_pb2.ExceptionEntry) -> str:
    """One exception-history entry as the attached CLI prints it."""
    where = f" in task {e.task}" if e.task else ""
    return f"attempt {e.attempt} failed{where}: {e.cause} ({'restarting' if e.restarted else 'not restarted'})"


def _from_standby(err: grpc.RpcError) -> bool:
    """A standby JobManager answered (jobmanager/servicers.py, `translated`): a cluster is there."""
    return err.code() == grpc.StatusCode.UNAVAILABLE and "standby" in (err.details() or "")


def _leader_hint(err: grpc.RpcError) -> str | None:
    """A standby answers UNAVAILABLE with 'leader=<host:port>' in its details."""
    details = err.details() or ""
    if err.code() == grpc.StatusCode.UNAVAILABLE and "leader=" in details:
        hint = details.split("leader=", 1)[1].split()[0].strip(";,")
        return hint or None
    return None
