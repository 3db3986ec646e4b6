"""JobMaster's restart decisions, driven by scripted task reports through an
in-memory gateway (no sockets): the status says at once whether a failing job
will restart, and the restart delay counts from the failure, not from the end
of cancelling the other tasks."""

from __future__ import annotations

import pytest

from jobmanager.job_master import JobMaster
from jobmanager.scheduler.slot_pool import SlotId
from sluice.api import StreamExecutionEnvironment
from sluice.states import JobStatus


class Gateway:
    """What the dispatcher gives a JobMaster, recorded instead of sent."""

    session_id = "a1b2c3d4e5f6"
    address = "127.0.0.1:1"
    ha = None

    def __init__(self) -> None:
        self.requested: list[int] = []
        self.calls: list[tuple[str, str]] = []

    def request_slots(self, _job_id: str, count: int) -> None:
        self.requested.append(count)

    def release_slots(self, job_id: str) -> None:
        pass

    def address_of(self, resource_id: str) -> str:
        return f"{resource_id}:1"

    def call_task(self, _job, execution_id: str, method: str, _request) -> None:
        self.calls.append((method, execution_id))

    def run_io(self, _job, fn, done) -> None:
        done(fn())

    def guard(self):
        return None


def job_graph(**config) -> object:
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
        jm.on_task_state(eid, "RUNNING", "", (0, 0), False, now)
    assert jm.state == "RUNNING"
    return eids


def fail_one(jm: JobMaster, eids: list[str], now: float) -> None:
    jm.on_task_state(eids[0], "FAILED", "Traceback ...\nValueError: bad record", (0, 0), False, now)


def cancelled(jm: JobMaster, eids: list[str], now: float) -> None:
    for eid in eids[1:]:
        jm.on_task_state(eid, "CANCELED", "", (0, 0), False, now)


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
