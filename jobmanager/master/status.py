"""A job's status for clients (`JobInfo`), computed from a snapshot: a pure function.

The JobMaster (jobmanager/job_master.py) takes a `JobSnapshot` of what it knows under
the dispatcher's lock; `job_info` turns it into the proto clients see. Nothing here reads a
clock, a socket or the lock: the wall-clock and monotonic times arrive in the snapshot, so
a unit test builds a snapshot by hand and checks the JobInfo it gives.

Also here: `TaskRecords`, a task's record counters as its TaskManager last reported them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from jobmanager.checkpoint.coordinator import CheckpointStats
from jobmanager.checkpoint.savepoints import SavepointRequest
from jobmanager.master.exception_history import ExceptionEntry
from jobmanager.scheduler import execution_graph as eg
from sluice.states import ExecutionState, JobStatus, to_proto
from sluice.v1 import common_pb2

BAD_RECORD_SAMPLES = 5  # in a job's status: the first tasks' samples, at most this many
SAMPLE_CHARS = 200  # each sample truncated to this many characters, whatever a TaskManager sent
CHECKPOINTS_SHOWN = 50  # the last checkpoints of all the attempts' coordinators the status lists


NO_COUNTERS = common_pb2.TaskCounters()  # a task not heard from yet


class TaskRecords(NamedTuple):
    """A task's counters as its TaskManager last reported them (heartbeats and task states);
    `TaskCounters` in proto/sluice/v1/common.proto says what each counts."""

    counters: common_pb2.TaskCounters = NO_COUNTERS  # never changed in place: a report brings new ones
    bad_record_samples: tuple[str, ...] = ()  # a few malformed lines, truncated (the TaskManager's)
    watermark: int | None = None  # the task's current input watermark (ms)
    key_group_records: tuple[tuple[int, int], ...] = ()  # a keyed task's input rows per key group (heartbeats)
    io: common_pb2.TaskIOMetrics | None = None  # rates, time shares, queues (heartbeats; docs/monitoring.md)
    heartbeat: bool = False  # from a heartbeat (which carries the key-group loads), not only a state report
    heartbeat_at: float | None = None  # the JobManager's clock when that heartbeat arrived


def task_records(m: Any) -> TaskRecords:
    """The counters of a heartbeat's `TaskMetrics` or a `TaskExecutionState` (same fields)."""
    counters = common_pb2.TaskCounters()
    counters.CopyFrom(m.counters)
    return TaskRecords(
        counters,
        tuple(s[:SAMPLE_CHARS] for s in m.bad_record_samples[:BAD_RECORD_SAMPLES]),
        m.watermark if m.HasField("watermark") else None,
        tuple(sorted(m.key_group_records.items())) if hasattr(m, "key_group_records") else (),
        finite_io(m.io) if hasattr(m, "io") and m.HasField("io") else None,
        hasattr(m, "key_group_records"),
    )


def finite_io(io: common_pb2.TaskIOMetrics) -> common_pb2.TaskIOMetrics:
    """A TaskManager's I/O metrics with what no honest one sends (NaN, infinities, negative
    values) made 0, so that JSON clients and Prometheus get numbers."""
    out = common_pb2.TaskIOMetrics()
    out.CopyFrom(io)
    for field, value in out.ListFields():
        if isinstance(value, float) and (not math.isfinite(value) or value < 0):
            setattr(out, field.name, 0.0)
        elif isinstance(value, int) and value < 0:
            setattr(out, field.name, 0)
    return out


@dataclasses.dataclass(frozen=True)
class TaskRow:
    """One execution of the current attempt, as the status lists it."""

    operator: str
    subtask: int
    state: ExecutionState
    taskmanager: str  # its TaskManager's address, else its resource id, else ""
    error: str
    chain_id: str
    execution_attempt: int
    speculative: bool
    region: str
    records: TaskRecords


def task_rows(
    g: eg.ExecutionGraph, metrics: Mapping[str, TaskRecords], address_of: Callable[[str], str | None]
) -> list[TaskRow]:
    """The rows of the current attempt's executions, with their TaskManagers' addresses."""
    rows = []
    for ex in g.executions.values():
        address = address_of(ex.slot.resource_id) if ex.slot is not None else ""
        rows.append(
            TaskRow(
                ex.name,
                ex.subtask,
                ex.state,
                address or (ex.slot.resource_id if ex.slot else ""),
                ex.error,
                ex.chain_id,
                ex.run,
                ex.speculative,
                g.region_name(ex),
                metrics.get(ex.execution_id, TaskRecords()),
            )
        )
    return rows


class StaleLoads(ValueError):
    """Some subtask's key-group load was last reported before the time asked for."""


def key_group_load(
    job_id: str,
    operator: str,
    chain_id: str | None,
    executions: Mapping[str, eg.Execution],
    metrics: Mapping[str, TaskRecords],
    since: float | None = None,
) -> dict[int, int]:
    """Input rows per key group of the tasks of chain `chain_id` (running `operator`), from their
    last heartbeats; ValueError while one has not reported its load yet, StaleLoads while one's
    last heartbeat arrived before `since` (the JobManager's clock)."""
    load: dict[int, int] = {}
    stale: list[int] = []
    for eid, ex in executions.items():
        if chain_id is not None and ex.chain_id == chain_id:
            records = metrics.get(eid, TaskRecords())
            if not records.heartbeat:  # its load is unknown, not zero: a plan now could move the wrong way
                raise ValueError(
                    f"job {job_id}: the key-group load of subtask {ex.subtask} of {operator!r} has not "
                    "reached the JobManager yet (heartbeats carry it); try again in a moment"
                )
            if since is not None and (records.heartbeat_at is None or records.heartbeat_at < since):
                stale.append(ex.subtask)
            load.update(records.key_group_records)
    if stale:
        raise StaleLoads(
            f"job {job_id}: the key-group loads of subtask(s) {', '.join(map(str, sorted(stale)))} of {operator!r} "
            "were last reported before the request (heartbeats carry them)"
        )
    return load


@dataclasses.dataclass(frozen=True)
class CheckpointStatsSnapshot:
    """A job's checkpoints and savepoints as its status shows them (Flink's CheckpointStatsSnapshot)."""

    latest_checkpoint: int | None = None
    restored_checkpoint: int | None = None
    restored_savepoint: str = ""
    stopped_with: str = ""  # the savepoint a job stopped with
    history: Sequence[CheckpointStats] = ()  # oldest first; the last CHECKPOINTS_SHOWN are listed
    savepoints: Sequence[SavepointRequest] = ()


@dataclasses.dataclass(frozen=True)
class RestartStatus:
    """Where a job stands with its restarts, for the message that says what it is doing."""

    pending: bool  # between attempts: the restart delay runs
    decision: tuple[bool, str] | None  # the restart decision of a failing attempt: (restart, reason)
    restarting_regions: int
    regions: int


@dataclasses.dataclass(frozen=True)
class JobSnapshot:
    """What `job_info` needs of a job, taken under the dispatcher's lock."""

    job_id: str
    name: str
    state: JobStatus
    terminal: bool
    attempt: int
    restarts: int
    leader: str
    message: str
    failure: str
    submitted_ms: int
    ended_ms: int
    slots_required: int
    free_slots: int
    metrics: common_pb2.JobMetrics
    now_ms: int  # wall clock, for durations of what has not ended
    monotonic_now: float  # the coordinators' clock, for checkpoints' trigger times and durations
    graph_state: JobStatus  # the execution graph's own state (FAILING, CANCELLING ...)
    restart: RestartStatus
    checkpointing: CheckpointStatsSnapshot = dataclasses.field(default_factory=CheckpointStatsSnapshot)
    tasks: Sequence[TaskRow] = ()
    reconfigurations: Sequence[common_pb2.ReconfigurationInfo] = ()
    exceptions: Sequence[ExceptionEntry] = ()


def _message(s: JobSnapshot) -> str:
    """What the job is doing now, when it is between states."""
    cause = s.exceptions[-1].cause if s.exceptions else "failure"
    r = s.restart
    if s.terminal:
        return s.message
    if r.pending:
        return f"restarting after: {cause}"
    if s.graph_state == JobStatus.FAILING:
        if r.decision is None:
            return "failing: cancelling the remaining tasks"
        restart, reason = r.decision
        return f"failing: cancelling the remaining tasks; {'then ' if restart else 'will not restart: '}{reason}"
    if s.graph_state == JobStatus.CANCELLING:
        return "cancelling"
    if r.restarting_regions:
        return f"restarting {r.restarting_regions} of {r.regions} regions after: {cause}"
    return s.message


def job_info(s: JobSnapshot) -> common_pb2.JobInfo:
    """The job's status for clients, states as proto enums."""
    info = common_pb2.JobInfo(
        job_id=s.job_id,
        name=s.name,
        state=to_proto(s.state),
        restarts=s.restarts,
        leader=s.leader,
        message=_message(s),
        failure=s.failure if s.state == JobStatus.FAILED else "",
        submitted_ms=s.submitted_ms,
        ended_ms=s.ended_ms,
        slots_required=s.slots_required,
        slots_available=s.free_slots,
    )
    cp = s.checkpointing
    if cp.latest_checkpoint is not None:
        info.last_completed_checkpoint = cp.latest_checkpoint
    if cp.restored_checkpoint is not None:
        info.restored_checkpoint = cp.restored_checkpoint
    if cp.restored_savepoint:
        info.restored_savepoint = cp.restored_savepoint
    info.metrics.CopyFrom(s.metrics)
    info.savepoint = cp.stopped_with if s.state == JobStatus.FINISHED else ""
    info.reconfigurations.extend(s.reconfigurations)
    for r in cp.savepoints:
        info.savepoints.add(
            request_id=r.request_id,
            status=to_proto(r.status),
            path=r.path,
            failure=r.failure,
            checkpoint_id=r.checkpoint_id,
            stop=r.stop,
            trigger_ms=r.trigger_ms,
            duration_ms=(r.end_ms or s.now_ms) - r.trigger_ms,
        )
    for t in s.tasks:
        records = t.records
        info.tasks.add(
            operator=t.operator,
            subtask=t.subtask,
            state=to_proto(t.state),
            taskmanager=t.taskmanager,
            error=t.error,
            counters=records.counters,
            bad_record_samples=records.bad_record_samples,
            watermark=records.watermark,
            io=records.io,
            chain_id=t.chain_id,
            attempt=s.attempt,
            execution_attempt=t.execution_attempt,
            speculative=t.speculative,
            region=t.region,
        )
        info.records_dropped += records.counters.records_dropped
        info.records_late_dropped += records.counters.records_late_dropped
        room = BAD_RECORD_SAMPLES - len(info.bad_record_samples)
        info.bad_record_samples.extend(records.bad_record_samples[: max(room, 0)])
    for st in list(cp.history)[-CHECKPOINTS_SHOWN:]:
        end = st.end_time if st.end_time is not None else s.monotonic_now
        info.checkpoints.add(
            checkpoint_id=st.checkpoint_id,
            status=to_proto(st.status),
            trigger_ms=int(s.now_ms - (s.monotonic_now - st.trigger_time) * 1000),
            duration_ms=int((end - st.trigger_time) * 1000),
            size_bytes=st.size,
            full_size_bytes=st.full_size,
            failure=st.failure,
            acks=st.acks,
            expected=st.expected,
        )
    for e in s.exceptions:
        info.exceptions.add(
            time_ms=e.time_ms,
            attempt=e.attempt,
            task=e.task,
            cause=e.cause,
            traceback=e.traceback,
            restarted=e.restarted,
        )
    return info
