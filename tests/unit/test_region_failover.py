"""Region failover, BATCH lazy scheduling and speculation in the ExecutionGraph (a pure
core: events in, actions out, time as an input)."""

from __future__ import annotations

import pytest

from jobmanager.scheduler.execution_graph import (
    CancelExecutions,
    ChainInfo,
    DeployExecutions,
    ExecutionGraph,
    GlobalFailure,
    JobTerminated,
    RegionsFailed,
    RegionsRestarted,
    ReleasePartitions,
    RequestSlots,
    RestartRegions,
    SlotsAdded,
    SlotsAssigned,
    Speculation,
    TaskManagerLost,
    TaskStateReported,
    Tick,
)
from jobmanager.scheduler.pipelined_regions import RegionEdge
from jobmanager.scheduler.slot_pool import SlotId
from sluice.states import ExecutionState, JobStatus

S = ExecutionState
SLOTS = (SlotId("tm-a", 0), SlotId("tm-b", 0), SlotId("tm-a", 1), SlotId("tm-b", 1))


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def deployed(actions) -> list[str]:
    return [eid for a in of(actions, DeployExecutions) for eid in a.execution_ids]


def run_all(g: ExecutionGraph, eids, now=1.0):
    for eid in eids:
        g.handle(TaskStateReported(eid, S.RUNNING, now=now))


def finish(g: ExecutionGraph, eid: str, now: float = 2.0):
    return g.handle(TaskStateReported(eid, S.FINISHED, now=now))


# -- streaming ------------------------------------------------------------------------------
def parallel_job(**kw) -> ExecutionGraph:
    """source -> map -> sink chained into one task of parallelism 3: one region per subtask."""
    return ExecutionGraph("job", [ChainInfo("c", "src -> sink", 3)], region_failover=True, **kw)


def test_an_embarrassingly_parallel_job_restarts_only_the_failed_subtask():
    g = parallel_job()
    run_all(g, deployed(g.handle(SlotsAssigned(SLOTS[:3], 0.0))))
    failed = g.current[("c", 1)]
    actions = g.handle(TaskStateReported(failed, S.FAILED, "boom", now=5.0))
    assert of(actions, RegionsFailed)[0].regions == (1,)
    assert not of(actions, CancelExecutions)  # the other subtasks run on
    assert g.state == JobStatus.RUNNING
    assert [ex.state for ex in g.executions.values()].count(S.RUNNING) == 2
    actions = g.handle(RestartRegions(6.0))
    restarted = of(actions, RegionsRestarted)[0]
    assert restarted.replaced == (failed,)
    new = deployed(actions)
    assert new == list(restarted.new) and len(new) == 1
    ex = g.executions[new[0]]
    assert (ex.subtask, ex.run, ex.slot) == (1, 1, SLOTS[1])
    assert failed not in g.executions and g.deployments == 4
    run_all(g, new)
    for eid in list(g.current.values()):
        actions = finish(g, eid)
    assert of(actions, JobTerminated)[0].state == JobStatus.FINISHED


def test_the_restart_waits_for_the_cancelled_tasks_of_the_region():
    g = ExecutionGraph(
        "job",
        [ChainInfo("src", "src", 2), ChainInfo("snk", "sink", 2)],
        edges=[RegionEdge("src", "snk", pointwise=True, blocking=False)],
        region_failover=True,
    )
    run_all(g, deployed(g.handle(SlotsAssigned(SLOTS[:2], 0.0))))
    actions = g.handle(TaskStateReported(g.current[("snk", 0)], S.FAILED, "boom", now=1.0))
    assert of(actions, CancelExecutions)[0].execution_ids == (g.current[("src", 0)],)
    assert g.handle(RestartRegions(2.0)) == []  # src 0 still cancelling
    actions = g.handle(TaskStateReported(g.current[("src", 0)], S.CANCELED, now=3.0))
    assert sorted(g.executions[e].chain_id for e in deployed(actions)) == ["snk", "src"]


def test_a_cancel_that_never_answers_times_out_into_the_restart():
    g = ExecutionGraph(
        "job",
        [ChainInfo("src", "src", 2), ChainInfo("snk", "sink", 2)],
        edges=[RegionEdge("src", "snk", pointwise=True, blocking=False)],
        region_failover=True,
        cancel_timeout=10.0,
    )
    run_all(g, deployed(g.handle(SlotsAssigned(SLOTS[:2], 0.0))))
    g.handle(TaskStateReported(g.current[("snk", 1)], S.FAILED, "boom", now=1.0))
    assert g.handle(RestartRegions(2.0)) == []
    assert g.handle(Tick(5.0)) == []
    assert len(deployed(g.handle(Tick(11.0)))) == 2


def test_a_failure_across_an_all_to_all_exchange_restarts_the_whole_job():
    g = ExecutionGraph(
        "job",
        [ChainInfo("src", "src", 2), ChainInfo("agg", "agg", 2)],
        edges=[RegionEdge("src", "agg", pointwise=False, blocking=False)],
        region_failover=True,
    )
    run_all(g, deployed(g.handle(SlotsAssigned(SLOTS[:2], 0.0))))
    actions = g.handle(TaskStateReported(g.current[("agg", 0)], S.FAILED, "boom", now=1.0))
    assert g.state == JobStatus.FAILING and not of(actions, RegionsFailed)


def test_full_failover_restarts_everything():
    g = ExecutionGraph("job", [ChainInfo("c", "c", 3)], region_failover=False)
    run_all(g, deployed(g.handle(SlotsAssigned(SLOTS[:3], 0.0))))
    g.handle(TaskStateReported(g.current[("c", 0)], S.FAILED, "boom", now=1.0))
    assert g.state == JobStatus.FAILING


def test_a_lost_taskmanager_restarts_its_subtasks_in_replacement_slots():
    g = parallel_job()
    run_all(g, deployed(g.handle(SlotsAssigned((SLOTS[0], SLOTS[1], SLOTS[2]), 0.0))))
    actions = g.handle(TaskManagerLost("tm-a", "gone", 1.0))
    assert of(actions, RegionsFailed)[0].regions == (0, 2)
    assert g.handle(RestartRegions(2.0)) == [RequestSlots(2)]
    assert g.handle(RestartRegions(2.5)) == []  # asked once
    new_slots = (SlotId("tm-c", 0), SlotId("tm-c", 1))
    actions = g.handle(SlotsAdded(new_slots, 3.0))
    slots = sorted((g.executions[e].subtask, g.executions[e].slot) for e in deployed(actions))
    assert slots == [(0, new_slots[0]), (2, new_slots[1])]
    assert g.current_execution("c", 1).run == 0


def test_a_global_failure_during_a_region_restart_fails_the_job():
    g = parallel_job()
    run_all(g, deployed(g.handle(SlotsAssigned(SLOTS[:3], 0.0))))
    g.handle(TaskStateReported(g.current[("c", 0)], S.FAILED, "boom", now=1.0))
    g.handle(GlobalFailure("not restarted", 2.0))
    assert g.state == JobStatus.FAILING
    assert not g.restarting


# -- batch ------------------------------------------------------------------------------------
def batch_job(parallelism: int = 4, speculation: Speculation | None = None) -> ExecutionGraph:
    """count per url: source (p) -hash-> aggregate + sink (p), blocking between them."""
    return ExecutionGraph(
        "job",
        [ChainInfo("src", "src", parallelism), ChainInfo("agg", "agg -> sink", parallelism)],
        edges=[RegionEdge("src", "agg", pointwise=False, blocking=False)],
        batch=True,
        speculation=speculation,
    )


def test_batch_runs_parallelism_4_in_2_slots_stage_by_stage():
    g = batch_job()
    first = deployed(g.handle(SlotsAssigned(SLOTS[:2], 0.0)))
    assert [g.executions[e].chain_id for e in first] == ["src", "src"]
    run_all(g, first)
    second = deployed(finish(g, first[0]))
    assert [g.executions[e].subtask for e in second] == [2]  # the freed slot takes the next source
    run_all(g, second)
    third = deployed(finish(g, first[1]))
    run_all(g, third)
    assert [g.executions[e].subtask for e in third] == [3]
    assert deployed(g.handle(TaskStateReported(second[0], S.FINISHED, now=3.0))) == []  # src 3 still runs
    aggs = deployed(finish(g, third[0]))
    assert [g.executions[e].chain_id for e in aggs] == ["agg", "agg"]  # only once every source finished
    run_all(g, aggs)
    releases = []
    for _ in range(4):
        actions = finish(g, aggs.pop(0))
        releases += [e for a in of(actions, ReleasePartitions) for e in a.execution_ids]
        aggs += deployed(actions)
        run_all(g, deployed(actions))
    assert of(actions, JobTerminated)[0].state == JobStatus.FINISHED
    assert sorted(releases) == sorted(g.current[("src", i)] for i in range(4))  # after the last consumer
    assert g.deployments == 8


def test_batch_failure_reruns_only_the_failed_subtask_from_its_persisted_inputs():
    g = batch_job(parallelism=2)
    srcs = deployed(g.handle(SlotsAssigned(SLOTS[:2], 0.0)))
    run_all(g, srcs)
    finish(g, srcs[0])
    aggs = deployed(finish(g, srcs[1]))
    run_all(g, aggs)
    actions = g.handle(TaskStateReported(aggs[1], S.FAILED, "boom", now=3.0))
    assert of(actions, RegionsFailed)[0].regions == (3,)
    assert not of(actions, CancelExecutions)
    actions = g.handle(RestartRegions(4.0))
    again = deployed(actions)
    assert [(g.executions[e].chain_id, g.executions[e].subtask, g.executions[e].run) for e in again] == [("agg", 1, 1)]
    assert g.current_execution("src", 0).run == 0  # the producers are not run again


def test_batch_recomputes_results_lost_with_their_taskmanager():
    g = batch_job(parallelism=2)
    srcs = deployed(g.handle(SlotsAssigned(SLOTS[:2], 0.0)))  # src0 on tm-a, src1 on tm-b
    run_all(g, srcs)
    finish(g, srcs[0])
    aggs = deployed(finish(g, srcs[1]))
    run_all(g, aggs)
    finish(g, aggs[0])  # agg0 (tm-a) done; agg1 (tm-b) still reads
    actions = g.handle(TaskManagerLost("tm-b", "killed", 5.0))
    assert of(actions, RegionsFailed)
    actions = g.handle(RestartRegions(6.0))
    redo = sorted((g.executions[e].chain_id, g.executions[e].subtask) for e in deployed(actions))
    assert redo == [("src", 1)]  # backtracking: the lost source result first, on the slot left
    run_all(g, deployed(actions))
    actions = finish(g, deployed(actions)[0], now=7.0)
    # the consumers of a result produced again run again (agg 0 too: its input changed), one slot left
    assert [(g.executions[e].chain_id, g.executions[e].subtask) for e in deployed(actions)] == [("agg", 0)]
    assert (g.current_execution("agg", 0).run, g.current_execution("agg", 1).run) == (1, 1)
    assert g.current_execution("src", 0).run == 0


def test_batch_refuses_slots_it_cannot_use():
    with pytest.raises(ValueError, match="at least 1 slot"):
        batch_job().handle(SlotsAssigned((), 0.0))


# -- speculation -------------------------------------------------------------------------------
def test_a_straggler_gets_a_backup_on_another_taskmanager_and_the_first_to_finish_wins():
    g = batch_job(parallelism=4, speculation=Speculation(multiplier=1.5, min_finished=0.75, min_runtime=1.0))
    srcs = deployed(g.handle(SlotsAssigned(SLOTS, 0.0)))
    run_all(g, srcs, now=0.0)
    for eid in srcs[:3]:
        finish(g, eid, now=2.0)  # median 2 s
    slow = g.executions[srcs[3]]
    assert deployed(g.handle(Tick(2.9))) == []  # not slow yet: 2.9 < 1.5 x 2
    backup = deployed(g.handle(Tick(3.1)))
    assert len(backup) == 1
    b = g.executions[backup[0]]
    assert b.speculative and b.subtask == slow.subtask and b.run == 1
    assert b.slot is not None and slow.slot is not None and b.slot.resource_id != slow.slot.resource_id
    assert deployed(g.handle(Tick(4.0))) == []  # one backup per subtask
    run_all(g, backup, now=3.2)
    actions = finish(g, backup[0], now=4.0)
    assert of(actions, CancelExecutions)[0].execution_ids == (slow.execution_id,)
    assert g.current[("src", 3)] == backup[0]
    aggs = deployed(actions)
    assert len(aggs) == 3  # the slots free: the next stage starts while the loser is cancelled
    g.handle(TaskStateReported(slow.execution_id, S.CANCELED, now=4.1))
    assert slow.execution_id not in g.executions and g.state == JobStatus.RUNNING


def test_the_primary_finishing_first_cancels_the_backup():
    g = batch_job(parallelism=4, speculation=Speculation(min_runtime=0.0))
    srcs = deployed(g.handle(SlotsAssigned(SLOTS, 0.0)))
    run_all(g, srcs, now=0.0)
    for eid in srcs[:3]:
        finish(g, eid, now=1.0)
    backup = deployed(g.handle(Tick(2.0)))
    actions = finish(g, srcs[3], now=2.5)
    assert of(actions, CancelExecutions)[0].execution_ids == tuple(backup)
    assert g.current[("src", 3)] == srcs[3]


def test_a_failed_primary_hands_over_to_its_running_backup():
    g = batch_job(parallelism=4, speculation=Speculation(min_runtime=0.0))
    srcs = deployed(g.handle(SlotsAssigned(SLOTS, 0.0)))
    run_all(g, srcs, now=0.0)
    for eid in srcs[:3]:
        finish(g, eid, now=1.0)
    backup = deployed(g.handle(Tick(2.0)))
    run_all(g, backup, now=2.0)
    actions = g.handle(TaskStateReported(srcs[3], S.FAILED, "boom", now=2.2))
    assert not of(actions, RegionsFailed)
    assert g.current[("src", 3)] == backup[0]


def test_a_loser_that_does_not_stop_does_not_hold_the_job_back():
    g = ExecutionGraph("job", [ChainInfo("src", "src", 4)], batch=True, speculation=Speculation(min_runtime=0.0))
    srcs = deployed(g.handle(SlotsAssigned(SLOTS, 0.0)))
    run_all(g, srcs, now=0.0)
    for eid in srcs[:3]:
        finish(g, eid, now=1.0)
    backup = deployed(g.handle(Tick(2.0)))
    run_all(g, backup, now=2.0)
    actions = finish(g, backup[0], now=2.5)  # the primary is told to cancel and never answers
    assert of(actions, JobTerminated)[0].state == JobStatus.FINISHED
