"""The JobManager's REST API and web dashboard: a FastAPI app (docs/monitoring.md).

Routes read the dispatcher and shape its protos with jobmanager/rest/views.py (Flink's REST
shapes); errors are JSON `{"errors": [...]}` (jobmanager/rest/errors.py); requests that change
jobs pass jobmanager/rest/security.py. A standby answers every request with a 307 redirect to
the leader's REST address (as published in ZooKeeper), or 503 while no leader is known.

Bounds: ids in paths are checked (length and characters, 400 naming the id), request bodies
are at most MAX_BODY_BYTES (413), `lines` of a TaskManager log at most MAX_LOG_LINES. The
dashboard (jobmanager/rest/dashboard/) is static files: no CDN, no build step; /docs and
/redoc are off (they would load their scripts from a CDN), /openapi.json describes the API.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from fastapi import FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse

from jobmanager.dispatcher import Dispatcher
from jobmanager.errors import JobNotFound
from jobmanager.rest import errors, views
from jobmanager.rest.errors import ApiError, quoted
from jobmanager.rest.security import HostGuard, TokenGuard
from sluice.states import JobStatus
from sluice.v1 import common_pb2

MAX_BODY_BYTES = 64 * 1024
MAX_LOG_LINES = 100_000
DEFAULT_LOG_LINES = 1000
MAX_TARGET_LENGTH = 4096
LIST_PAGE_SIZE = 1000
DASHBOARD = Path(__file__).with_name("dashboard")
DASHBOARD_FILES = {"app.js": "text/javascript", "style.css": "text/css", "index.html": "text/html"}
# The dashboard loads nothing from elsewhere and builds its DOM with textContent only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_JOB_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
_REQUEST_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
_TM_ID = re.compile(r"[0-9A-Za-z._:@+=-]{1,256}")
MAX_VERTEX_ID = 256  # sluice.graph.MAX_ID_LENGTH: an operator id


def _version() -> str:
    try:
        return importlib.metadata.version("sluice")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def job_id_param(value: str) -> str:
    if not _JOB_ID.fullmatch(value):
        raise ApiError(400, f"job id {quoted(value)}: expected 1 to 64 letters, digits, '-' or '_'")
    return value


def vertex_id_param(value: str) -> str:
    if not 0 < len(value) <= MAX_VERTEX_ID or not value.isprintable():
        raise ApiError(400, f"vertex id {quoted(value)}: expected 1 to {MAX_VERTEX_ID} printable characters")
    return value


def taskmanager_id_param(value: str) -> str:
    if not _TM_ID.fullmatch(value):
        raise ApiError(
            400, f"taskmanager id {quoted(value)}: expected 1 to 256 letters, digits or any of . _ : @ + = -"
        )
    return value


def request_id_param(value: str) -> str:
    if not _REQUEST_ID.fullmatch(value):
        raise ApiError(400, f"request id {quoted(value)}: expected 1 to 64 letters, digits, '-' or '_'")
    return value


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty), read up to MAX_BODY_BYTES."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body of {declared} bytes; the limit is {MAX_BODY_BYTES}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ApiError(415, f"body: expected Content-Type application/json, got {content_type[:80]!r}")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"body: not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "body: expected a JSON object")
    return body


def _target(body: dict[str, Any], *names: str) -> str:
    """The target directory of a savepoint body under the first of `names` given ("" if none)."""
    for name in names:
        if name in body and body[name] is not None:
            value = body[name]
            if not isinstance(value, str) or len(value) > MAX_TARGET_LENGTH or "\0" in value:
                raise ApiError(400, f"{name}: expected a directory or URI of at most {MAX_TARGET_LENGTH} characters")
            return value
    return ""


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name}: expected true or false")
    return value


def _unknown_fields(body: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise ApiError(400, f"{unknown[0][:64]}: unknown field; expected {', '.join(known)}")


def create_app(
    dispatcher: Dispatcher,
    *,
    is_leader: Callable[[], bool],
    leader_rest: Callable[[], str | None],
    token: bytes | None = None,
    scheme: str = "http",
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    bind_address: str = "127.0.0.1",
    allowed_hosts: str | None = None,
    logs_public: bool = False,
) -> FastAPI:
    """The app of a JobManager: `is_leader` says whether it leads now, `leader_rest` the leader's
    REST host:port; `token`: the bearer token (security.token.file) that requests changing jobs
    (and reading TaskManager logs, unless `logs_public`) must carry on a secured cluster (`scheme`
    https, or a token given); `bind_address` and `allowed_hosts` (rest.allowed-hosts): which Host
    headers it answers to (jobmanager/rest/security.py)."""
    app = FastAPI(
        title="Sluice JobManager REST API",
        version=_version(),
        description="Flink-shaped monitoring and job control; see docs/monitoring.md.",
        docs_url=None,  # Swagger UI and ReDoc load their assets from a CDN: off
        redoc_url=None,
    )
    errors.install(app)
    guard = TokenGuard(token, secured=scheme == "https", logs_public=logs_public)
    hosts = HostGuard(bind_address, allowed_hosts)
    version = _version()

    @app.middleware("http")
    async def leader_only(request: Request, call_next: Callable[[Request], Any]) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return errors.error_response(413, f"request body of {declared} bytes; the limit is {MAX_BODY_BYTES}")
        try:
            hosts.check(request.headers.get("host"))
        except ApiError as exc:
            return errors.error_response(exc.status, exc.message)
        if is_leader():
            return await call_next(request)
        leader = await run_in_threadpool(leader_rest)
        if not leader:
            return errors.error_response(503, "no leading JobManager at the moment; retry shortly")
        url = f"{scheme}://{leader}{request.url.path}" + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(url, status_code=307)

    def all_jobs() -> list[common_pb2.JobInfo]:
        jobs: list[common_pb2.JobInfo] = []
        token = ""
        while True:
            page, token = dispatcher.list_jobs(LIST_PAGE_SIZE, token)
            jobs += page
            if not token:
                return jobs

    def graph_of(job_id: str) -> common_pb2.JobGraph | None:
        try:
            return dispatcher.job_graph(job_id)
        except ValueError:  # ended under an earlier leader: the graph is not kept
            return None

    # -- cluster ------------------------------------------------------------------------------
    @app.get("/overview", tags=["cluster"])
    def overview() -> dict[str, Any]:
        """TaskManagers, slots and jobs by state."""
        return views.overview(dispatcher.cluster_overview(), all_jobs(), version)

    @app.get("/config", tags=["cluster"])
    def dashboard_config() -> dict[str, Any]:
        """What the dashboard needs to know about this JobManager."""
        return {
            "refresh-interval": 2000,
            "sluice-version": version,
            "timezone-offset": 0,
            "secured": guard.secured,
            "features": {"web-submit": False, "web-cancel": not guard.secured},
        }

    @app.get("/taskmanagers", tags=["cluster"])
    def list_taskmanagers() -> dict[str, Any]:
        """Registered TaskManagers: address, slots, free slots, time since the last heartbeat."""
        return views.taskmanagers(dispatcher.cluster_overview(), now_ms())

    @app.get("/taskmanagers/{taskmanager_id}/log", tags=["cluster"], response_class=PlainTextResponse)
    def taskmanager_log(
        request: Request,
        taskmanager_id: str,
        lines: int = Query(DEFAULT_LOG_LINES, ge=1, le=MAX_LOG_LINES, description="last lines to return"),
    ) -> Response:
        """The last `lines` lines of a TaskManager's log file (from at most its last 1 MiB); on a
        secured cluster with the bearer token unless rest.logs.public is set."""
        guard.check_logs(request)
        taskmanager_id_param(taskmanager_id)
        try:
            reply = dispatcher.read_taskmanager_log(taskmanager_id, 0)
        except grpc.RpcError as err:
            raise ApiError(
                502, f"taskmanager {quoted(taskmanager_id)} did not send its log: {err.code().name} {err.details()}"
            ) from None
        if reply is None:
            raise ApiError(404, f"taskmanager {quoted(taskmanager_id)} not found")
        if not reply.file:
            raise ApiError(404, f"taskmanager {quoted(taskmanager_id)} logs to stderr (no log.file): no log to show")
        text = reply.data.decode("utf-8", errors="replace")
        kept = text.splitlines(keepends=True)
        if reply.truncated and kept:
            kept = kept[1:]  # the first line may start mid-line
        body = "".join(kept[-lines:])
        return PlainTextResponse(
            body,
            headers={
                "X-Sluice-Log-File": reply.file,
                "X-Sluice-Log-Size": str(reply.size),
                "X-Content-Type-Options": "nosniff",
            },
        )

    # -- jobs ---------------------------------------------------------------------------------
    @app.get("/jobs/overview", tags=["jobs"])
    def jobs_overview() -> dict[str, Any]:
        """Every job, newest first: state, times, subtask counts by state."""
        jobs = all_jobs()
        detailed = []
        for job in jobs:
            if views.state_name(JobStatus, job.state) in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED):
                detailed.append(job)  # ended: the summary says it all
                continue
            try:
                detailed.append(dispatcher.job_info(job.job_id))  # with its tasks
            except JobNotFound:  # ended and gone meanwhile
                detailed.append(job)
        return views.jobs_overview(detailed, now_ms())

    @app.get("/jobs", tags=["jobs"])
    def jobs() -> dict[str, Any]:
        """Job ids and states (Flink's /jobs)."""
        return {"jobs": [{"id": j.job_id, "status": views.state_name(JobStatus, j.state)} for j in all_jobs()]}

    @app.get("/jobs/{job_id}", tags=["jobs"])
    def job(job_id: str) -> dict[str, Any]:
        """A job: state, times, vertices (chains) with aggregated metrics, and its plan."""
        job_id_param(job_id)
        info = dispatcher.job_info(job_id)
        return views.job_detail(info, graph_of(job_id), now_ms())

    @app.get("/jobs/{job_id}/checkpoints", tags=["jobs"])
    def checkpoints(job_id: str) -> dict[str, Any]:
        """Checkpoint counts, the latest ones and the recent history."""
        job_id_param(job_id)
        return views.checkpoints(dispatcher.job_info(job_id))

    @app.get("/jobs/{job_id}/exceptions", tags=["jobs"])
    def exceptions(job_id: str) -> dict[str, Any]:
        """The root exception and the exception history, with tracebacks."""
        job_id_param(job_id)
        return views.exceptions(dispatcher.job_info(job_id))

    def vertex_of(job_id: str, vertex_id: str) -> tuple[common_pb2.JobInfo, common_pb2.JobGraph | None, Any]:
        job_id_param(job_id)
        vertex_id_param(vertex_id)
        info = dispatcher.job_info(job_id)
        graph = graph_of(job_id)
        vertex = views.find_vertex(info, graph, vertex_id)
        if vertex is None:
            raise ApiError(404, f"vertex {quoted(vertex_id)} not found in job {quoted(job_id)}")
        return info, graph, vertex

    @app.get("/jobs/{job_id}/vertices/{vertex_id}", tags=["jobs"])
    def vertex(job_id: str, vertex_id: str) -> dict[str, Any]:
        """A vertex's subtasks: state, TaskManager, attempt, records, rates, time shares."""
        info, graph, found = vertex_of(job_id, vertex_id)
        tm_ids = views.taskmanager_ids(dispatcher.cluster_overview())
        max_parallelism = graph.max_parallelism if graph is not None else -1
        return views.vertex_detail(info, found, max_parallelism, tm_ids, now_ms())

    @app.get("/jobs/{job_id}/vertices/{vertex_id}/backpressure", tags=["jobs"])
    def backpressure(job_id: str, vertex_id: str) -> dict[str, Any]:
        """Back pressure per subtask (Flink's levels: ok <= 0.10 < low <= 0.5 < high)."""
        _info, _graph, found = vertex_of(job_id, vertex_id)
        return views.backpressure(found, now_ms())

    @app.get("/jobs/{job_id}/savepoints/{request_id}", tags=["jobs"])
    def savepoint_status(job_id: str, request_id: str) -> dict[str, Any]:
        """How a savepoint request went (Flink's asynchronous operation result)."""
        job_id_param(job_id)
        request_id_param(request_id)
        status = views.savepoint_status(dispatcher.job_info(job_id), request_id)
        if status is None:
            raise ApiError(404, f"savepoint request {quoted(request_id)} not found for job {quoted(job_id)}")
        return status

    # -- changing jobs (security.py) ----------------------------------------------------------
    @app.patch("/jobs/{job_id}", tags=["jobs"], status_code=202)
    async def cancel(request: Request, job_id: str, mode: str = Query("cancel")) -> dict[str, Any]:
        """Cancel a job (`mode=cancel`, the only mode)."""
        guard.check(request)
        job_id_param(job_id)
        if mode != "cancel":
            raise ApiError(400, f"mode: {quoted(mode)} is not supported; use mode=cancel")
        await json_body(request)
        try:
            await run_in_threadpool(dispatcher.cancel, job_id)
        except ValueError as exc:
            raise ApiError(409, str(exc)) from None
        return {}

    async def savepoint(request: Request, job_id: str, stop: bool) -> dict[str, Any]:
        guard.check(request)
        job_id_param(job_id)
        body = await json_body(request)
        if stop:
            _unknown_fields(body, ("targetDirectory", "target-directory", "drain"))
            if _flag(body, "drain"):
                raise ApiError(400, "drain: not supported (a stop ends the sources at the savepoint's barrier)")
            target = _target(body, "targetDirectory", "target-directory")
        else:
            _unknown_fields(body, ("target-directory", "cancel-job", "formatType"))
            stop = _flag(body, "cancel-job")
            target = _target(body, "target-directory")
        try:
            request_id = await run_in_threadpool(dispatcher.trigger_savepoint, job_id, target, stop)
        except ValueError as exc:
            message = str(exc)
            if message.startswith("savepoint directory"):
                raise ApiError(
                    400, "target-directory: required (the job has no default savepoint directory, state.savepoints.dir)"
                ) from None
            raise ApiError(409, message) from None
        return {"request-id": request_id}

    @app.post("/jobs/{job_id}/savepoints", tags=["jobs"], status_code=202)
    async def trigger_savepoint(request: Request, job_id: str) -> dict[str, Any]:
        """Take a savepoint: body `{"target-directory": DIR, "cancel-job": false}`; with
        cancel-job the job stops after it (stop with a savepoint)."""
        return await savepoint(request, job_id, stop=False)

    @app.post("/jobs/{job_id}/stop", tags=["jobs"], status_code=202)
    async def stop(request: Request, job_id: str) -> dict[str, Any]:
        """Stop with a savepoint: body `{"targetDirectory": DIR}`; the job ends FINISHED."""
        return await savepoint(request, job_id, stop=True)

    # -- dashboard ----------------------------------------------------------------------------
    def static(name: str) -> FileResponse:
        return FileResponse(
            DASHBOARD / name,
            media_type=DASHBOARD_FILES[name],
            headers={
                "Content-Security-Policy": CSP,
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-cache",
                "Referrer-Policy": "no-referrer",
            },
        )

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return static("index.html")

    @app.get("/dashboard/{name}", include_in_schema=False)
    def asset(name: str) -> FileResponse:
        if name not in DASHBOARD_FILES:
            raise ApiError(404, f"not found: no dashboard file {quoted(name)}")
        return static(name)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    return app
