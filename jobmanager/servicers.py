"""gRPC servicers of the JobManager: proto in, dispatcher call, proto out.
Expected failures become status codes; nothing a client sends crashes the
process.

This is the wire edge: proto enum values become `sluice.states` members on
the way in (`from_proto`; UNSPECIFIED or an unknown value is INVALID_ARGUMENT
naming the field) and members become proto values on the way out
(`to_proto`). Everything behind it speaks members only.

It is also where requests meet their bounds (docs/protocols.md, "Bounds"):
ids and addresses of at most MAX_ID_LENGTH / MAX_ADDRESS_LENGTH characters,
at most MAX_HEARTBEAT_TASKS task entries in a heartbeat, a state handle of at
most MAX_STATE_HANDLE_BYTES and checkpoint ids and sizes that are not
negative; anything else is INVALID_ARGUMENT naming the field, before the
dispatcher sees it. Each ResourceManager call passes the caller's verified
identity (`peer_identity`; None on a plaintext server) to the dispatcher,
which binds TaskManagers and their executions to it (PERMISSION_DENIED for
anyone else). No error text carries the leader session id.
"""

from __future__ import annotations

import functools
import json
import logging
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from jobmanager.checkpoint.state_handles import MAX_STATE_HANDLE_BYTES, InvalidStateHandle
from jobmanager.declarative.translate import to_job_graph as declarative_job_graph
from jobmanager.dispatcher import Dispatcher
from jobmanager.errors import InvalidRequest, JobNotFound, NotLeader, NotOwner, StaleLeaderSession
from jobmanager.master.status import task_records
from sluice.graph import JobValidationError
from sluice.security.identity import peer_identity
from sluice.states import ExecutionState, FailureCause, from_proto, to_proto
from sluice.v1 import common_pb2, jobmanager_pb2, jobmanager_pb2_grpc

log = logging.getLogger("sluice.jobmanager.rpc")

Handler = Callable[[Any, Any, grpc.ServicerContext], Any]
E = TypeVar("E", ExecutionState, FailureCause)

MAX_ID_LENGTH = 1024  # characters of a resource, job or execution id (operator ids alone may have 256)
MAX_ADDRESS_LENGTH = 300  # characters of a host:port (a DNS name has at most 253)
MAX_HEARTBEAT_TASKS = 4096  # task entries in one heartbeat
MAX_KEY_GROUP_RECORDS = 4096  # key groups one task reports per heartbeat
MAX_HEARTBEAT_SLOTS = 4096  # slot entries in one heartbeat's slot report


class BadField(InvalidRequest):
    """A request field holds a value this JobManager does not accept."""


def bounded_id(value: str, field: str, required: bool = True) -> str:
    """`value` of request field `field`, checked: present (when `required`), not too long."""
    if required and not value:
        raise BadField(field, "is required")
    if len(value) > MAX_ID_LENGTH:
        raise BadField(field, f"{len(value)} characters, more than {MAX_ID_LENGTH}")
    return value


def host_port(value: str, field: str) -> str:
    """A `host:port` address of request field `field`."""
    if len(value) > MAX_ADDRESS_LENGTH:
        raise BadField(field, f"{len(value)} characters, more than {MAX_ADDRESS_LENGTH}")
    host, sep, port = value.rpartition(":")
    if not sep or not host or any(c.isspace() for c in host) or not (port.isdigit() and 0 < int(port) < 65536):
        raise BadField(field, f"expected host:port, got {value[:80]!r}")
    return value


def not_negative(value: int, field: str) -> int:
    if value < 0:
        raise BadField(field, f"must be >= 0, got {value}")
    return value


MAX_PATH_LENGTH = 4096  # a savepoint path or target directory


def _target(value: str) -> str:
    if len(value) > MAX_PATH_LENGTH or "\0" in value:
        raise BadField("target_directory", f"a directory or URI of at most {MAX_PATH_LENGTH} characters")
    return value


def member(cls: type[E], value: int, field: str) -> E:
    """The `sluice.states` member for a proto enum value of request field `field`."""
    try:
        return from_proto(cls, value)
    except ValueError as exc:
        raise BadField(field, str(exc)) from None


def translated(method: Handler) -> Handler:
    @functools.wraps(method)
    def wrapper(self: _Base, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except NotLeader:
            leader = self.leader_hint()
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"this JobManager is a standby; leader={leader}"
                if leader
                else "this JobManager is a standby and no leader is known yet",
            )
        except JobValidationError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid job: {exc}")
        except (InvalidRequest, InvalidStateHandle) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid request: {exc}")
        except NotOwner as exc:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except JobNotFound as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job with id {str(exc.args[0])[:MAX_ID_LENGTH]!r}")
        except StaleLeaderSession as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except ValueError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except Exception as exc:
            if context.code() is not None:  # context.abort() already ran inside the method
                raise
            log.error("%s failed: %s", method.__name__, traceback.format_exc())
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    return wrapper


class _Base:
    def __init__(self, dispatcher: Dispatcher, leader_hint: Callable[[], str | None]) -> None:
        self.dispatcher = dispatcher
        self.leader_hint = leader_hint


class JobManagerServicer(_Base, jobmanager_pb2_grpc.JobManagerServicer):
    @translated
    def SubmitJob(
        self, request: jobmanager_pb2.SubmitJobRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.SubmitJobResponse:
        if len(request.restore_path) > MAX_PATH_LENGTH:
            raise BadField("restore_path", f"more than {MAX_PATH_LENGTH} characters")
        job = request.job
        if request.HasField("job") == request.HasField("declarative"):  # docs/declarative-jobs.md
            raise BadField("job", "give exactly one of job (a JobGraph) and declarative (a DeclarativeJob)")
        if request.HasField("declarative"):
            job = declarative_job_graph(request.declarative)
        job_id = self.dispatcher.submit(job, request.restore_path, request.allow_non_restored_state)
        return jobmanager_pb2.SubmitJobResponse(job_id=job_id)

    @translated
    def TriggerSavepoint(
        self, request: jobmanager_pb2.TriggerSavepointRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.TriggerSavepointResponse:
        target = _target(request.target_directory)
        request_id = self.dispatcher.trigger_savepoint(bounded_id(request.job_id, "job_id"), target, stop=False)
        return jobmanager_pb2.TriggerSavepointResponse(request_id=request_id)

    @translated
    def StopJob(
        self, request: jobmanager_pb2.StopJobRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.StopJobResponse:
        target = _target(request.target_directory)
        request_id = self.dispatcher.trigger_savepoint(bounded_id(request.job_id, "job_id"), target, stop=True)
        return jobmanager_pb2.StopJobResponse(request_id=request_id)

    @translated
    def ReconfigureJob(
        self, request: jobmanager_pb2.ReconfigureJobRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.ReconfigureJobResponse:
        if request.parallelism < 0:
            raise BadField("parallelism", f"must be >= 1, got {request.parallelism}")
        rid = self.dispatcher.reconfigure(
            bounded_id(request.job_id, "job_id"),
            bounded_id(request.operator_uid, "operator_uid"),
            request.parallelism,
            request.new_job if request.HasField("new_job") else None,
            request.rebalance_keys,
        )
        return jobmanager_pb2.ReconfigureJobResponse(reconfiguration_id=rid)

    @translated
    def GetJobGraph(
        self, request: jobmanager_pb2.GetJobGraphRequest, _context: grpc.ServicerContext
    ) -> common_pb2.JobGraph:
        return self.dispatcher.job_graph(bounded_id(request.job_id, "job_id"))

    @translated
    def GetJob(self, request: jobmanager_pb2.GetJobRequest, _context: grpc.ServicerContext) -> common_pb2.JobInfo:
        return self.dispatcher.job_info(request.job_id)

    @translated
    def ListJobs(
        self, request: jobmanager_pb2.ListJobsRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.ListJobsResponse:
        jobs, next_token = self.dispatcher.list_jobs(request.page_size, request.page_token)
        return jobmanager_pb2.ListJobsResponse(jobs=jobs, next_page_token=next_token)

    @translated
    def CancelJob(
        self, request: jobmanager_pb2.CancelJobRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.CancelJobResponse:
        state = self.dispatcher.cancel(request.job_id)
        return jobmanager_pb2.CancelJobResponse(state=to_proto(state))

    @translated
    def GetCluster(
        self, _request: jobmanager_pb2.GetClusterRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.ClusterOverview:
        return self.dispatcher.cluster_overview()


class ResourceManagerServicer(_Base, jobmanager_pb2_grpc.ResourceManagerServicer):
    @translated
    def RegisterTaskManager(
        self, request: jobmanager_pb2.RegisterTaskManagerRequest, context: grpc.ServicerContext
    ) -> jobmanager_pb2.RegisterTaskManagerResponse:
        session = self.dispatcher.register_taskmanager(
            bounded_id(request.resource_id, "resource_id"),
            host_port(request.address, "address"),
            request.slots,
            peer_identity(context),
        )
        return jobmanager_pb2.RegisterTaskManagerResponse(
            leader_session_id=session, heartbeat_interval_ms=int(self.dispatcher.heartbeat_interval * 1000)
        )

    @translated
    def Heartbeat(
        self, request: jobmanager_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> jobmanager_pb2.HeartbeatResponse:
        bounded_id(request.resource_id, "resource_id")
        if len(request.tasks) > MAX_HEARTBEAT_TASKS:
            raise BadField("tasks", f"{len(request.tasks)} entries, more than {MAX_HEARTBEAT_TASKS}")
        if len(request.slots) > MAX_HEARTBEAT_SLOTS:
            raise BadField("slots", f"{len(request.slots)} entries, more than {MAX_HEARTBEAT_SLOTS}")
        if any(len(t.key_group_records) > MAX_KEY_GROUP_RECORDS for t in request.tasks):
            raise BadField("tasks.key_group_records", f"more than {MAX_KEY_GROUP_RECORDS} entries for one task")
        metrics = [(t.job_id, t.execution_id, task_records(t)) for t in request.tasks]
        # the slot report: one entry per slot, a job id where tasks still hold it (none: an older TaskManager)
        held = frozenset(s.slot_index for s in request.slots if s.job_id) if request.slots else None
        known = self.dispatcher.heartbeat(
            request.resource_id, request.leader_session_id, metrics, held, identity=peer_identity(context)
        )
        return jobmanager_pb2.HeartbeatResponse(known=known)

    @translated
    def UpdateTaskExecutionState(
        self, request: jobmanager_pb2.TaskExecutionState, context: grpc.ServicerContext
    ) -> jobmanager_pb2.UpdateTaskExecutionStateResponse:
        bounded_id(request.resource_id, "resource_id")
        bounded_id(request.job_id, "job_id")
        bounded_id(request.execution_id, "execution_id")
        if request.unreachable_peer:
            host_port(request.unreachable_peer, "unreachable_peer")
        state = member(ExecutionState, request.state, "state")
        cause = member(FailureCause, request.failure_cause, "failure_cause") if request.failure_cause else None
        accepted = self.dispatcher.update_task_state(
            request.leader_session_id,
            request.job_id,
            request.execution_id,
            state,
            request.error,
            task_records(request),
            request.end_of_input,
            failure_cause=cause,
            unreachable_peer=request.unreachable_peer,
            identity=peer_identity(context),
            resource_id=request.resource_id,
        )
        return jobmanager_pb2.UpdateTaskExecutionStateResponse(accepted=accepted)

    @translated
    def AcknowledgeCheckpoint(
        self, request: jobmanager_pb2.AcknowledgeCheckpointRequest, context: grpc.ServicerContext
    ) -> jobmanager_pb2.AcknowledgeCheckpointResponse:
        if len(request.state_handle) > MAX_STATE_HANDLE_BYTES:
            raise BadField("state_handle", f"{len(request.state_handle)} bytes, more than {MAX_STATE_HANDLE_BYTES}")
        outcome = self.dispatcher.acknowledge_checkpoint(
            request.leader_session_id,
            bounded_id(request.job_id, "job_id"),
            bounded_id(request.execution_id, "execution_id"),
            not_negative(request.checkpoint_id, "checkpoint_id"),
            request.state_handle,
            not_negative(request.size_bytes, "size_bytes"),
            identity=peer_identity(context),
        )
        return jobmanager_pb2.AcknowledgeCheckpointResponse(outcome=to_proto(outcome))

    @translated
    def RequestSplits(
        self, request: jobmanager_pb2.RequestSplitsRequest, context: grpc.ServicerContext
    ) -> jobmanager_pb2.RequestSplitsResponse:
        assignment = self.dispatcher.request_splits(
            request.leader_session_id,
            bounded_id(request.job_id, "job_id"),
            bounded_id(request.execution_id, "execution_id"),
            bounded_id(request.operator_id, "operator_id"),
            request.received,
            not_negative(request.last_checkpoint, "last_checkpoint"),
            request.idle,
            identity=peer_identity(context),
        )
        if assignment is None:  # a late request: the execution is gone, nothing to hand out
            return jobmanager_pb2.RequestSplitsResponse(first=request.received)
        return jobmanager_pb2.RequestSplitsResponse(
            first=assignment.first,
            splits=[json.dumps(s, separators=(",", ":")) for s in assignment.splits],
            no_more_splits=assignment.no_more_splits,
        )

    @translated
    def DeclineCheckpoint(
        self, request: jobmanager_pb2.DeclineCheckpointRequest, context: grpc.ServicerContext
    ) -> jobmanager_pb2.DeclineCheckpointResponse:
        self.dispatcher.decline_checkpoint(
            request.leader_session_id,
            bounded_id(request.job_id, "job_id"),
            bounded_id(request.execution_id, "execution_id"),
            not_negative(request.checkpoint_id, "checkpoint_id"),
            request.reason,
            identity=peer_identity(context),
        )
        return jobmanager_pb2.DeclineCheckpointResponse()
