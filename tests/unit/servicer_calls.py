"""Calls into the JobManager's servicers without sockets (a fake context, a dispatcher, reports),
shared by the servicer tests."""

from __future__ import annotations

from typing import Any

import grpc

from jobmanager.dispatcher import Dispatcher
from jobmanager.servicers import (
    ResourceManagerServicer,
)
from sluice.v1 import common_pb2, jobmanager_pb2

SESSION = "session-1"


class Aborted(Exception):
    pass


class Context:
    """The part of grpc.ServicerContext the servicers use; `identity` is the common name
    of the caller's verified certificate (None: a plaintext server)."""

    def __init__(self, identity: str | None = None) -> None:
        self._code: grpc.StatusCode | None = None
        self.details = ""
        self.identity = identity

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_common_name": [self.identity.encode()]} if self.identity else {}

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self.details = code, details
        raise Aborted(details)

    def code(self) -> grpc.StatusCode | None:
        return self._code


def rm(d: Dispatcher) -> ResourceManagerServicer:
    return ResourceManagerServicer(d, lambda: None)


def call(method, request, identity: str | None = None) -> tuple[Any, Context]:
    """The method's response (None when it aborted) and the context it saw."""
    context = Context(identity)
    try:
        return method(request, context), context
    except Aborted:
        return None, context


def where(d: Dispatcher, job_id: str, eid: str) -> str:
    """The resource id of the TaskManager `eid` was deployed to."""
    slot = d._jobs[job_id].graph.executions[eid].slot
    assert slot is not None, f"{eid} is not deployed"
    return slot.resource_id


def report(
    d: Dispatcher, job_id: str, eid: str, state: common_pb2.ExecutionState, session: str = SESSION, **fields
) -> jobmanager_pb2.TaskExecutionState:
    """A task state report as the TaskManager running `eid` sends it."""
    if "resource_id" not in fields:
        fields["resource_id"] = where(d, job_id, eid)
    return jobmanager_pb2.TaskExecutionState(
        leader_session_id=session, job_id=job_id, execution_id=eid, state=state, **fields
    )


def register(d: Dispatcher, resource_id: str, address: str, slots: int, identity: str | None = None):
    request = jobmanager_pb2.RegisterTaskManagerRequest(resource_id=resource_id, address=address, slots=slots)
    return call(rm(d).RegisterTaskManager, request, identity)
