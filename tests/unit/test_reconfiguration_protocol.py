"""Live reconfiguration's pure parts (docs/reconfiguration.md): which tasks a change touches
(plan), the protocol with its abort and failure paths (time as an input), the execution
graph's replacement of a chain's executions, and the coordinator's reconfiguration barrier."""

from __future__ import annotations

import pytest
from coordinator_scripts import ALL as CKPT_ALL
from coordinator_scripts import SRC as CKPT_SRC
from coordinator_scripts import ack_all, make
from execution_graph_scripts import AGG0, AGG1, SLOTS, new_graph, running_graph

from jobmanager.checkpoint.coordinator import (
    CheckpointPersisted,
    NotifyAborted,
    ReconfigurationRequested,
    SavepointRequested,
    Tick,
    TriggerCheckpoint,
)
from jobmanager.reconfiguration import protocol as rp
from jobmanager.reconfiguration.plan import ReconfigurationError, make_plan, rebalance
from jobmanager.scheduler.execution_graph import ChainInfo, DeployExecutions, Ignored, ReplaceChains, TaskStateReported
from sluice import graph, states
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.api import environment as env_module
from sluice.key_groups import default_table, owned_key_groups, owners
from sluice.states import ExecutionState


@pytest.fixture(autouse=True)
def no_run_context():
    saved = dict(env_module._context)
    env_module._context.clear()
    yield
    env_module._context.update(saved)


def pipeline(label: str = "v1", parallelism: int = 3):
    """source -> (rebalance) select -> key_by count -> label map -> sink: three tasks."""
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism)
    src = env.from_collection([{"url": "/a", "n": 1}]).uid("src")
    picked = src.rebalance().select("url", "n").uid("pick")
    counts = picked.key_by("url").count().uid("counts")
    labelled = counts.select("url", "count", f"'{label}' AS label").uid("label")
    labelled.sink_to(FileSink("/tmp/never-written", columns=("url", "count", "label"))).uid("sink")
    return env.get_job_graph("j")


def chain_named(job, op: str) -> str:
    return graph.chain_of(graph.build_chains(job))[op].id


# -- plan -------------------------------------------------------------------------------------------
def test_the_operators_task_and_those_downstream_are_redeployed_and_its_feeders_switched():
    job = pipeline()
    plan = make_plan(job, "counts", parallelism=2)
    assert plan.redeployed == (chain_named(job, "counts"),)  # counts -> label -> sink is one task
    assert plan.switched == (chain_named(job, "pick"),)  # the source's task is not touched at all
    assert {op.id: op.parallelism for op in plan.new_job.operators} == {
        "src": 1,  # a collection source runs alone
        "pick": 3,
        "counts": 2,
        "label": 2,
        "sink": 2,
    }
    graph.validate(plan.new_job, check_paths=False)


def test_a_function_swap_takes_the_new_settings_and_keeps_everything_else():
    job, new = pipeline("v1"), pipeline("v2")
    plan = make_plan(job, "label", new_job=new)
    assert plan.kind == "function" and plan.parallelism == 3
    swapped = {op.id: op for op in plan.new_job.operators}
    assert "v2" in swapped["label"].config and "v1" not in swapped["label"].config
    assert [op.config for op in plan.new_job.operators if op.id != "label"] == [
        op.config for op in job.operators if op.id != "label"
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operator": "nope", "parallelism": 2}, "no operator with uid 'nope'"),
        ({"operator": "counts", "parallelism": 4}, "needs 4 slots and the job holds 3"),
        ({"operator": "counts", "parallelism": 3}, "already runs at parallelism 3"),
        ({"operator": "src", "parallelism": 2}, "runs in a source task"),
        ({"operator": "counts", "parallelism": 500}, "max parallelism 128"),
        ({"operator": "counts"}, "one of a new parallelism, a new job file or --rebalance-keys"),
    ],
)
def test_changes_that_cannot_be_made_live_are_refused_with_what_to_do(kwargs, message):
    job = pipeline()
    with pytest.raises(ReconfigurationError, match=message):
        make_plan(job, **kwargs)


def test_a_new_job_without_the_uid_or_with_another_kind_is_refused():
    job = pipeline()
    other = pipeline()
    for op in other.operators:
        if op.id == "label":
            op.id = "renamed"
    for e in other.edges:
        e.source = "renamed" if e.source == "label" else e.source
        e.target = "renamed" if e.target == "label" else e.target
    with pytest.raises(ReconfigurationError, match="no operator with uid 'label'"):
        make_plan(job, "label", new_job=other)
    with pytest.raises(ReconfigurationError, match="only its function may change"):
        make_plan(job, "counts", new_job=_with_kind(job, "counts", graph.OperatorKind.MAP))


def _with_kind(job, op_id: str, kind: graph.OperatorKind):
    """A copy of `job` whose operator `op_id` is of another kind."""
    changed = type(job)()
    changed.CopyFrom(job)
    next(op for op in changed.operators if op.id == op_id).kind = states.to_proto(kind)
    return changed


# -- protocol ---------------------------------------------------------------------------------------
RETIRE, SWITCH = ("r0", "r1"), ("u0",)


def started(now: float = 0.0) -> rp.Reconfiguration:
    return rp.Reconfiguration((*RETIRE, *SWITCH), RETIRE, now, timeout=10.0)


def test_the_happy_path_prepares_barriers_retires_deploys_and_commits():
    r = started()
    assert r.handle(rp.Prepared("r0")) == [] and r.handle(rp.Prepared("u0")) == []
    assert r.handle(rp.Prepared("r1")) == [rp.RequestBarrier()]
    assert r.handle(rp.BarrierTriggered(7, 1.0)) == []
    assert r.handle(rp.BarrierCompleted(6)) == []  # not its checkpoint
    assert r.handle(rp.Retired("r0")) == []  # may finish before the completion is seen
    assert r.handle(rp.BarrierCompleted(7)) == []
    assert r.handle(rp.Retired("r1")) == [rp.ReplaceTasks()]
    r.handle(rp.Deployed(("n0",)))
    assert r.handle(rp.Running("x", 2.0)) == []
    assert r.handle(rp.Running("n0", 2.5)) == [rp.Commit()]
    assert r.phase == rp.Phase.COMPLETED and r.pause == 1.5
    assert r.handle(rp.JobFailing("late")) == []  # ended: nothing more


def test_a_task_that_cannot_prepare_aborts_and_the_prepared_ones_are_told():
    r = started()
    r.handle(rp.Prepared("u0"))
    assert r.handle(rp.PrepareFailed("r0", "gone")) == [rp.SendAbort(("u0",))]
    assert r.phase == rp.Phase.ABORTED and "r0 could not prepare: gone" in r.failure


def test_deadlines_abort_before_the_barrier_and_fail_the_job_after_it():
    r = started()
    assert r.handle(rp.Tick(9.9)) == []
    assert r.handle(rp.Tick(10.0)) == [rp.SendAbort(())]
    r = started()
    for eid in (*RETIRE, *SWITCH):
        r.handle(rp.Prepared(eid))
    [action] = r.handle(rp.Tick(25.0))
    assert isinstance(action, rp.FailJob) and r.phase == rp.Phase.FAILED


def test_a_failed_barrier_fails_the_job_which_restarts_with_the_old_configuration():
    r = started()
    for eid in (*RETIRE, *SWITCH):
        r.handle(rp.Prepared(eid))
    r.handle(rp.BarrierTriggered(4, 0.5))
    assert r.handle(rp.BarrierAborted(3, "other")) == []
    [action] = r.handle(rp.BarrierAborted(4, "expired"))
    assert action == rp.FailJob("reconfiguration failed: its checkpoint 4 failed: expired")


def test_the_job_failing_mid_way_fails_it_without_another_failure():
    r = started()
    for eid in (*RETIRE, *SWITCH):
        r.handle(rp.Prepared(eid))
    r.handle(rp.BarrierTriggered(4, 0.5))
    r.handle(rp.BarrierCompleted(4))
    assert r.handle(rp.JobFailing("tm lost")) == []
    assert r.phase == rp.Phase.FAILED


def test_a_reconfiguration_must_retire_prepared_executions():
    with pytest.raises(ValueError, match="retires some executions"):
        rp.Reconfiguration(("a",), ("b",), 0.0, 1.0)


# -- execution graph ----------------------------------------------------------------------------------
def test_a_finished_chain_gives_way_to_new_executions_in_the_jobs_slots():
    g = running_graph()
    before = dict(g.executions)
    with pytest.raises(ValueError, match="did not finish"):
        g.handle(ReplaceChains((ChainInfo("agg", "aggregate", 1),), "0.r1", 2.0))
    for eid in (AGG0, AGG1):
        assert g.handle(TaskStateReported(eid, ExecutionState.FINISHED, now=2.0)) == []  # the job goes on
    [deploy] = g.handle(ReplaceChains((ChainInfo("agg", "aggregate", 1),), "0.r1", 3.0))
    assert deploy == DeployExecutions(("job1/0.r1/agg/0",))
    assert AGG0 not in g.executions and g.executions["job1/0.r1/agg/0"].slot == SLOTS[0]
    assert g.slot_of("agg", 0) == SLOTS[0]
    assert {e for e in before if e not in (AGG0, AGG1)} <= set(g.executions)
    g.handle(TaskStateReported("job1/0/sink/0", ExecutionState.FINISHED, now=4.0))
    with pytest.raises(ValueError, match="cannot hold"):  # more subtasks than the job's slots
        g.handle(ReplaceChains((ChainInfo("sink", "print", 5),), "0.r2", 4.0))


def test_replacing_outside_running_is_ignored():
    assert isinstance(new_graph().handle(ReplaceChains((), "t", 0.0))[0], Ignored)


# -- coordinator --------------------------------------------------------------------------------------
def test_the_reconfiguration_barrier_triggers_even_while_suspended_and_then_holds_checkpoints():
    from jobmanager.checkpoint.coordinator import Suspend

    c = make(interval=10)
    c.handle(Suspend(0.5))
    assert c.handle(ReconfigurationRequested(1.0)) == [TriggerCheckpoint(1, 1.0, CKPT_SRC, False, False, False, True)]
    with pytest.raises(ValueError, match="reconfiguration is in progress"):
        c.handle(SavepointRequested(False, 1.5))
    ack_all(c, 1, 2.0)
    c.handle(CheckpointPersisted(1, 3.0))
    assert c.handle(Tick(50.0)) == []  # suspended: the adapter replaces this coordinator


def test_a_failed_reconfiguration_barrier_is_not_a_checkpoint_failure():
    c = make(interval=10, timeout=5, tolerable_failures=0)
    c.handle(ReconfigurationRequested(1.0))
    actions = c.handle(Tick(6.5))
    assert isinstance(actions[0], NotifyAborted) and c.consecutive_failures == 0
    assert len(actions) == 2 and actions[0].targets == CKPT_ALL


# -- rebalance-keys ----------------------------------------------------------------------------------
def test_rebalance_moves_the_key_groups_that_even_out_busiest_and_idlest():
    owners = default_table(2, 8)  # subtask 0: 0..3, subtask 1: 4..7
    load = {0: 50, 1: 30, 2: 10, 3: 10, 4: 5, 5: 5}
    table, busiest, idlest, moved = rebalance(owners, 2, load)
    assert (busiest, idlest) == (0, 1)
    totals = [sum(n for kg, n in load.items() if table[kg] == s) for s in (0, 1)]
    assert max(totals) < 100 and moved and all(owners[kg] == 0 and table[kg] == 1 for kg in moved)
    assert [table[kg] for kg in range(8) if kg not in moved] == [owners[kg] for kg in range(8) if kg not in moved]


def test_rebalance_moves_nothing_when_one_key_group_carries_the_load_or_it_is_even():
    assert rebalance(default_table(2, 8), 2, {0: 100, 5: 1})[3] == ()
    assert rebalance(default_table(2, 8), 2, {0: 10, 4: 10})[3] == ()


def test_a_rebalance_plan_sets_the_chains_key_group_owners_and_routes_by_them():
    job = pipeline(parallelism=2)
    counts = chain_named(job, "counts")
    load = {kg: 100 for kg in range(64)} | {64: 10}
    plan = make_plan(job, "counts", key_group_load=load)
    assert plan.kind == "rebalance-keys" and (plan.from_subtask, plan.to_subtask) == (0, 1)
    table = graph.key_group_owners(plan.new_job, counts)
    assert len(table) == 128 and sorted(owned_key_groups(1, 2, 128, table)) != list(range(64, 128))
    assert plan.redeployed == (counts,) and plan.switched == (chain_named(job, "pick"),)
    graph.validate(plan.new_job, check_paths=False)
    with pytest.raises(ReconfigurationError, match="no key group of subtask 0 can move"):
        make_plan(job, "counts", key_group_load={0: 5, 64: 5})
    with pytest.raises(ReconfigurationError, match="does not run behind a key_by"):
        make_plan(job, "pick", key_group_load=load)
    # a later rescale drops the table: it was for the old parallelism
    assert not graph.key_group_owners(graph.rescaled(plan.new_job, 3, members=("counts", "label", "sink")), counts)


def test_routing_and_restore_follow_a_key_group_table():
    import pyarrow as pa

    table = [1, 0, 1, 0]
    assert owners(pa.array([0, 1, 2, 3]), 2, 4, table).to_pylist() == [1, 0, 1, 0]
    assert owners(pa.array([0, 1, 2, 3]), 2, 4).to_pylist() == [0, 0, 1, 1]
    assert owned_key_groups(0, 2, 4, table) == [1, 3] and owned_key_groups(0, 2, 4) == [0, 1]


@pytest.mark.parametrize("bad", [[0] * 127, [0] * 127 + [2]])
def test_a_job_graph_with_a_bad_key_group_table_is_refused(bad):
    job = pipeline(parallelism=2)
    job.key_group_owners[chain_named(job, "counts")].owners[:] = bad
    with pytest.raises(graph.JobValidationError, match="key_group_owners"):
        graph.validate(job, check_paths=False)
