"""A key rebalance plans on the key-group loads the TaskManagers reported after the request, not
on whatever heartbeat came last: a load reported just before a burst would move key groups the
wrong way. The Dispatcher waits (off its lock) for a fresh heartbeat of every subtask of the
operator, up to two heartbeat intervals and a second, then refuses saying why."""

from __future__ import annotations

import threading
import time

import pytest
from servicer_calls import SESSION

from jobmanager.dispatcher import Dispatcher
from jobmanager.master.status import StaleLoads, TaskRecords
from sluice.api import StreamExecutionEnvironment
from sluice.states import ExecutionState
from sluice.v1 import common_pb2

INTERVAL = 0.1  # heartbeat interval: the wait is 2 of them + 1 s


@pytest.fixture
def dispatcher(monkeypatch):
    d = Dispatcher("127.0.0.1:1", heartbeat_timeout=30.0, heartbeat_interval=INTERVAL, clock=time.monotonic)
    d.grant_leadership(SESSION)
    monkeypatch.setattr(d, "call_task", lambda *_a, **_k: None)  # no TaskManager to call
    yield d
    d.close()


def keyed_job(d: Dispatcher, tmp_path) -> tuple[str, dict[int, str]]:
    """A running keyed count at parallelism 2 on tm-a and tm-b; its counts subtasks' executions."""
    for rid, port in (("tm-a", 7001), ("tm-b", 7002)):
        d.register_taskmanager(rid, f"127.0.0.1:{port}", 1)
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.enable_checkpointing(60_000)
    env.set_config("state.checkpoints.dir", str(tmp_path))
    env.from_collection([{"url": "a"}, {"url": "b"}]).key_by("url").count().uid("counts").print()
    job_id = d.submit(env.get_job_graph("keyed"))
    master = d._jobs[job_id]
    for eid in master.graph.executions:
        assert d.update_task_state(SESSION, job_id, eid, ExecutionState.RUNNING, "")
    chain = master.chain_of["counts"].id
    counts = {ex.subtask: eid for eid, ex in master.graph.executions.items() if ex.chain_id == chain}
    return job_id, counts


def beat(d: Dispatcher, job_id: str, eid: str, loads: dict[int, int]) -> None:
    """A heartbeat of `eid`'s TaskManager carrying its key-group loads."""
    ex = d._jobs[job_id].graph.executions[eid]
    assert ex.slot is not None
    records = TaskRecords(
        common_pb2.TaskCounters(records_in=sum(loads.values())), key_group_records=tuple(loads.items()), heartbeat=True
    )
    assert d.heartbeat(ex.slot.resource_id, SESSION, [(job_id, eid, records)])


def test_a_rebalance_waits_for_loads_reported_after_the_request_and_plans_on_them(dispatcher, tmp_path):
    job_id, counts = keyed_job(dispatcher, tmp_path)
    beat(dispatcher, job_id, counts[0], {1: 5, 2: 5})  # before the request: subtask 1 looks the busiest ...
    beat(dispatcher, job_id, counts[1], {64: 90, 65: 80})
    fresh = {0: {1: 500, 2: 400, 3: 300}, 1: {64: 95, 65: 85}}  # ... after it, subtask 0 is

    def report_after_the_request() -> None:
        time.sleep(0.3)
        for subtask, loads in fresh.items():
            beat(dispatcher, job_id, counts[subtask], loads)

    sender = threading.Thread(target=report_after_the_request)
    started = time.monotonic()
    sender.start()
    try:
        rid = dispatcher.reconfigure(job_id, "counts", 0, None, rebalance_keys=True)
    finally:
        sender.join()
    assert time.monotonic() - started >= 0.3  # it waited for the fresh loads
    [outcome] = dispatcher._jobs[job_id].reconfigurations
    assert outcome.id == rid
    plan = outcome.plan
    assert (plan.from_subtask, plan.to_subtask) == (0, 1), plan  # the stale loads said 1 -> 0
    assert plan.moved and all(kg < 64 for kg in plan.moved)


def test_a_rebalance_without_fresh_loads_is_refused_and_the_job_untouched(dispatcher, tmp_path):
    job_id, counts = keyed_job(dispatcher, tmp_path)
    beat(dispatcher, job_id, counts[0], {1: 500, 2: 400})
    beat(dispatcher, job_id, counts[1], {64: 10})
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"subtask\(s\) 0, 1 of 'counts' were last reported before the request") as err:
        dispatcher.reconfigure(job_id, "counts", 0, None, rebalance_keys=True)
    assert not isinstance(err.value, StaleLoads)  # the refusal after the wait, not the inner signal
    assert "none came within 1.2 s" in str(err.value)
    assert 1.2 <= time.monotonic() - started < 10
    assert not dispatcher._jobs[job_id].reconfigurations
