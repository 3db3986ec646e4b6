"""What the REST tests share: a fake dispatcher (duck-typed like jobmanager.dispatcher.Dispatcher), the
job it serves, and a TestClient of the REST app over it, calling it as http://localhost:8081."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from jobmanager.errors import InvalidRequest, JobNotFound, NotLeader
from jobmanager.rest.app import create_app
from sluice.v1 import common_pb2, jobmanager_pb2, taskmanager_pb2

JOB = "0123456789abcdef0123456789abcdef"
ENDED = "fedcba9876543210fedcba9876543210"
TOKEN = b"a-long-random-bearer-token-0123456789"
NOW = 1_700_000_100_000


def job_graph() -> common_pb2.JobGraph:
    g = common_pb2.JobGraph(name="page_views", max_parallelism=128)
    kinds = common_pb2.OperatorKind
    for op_id, name, kind in (
        ("src", "page-views", kinds.OPERATOR_KIND_SOURCE_GENERATOR),
        ("parse", "parse", kinds.OPERATOR_KIND_MAP),
        ("counts", "counts", kinds.OPERATOR_KIND_AGGREGATE),
        ("sink", "counts-sink", kinds.OPERATOR_KIND_SINK_FILE),
    ):
        g.operators.add(id=op_id, name=name, kind=kind, parallelism=2, config="{}")
    p = common_pb2.Partitioning
    g.edges.add(source="src", target="parse", partitioning=p.PARTITIONING_FORWARD)
    g.edges.add(source="parse", target="counts", partitioning=p.PARTITIONING_HASH, keys=["url"])
    g.edges.add(source="counts", target="sink", partitioning=p.PARTITIONING_FORWARD)
    return g


def task(chain: str, name: str, subtask: int, backpressured: float = 0.0, busy: float = 100.0) -> common_pb2.TaskStatus:
    return common_pb2.TaskStatus(
        operator=name,
        chain_id=chain,
        subtask=subtask,
        state=common_pb2.EXECUTION_STATE_RUNNING,
        taskmanager=f"127.0.0.1:{7000 + subtask}",
        counters=common_pb2.TaskCounters(records_in=100 * (subtask + 1), records_out=90 * (subtask + 1)),
        attempt=1,
        io=common_pb2.TaskIOMetrics(
            records_in_per_second=10.0,
            records_out_per_second=9.0,
            busy_ms_per_second=busy,
            idle_ms_per_second=1000.0 - busy - backpressured,
            backpressured_ms_per_second=backpressured,
        ),
    )


def job_info() -> common_pb2.JobInfo:
    info = common_pb2.JobInfo(
        job_id=JOB,
        name="page_views",
        state=common_pb2.JOB_STATE_RUNNING,
        submitted_ms=NOW - 60_000,
        restarts=1,
        leader="127.0.0.1:6123",
    )
    info.tasks.extend(
        [
            task("src", "page-views -> parse", 0, backpressured=50.0),
            task("src", "page-views -> parse", 1, backpressured=700.0),
            task("counts", "counts -> counts-sink", 0),
            task("counts", "counts -> counts-sink", 1),
        ]
    )
    done = common_pb2.CHECKPOINT_STATUS_COMPLETED
    info.checkpoints.add(checkpoint_id=1, status=done, trigger_ms=NOW - 5000, duration_ms=120, size_bytes=2048)
    info.checkpoints[-1].acks, info.checkpoints[-1].expected = 4, 4
    info.checkpoints.add(checkpoint_id=2, status=common_pb2.CHECKPOINT_STATUS_FAILED, failure="declined")
    info.checkpoints.add(
        checkpoint_id=3, status=done, trigger_ms=NOW - 1000, duration_ms=80, size_bytes=4096, full_size_bytes=10240
    )
    info.exceptions.add(
        time_ms=NOW - 30_000,
        attempt=0,
        task="page-views -> parse (1/2)",
        cause="ValueError: bad record",
        traceback='Traceback (most recent call last):\n  File "job.py", line 3\nValueError: bad record',
        restarted=True,
    )
    info.savepoints.add(
        request_id="abc123", status=common_pb2.SAVEPOINT_STATUS_COMPLETED, path="/sp/savepoint-3", checkpoint_id=3
    )
    info.savepoints.add(request_id="def456", status=common_pb2.SAVEPOINT_STATUS_FAILED, failure="disk full")
    info.metrics.number_of_completed_checkpoints = 2
    info.metrics.number_of_failed_checkpoints = 1
    return info


class FakeDispatcher:
    def __init__(self) -> None:
        self.leading = True
        self.cancelled: list[str] = []
        self.savepoints: list[tuple[str, str, bool]] = []

    def _lead(self) -> None:
        if not self.leading:
            raise NotLeader()

    def _info(self, job_id: str) -> common_pb2.JobInfo:
        if job_id == JOB:
            return job_info()
        if job_id == ENDED:
            return common_pb2.JobInfo(
                job_id=ENDED,
                name="failing",
                state=common_pb2.JOB_STATE_FAILED,
                submitted_ms=NOW - 9000,
                ended_ms=NOW - 8000,
                failure="ValueError: boom",
            )
        raise JobNotFound(job_id)

    def job_info(self, job_id: str) -> common_pb2.JobInfo:
        self._lead()
        return self._info(job_id)

    def job_graph(self, job_id: str) -> common_pb2.JobGraph:
        self._lead()
        if job_id == ENDED:
            raise ValueError("ended before this JobManager led")
        self._info(job_id)
        return job_graph()

    def list_jobs(self, page_size: int = 0, page_token: str = "") -> tuple[list[common_pb2.JobInfo], str]:
        self._lead()
        if page_token == "":
            first = self._info(JOB)
            first.ClearField("tasks")
            return [first], "next"
        if page_token == "next":
            return [self._info(ENDED)], ""
        raise InvalidRequest("page_token", "bad")

    def cluster_overview(self) -> jobmanager_pb2.ClusterOverview:
        self._lead()
        out = jobmanager_pb2.ClusterOverview(leader="127.0.0.1:6123", total_slots=4, free_slots=1)
        for i in range(2):
            out.taskmanagers.add(
                resource_id=f"tm-{i}",
                address=f"127.0.0.1:{7000 + i}",
                slots=2,
                free_slots=i,
                seconds_since_heartbeat=0.5,
            )
        return out

    def cancel(self, job_id: str) -> Any:
        self._lead()
        if self._info(job_id).state != common_pb2.JOB_STATE_RUNNING:
            raise ValueError(f"job {job_id} already ended FAILED")
        self.cancelled.append(job_id)

    def trigger_savepoint(self, job_id: str, target: str, stop: bool) -> str:
        self._lead()
        self._info(job_id)
        if not target:
            raise ValueError("savepoint directory: give --dir (a directory or URI of at most 4096 characters)")
        self.savepoints.append((job_id, target, stop))
        return "req0001"

    def read_taskmanager_log(self, resource_id: str, max_bytes: int) -> taskmanager_pb2.ReadLogResponse | None:
        self._lead()
        if resource_id == "tm-0":
            data = b"tail of a cut line\n" + b"".join(b"line %d\n" % i for i in range(10))
            return taskmanager_pb2.ReadLogResponse(data=data, truncated=True, file="taskmanager-0.log", size=9999)
        if resource_id == "tm-1":
            return taskmanager_pb2.ReadLogResponse()  # logs to stderr
        return None


def client_for(dispatcher: FakeDispatcher, **kwargs: Any) -> TestClient:
    kwargs.setdefault("is_leader", lambda: True)
    kwargs.setdefault("leader_rest", lambda: "127.0.0.1:8081")
    app = create_app(dispatcher, now_ms=lambda: NOW, **kwargs)  # type: ignore[arg-type]  # a duck-typed fake
    return TestClient(app, base_url="http://localhost:8081", raise_server_exceptions=False)
