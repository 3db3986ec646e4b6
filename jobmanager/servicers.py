"""gRPC servicers of the JobManager: proto in, dispatcher call, proto out.
Expected failures become status codes; nothing a client sends crashes the
process."""

from __future__ import annotations

import functools
import logging
import traceback
from typing import Callable

import grpc

from jobmanager.dispatcher import Dispatcher, JobNotFound, NotLeader
from sluice.graph import JobValidationError
from sluice.v1 import jobmanager_pb2, jobmanager_pb2_grpc

log = logging.getLogger("sluice.jobmanager.rpc")


def translated(method: Callable) -> Callable:
    @functools.wraps(method)
    def wrapper(self, request, context: grpc.ServicerContext):
        try:
            return method(self, request, context)
        except NotLeader:
            leader = self.leader_hint()
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"this JobManager is a standby; leader={leader}" if leader else
                          "this JobManager is a standby and no leader is known yet")
        except JobValidationError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid job: {exc}")
        except JobNotFound as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job with id {exc.args[0]!r}")
        except PermissionError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except ValueError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except Exception as exc:  # noqa: BLE001 — never crash on a request
            if context.code() is not None:  # context.abort() already ran inside the method
                raise
            log.error("%s failed: %s", method.__name__, traceback.format_exc())
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
    return wrapper


class _Base:
    def __init__(self, dispatcher: Dispatcher, leader_hint: Callable[[], str | None]):
        self.dispatcher = dispatcher
        self.leader_hint = leader_hint


class JobManagerServicer(_Base, jobmanager_pb2_grpc.JobManagerServicer):
    @translated
    def SubmitJob(self, request, context):
        return jobmanager_pb2.SubmitJobResponse(job_id=self.dispatcher.submit(request.job))

    @translated
    def GetJob(self, request, context):
        return self.dispatcher.job_info(request.job_id)

    @translated
    def ListJobs(self, request, context):
        return jobmanager_pb2.ListJobsResponse(jobs=self.dispatcher.list_jobs())

    @translated
    def CancelJob(self, request, context):
        return jobmanager_pb2.CancelJobResponse(state=self.dispatcher.cancel(request.job_id))

    @translated
    def GetCluster(self, request, context):
        return self.dispatcher.cluster_overview()


class ResourceManagerServicer(_Base, jobmanager_pb2_grpc.ResourceManagerServicer):
    @translated
    def RegisterTaskManager(self, request, context):
        if not request.resource_id or not request.address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "resource_id and address are required")
        session = self.dispatcher.register_taskmanager(request.resource_id, request.address, request.slots)
        return jobmanager_pb2.RegisterTaskManagerResponse(
            leader_session_id=session, heartbeat_interval_ms=int(self.dispatcher.heartbeat_interval * 1000))

    @translated
    def Heartbeat(self, request, context):
        metrics = [(t.execution_id, t.records_in, t.records_out) for t in request.tasks]
        known = self.dispatcher.heartbeat(request.resource_id, request.leader_session_id, metrics)
        return jobmanager_pb2.HeartbeatResponse(known=known)

    @translated
    def UpdateTaskExecutionState(self, request, context):
        accepted = self.dispatcher.update_task_state(request.leader_session_id, request.job_id,
                                                     request.execution_id, request.state, request.error,
                                                     (request.records_in, request.records_out), request.end_of_input)
        return jobmanager_pb2.UpdateTaskExecutionStateResponse(accepted=accepted)

    @translated
    def AcknowledgeCheckpoint(self, request, context):
        outcome = self.dispatcher.acknowledge_checkpoint(request.leader_session_id, request.job_id,
                                                         request.execution_id, request.checkpoint_id,
                                                         request.state_handle, request.size_bytes)
        return jobmanager_pb2.AcknowledgeCheckpointResponse(outcome=outcome)

    @translated
    def DeclineCheckpoint(self, request, context):
        self.dispatcher.decline_checkpoint(request.leader_session_id, request.job_id, request.execution_id,
                                           request.checkpoint_id, request.reason)
        return jobmanager_pb2.DeclineCheckpointResponse()
