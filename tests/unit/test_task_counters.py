"""A task's counters are one message (`TaskCounters`, proto/sluice/v1/common.proto): every
field is named by sluice/metrics/counters.py and shown by the REST API, `sluice status
--json` and the TaskManager's Prometheus samples without being listed there; an operator
counts into the task's own through `OperatorContext.counters`."""

from __future__ import annotations

from typing import Any, Self

from helpers import wait_until

from jobmanager.rest import views
from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.cli import status
from sluice.graph import OperatorKind
from sluice.metrics import counters
from sluice.metrics.task_metrics import TaskIO
from sluice.states import ExecutionState, to_proto
from sluice.v1 import common_pb2, taskmanager_pb2
from taskmanager import metrics
from taskmanager.network.partition import PartitionManager
from taskmanager.operators import registry
from taskmanager.operators.base import Operator, OperatorContext, Payload
from taskmanager.spark_engine import Batch, SparkEngine
from taskmanager.task import Task

FIELDS = [f.name for f in common_pb2.TaskCounters.DESCRIPTOR.fields]


def every_counter() -> common_pb2.TaskCounters:
    """Each counter a different value."""
    return common_pb2.TaskCounters(**{name: 10 + i for i, name in enumerate(FIELDS)})


def test_every_field_has_distinct_names_everywhere():
    assert [c.field for c in counters.COUNTERS] == FIELDS
    for attr in ("rest", "metric"):
        names = [getattr(c, attr) for c in counters.COUNTERS]
        assert len(set(names)) == len(names), f"two counters share a {attr} name: {names}"
    assert set(counters.NAMES) <= set(FIELDS), "NAMES names a field TaskCounters does not have"


def test_a_counter_without_names_gets_them_from_its_field():
    c = counters._derived("records_retried_twice")
    assert (c.rest, c.column, c.metric, c.vertex) == (
        "records-retried-twice",
        "retried twice",
        "numRecordsRetriedTwice",
        True,
    )


def test_rest_status_json_and_prometheus_show_every_field():
    values = every_counter()
    task = common_pb2.TaskStatus(operator="src", state=to_proto(ExecutionState.RUNNING), counters=values)
    rest = views.subtask(task, {})["metrics"]
    assert {c.rest: rest[c.rest] for c in counters.COUNTERS} == counters.rest_metrics(values)
    vertex = views.vertex_metrics([task, task])
    assert all(vertex[c.rest] == 2 * getattr(values, c.field) for c in counters.COUNTERS if c.vertex)
    info = common_pb2.JobInfo(job_id="j", name="n", state=common_pb2.JOB_STATE_RUNNING)
    info.tasks.append(task)
    shown = status.job_dict(info)["tasks"][0]
    assert {name: shown[name] for name in FIELDS} == counters.values(values)

    class FakeTask:
        job_id, name, tag = "j", "src", "[t]"
        tdd = taskmanager_pb2.TaskDeploymentDescriptor(subtask_index=0, attempt=0)
        watermark = None

        def io_snapshot(self, now: float) -> Any:
            return TaskIO().snapshot(now)

        def counters(self) -> common_pb2.TaskCounters:
            return values

    samples = {s.name: s.value for s in metrics.task_samples(FakeTask(), "tm", 1.0)}  # type: ignore[arg-type]  # a fake task
    for c in counters.COUNTERS:
        assert samples[f"taskmanager_job_task_{c.metric}"] == getattr(values, c.field)


class CountingSink(Operator):
    """A sink that counts every row it takes as dropped, straight into the task's counters."""

    is_sink = True

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:
        return cls(ctx)

    def process(self, batch: Batch) -> Batch | None:
        assert self.ctx.counters is not None
        self.ctx.counters.records_dropped += batch.table().num_rows
        return None


def test_an_operator_counts_into_its_tasks_counters(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.OPERATORS, OperatorKind.SINK_FILE, CountingSink)
    env = StreamExecutionEnvironment()
    env.from_collection([{"n": i} for i in range(7)]).sink_to(FileSink(str(tmp_path / "out")))
    job = env.get_job_graph("count")
    (chain,) = graph.build_chains(job)
    tdd = taskmanager_pb2.TaskDeploymentDescriptor(
        job_id="a" * 32,
        execution_id="e0",
        chain_id=chain.id,
        operator_ids=chain.operator_ids,
        subtask_index=0,
        parallelism=1,
        job=job,
    )

    class Reports:
        states: list[ExecutionState] = []

        def report(self, _task: Task, state: ExecutionState, *_args: Any, **_kw: Any) -> None:
            self.states.append(state)

    reports = Reports()
    task = Task(tdd, SparkEngine(1), PartitionManager(), "127.0.0.1:1", reports)  # type: ignore[arg-type]  # reports only
    task.start()
    wait_until(lambda: ExecutionState.FINISHED in reports.states, 10.0, "the task finished")
    task.join(5.0)
    got = task.counters()
    assert (got.records_in, got.records_out, got.records_dropped) == (7, 7, 7)
