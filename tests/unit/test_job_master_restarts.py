"""JobMaster's restart decisions, driven by scripted task reports through an
in-memory gateway (no sockets): the status says at once whether a failing job
will restart, and the restart delay counts from the failure, not from the end
of cancelling the other tasks."""

from __future__ import annotations

from typing import Any

import pytest

from jobmanager.job_master import JobMaster
from jobmanager.master.exception_history import HISTORY_SIZE, TRACEBACK_LIMIT
from jobmanager.master.status import TaskRecords, task_records
from jobmanager.scheduler.slot_pool import SlotId
from sluice.api import StreamExecutionEnvironment
from sluice.states import ExecutionState, FailureCause, JobStatus
from sluice.v1 import common_pb2


def records(records_in: int, records_out: int) -> TaskRecords:
    """A task state report's counters."""
    return TaskRecords(common_pb2.TaskCounters(records_in=records_in, records_out=records_out))


class Gateway:
    """What the dispatcher gives a JobMaster, recorded instead of sent."""

    session_id = "a1b2c3d4e5f6"
    address = "127.0.0.1:1"
    ha: Any = None  # a test sets a fake store

    def __init__(self) -> None:
        self.requested: list[int] = []
        self.calls: list[tuple[str, str]] = []

    def request_slots(self, _job_id: str, count: int, minimum: int | None = None, extend: bool = False) -> None:
        self.requested.append(count)

    def release_slots(self, job_id: str) -> None:
        pass

    def address_of(self, resource_id: str) -> str:
        return f"{resource_id}:1"

    def call_task(self, _job, execution_id: str, method: str, _request, on_reply=None) -> None:
        self.calls.append((method, execution_id))

    def release_partitions(self, job, resource_id: str, partition_ids, all_of_job: bool = False) -> None:
        pass

    def run_io(self, _job, fn, done) -> None:
        done(fn())

    def guard(self):
        return None


def job_graph(**config) -> common_pb2.JobGraph:
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    for key, value in config.items():
        env.set_config(key, value)
    env.from_collection([{"k": "a"}, {"k": "b"}]).print()
    return env.get_job_graph("restarts")


def running(jm: JobMaster, gw: Gateway, now: float) -> list[str]:
    """Give the current attempt its slots and report every task RUNNING."""
    jm.on_slots([SlotId(f"tm-{i}", 0) for i in range(gw.requested[-1])], now)
    eids = sorted(jm.graph.executions)
    for eid in eids:
        jm.on_task_state(eid, ExecutionState.RUNNING, "", TaskRecords(), False, now)
    assert jm.state == "RUNNING"
    return eids


def taskmanager_of(jm: JobMaster, eid: str) -> str:
    """The TaskManager of a deployed execution's slot."""
    slot = jm.graph.executions[eid].slot
    assert slot is not None, f"{eid} has no slot"
    return slot.resource_id


def fail_one(jm: JobMaster, eids: list[str], now: float) -> None:
    jm.on_task_state(eids[0], ExecutionState.FAILED, "Traceback ...\nValueError: bad record", TaskRecords(), False, now)


def cancelled(jm: JobMaster, eids: list[str], now: float) -> None:
    for eid in eids[1:]:
        jm.on_task_state(eid, ExecutionState.CANCELED, "", TaskRecords(), False, now)


def test_restart_delay_counts_from_the_failure():
    gw = Gateway()
    jm = JobMaster(
        "j1",
        job_graph(
            **{
                "restart-strategy": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": "2",
                "restart-strategy.fixed-delay.delay": "2s",
            }
        ),
        gw,
        None,
    )
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    fail_one(jm, eids, 10.0)
    assert jm.state == JobStatus.RESTARTING
    assert "then restart attempt 1 of 2" in jm.info(0).message
    cancelled(jm, eids, 11.5)  # the other tasks took 1.5 s to stop
    jm.tick(11.9)
    assert jm.attempt == 0 and jm.state == JobStatus.RESTARTING
    jm.tick(12.0)  # failure at 10 s + 2 s delay, not end of cancelling + 2 s
    assert jm.attempt == 1 and jm.restarts == 1 and jm.state == JobStatus.RESTARTING
    assert gw.requested == [2, 2]


def test_cancelling_longer_than_the_delay_restarts_as_soon_as_tasks_stopped():
    gw = Gateway()
    jm = JobMaster("j1", job_graph(**{"restart-strategy.fixed-delay.delay": "500ms"}), gw, None)
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    fail_one(jm, eids, 1.0)
    cancelled(jm, eids, 3.0)
    assert jm.attempt == 0
    jm.tick(3.0)
    assert jm.attempt == 1


@pytest.mark.parametrize(
    "config",
    [
        {"restart-strategy": "none"},
        {"restart-strategy.fixed-delay.attempts": "0"},
    ],
)
def test_failing_without_restart_left_is_not_shown_as_restarting(config):
    gw = Gateway()
    jm = JobMaster("j1", job_graph(**config), gw, None)
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    fail_one(jm, eids, 1.0)
    assert jm.state == "RUNNING"  # not RESTARTING: it will end FAILED once the other tasks stop
    assert "will not restart" in jm.info(0).message
    cancelled(jm, eids, 1.2)
    assert jm.state == "FAILED" and jm.restarts == 0
    assert "ValueError: bad record" in jm.failure and "not restarted" in jm.failure


def test_last_attempt_failing_is_not_shown_as_restarting():
    gw = Gateway()
    jm = JobMaster(
        "j1",
        job_graph(**{"restart-strategy.fixed-delay.attempts": "1", "restart-strategy.fixed-delay.delay": "0"}),
        gw,
        None,
    )
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    fail_one(jm, eids, 1.0)
    assert jm.state == JobStatus.RESTARTING
    cancelled(jm, eids, 1.1)
    jm.tick(1.1)
    eids = running(jm, gw, 1.2)
    fail_one(jm, eids, 2.0)
    assert jm.state == "RUNNING"
    assert "restart attempts exhausted (1 of 1)" in jm.info(0).message
    cancelled(jm, eids, 2.1)
    assert jm.state == "FAILED" and jm.restarts == 1


def test_cancel_while_failing_ends_canceled_not_restarting():
    gw = Gateway()
    jm = JobMaster("j1", job_graph(), gw, None)
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    fail_one(jm, eids, 1.0)
    jm.cancel(1.05)
    assert jm.state == "RUNNING"
    cancelled(jm, eids, 1.2)
    jm.tick(5.0)
    assert jm.state == "CANCELED" and jm.attempt == 0


# -- failure classification and exception history ----------------------------------------------
# The rule (jobmanager/scheduler/restart_strategy.py): a task's NON_RECOVERABLE report fails the
# job at once; the same task error from the same operator on 2 consecutive attempts with no
# checkpoint completed in between fails it too. Neither uses an attempt of the restart strategy.
IMPORT_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "taskmanager/task.py", line 198, in _setup\n'
    "    settings = graph.operator_settings(spec)\n"
    "ModuleNotFoundError: No module named 'my_helpers'\n"
)


def bad_record(n: int = 1) -> str:
    frame = '  File "job.py", line 3, in body\n    raise ValueError\n'
    return f"Traceback (most recent call last):\n{frame}ValueError: bad record {n}\n"


def restarting_job(attempts: int = 3, **config) -> tuple[JobMaster, Gateway]:
    config = {
        "restart-strategy.fixed-delay.attempts": str(attempts),
        "restart-strategy.fixed-delay.delay": "0",
        **config,
    }
    gw = Gateway()
    jm = JobMaster("j1", job_graph(**config), gw, None)
    jm.start(0.0)
    return jm, gw


def fail_attempt(jm: JobMaster, gw: Gateway, now: float, error: str, cause=FailureCause.TASK_ERROR, task: int = 0):
    """Run the current attempt, fail task `task` with `error`, stop the others, and tick."""
    eids = running(jm, gw, now)
    jm.on_task_state(eids[task], ExecutionState.FAILED, error, TaskRecords(), False, now + 0.1, cause=cause)
    cancel_others(jm, eids, eids[task], now + 0.2)
    jm.tick(now + 0.3)


def cancel_others(jm: JobMaster, eids: list[str], failed: str, now: float) -> None:
    for eid in eids:
        if eid != failed:
            jm.on_task_state(eid, ExecutionState.CANCELED, "", TaskRecords(), False, now)


def test_non_recoverable_report_fails_the_job_at_once_without_using_an_attempt():
    jm, gw = restarting_job()
    eids = running(jm, gw, 0.0)
    jm.on_task_state(
        eids[0], ExecutionState.FAILED, IMPORT_ERROR, TaskRecords(), False, 1.0, cause=FailureCause.NON_RECOVERABLE
    )
    assert jm.state == JobStatus.RUNNING  # winding down, and saying it will not restart
    assert "will not restart: non-recoverable error (ModuleNotFoundError) in task" in jm.info(0).message
    cancel_others(jm, eids, eids[0], 1.1)
    assert jm.state == JobStatus.FAILED and jm.restarts == 0 and jm.restart.restarts == 0
    assert jm.failure.endswith("(not restarted: non-recoverable error (ModuleNotFoundError) in task collection (1/1))")
    (entry,) = jm.info(0).exceptions
    assert (entry.attempt, entry.task, entry.cause, entry.restarted) == (
        0,
        "collection (1/1)",
        "ModuleNotFoundError: No module named 'my_helpers'",
        False,
    )
    assert entry.traceback == IMPORT_ERROR and entry.time_ms > 0


def test_same_error_on_two_consecutive_attempts_is_deterministic():
    jm, gw = restarting_job(attempts=3)
    fail_attempt(jm, gw, 0.0, bad_record(), task=1)  # print (1/2)
    assert jm.state == JobStatus.RESTARTING and jm.restarts == 1
    fail_attempt(jm, gw, 1.0, bad_record(), task=2)  # print (2/2): another subtask of the same operator
    assert jm.state == JobStatus.FAILED and jm.restarts == 1 and jm.restart.restarts == 1
    assert jm.failure.endswith(
        "(not restarted: the same error in task print on 2 consecutive attempts with no checkpoint "
        "completed in between: a deterministic error (ValueError: bad record 1))"
    )
    assert [(e.attempt, e.task, e.cause, e.restarted) for e in jm.info(0).exceptions] == [
        (0, "print (1/2)", "ValueError: bad record 1", True),
        (1, "print (2/2)", "ValueError: bad record 1", False),
    ]


@pytest.mark.parametrize(
    ("errors", "cause"),
    [
        ([bad_record(1), bad_record(2), bad_record(1)], FailureCause.TASK_ERROR),  # not the same error twice in a row
        (["ConnectionResetError: [Errno 104] Connection reset by peer"] * 3, FailureCause.TASK_ERROR),  # transient
        (["ChannelError: stream from 127.0.0.1:7 broke"] * 3, FailureCause.PEER_UNREACHABLE),
        ([bad_record()] * 3, None),  # a report without a cause is not counted
    ],
)
def test_transient_or_different_failures_use_the_restart_strategy(errors, cause):
    jm, gw = restarting_job(attempts=3)
    for i, error in enumerate(errors):
        fail_attempt(jm, gw, float(i), error, cause=cause)
    assert jm.state == JobStatus.RESTARTING and jm.restarts == 3
    fail_attempt(jm, gw, 9.0, "ValueError: other")
    assert jm.state == JobStatus.FAILED and "restart attempts exhausted (3 of 3)" in jm.failure


def test_lost_taskmanager_restarts_the_job_and_names_the_task_it_ran():
    jm, gw = restarting_job(attempts=3)
    running(jm, gw, 0.0)
    jm.on_tm_lost("tm-1", "no heartbeat for 6s (timeout 6s)", 0.1, "10.0.0.7:6122")
    jm.tick(20.0)  # the other task does not answer the cancel: the cancel timeout ends it
    jm.tick(20.1)
    assert jm.state == JobStatus.RESTARTING and jm.restarts == 1
    [entry] = jm.info(0).exceptions
    assert entry.restarted and entry.task == "print (2/2)"
    assert entry.cause == (
        "TaskManager tm-1 (10.0.0.7:6122) was lost while running task print (2/2): no heartbeat for 6s (timeout 6s)"
    )


def lose_taskmanagers(jm: JobMaster, gw: Gateway, lost: tuple[str, ...]) -> None:
    """One attempt per TaskManager in `lost`: run it (subtask i on tm-i), lose that TaskManager, restart."""
    for i, tm in enumerate(lost):
        running(jm, gw, float(i * 30))
        jm.on_tm_lost(tm, "no heartbeat for 6s (timeout 6s)", i * 30 + 0.1, f"{tm}:1")
        jm.tick(i * 30 + 20.0)  # the other task does not answer the cancel: the cancel timeout ends it
        jm.tick(i * 30 + 20.1)


def test_a_task_whose_taskmanagers_keep_dying_fails_its_job_at_the_per_job_limit():
    """A body that kills its TaskManager fails its job, instead of every TaskManager in turn."""
    jm, gw = restarting_job(attempts=10)
    lose_taskmanagers(jm, gw, ("tm-1", "tm-1"))  # print (2/2) both times
    assert jm.state == JobStatus.FAILED and jm.restarts == 1
    assert "task print (2/2) was on 2 TaskManagers that exited while it started or ran" in jm.failure
    assert "jobmanager.taskmanager-loss.max-per-job: 2" in jm.failure
    assert [e.restarted for e in jm.info(0).exceptions] == [True, False]
    assert "TaskManager tm-1 (tm-1:1) was lost while running task" in jm.info(0).exceptions[-1].cause


def test_losses_under_different_tasks_restart_the_job_under_its_strategy():
    """Unrelated losses (a host with two TaskManagers reboots, machines are drained) are not the job's doing."""
    jm, gw = restarting_job(attempts=10)
    lose_taskmanagers(jm, gw, ("tm-1", "tm-0"))
    assert jm.state == JobStatus.RESTARTING and jm.restarts == 2
    assert jm.tm_losses.exhausted() is None


def test_a_taskmanager_lost_while_the_attempt_fails_counts_nothing():
    """The second TaskManager of a rebooting host, lost while the attempt winds down after the first."""
    jm, gw = restarting_job(attempts=10)
    eids = running(jm, gw, 0.0)
    jm.on_tm_lost("tm-1", "no heartbeat for 6s (timeout 6s)", 0.1, "tm-1:1")
    jm.on_tm_lost("tm-0", "no heartbeat for 6s (timeout 6s)", 0.2, "tm-0:1")
    on = {taskmanager_of(jm, e): jm.graph.executions[e] for e in eids}
    assert jm.tm_losses.count(on["tm-1"].chain_id, on["tm-1"].subtask) == 1
    assert jm.tm_losses.count(on["tm-0"].chain_id, on["tm-0"].subtask) == 0
    jm.tick(0.3)
    assert jm.state == JobStatus.RESTARTING and jm.restarts == 1


def test_a_completed_checkpoint_resets_the_taskmanager_losses(tmp_path):
    jm, gw = restarting_job(
        attempts=10, **{"execution.checkpointing.interval": "100ms", "state.checkpoints.dir": str(tmp_path)}
    )
    eids = running(jm, gw, 0.0)
    jm.on_tm_lost("tm-1", "gone", 0.1, "tm-1:1")
    tm1 = next(e for e in eids if taskmanager_of(jm, e) == "tm-1")
    chain, subtask = jm.graph.executions[tm1].chain_id, jm.graph.executions[tm1].subtask
    assert jm.tm_losses.count(chain, subtask) == 1
    cancel_others(jm, eids, tm1, 0.2)
    jm.tick(5.0)  # the restart delay has passed: the next attempt
    eids = running(jm, gw, 6.0)
    jm.tick(7.0)  # triggers a checkpoint
    for eid in eids:
        jm.on_ack(eid, 1, b"{}", 0, 7.1)
    assert jm.latest is not None and jm.tm_losses.count(chain, subtask) == 0


def test_a_completed_checkpoint_between_two_equal_errors_keeps_restarting(tmp_path):
    jm, gw = restarting_job(
        attempts=3, **{"execution.checkpointing.interval": "100ms", "state.checkpoints.dir": str(tmp_path)}
    )
    fail_attempt(jm, gw, 0.0, bad_record())
    eids = running(jm, gw, 1.0)
    jm.tick(2.0)  # triggers a checkpoint
    assert any(method == "TriggerCheckpoint" for method, _ in gw.calls)
    for eid in eids:
        jm.on_ack(eid, 1, b"{}", 0, 2.1)
    assert jm.latest is not None and jm.latest.checkpoint_id == 1  # completed: the job made progress
    jm.on_task_state(
        eids[0], ExecutionState.FAILED, bad_record(), TaskRecords(), False, 3.0, cause=FailureCause.TASK_ERROR
    )
    cancel_others(jm, eids, eids[0], 3.1)
    jm.tick(3.2)
    assert jm.state == JobStatus.RESTARTING and jm.restarts == 2
    fail_attempt(jm, gw, 4.0, bad_record())  # no checkpoint since the last one: deterministic now
    assert jm.state == JobStatus.FAILED and "a deterministic error" in jm.failure


def test_a_recovered_job_that_finishes_keeps_why_it_restarted():
    records = []

    class Ha:
        def put_job_result(self, _guard, job_id, info):
            records.append((job_id, info))

        def compact_failure(self, _job_id, failure):
            return failure

        def put_job_metrics(self, _guard, job_id, metrics):
            counters.append((job_id, metrics.num_restarts))

    counters: list[tuple[str, int]] = []
    jm, gw = restarting_job(attempts=3, **{"restart-strategy.fixed-delay.delay": "1s"})
    gw.ha = Ha()
    fail_attempt(jm, gw, 0.0, bad_record())
    assert jm.info(0).message == "restarting after: ValueError: bad record 1"  # its exception line
    jm.tick(1.1)
    for eid in running(jm, gw, 1.2):
        jm.on_task_state(eid, ExecutionState.FINISHED, "", TaskRecords(), False, 2.0)
    info = jm.info(0)
    assert info.failure == ""  # a FINISHED job has no failure: the history says why it restarted
    assert [(e.attempt, e.task, e.cause, e.restarted) for e in info.exceptions] == [
        (0, "collection (1/1)", "ValueError: bad record 1", True)
    ]
    (job_id, stored), *_ = records  # the job result store keeps the history across a failover
    assert job_id == "j1" and list(stored.exceptions) == list(info.exceptions)
    assert counters[-1] == ("j1", 1)  # the restart count is kept for a new leader (JobInfo.metrics)


def test_history_is_bounded():
    jm, gw = restarting_job(
        attempts=3,
        **{
            "restart-strategy": "exponential-delay",
            "restart-strategy.exponential-delay.initial-backoff": "1ms",
            "restart-strategy.exponential-delay.max-backoff": "1ms",
        },
    )
    long_error = "x" * 100_000 + "\n" + bad_record()
    for i in range(40):
        fail_attempt(jm, gw, float(i) * 100, long_error if i == 39 else bad_record(i))
    entries = jm.info(0).exceptions
    assert len(entries) == HISTORY_SIZE and [e.attempt for e in entries] == list(range(8, 40))
    last = entries[-1].traceback
    assert len(last) < TRACEBACK_LIMIT + 100 and "characters cut" in last and last.endswith(bad_record())
    assert entries[-1].cause == "ValueError: bad record 1"  # the exception line survives the cut


def test_cancel_while_failing_records_the_failure_as_not_restarted():
    jm, gw = restarting_job()
    eids = running(jm, gw, 0.0)
    jm.on_task_state(
        eids[0], ExecutionState.FAILED, bad_record(), TaskRecords(), False, 1.0, cause=FailureCause.TASK_ERROR
    )
    jm.cancel(1.05)
    cancel_others(jm, eids, eids[0], 1.2)
    assert jm.state == JobStatus.CANCELED
    assert [(e.cause, e.restarted) for e in jm.info(0).exceptions] == [("ValueError: bad record 1", False)]


def test_a_finished_job_lists_each_checkpoint_once(tmp_path):
    """The status's checkpoint history: the ended attempt's checkpoints, each once."""
    gw = Gateway()
    config = {"execution.checkpointing.interval": "100ms", "state.checkpoints.dir": str(tmp_path)}
    jm = JobMaster("j1", job_graph(**config), gw, None)
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    jm.tick(1.0)
    triggered = [eid for method, eid in gw.calls if method == "TriggerCheckpoint"]
    assert triggered, gw.calls
    for eid in eids:
        assert jm.on_ack(eid, 1, b'{"operators": {}, "keyed": {}}', 10, 1.1) == "SUCCESS"
    assert jm.latest is not None and jm.latest.checkpoint_id == 1
    for eid in eids:
        jm.on_task_state(eid, ExecutionState.FINISHED, "", records(1, 1), False, 2.0)
    assert jm.state == JobStatus.FINISHED
    assert [c.checkpoint_id for c in jm.info(0).checkpoints] == [1]


def test_a_rebalance_waits_for_every_subtasks_key_group_load():
    """Until a subtask's heartbeat brought its load, the load is unknown, not zero: planning then
    could move key groups from the idler subtask to the busier one."""
    from sluice.v1 import jobmanager_pb2

    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_collection([{"url": "a"}, {"url": "b"}]).key_by("url").count().uid("counts").print()
    gw = Gateway()
    jm = JobMaster("j1", env.get_job_graph("keyed"), gw, None)
    jm.start(0.0)
    eids = running(jm, gw, 0.0)
    counts = [e for e in eids if jm.graph.executions[e].chain_id == jm.chain_of["counts"].id]
    beat = jobmanager_pb2.TaskMetrics(
        execution_id=counts[1], counters=common_pb2.TaskCounters(records_in=10), key_group_records={64: 10}
    )
    jm.metrics[counts[1]] = task_records(beat)
    with pytest.raises(ValueError, match="load of subtask 0 of 'counts' has not reached the JobManager yet"):
        jm._key_group_load("counts")
    jm.metrics[counts[0]] = task_records(jobmanager_pb2.TaskMetrics(execution_id=counts[0], key_group_records={1: 90}))
    jm.on_task_state(
        counts[0], ExecutionState.RUNNING, "", records(90, 0), False, 1.0
    )  # a later state report keeps the load
    assert jm._key_group_load("counts") == {1: 90, 64: 10}
