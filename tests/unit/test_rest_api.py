"""The REST API's shaping (jobmanager/rest/views.py) and its HTTP edge (jobmanager/rest/app.py)
against a fake dispatcher: Flink's shapes, error mapping, bounds, the bearer token on a secured
cluster, the standby's redirect and the dashboard's static files."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from rest_fakes import ENDED, JOB, NOW, TOKEN, FakeDispatcher, client_for, job_graph, job_info

from jobmanager.rest import views
from jobmanager.rest.app import MAX_BODY_BYTES
from sluice.v1 import common_pb2, taskmanager_pb2


@pytest.fixture
def dispatcher() -> FakeDispatcher:
    return FakeDispatcher()


@pytest.fixture
def client(dispatcher: FakeDispatcher) -> TestClient:
    return client_for(dispatcher)


# -- views.py: pure shaping -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ratio", "level"), [(0.0, "ok"), (0.10, "ok"), (0.11, "low"), (0.5, "low"), (0.51, "high"), (1.0, "high")]
)
def test_backpressure_levels_use_flinks_thresholds(ratio, level):
    assert views.backpressure_level(ratio) == level


@pytest.mark.parametrize(
    ("states", "status"),
    [
        ([], "CREATED"),
        (["RUNNING", "RUNNING"], "RUNNING"),
        (["RUNNING", "FINISHED"], "RUNNING"),
        (["RUNNING", "FAILED"], "FAILED"),
        (["CANCELING", "CANCELED"], "CANCELING"),
        (["FINISHED", "FINISHED"], "FINISHED"),
        (["DEPLOYING", "CREATED"], "DEPLOYING"),
    ],
)
def test_vertex_status_aggregates_like_flink(states, status):
    assert views.vertex_status(states) == status


def test_vertices_are_chains_with_their_tasks_and_the_plan_labels_partitioning():
    detail = views.job_detail(job_info(), job_graph(), NOW)
    assert [(v["id"], v["name"], v["parallelism"]) for v in detail["vertices"]] == [
        ("src", "page-views -> parse", 2),
        ("counts", "counts -> counts-sink", 2),
    ]
    src = detail["vertices"][0]
    assert src["status"] == "RUNNING" and src["tasks"]["running"] == 2 and src["tasks"]["total"] == 2
    assert src["metrics"]["read-records"] == 300 and src["metrics"]["write-records"] == 270
    assert src["metrics"]["read-records-per-second"] == 20.0
    assert src["metrics"]["backpressured-ms-per-second-max"] == 700.0
    assert src["metrics"]["backpressure-level"] == "high"
    assert detail["vertices"][1]["metrics"]["backpressure-level"] == "ok"
    assert [o["id"] for o in src["operators"]] == ["src", "parse"]
    plan = detail["plan"]
    assert [n["id"] for n in plan["nodes"]] == ["src", "counts"]
    assert plan["nodes"][1]["inputs"] == [
        {
            "num": 0,
            "id": "src",
            "ship_strategy": "HASH",
            "keys": ["url"],
            "side-output": None,
            "exchange": "pipelined_bounded",
        }
    ]
    assert plan["edges"] == [
        {"source": "src", "target": "counts", "partitioning": "HASH", "keys": ["url"], "side-output": None}
    ]
    assert detail["state"] == "RUNNING" and detail["duration"] == 60_000 and detail["end-time"] == -1
    assert detail["isStoppable"] is True and detail["vertices"][0]["maxParallelism"] == 128


def test_without_a_graph_vertices_come_from_the_tasks():
    info = job_info()
    detail = views.job_detail(info, None, NOW)
    assert [(v["id"], v["parallelism"]) for v in detail["vertices"]] == [("src", 2), ("counts", 2)]
    assert [n["id"] for n in detail["plan"]["nodes"]] == ["src", "counts"] and detail["plan"]["edges"] == []


def test_checkpoints_history_newest_first_with_counts_and_latest():
    out = views.checkpoints(job_info())
    assert [h["id"] for h in out["history"]] == [3, 2, 1]
    assert out["counts"] == {"restored": 0, "total": 3, "in_progress": 0, "completed": 2, "failed": 1}
    latest = out["latest"]["completed"]
    assert latest["id"] == 3 and latest["is_savepoint"] is True
    assert latest["state_size"] == 10240 and latest["checkpointed_size"] == 4096  # incremental: wrote 4 KiB of 10
    assert out["history"][2]["state_size"] == 2048  # a checkpoint without a full size: what it wrote
    assert latest["end_to_end_duration"] == 80 and out["latest"]["failed"]["failure_message"] == "declined"
    assert out["history"][2]["num_acknowledged_subtasks"] == 4 and out["history"][2]["num_subtasks"] == 4
    assert out["summary"]["end_to_end_duration"] == {"min": 80, "max": 120, "avg": 100}


def test_exceptions_root_and_history_with_tracebacks():
    out = views.exceptions(job_info())
    [entry] = out["exceptionHistory"]["entries"]
    assert entry["exceptionName"] == "ValueError" and entry["taskName"] == "page-views -> parse (1/2)"
    assert out["root-exception"].startswith("Traceback") and out["timestamp"] == NOW - 30_000
    no_history = common_pb2.JobInfo(failure="RuntimeError: lost")
    assert views.exceptions(no_history)["root-exception"] == "RuntimeError: lost"


def test_backpressure_per_subtask_in_flinks_shape():
    vertex = views.find_vertex(job_info(), job_graph(), "src")
    assert vertex is not None
    out = views.backpressure(vertex, NOW)
    assert out["status"] == "ok" and out["backpressureLevel"] == "high" and out["end-timestamp"] == NOW
    assert [(s["subtask"], s["backpressureLevel"], s["ratio"]) for s in out["subtasks"]] == [
        (0, "ok", 0.05),
        (1, "high", 0.7),
    ]
    assert out["subtasks"][0]["busyRatio"] == 0.1 and out["subtasks"][0]["idleRatio"] == 0.85


def test_an_unknown_enum_value_shows_as_unknown():
    info = common_pb2.JobInfo(job_id="x", state=99)  # type: ignore[arg-type]  # an unknown value: the point
    assert views.job_summary(info, NOW)["state"] == "UNKNOWN"


# -- the HTTP edge ---------------------------------------------------------------------------------
def test_overview_counts_jobs_over_every_page(client):
    body = client.get("/overview").json()
    assert body == {
        "taskmanagers": 2,
        "slots-total": 4,
        "slots-available": 1,
        "jobs-running": 1,
        "jobs-finished": 0,
        "jobs-cancelled": 0,
        "jobs-failed": 1,
        "sluice-version": body["sluice-version"],
        "leader": "127.0.0.1:6123",
    }


def test_jobs_overview_newest_first_with_task_counts_of_running_jobs(client):
    jobs = client.get("/jobs/overview").json()["jobs"]
    assert [(j["jid"], j["state"]) for j in jobs] == [(ENDED, "FAILED"), (JOB, "RUNNING")]
    assert jobs[1]["tasks"]["running"] == 4 and jobs[0]["duration"] == 1000


def test_job_vertex_and_savepoint_endpoints(client):
    job = client.get(f"/jobs/{JOB}").json()
    assert [v["id"] for v in job["vertices"]] == ["src", "counts"]
    vertex = client.get(f"/jobs/{JOB}/vertices/src").json()
    assert vertex["maxParallelism"] == 128
    assert [(s["subtask"], s["status"], s["taskmanager-id"], s["attempt"]) for s in vertex["subtasks"]] == [
        (0, "RUNNING", "tm-0", 1),
        (1, "RUNNING", "tm-1", 1),
    ]
    assert vertex["subtasks"][1]["metrics"]["backpressured-ms-per-second"] == 700.0
    assert client.get(f"/jobs/{JOB}/vertices/counts/backpressure").json()["backpressureLevel"] == "ok"
    assert client.get(f"/jobs/{JOB}/checkpoints").json()["counts"]["completed"] == 2
    assert client.get(f"/jobs/{JOB}/exceptions").json()["exceptionHistory"]["entries"][0]["restarted"] is True
    done = client.get(f"/jobs/{JOB}/savepoints/abc123").json()
    assert done["status"] == {"id": "COMPLETED"} and done["operation"] == {"location": "/sp/savepoint-3"}
    failed = client.get(f"/jobs/{JOB}/savepoints/def456").json()
    assert failed["operation"]["failure-cause"]["stack-trace"] == "disk full"
    ended = client.get(f"/jobs/{ENDED}").json()  # no graph kept: still answered
    assert ended["state"] == "FAILED" and ended["failure"] == "ValueError: boom"


def test_taskmanagers_and_their_logs(client):
    tms = client.get("/taskmanagers").json()["taskmanagers"]
    assert [(t["id"], t["slotsNumber"], t["freeSlots"], t["timeSinceLastHeartbeat"]) for t in tms] == [
        ("tm-0", 2, 0, 500),
        ("tm-1", 2, 1, 500),
    ]
    log = client.get("/taskmanagers/tm-0/log", params={"lines": 3})
    assert log.status_code == 200 and log.text == "line 7\nline 8\nline 9\n"
    assert (
        log.headers["content-type"].startswith("text/plain") and log.headers["x-sluice-log-file"] == "taskmanager-0.log"
    )
    assert "tail of a cut line" not in client.get("/taskmanagers/tm-0/log").text  # the cut first line is dropped
    stderr = client.get("/taskmanagers/tm-1/log")
    assert stderr.status_code == 404 and "logs to stderr" in stderr.json()["errors"][0]
    assert client.get("/taskmanagers/tm-9/log").json() == {"errors": ["taskmanager 'tm-9' not found"]}
    too_many = client.get("/taskmanagers/tm-0/log", params={"lines": 10**9})
    assert too_many.status_code == 400 and too_many.json()["errors"][0].startswith("lines:")


@pytest.mark.parametrize(
    ("path", "status", "names"),
    [
        ("/jobs/00000000000000000000000000000000", 404, "job '00000000000000000000000000000000' not found"),
        (f"/jobs/{JOB}/vertices/nope", 404, "vertex 'nope' not found"),
        (f"/jobs/{JOB}/vertices/nope/backpressure", 404, "vertex 'nope' not found"),
        (f"/jobs/{JOB}/savepoints/zzz", 404, "savepoint request 'zzz' not found"),
        ("/jobs/" + "a" * 65, 400, "job id"),
        ("/jobs/bad$id", 400, "job id 'bad$id'"),
        (f"/jobs/{JOB}/vertices/" + "v" * 300, 400, "vertex id"),
        ("/taskmanagers/tm%20x/log", 400, "taskmanager id 'tm x'"),
        (f"/jobs/{JOB}/savepoints/bad!", 400, "request id"),
        ("/no/such/route", 404, "not found: no resource at /no/such/route"),
        ("/dashboard/secrets.txt", 404, "no dashboard file"),
    ],
)
def test_errors_are_json_naming_what_is_wrong(client, path, status, names):
    response = client.get(path)
    assert response.status_code == status
    [message] = response.json()["errors"]
    assert names in message


def test_errors_map_the_dispatchers_exceptions(dispatcher, client):
    dispatcher.leading = False  # a handover: leading says yes, the dispatcher says no
    response = client.get("/overview")
    assert response.status_code == 503 and "not the leader" in response.json()["errors"][0]


def test_an_unexpected_failure_is_a_500_without_details(dispatcher, client):
    dispatcher.cluster_overview = lambda: 1 / 0  # a failing dispatcher
    response = client.get("/taskmanagers")
    assert response.status_code == 500 and response.json() == {
        "errors": ["internal error; the JobManager's log has the details"]
    }


def test_wrong_method_is_405_json(client):
    response = client.delete(f"/jobs/{JOB}")
    assert response.status_code == 405 and "method DELETE" in response.json()["errors"][0]


# -- changing jobs -------------------------------------------------------------------------------
def test_insecure_cluster_allows_cancel_savepoint_and_stop(dispatcher, client):
    response = client.patch(f"/jobs/{JOB}", params={"mode": "cancel"})
    assert response.status_code == 202 and response.json() == {} and dispatcher.cancelled == [JOB]
    response = client.post(f"/jobs/{JOB}/savepoints", json={"target-directory": "/sp", "cancel-job": False})
    assert response.status_code == 202 and response.json() == {"request-id": "req0001"}
    response = client.post(f"/jobs/{JOB}/savepoints", json={"target-directory": "/sp", "cancel-job": True})
    assert response.status_code == 202
    assert client.post(f"/jobs/{JOB}/stop", json={"targetDirectory": "/sp2"}).status_code == 202
    assert dispatcher.savepoints == [(JOB, "/sp", False), (JOB, "/sp", True), (JOB, "/sp2", True)]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "names"),
    [
        ("patch", f"/jobs/{JOB}?mode=stop", {}, 400, "mode:"),
        ("patch", f"/jobs/{ENDED}?mode=cancel", {}, 409, "already ended"),
        ("patch", "/jobs/11111111111111111111111111111111?mode=cancel", {}, 404, "not found"),
        ("post", f"/jobs/{JOB}/savepoints", {"json": {"target-directory": 7}}, 400, "target-directory:"),
        (
            "post",
            f"/jobs/{JOB}/savepoints",
            {"json": {"cancel-job": "yes", "target-directory": "/x"}},
            400,
            "cancel-job",
        ),
        ("post", f"/jobs/{JOB}/savepoints", {"json": {"target": "/x"}}, 400, "target: unknown field"),
        ("post", f"/jobs/{JOB}/savepoints", {"json": {}}, 400, "target-directory: required"),
        ("post", f"/jobs/{JOB}/savepoints", {"json": [1, 2]}, 400, "body: expected a JSON object"),
        (
            "post",
            f"/jobs/{JOB}/savepoints",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
            "body: not valid JSON",
        ),
        (
            "post",
            f"/jobs/{JOB}/savepoints",
            {"content": b"target=/x", "headers": {"content-type": "text/plain"}},
            415,
            "application/json",
        ),
        ("post", f"/jobs/{JOB}/stop", {"json": {"drain": True}}, 400, "drain:"),
        ("post", f"/jobs/{JOB}/savepoints", {"content": b"x" * (MAX_BODY_BYTES + 1)}, 413, "limit"),
    ],
)
def test_bad_changes_are_refused_naming_the_field(dispatcher, client, method, path, kwargs, status, names):
    response = getattr(client, method)(path, **kwargs)
    assert response.status_code == status, response.text
    assert names in response.json()["errors"][0]
    assert dispatcher.cancelled == [] and dispatcher.savepoints == []


def test_an_oversized_chunked_body_is_413(client):
    def chunks():
        for _ in range(20):
            yield b"x" * 8192

    response = client.post(f"/jobs/{JOB}/savepoints", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_a_secured_cluster_needs_the_bearer_token_to_change_jobs(dispatcher):
    client = client_for(dispatcher, token=TOKEN, scheme="https")
    missing = client.patch(f"/jobs/{JOB}?mode=cancel")
    assert missing.status_code == 401 and "Authorization: Bearer" in missing.json()["errors"][0]
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = client.patch(f"/jobs/{JOB}?mode=cancel", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and "invalid bearer token" in wrong.json()["errors"][0]
    basic = client.post(f"/jobs/{JOB}/stop", json={}, headers={"Authorization": "Basic " + TOKEN.decode()})
    assert basic.status_code == 401
    assert dispatcher.cancelled == [] and dispatcher.savepoints == []
    ok = client.patch(f"/jobs/{JOB}?mode=cancel", headers={"Authorization": f"Bearer {TOKEN.decode()}"})
    assert ok.status_code == 202 and dispatcher.cancelled == [JOB]
    assert client.get(f"/jobs/{JOB}").status_code == 200  # reading needs nothing


def test_a_tls_cluster_without_a_token_cannot_change_jobs_over_rest(dispatcher):
    client = client_for(dispatcher, token=None, scheme="https")
    response = client.patch(f"/jobs/{JOB}?mode=cancel", headers={"Authorization": "Bearer anything-at-all-here"})
    assert response.status_code == 403 and "security.token.file" in response.json()["errors"][0]
    assert dispatcher.cancelled == []


def test_cross_origin_changes_are_refused_even_on_an_insecure_cluster(dispatcher, client):
    response = client.patch(f"/jobs/{JOB}?mode=cancel", headers={"Origin": "http://evil.example"})
    assert response.status_code == 403 and "cross-origin" in response.json()["errors"][0]
    assert client.patch(f"/jobs/{JOB}?mode=cancel", headers={"Origin": "null"}).status_code == 403
    same = client.patch(f"/jobs/{JOB}?mode=cancel", headers={"Origin": "http://localhost:8081"})
    assert same.status_code == 202 and dispatcher.cancelled == [JOB]


# -- standby, dashboard, OpenAPI ------------------------------------------------------------------
def test_a_standby_redirects_to_the_leader_keeping_path_and_query(dispatcher):
    client = client_for(dispatcher, is_leader=lambda: False, leader_rest=lambda: "10.0.0.2:8081", scheme="https")
    response = client.get("/taskmanagers/tm-0/log?lines=5", follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == "https://10.0.0.2:8081/taskmanagers/tm-0/log?lines=5"
    none = client_for(dispatcher, is_leader=lambda: False, leader_rest=lambda: None)
    unknown = none.get("/overview")
    assert unknown.status_code == 503 and "no leading JobManager" in unknown.json()["errors"][0]


def test_the_dashboard_is_served_without_external_assets(client):
    index = client.get("/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    csp = index.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        asset = client.get(f"/dashboard/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
    for text in (index.text, client.get("/dashboard/app.js").text, client.get("/dashboard/style.css").text):
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    assert "innerHTML" not in client.get("/dashboard/app.js").text  # cluster text never parsed as HTML


def test_openapi_is_served_and_the_cdn_docs_are_off(client):
    spec = client.get("/openapi.json").json()
    assert {"/overview", "/jobs/{job_id}", "/jobs/{job_id}/vertices/{vertex_id}/backpressure"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    json.dumps(spec)


# -- the TaskManager's side of /taskmanagers/{id}/log ------------------------------------------------
class _Aborted(Exception):
    pass


class _Context:
    def abort(self, code, details):
        raise _Aborted(code, details)


class _Registry:
    session = "session-1"


def test_readlog_returns_a_bounded_tail_of_the_log_file_to_the_leader_only(tmp_path):
    import logging

    import grpc

    from taskmanager import servicer as tm_servicer

    path = tmp_path / "taskmanager-0.log"
    path.write_bytes(b"".join(b"line %06d\n" % i for i in range(200_000)))  # 2.4 MB
    handler = logging.FileHandler(path)
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = [handler]  # as sluice.logs.setup leaves it (pytest adds file handlers of its own)
    try:
        service = tm_servicer.TaskExecutorServicer(_Registry(), lambda tdd: None)  # type: ignore[arg-type, return-value]  # a fake registry; no task deployed
        reply = service.ReadLog(taskmanager_pb2.ReadLogRequest(leader_session_id="session-1"), _Context())
        assert len(reply.data) == tm_servicer.MAX_LOG_BYTES and reply.truncated and reply.file == path.name
        assert reply.data.endswith(b"line 199999\n") and reply.size == path.stat().st_size
        small = service.ReadLog(taskmanager_pb2.ReadLogRequest(leader_session_id="session-1", max_bytes=24), _Context())
        assert small.data == b"line 199998\nline 199999\n"
        with pytest.raises(_Aborted) as refused:
            service.ReadLog(taskmanager_pb2.ReadLogRequest(leader_session_id="another"), _Context())
        assert refused.value.args[0] == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        root.handlers[:] = saved
        handler.close()
