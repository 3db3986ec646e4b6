"""HTTP errors of the REST API: every error is JSON `{"errors": [message]}` (Flink's shape).

The dispatcher's exceptions (jobmanager/errors.py) map to status codes as the gRPC servicers
map them to gRPC codes (jobmanager/servicers.py, `translated`):

  NotLeader                          503 (a standby redirects before this; seen during a handover)
  JobNotFound                        404 naming the job
  InvalidRequest, JobValidationError 400 naming the field
  NotOwner                           403
  anything else                      500 "internal error" (logged with its traceback)

Unknown routes are 404, wrong methods 405, malformed query parameters 400 naming them.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobmanager.errors import InvalidRequest, JobNotFound, NotLeader, NotOwner
from sluice.graph import JobValidationError

log = logging.getLogger("sluice.jobmanager.rest")

ID_ECHO_LIMIT = 64  # characters of a client's id quoted back in an error


class ApiError(Exception):
    """An error answered as `status` with `{"errors": [message]}`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"errors": [message]}, status_code=status, headers=headers)


def quoted(value: str) -> str:
    """A client's value quoted in an error, cut to ID_ECHO_LIMIT characters."""
    return repr(value[:ID_ECHO_LIMIT] + ("..." if len(value) > ID_ECHO_LIMIT else ""))


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("query", "path", "body", "header")]
    return ".".join(parts) or "request"


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into a JSON error."""

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"not found: no resource at {request.url.path[:200]}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path[:200]}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [f"{_field(tuple(e.get('loc', ())))}: {e.get('msg', 'invalid')}" for e in exc.errors()[:5]]
        return JSONResponse({"errors": errors or ["invalid request"]}, status_code=400)

    @app.exception_handler(NotLeader)
    async def not_leader(_request: Request, _exc: NotLeader) -> JSONResponse:
        return error_response(503, "this JobManager is not the leader (a handover is under way); retry shortly")

    @app.exception_handler(JobNotFound)
    async def job_not_found(_request: Request, exc: JobNotFound) -> JSONResponse:
        return error_response(404, f"job {quoted(str(exc.args[0]))} not found")

    @app.exception_handler(InvalidRequest)
    async def invalid(_request: Request, exc: InvalidRequest) -> JSONResponse:
        return error_response(400, str(exc))

    @app.exception_handler(JobValidationError)
    async def invalid_job(_request: Request, exc: JobValidationError) -> JSONResponse:
        return error_response(400, f"invalid job: {exc}")

    @app.exception_handler(NotOwner)
    async def not_owner(_request: Request, exc: NotOwner) -> JSONResponse:
        return error_response(403, str(exc))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("REST %s %s failed", request.method, request.url.path[:200], exc_info=exc)
        return error_response(500, "internal error; the JobManager's log has the details")
