"""The job status view (jobmanager/master/status.py): a JobInfo computed from a hand-built
snapshot, without a JobMaster, a dispatcher or a socket; and the savepoint request records
(jobmanager/checkpoint/savepoints.py) it shows."""

from __future__ import annotations

import dataclasses

import pytest

from jobmanager.checkpoint.coordinator import CheckpointStats
from jobmanager.checkpoint.savepoints import SavepointRequest, SavepointRequests, check_target
from jobmanager.master.exception_history import ExceptionEntry, ExceptionHistory, bounded
from jobmanager.master.status import (
    BAD_RECORD_SAMPLES,
    CHECKPOINTS_SHOWN,
    CheckpointStatsSnapshot,
    JobSnapshot,
    RestartStatus,
    TaskRecords,
    TaskRow,
    job_info,
)
from sluice.states import CheckpointStatus, ExecutionState, JobStatus, SavepointStatus, from_proto
from sluice.v1 import common_pb2

NO_RESTART = RestartStatus(pending=False, decision=None, restarting_regions=0, regions=1)


def restart(**changes) -> RestartStatus:
    return dataclasses.replace(NO_RESTART, **changes)


def snapshot(**changes) -> JobSnapshot:
    base = JobSnapshot(
        job_id="j1",
        name="job",
        state=JobStatus.RUNNING,
        terminal=False,
        attempt=2,
        restarts=1,
        leader="127.0.0.1:6123",
        message="",
        failure="Traceback ...\nValueError: bad",
        submitted_ms=1_000,
        ended_ms=0,
        slots_required=2,
        free_slots=3,
        metrics=common_pb2.JobMetrics(number_of_completed_checkpoints=4),
        now_ms=100_000,
        monotonic_now=50.0,
        graph_state=JobStatus.RUNNING,
        restart=NO_RESTART,
    )
    return dataclasses.replace(base, **changes)


def row(subtask: int, records: TaskRecords) -> TaskRow:
    return TaskRow("map", subtask, ExecutionState.RUNNING, "tm:1", "", "c1", 0, False, "r0", records)


def test_a_running_job_shows_its_fields_and_no_failure():
    checkpointing = CheckpointStatsSnapshot(latest_checkpoint=7, restored_checkpoint=5, restored_savepoint="/sp/1")
    info = job_info(snapshot(checkpointing=checkpointing))
    assert from_proto(JobStatus, info.state) == JobStatus.RUNNING
    assert (info.job_id, info.name, info.restarts, info.leader) == ("j1", "job", 1, "127.0.0.1:6123")
    assert (info.slots_required, info.slots_available) == (2, 3)
    assert (info.last_completed_checkpoint, info.restored_checkpoint, info.restored_savepoint) == (7, 5, "/sp/1")
    assert info.failure == "" and info.message == ""
    assert info.metrics.number_of_completed_checkpoints == 4


def test_a_failed_job_shows_its_failure_and_a_finished_one_the_savepoint_it_stopped_with():
    failed = job_info(snapshot(state=JobStatus.FAILED, terminal=True, message="left"))
    assert failed.failure.endswith("ValueError: bad") and failed.message == "left"
    stopped = CheckpointStatsSnapshot(stopped_with="/sp/2")
    finished = job_info(snapshot(state=JobStatus.FINISHED, terminal=True, checkpointing=stopped))
    assert finished.savepoint == "/sp/2" and finished.failure == ""
    assert job_info(snapshot(checkpointing=stopped)).savepoint == ""  # only once it finished


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"restart": restart(pending=True)}, "restarting after: ValueError: bad"),
        ({"graph_state": JobStatus.FAILING}, "failing: cancelling the remaining tasks"),
        (
            {"graph_state": JobStatus.FAILING, "restart": restart(decision=(True, "fixed-delay 1 of 3"))},
            "failing: cancelling the remaining tasks; then fixed-delay 1 of 3",
        ),
        (
            {"graph_state": JobStatus.FAILING, "restart": restart(decision=(False, "deterministic"))},
            "failing: cancelling the remaining tasks; will not restart: deterministic",
        ),
        ({"graph_state": JobStatus.CANCELLING}, "cancelling"),
        ({"restart": restart(restarting_regions=1, regions=3)}, "restarting 1 of 3 regions after: ValueError: bad"),
        ({"message": "waiting for slots"}, "waiting for slots"),
    ],
)
def test_the_message_says_what_the_job_is_doing(changes, message):
    entry = ExceptionEntry(1, 0, "map (1/2)", "ValueError: bad", "Traceback", True)
    assert job_info(snapshot(exceptions=[entry], **changes)).message == message


def test_tasks_carry_their_counters_and_the_job_sums_drops_and_keeps_a_few_samples():
    samples = tuple(f"line {i}" for i in range(4))
    counters = common_pb2.TaskCounters
    rows = [row(0, TaskRecords(counters(records_in=3, records_dropped=2), samples)), row(1, TaskRecords())]
    rows.append(row(2, TaskRecords(counters(records_dropped=1, records_late_dropped=5), samples)))
    info = job_info(snapshot(tasks=rows))
    assert [t.subtask for t in info.tasks] == [0, 1, 2] and info.tasks[0].counters.records_in == 3
    assert all(t.attempt == 2 and t.region == "r0" and t.taskmanager == "tm:1" for t in info.tasks)
    assert (info.records_dropped, info.records_late_dropped) == (3, 5)
    assert list(info.bad_record_samples) == [*samples, "line 0"][:BAD_RECORD_SAMPLES]


def test_checkpoints_are_the_last_ones_with_times_from_the_snapshots_clocks():
    history = [
        CheckpointStats(i, CheckpointStatus.COMPLETED, 10.0 + i, 11.0 + i, 100, 2, 2)
        for i in range(1, CHECKPOINTS_SHOWN + 3)
    ]
    history.append(CheckpointStats(99, CheckpointStatus.IN_PROGRESS, 48.0, None, 0, 1, 2))
    info = job_info(snapshot(checkpointing=CheckpointStatsSnapshot(history=history)))
    assert len(info.checkpoints) == CHECKPOINTS_SHOWN and info.checkpoints[-1].checkpoint_id == 99
    last = info.checkpoints[-1]
    assert last.trigger_ms == 100_000 - 2_000 and last.duration_ms == 2_000  # still running: until now
    assert info.checkpoints[-2].duration_ms == 1_000


def test_savepoints_and_exceptions_are_listed_in_order():
    running = SavepointRequest("a", False, "/sp", 90_000)
    done = SavepointRequest("b", True, "/sp", 80_000, SavepointStatus.COMPLETED, 3, "/sp/b", "", 85_000)
    entry = ExceptionEntry(5, 1, "map (1/2)", "ValueError: bad", "Traceback", False)
    info = job_info(snapshot(checkpointing=CheckpointStatsSnapshot(savepoints=[done, running]), exceptions=[entry]))
    assert [s.request_id for s in info.savepoints] == ["b", "a"]
    assert info.savepoints[0].duration_ms == 5_000 and info.savepoints[1].duration_ms == 10_000
    assert info.savepoints[0].path == "/sp/b" and info.savepoints[0].stop
    assert [(e.attempt, e.cause, e.restarted) for e in info.exceptions] == [(1, "ValueError: bad", False)]


def test_savepoint_requests_complete_only_for_their_checkpoint_and_one_runs_at_a_time():
    requests = SavepointRequests()
    requests.started(SavepointRequest("a", True, "/sp", 1))
    with pytest.raises(ValueError, match="in progress"):
        requests.started(SavepointRequest("b", False, "/sp", 2))
    requests.triggered(4)
    assert requests.completed(3, "/sp/x", 10) is None and requests.in_progress  # another checkpoint's
    done = requests.completed(4, "/sp/a", 10)
    assert done is not None and done.status == SavepointStatus.COMPLETED and requests.stopped_with == "/sp/a"
    assert requests.current is None and requests.failed("late", 11) is None
    with pytest.raises(ValueError, match="--dir"):
        check_target("x" * 4097)


def test_the_exception_history_stamps_a_failure_when_it_began_and_bounds_tracebacks():
    history = ExceptionHistory()
    history.failed(500)
    history.record(None, "x" * 10_000, attempt=3, restarted=True, now_ms=900)
    history.record(None, "short", attempt=4, restarted=False, now_ms=900)
    assert [(e.time_ms, e.attempt, e.restarted) for e in history] == [(500, 3, True), (900, 4, False)]
    assert history[0].traceback == bounded("x" * 10_000) and len(history[0].traceback) < 10_000
