"""The TaskExecutor service: what the leading JobManager asks of this TaskManager.

Every call carries the leader session id; a call from any session other than
the one this TaskManager follows (TaskRegistry.session) is rejected with
FAILED_PRECONDITION, before it touches a task (docs/architecture.md,
"Fencing"). The servicer only translates: deployments go through the task
registry (and its slot table), checkpoint calls to the task's control queue,
releases of blocking result partitions (BATCH) to the partition manager.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

import grpc

from sluice.v1 import taskmanager_pb2, taskmanager_pb2_grpc
from taskmanager.network.partition import PartitionManager
from taskmanager.task import Task
from taskmanager.task_registry import TaskRegistry, TaskRejected

log = logging.getLogger("sluice.taskmanager")

MAX_LOG_BYTES = 1 << 20  # ReadLog answers with at most this much of the log's tail
MAX_RELEASE_IDS = 4096  # partition ids per ReleasePartitions request (the protocol's bound)
MAX_ID_LENGTH = 1024  # characters of a job or partition id in a ReleasePartitions request


def log_file() -> str | None:
    """The file this process logs to (sluice.logs.setup with log.file), None when it logs to stderr."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return handler.baseFilename
    return None


class _ForExecution(Protocol):
    @property
    def leader_session_id(self) -> str: ...

    @property
    def execution_id(self) -> str: ...


class TaskExecutorServicer(taskmanager_pb2_grpc.TaskExecutorServicer):
    def __init__(
        self,
        tasks: TaskRegistry,
        create_task: Callable[[taskmanager_pb2.TaskDeploymentDescriptor], Task],
        partitions: PartitionManager | None = None,
    ) -> None:
        self.tasks = tasks
        self.create_task = create_task
        self.partitions = partitions if partitions is not None else PartitionManager()

    def _check_fencing(self, session_id: str, context: grpc.ServicerContext) -> None:
        followed = self.tasks.session
        if not session_id or session_id != followed:
            log.warning(
                "rejected a call from leader session %r: this TaskManager follows %r", session_id[:64], followed
            )
            # No session id in the text: whoever gets this error must not learn the one to forge.
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "the call's leader session is not the one this TaskManager follows "
                "(the caller is not the leading JobManager, or leadership changed)",
            )

    def SubmitTask(
        self, request: taskmanager_pb2.TaskDeploymentDescriptor, context: grpc.ServicerContext
    ) -> taskmanager_pb2.SubmitTaskResponse:
        self._check_fencing(request.leader_session_id, context)
        if not 0 <= request.subtask_index < request.parallelism:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"subtask_index {request.subtask_index} and parallelism {request.parallelism}: "
                "a deployment needs parallelism >= 1 and 0 <= subtask_index < parallelism",
            )
        try:
            task = self.tasks.deploy(
                request.slot_index, request.job_id, request.execution_id, lambda: self.create_task(request)
            )
        except TaskRejected as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            raise  # abort() raises; this tells the type checker
        except ValueError as exc:  # a descriptor the task cannot be built from (e.g. parallelism above max)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot deploy {request.execution_id!r}: {exc}"[:1024])
            raise
        log.info(
            "[job %s attempt %d] deploying %s to slot %d",
            request.job_id,
            request.attempt,
            request.execution_id,
            request.slot_index,
        )
        task.start()
        return taskmanager_pb2.SubmitTaskResponse()

    def CancelTask(
        self, request: taskmanager_pb2.CancelTaskRequest, context: grpc.ServicerContext
    ) -> taskmanager_pb2.CancelTaskResponse:
        self._check_fencing(request.leader_session_id, context)
        # A cancel that overtook its SubmitTask is remembered: the late deployment is refused.
        found = self.tasks.cancel(request.execution_id, f"[job {request.job_id}] cancel of {request.execution_id}")
        if found:
            log.info("[job %s] cancelling %s", request.job_id, request.execution_id)
        return taskmanager_pb2.CancelTaskResponse(found=found)

    def TriggerCheckpoint(
        self, request: taskmanager_pb2.TriggerCheckpointRequest, context: grpc.ServicerContext
    ) -> taskmanager_pb2.TriggerCheckpointResponse:
        task = self._task_for(request, context)
        if task is not None:
            task.trigger_checkpoint(request.checkpoint_id, request.final, request.stop)
        return taskmanager_pb2.TriggerCheckpointResponse(found=task is not None)

    def NotifyCheckpointComplete(
        self, request: taskmanager_pb2.CheckpointNotification, context: grpc.ServicerContext
    ) -> taskmanager_pb2.CheckpointNotificationResponse:
        task = self._task_for(request, context)
        if task is not None:
            task.notify_complete(request.checkpoint_id, request.final)
        return taskmanager_pb2.CheckpointNotificationResponse(found=task is not None)

    def NotifyCheckpointAborted(
        self, request: taskmanager_pb2.CheckpointNotification, context: grpc.ServicerContext
    ) -> taskmanager_pb2.CheckpointNotificationResponse:
        task = self._task_for(request, context)
        if task is not None:
            task.notify_aborted(request.checkpoint_id)
        return taskmanager_pb2.CheckpointNotificationResponse(found=task is not None)

    def PrepareReconfiguration(
        self, request: taskmanager_pb2.PrepareReconfigurationRequest, context: grpc.ServicerContext
    ) -> taskmanager_pb2.PrepareReconfigurationResponse:
        task = self._task_for(request, context)
        found = task is not None and task.prepare_reconfiguration(request)
        return taskmanager_pb2.PrepareReconfigurationResponse(found=found)

    def AbortReconfiguration(
        self, request: taskmanager_pb2.AbortReconfigurationRequest, context: grpc.ServicerContext
    ) -> taskmanager_pb2.PrepareReconfigurationResponse:
        task = self._task_for(request, context)
        if task is not None:
            task.abort_reconfiguration(request.reconfiguration_id)
        return taskmanager_pb2.PrepareReconfigurationResponse(found=task is not None)

    def ReadLog(
        self, request: taskmanager_pb2.ReadLogRequest, context: grpc.ServicerContext
    ) -> taskmanager_pb2.ReadLogResponse:
        """The tail of this process's log file, at most MAX_LOG_BYTES (the REST API's
        /taskmanagers/{id}/log). Only the leader asks; fenced like every other call."""
        self._check_fencing(request.leader_session_id, context)
        path = log_file()
        if path is None:
            return taskmanager_pb2.ReadLogResponse()
        want = request.max_bytes if 0 < request.max_bytes <= MAX_LOG_BYTES else MAX_LOG_BYTES
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - want))
                data = f.read(want)
        except OSError as exc:
            context.abort(grpc.StatusCode.INTERNAL, f"cannot read the log file: {exc.strerror or exc}")
            raise  # abort() raises; this tells the type checker
        return taskmanager_pb2.ReadLogResponse(
            data=data, truncated=size > len(data), file=os.path.basename(path), size=size
        )

    def ReleasePartitions(
        self, request: taskmanager_pb2.ReleasePartitionsRequest, context: grpc.ServicerContext
    ) -> taskmanager_pb2.ReleasePartitionsResponse:
        """Delete blocking result partitions of a job (BATCH): the ids named, or every one of
        the job's with all_of_job. Ids not held here are not an error; the answer counts
        the partitions released."""
        self._check_fencing(request.leader_session_id, context)
        if not request.job_id or len(request.job_id) > MAX_ID_LENGTH:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"job_id: 1 to {MAX_ID_LENGTH} characters")
        if len(request.partition_ids) > MAX_RELEASE_IDS:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"partition_ids: at most {MAX_RELEASE_IDS} per request, got {len(request.partition_ids)}",
            )
        if any(len(pid) > MAX_ID_LENGTH for pid in request.partition_ids):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"partition_ids: each at most {MAX_ID_LENGTH} characters")
        released = self.partitions.release_blocking(request.job_id, request.partition_ids, request.all_of_job)
        log.info(
            "[job %s] released %d blocking result partitions (%s)",
            request.job_id,
            released,
            "all of the job's" if request.all_of_job else f"{len(request.partition_ids)} asked for",
        )
        return taskmanager_pb2.ReleasePartitionsResponse(released=released)

    def _task_for(self, request: _ForExecution, context: grpc.ServicerContext) -> Task | None:
        self._check_fencing(request.leader_session_id, context)
        return self.tasks.get(request.execution_id)
