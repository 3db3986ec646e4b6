"""gRPC servicers of the JobManager: proto in, dispatcher call, proto out.
Expected failures become status codes; nothing a client sends crashes the
process.

This is the wire edge: proto enum values become `sluice.states` members on
the way in (`from_proto`; UNSPECIFIED or an unknown value is INVALID_ARGUMENT
naming the field) and members become proto values on the way out
(`to_proto`). Everything behind it speaks members only.
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable
from typing import Any, TypeVar, cast

import grpc

from jobmanager.dispatcher import Dispatcher
from jobmanager.errors import JobNotFound, NotLeader, StaleLeaderSession
from jobmanager.job_master import TaskRecords
from sluice.graph import JobValidationError
from sluice.states import ExecutionState, FailureCause, from_proto, to_proto
from sluice.v1 import common_pb2, jobmanager_pb2, jobmanager_pb2_grpc

log = logging.getLogger("sluice.jobmanager.rpc")

Handler = Callable[[Any, Any, grpc.ServicerContext], Any]
E = TypeVar("E", ExecutionState, FailureCause)


class BadField(ValueError):
    """A request field holds a value this JobManager does not accept."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


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
        except BadField as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid request: {exc}")
        except JobNotFound as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job with id {exc.args[0]!r}")
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
        return jobmanager_pb2.SubmitJobResponse(job_id=self.dispatcher.submit(request.job))

    @translated
    def GetJob(self, request: jobmanager_pb2.GetJobRequest, _context: grpc.ServicerContext) -> common_pb2.JobInfo:
        return self.dispatcher.job_info(request.job_id)

    @translated
    def ListJobs(
        self, _request: jobmanager_pb2.ListJobsRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.ListJobsResponse:
        return jobmanager_pb2.ListJobsResponse(jobs=self.dispatcher.list_jobs())

    @translated
    def CancelJob(
        self, request: jobmanager_pb2.CancelJobRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.CancelJobResponse:
        state = self.dispatcher.cancel(request.job_id)
        return jobmanager_pb2.CancelJobResponse(state=cast(common_pb2.JobState, to_proto(state)))

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
        if not request.resource_id or not request.address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "resource_id and address are required")
        session = self.dispatcher.register_taskmanager(request.resource_id, request.address, request.slots)
        return jobmanager_pb2.RegisterTaskManagerResponse(
            leader_session_id=session, heartbeat_interval_ms=int(self.dispatcher.heartbeat_interval * 1000)
        )

    @translated
    def Heartbeat(
        self, request: jobmanager_pb2.HeartbeatRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.HeartbeatResponse:
        metrics = [
            (t.job_id, t.execution_id, TaskRecords(t.records_in, t.records_out, t.records_sent, t.records_malformed))
            for t in request.tasks
        ]
        known = self.dispatcher.heartbeat(request.resource_id, request.leader_session_id, metrics)
        return jobmanager_pb2.HeartbeatResponse(known=known)

    @translated
    def UpdateTaskExecutionState(
        self, request: jobmanager_pb2.TaskExecutionState, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.UpdateTaskExecutionStateResponse:
        state = member(ExecutionState, request.state, "state")
        cause = member(FailureCause, request.failure_cause, "failure_cause") if request.failure_cause else None
        accepted = self.dispatcher.update_task_state(
            request.leader_session_id,
            request.job_id,
            request.execution_id,
            state,
            request.error,
            TaskRecords(request.records_in, request.records_out, request.records_sent, request.records_malformed),
            request.end_of_input,
            failure_cause=cause,
            unreachable_peer=request.unreachable_peer,
        )
        return jobmanager_pb2.UpdateTaskExecutionStateResponse(accepted=accepted)

    @translated
    def AcknowledgeCheckpoint(
        self, request: jobmanager_pb2.AcknowledgeCheckpointRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.AcknowledgeCheckpointResponse:
        outcome = self.dispatcher.acknowledge_checkpoint(
            request.leader_session_id,
            request.job_id,
            request.execution_id,
            request.checkpoint_id,
            request.state_handle,
            request.size_bytes,
        )
        return jobmanager_pb2.AcknowledgeCheckpointResponse(outcome=cast(jobmanager_pb2.AckOutcome, to_proto(outcome)))

    @translated
    def DeclineCheckpoint(
        self, request: jobmanager_pb2.DeclineCheckpointRequest, _context: grpc.ServicerContext
    ) -> jobmanager_pb2.DeclineCheckpointResponse:
        self.dispatcher.decline_checkpoint(
            request.leader_session_id, request.job_id, request.execution_id, request.checkpoint_id, request.reason
        )
        return jobmanager_pb2.DeclineCheckpointResponse()
