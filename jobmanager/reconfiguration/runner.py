"""One live reconfiguration of a running job: the JobMaster's adapter around the protocol.

It turns a `Plan` (plan.py) into RPCs and graph changes and feeds the protocol
(protocol.py) the events the JobMaster sees, knowing the job only through its
`ReconfigurationPort` (port.py): acknowledged prepares, the barrier's
checkpoint triggered / completed / aborted, the stopped tasks finishing, the new ones
running, the job failing. Everything runs under the dispatcher's lock, like the JobMaster.
docs/reconfiguration.md has the whole story.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, assert_never

from jobmanager.checkpoint import coordinator as cc
from jobmanager.checkpoint import metadata
from jobmanager.master.deployment import output_descriptor
from jobmanager.master.status import StaleLoads
from jobmanager.reconfiguration import protocol as rp
from jobmanager.reconfiguration.plan import Plan
from jobmanager.reconfiguration.port import ReconfigurationPort
from jobmanager.scheduler import execution_graph as eg
from sluice import graph
from sluice.checkpoints import savepoint
from sluice.states import ReconfigurationStatus, to_proto
from sluice.v1 import common_pb2, taskmanager_pb2

log = logging.getLogger("sluice.jobmanager.reconfiguration")

PHASE_TIMEOUT = 60.0  # seconds each phase may take before the reconfiguration fails (and the job restarts)
_STATUS = {
    rp.Phase.COMPLETED: ReconfigurationStatus.COMPLETED,
    rp.Phase.FAILED: ReconfigurationStatus.FAILED,
    rp.Phase.ABORTED: ReconfigurationStatus.ABORTED,
}


# a key rebalance waits up to this many heartbeat intervals (+ 1 s) for loads reported after its
# request, trying again every FRESH_LOADS_POLL seconds (docs/reconfiguration.md)
FRESH_LOADS_WAIT = 2
FRESH_LOADS_POLL = 0.05


def retry_until_fresh(attempt: Callable[[], str], heartbeat_interval: float) -> str:
    """`attempt()` (which takes the caller's lock itself) again while it raises StaleLoads, up to
    FRESH_LOADS_WAIT heartbeat intervals and a second; then a ValueError naming the stale subtasks."""
    wait = FRESH_LOADS_WAIT * heartbeat_interval + 1.0
    until = time.monotonic() + wait
    while True:
        try:
            return attempt()
        except StaleLoads as exc:
            if time.monotonic() >= until:
                raise ValueError(
                    f"{exc}, and none came within {wait:.1f} s of it; a TaskManager may be slow or lost: try again"
                ) from None
        time.sleep(FRESH_LOADS_POLL)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass
class Outcome:
    """What the status shows of a reconfiguration (`ReconfigurationInfo` in common.proto)."""

    id: str
    plan: Plan
    redeployed: list[str]
    switched: list[str]
    trigger_ms: int
    status: ReconfigurationStatus = ReconfigurationStatus.IN_PROGRESS
    checkpoint_id: int = 0
    pause_ms: int = 0
    failure: str = ""

    def to_proto(self) -> common_pb2.ReconfigurationInfo:
        return common_pb2.ReconfigurationInfo(
            id=self.id,
            kind=self.plan.kind,
            operator=self.plan.operator,
            parallelism=self.plan.parallelism,
            redeployed=self.redeployed,
            switched=self.switched,
            status=to_proto(self.status),
            checkpoint_id=self.checkpoint_id,
            trigger_ms=self.trigger_ms,
            pause_ms=self.pause_ms,
            failure=self.failure,
            moved_key_groups=self.plan.moved,
            from_subtask=self.plan.from_subtask,
            to_subtask=self.plan.to_subtask,
        )


class ReconfigurationRun:
    def __init__(self, master: ReconfigurationPort, rid: str, plan: Plan, tag: str, now: float) -> None:
        self.master, self.plan, self.tag = master, plan, tag
        self.old_job = master.job
        g = master.graph
        redeployed, switched = set(plan.redeployed), set(plan.switched)
        self.retiring = tuple(eid for eid, ex in g.executions.items() if ex.chain_id in redeployed)
        self.switching = tuple(eid for eid, ex in g.executions.items() if ex.chain_id in switched)
        names = {c.id: c.name for c in master.chains}
        self.outcome = Outcome(
            rid, plan, [names[c] for c in plan.redeployed], [names[c] for c in plan.switched], _now_ms()
        )
        self.protocol = rp.Reconfiguration((*self.retiring, *self.switching), self.retiring, now, PHASE_TIMEOUT)
        self.new_executions: frozenset[str] = frozenset()
        self.committed = False

    @property
    def tag_line(self) -> str:
        return f"{self.master.tag} [reconfiguration {self.outcome.id}]"

    @property
    def ended(self) -> bool:
        return self.protocol.ended

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Hold checkpoints back and tell every affected task what to do at the barrier."""
        m = self.master
        m.checkpoint(cc.Suspend(time.monotonic()), time.monotonic())  # a coordinator runs: checked by reconfigure
        from_id = m.next_checkpoint_id()  # the barrier's checkpoint is the first one triggered from now on
        new_chains = {c.id: c for c in graph.build_chains(self.plan.new_job)}
        new_ops = {op.id: op for op in self.plan.new_job.operators}
        log.info(
            "%s %s of %r: redeploying %s, switching %s",
            self.tag_line,
            self.plan.kind,
            self.plan.operator,
            self.outcome.redeployed,
            self.outcome.switched or "nothing",
        )
        for eid in self.retiring:
            self._prepare(eid, from_id, retire=True)
        for eid in self.switching:
            ex = m.graph.executions[eid]
            request = self._request(eid, from_id, retire=False)
            chain = m.chain_by_id[ex.chain_id]
            for edge in chain.outputs:
                target = m.chain_of[edge.target]
                if target.id not in self.plan.redeployed:
                    continue
                new_edge = next(
                    e for e in self.plan.new_job.edges if e.source == edge.source and e.target == edge.target
                )
                pid = m.partition_id_for(chain.id, edge.target, ex.subtask, self.tag)
                request.outputs.append(output_descriptor(pid, new_edge, new_chains[target.id], self.plan.new_job))
                request.targets.append(new_ops[target.id])
            self._send(eid, request)

    def _request(self, eid: str, from_id: int, retire: bool) -> taskmanager_pb2.PrepareReconfigurationRequest:
        m = self.master
        return taskmanager_pb2.PrepareReconfigurationRequest(
            leader_session_id=m.session_id,
            job_id=m.job_id,
            execution_id=eid,
            reconfiguration_id=self.outcome.id,
            from_checkpoint_id=from_id,
            retire=retire,
        )

    def _prepare(self, eid: str, from_id: int, retire: bool) -> None:
        self._send(eid, self._request(eid, from_id, retire))

    def _send(self, eid: str, request: taskmanager_pb2.PrepareReconfigurationRequest) -> None:
        def answered(reply: Any, error: str) -> None:
            if not self.master.is_current(self):
                return
            if reply is not None and reply.found:
                self.handle(rp.Prepared(eid), time.monotonic())
            else:
                self.handle(rp.PrepareFailed(eid, error or "the task is not running there"), time.monotonic())

        self.master.call_task(eid, "PrepareReconfiguration", request, on_reply=answered)

    # -- events --------------------------------------------------------------------------------
    def handle(self, event: rp.Event, now: float) -> None:
        if isinstance(event, rp.BarrierTriggered):
            self.outcome.checkpoint_id = event.checkpoint_id
        for action in self.protocol.handle(event):
            self._carry_out(action, now)
        if self.protocol.ended and self.outcome.status == ReconfigurationStatus.IN_PROGRESS:
            self.outcome.status = _STATUS[self.protocol.phase]
            self.outcome.failure = self.protocol.failure
            if self.protocol.pause is not None:
                self.outcome.pause_ms = round(self.protocol.pause * 1000)
            level = logging.INFO if self.outcome.status == ReconfigurationStatus.COMPLETED else logging.WARNING
            log.log(
                level,
                "%s %s%s",
                self.tag_line,
                self.outcome.status,
                f": {self.outcome.failure}" * bool(self.outcome.failure),
            )

    def on_job_failing(self, reason: str, now: float) -> None:
        """The job fails: before Commit it restarts with the configuration it had."""
        self.handle(rp.JobFailing(reason), now)
        if not self.committed:
            self.master.adopt(self.old_job)

    def _carry_out(self, action: rp.Action, now: float) -> None:
        m = self.master
        match action:
            case rp.RequestBarrier():
                m.checkpoint(cc.ReconfigurationRequested(now), now)
            case rp.SendAbort(execution_ids=eids):
                for eid in eids:
                    m.call_task(
                        eid,
                        "AbortReconfiguration",
                        taskmanager_pb2.AbortReconfigurationRequest(
                            leader_session_id=m.session_id,
                            job_id=m.job_id,
                            execution_id=eid,
                            reconfiguration_id=self.outcome.id,
                        ),
                    )
                m.checkpoint(cc.Resume(now), now)
            case rp.ReplaceTasks():
                self._replace(now)
            case rp.Commit():
                self.committed = True
                m.commit_reconfiguration(now)
            case rp.FailJob(reason=reason):
                m.fail_globally(reason, now)
            case _:
                assert_never(action)

    def _replace(self, now: float) -> None:
        """Deploy the new subtasks from the barrier's checkpoint, in the new configuration."""
        m = self.master
        latest = m.latest
        assert latest is not None and latest.checkpoint_id == self.outcome.checkpoint_id
        executions = m.graph.executions
        content = metadata.build(
            m.job_id,
            latest.checkpoint_id,
            False,
            _now_ms(),
            m.attempt,
            latest.handles,
            lambda eid: (executions[eid].chain_id, executions[eid].subtask),
        )
        m.adopt(self.plan.new_job)
        chains = [m.chain_by_id[c] for c in self.plan.redeployed]
        states = savepoint.map_states(
            savepoint.by_operator(content, self.old_job), f"checkpoint {latest.checkpoint_id}", m.job, chains
        )
        m.add_restore_states(states, latest.checkpoint_id)
        for c in chains:  # their partitions, and those feeding them, are named with the new tag
            m.set_partition_tag(c.id, self.tag)
            for e in c.inputs:
                m.set_partition_tag(m.chain_of[e.source].id, self.tag, target=c.id)
        infos = tuple(eg.ChainInfo(c.id, c.name, c.parallelism) for c in chains)
        actions = m.graph.handle(eg.ReplaceChains(infos, self.tag, now))
        m.forget_metrics(self.retiring)  # their counters are the old subtasks'
        for a in actions:
            if isinstance(a, eg.DeployExecutions):
                self.new_executions = frozenset(a.execution_ids)
                self.protocol.handle(rp.Deployed(a.execution_ids))
        m.apply_graph_actions(actions, now)
