"""JobMaster: one job across its attempts — the owner that wires its collaborators.

Each attempt is an ExecutionGraph (pure core) that the JobMaster feeds events and whose
actions it carries out through the dispatcher's gateway (slots and RPCs). It keeps the job's
graph (`Topology`), its counters, metrics and final state, answers the dispatcher and hands
the work to its collaborators, in jobmanager/master/ and beside it:

* `Scheduler` (master/scheduler.py): the attempts — it owns the current ExecutionGraph,
  starts and restarts attempts and carries out the graph's actions;
* `Checkpointing` (master/checkpointing.py): the attempt's CheckpointCoordinator (pure core)
  and its actions — triggers, persisting, notifications, discards — and savepoints;
* `ExecutionFailureHandler` (master/failover.py): whether and when a failed attempt or failed
  regions restart, and the exception history (master/exception_history.py);
* `TaskDeployment` (master/deployment.py): deployment descriptors, partition ids and tags;
* `SplitAssignment` (connectors/splits.py): connector sources' split enumerators;
* `ReconfigurationRun` (reconfiguration/runner.py): a live reconfiguration, which sees the
  JobMaster only as its `ReconfigurationPort`;
* `job_info` (master/status.py): the status, a pure function of a `JobSnapshot`.

When an attempt fails, the failure handler decides; a new attempt restores every task from the
latest completed checkpoint, read back from storage — a checkpoint that cannot be read fails the
job loudly, never a silent start from empty state. An ended job's JobInfo goes to the job
result store, so its exception history outlives a JobManager failover.

All methods run under the dispatcher's lock; storage writes and RPCs run on its thread pool
and come back through `gateway.locked`. Log lines carry the job's correlation id, `tag`.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jobmanager.checkpoint import coordinator as cc
from jobmanager.checkpoint.id_counter import CheckpointIDCounter
from jobmanager.checkpoint.savepoints import SAVEPOINTS_SHOWN, check_target
from jobmanager.connectors import coordinator as sc
from jobmanager.connectors.splits import SplitAssignment, connector_sources
from jobmanager.master.checkpointing import Checkpointing, checkpoint_config, now_ms
from jobmanager.master.deployment import TaskDeployment
from jobmanager.master.failover import ExecutionFailureHandler
from jobmanager.master.ports import Gateway
from jobmanager.master.scheduler import Scheduler
from jobmanager.master.status import (
    CheckpointStatsSnapshot,
    JobSnapshot,
    RestartStatus,
    TaskRecords,
    job_info,
    key_group_load,
    task_rows,
)
from jobmanager.reconfiguration import protocol as rp
from jobmanager.reconfiguration.plan import make_plan
from jobmanager.reconfiguration.runner import Outcome, ReconfigurationRun
from jobmanager.scheduler import execution_graph as eg
from jobmanager.scheduler import taskmanager_losses as tl
from jobmanager.scheduler.restart_strategy import RestartStrategy, from_config
from jobmanager.scheduler.slot_pool import SlotId
from sluice import config, graph, job_options
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointStorage
from sluice.states import AckOutcome, ExecutionState, FailureCause, JobStatus, to_proto
from sluice.v1 import common_pb2

log = logging.getLogger("sluice.jobmanager.job")


class Topology:
    """The job's graph and what is derived from it; a live reconfiguration replaces it."""

    def __init__(self, job: common_pb2.JobGraph) -> None:
        self.job = job
        self.chains = graph.build_chains(job)
        self.chain_by_id = {c.id: c for c in self.chains}
        self.chain_of = graph.chain_of(self.chains)
        self.slots_required = graph.slots_required(job)


def _ignore(error: Exception | None) -> None:
    """For background I/O whose failure only needs the log line run_io writes."""


class JobMaster:
    def __init__(
        self,
        job_id: str,
        job: common_pb2.JobGraph,
        gateway: Gateway,
        checkpoint_dir: str | None,
        cancel_timeout: float = eg.CANCEL_TIMEOUT,
        counter: CheckpointIDCounter | None = None,
        max_tm_losses: int = config.TASKMANAGER_LOSS_MAX_PER_JOB.default,
        savepoint: sp.Savepoint | None = None,
    ):
        self.job_id, self.gateway = job_id, gateway
        self.topology = Topology(job)
        config = dict(job.config)
        self.execution = job_options.execution(config)  # runtime mode, failover, speculation (docs/batch.md)
        self.batch = self.execution.batch
        # BATCH needs no checkpoints: a failed region runs again from its persisted inputs
        ckpt_config = None if self.batch else checkpoint_config(config)  # raises ValueError on bad settings
        self.failover = ExecutionFailureHandler(from_config(config), max_tm_losses)
        self.checkpointing = Checkpointing(self, ckpt_config, config, checkpoint_dir, counter)
        self.cancel_timeout = cancel_timeout
        self.submitted_ms, self.ended_ms = now_ms(), 0
        self.message = ""
        self.restarts = 0
        # the job's counters (JobInfo.metrics): kept in the HA store, a new leader goes on from them
        self.counters = common_pb2.JobMetrics()
        self.attempt_started_ms = 0
        self.final_state: JobStatus | None = None
        self.failure = ""
        self.cancel_requested = False
        self.metrics: dict[str, TaskRecords] = {}
        self.splits = SplitAssignment(self)  # connector sources' split enumerators (docs/connectors.md)
        self.deployment = TaskDeployment(job_id, self, self.batch)
        self.scheduler = Scheduler(self, eg.ExecutionGraph(job_id, [], cancel_timeout=cancel_timeout))
        # Live reconfiguration (docs/reconfiguration.md): the one in progress, the past ones for the status
        self.reconfiguration: ReconfigurationRun | None = None
        self.reconfigurations: collections.deque[Outcome] = collections.deque(maxlen=SAVEPOINTS_SHOWN)
        # A job started from a savepoint restores from it until a checkpoint of its own completes.
        self.savepoint = savepoint
        if savepoint is not None:
            allow = job_options.SAVEPOINT_IGNORE_UNCLAIMED.read(config)
            states = sp.restore_states(savepoint, job, self.chains, allow)  # raises SavepointError
            self.deployment.savepoint_states = states

    # -- the job's graph (Topology) and its collaborators' state, for callers and tests ----------
    @property
    def job(self) -> common_pb2.JobGraph:
        return self.topology.job

    @property
    def chains(self) -> list[graph.Chain]:
        return self.topology.chains

    @property
    def chain_by_id(self) -> dict[str, graph.Chain]:
        return self.topology.chain_by_id

    @property
    def chain_of(self) -> dict[str, graph.Chain]:
        return self.topology.chain_of

    @property
    def slots_required(self) -> int:
        return self.topology.slots_required

    @property
    def ckpt_config(self) -> cc.CheckpointConfig | None:
        return self.checkpointing.config

    @property
    def storage(self) -> CheckpointStorage | None:
        return self.checkpointing.storage

    @property
    def coordinator(self) -> cc.CheckpointCoordinator | None:
        return self.checkpointing.coordinator

    @property
    def latest(self) -> cc.CompletedCheckpoint | None:
        return self.checkpointing.latest

    @property
    def restart(self) -> RestartStrategy:
        return self.failover.restart

    @property
    def tm_losses(self) -> tl.TaskManagerLosses:
        return self.failover.tm_losses

    def start(self, now: float, recover_from: int | None = None) -> None:
        """First attempt; a JobManager that took over a running job restores it from
        `recover_from`, its latest completed checkpoint in the HA store."""
        if recover_from is None:
            self.restarts = int(self.counters.num_restarts)  # a job recovered before its first checkpoint
            if self.savepoint is not None:
                self.deployment.restore(self.savepoint.checkpoint_id, self.deployment.savepoint_states)
                log.info("%s starting from savepoint %s", self.tag, self.savepoint.path)
            self.scheduler.start_attempt(0, now)
            return
        self.restarts = int(self.counters.num_restarts) + 1  # the job's tasks restart under the new leader
        self.save_counters()
        self.checkpointing.latest = cc.CompletedCheckpoint(recover_from, {}, now, now, 0)
        self.scheduler.restart(now, first_attempt=0)

    @property
    def graph(self) -> eg.ExecutionGraph:
        """The current attempt's ExecutionGraph (the scheduler's)."""
        return self.scheduler.graph

    @property
    def attempt(self) -> int:
        return self.graph.attempt

    @property
    def tag(self) -> str:
        return f"[job {self.job_id} attempt {self.attempt}]"

    @property
    def state(self) -> JobStatus:
        """The job's state as clients see it (never the graph's internal FAILING/CANCELLING)."""
        if self.final_state is not None:
            return self.final_state
        if self.failover.restart_at is not None or (self.attempt > 0 and self.graph.state == JobStatus.CREATED):
            return JobStatus.RESTARTING
        if self.graph.state == JobStatus.FAILING:  # winding down after a failure
            will_restart = not self.cancel_requested and self.failover.will_restart
            # not restarting: FAILED once the remaining tasks stopped
            return JobStatus.RESTARTING if will_restart else JobStatus.RUNNING
        return JobStatus.RUNNING if self.graph.state == JobStatus.CANCELLING else self.graph.state

    @property
    def terminal(self) -> bool:
        return self.final_state is not None

    # -- events from the dispatcher -----------------------------------------------------------------
    def on_slots(self, slots: Sequence[SlotId], now: float, added: bool = False) -> None:
        self.message = ""
        self.deployment.used_taskmanagers.update(s.resource_id for s in slots)
        if added or self.graph.state == JobStatus.RUNNING:  # replacements, or more room for a batch job
            self.scheduler.apply(self.graph.handle(eg.SlotsAdded(tuple(slots), now)), now)
            return
        self.scheduler.apply(self.graph.handle(eg.SlotsAssigned(tuple(slots), now)), now)

    def on_waiting(self, message: str) -> None:
        self.message = message

    def on_task_state(
        self,
        eid: str,
        state: ExecutionState,
        error: str,
        records: TaskRecords,
        end_of_input: bool,
        now: float,
        cause: FailureCause | None = None,
    ) -> bool:
        if eid not in self.graph.executions:
            return False
        previous = self.metrics.get(eid)
        reported = records
        if not reported.heartbeat and previous is not None:  # a state report has no rates or loads: keep the last
            reported = reported._replace(
                io=previous.io,
                key_group_records=previous.key_group_records,
                heartbeat=previous.heartbeat,
                heartbeat_at=previous.heartbeat_at,
            )
        self.metrics[eid] = reported
        if end_of_input and state == ExecutionState.RUNNING:
            self.checkpointing.on_end_of_input(eid, now)
            return True
        actions = self.graph.handle(eg.TaskStateReported(eid, state, error, now, cause))
        self.scheduler.apply(actions, now)
        run = self.reconfiguration
        if run is not None and not run.ended and not any(isinstance(a, eg.Ignored) for a in actions):
            if state == ExecutionState.FINISHED and eid in run.retiring:
                run.handle(rp.Retired(eid), now)
            elif state == ExecutionState.RUNNING and eid in run.new_executions:
                run.handle(rp.Running(eid, now), now)
        return not any(isinstance(a, eg.Ignored) for a in actions)

    def on_heartbeat(self, resource_id: str, eid: str, records: TaskRecords, now: float | None = None) -> None:
        """A heartbeat's counters of `eid` (arrived at `now`), from the TaskManager it runs on, until it ends."""
        ex = self.graph.executions.get(eid)
        if ex is not None and ex.slot is not None and ex.slot.resource_id == resource_id and not ex.state.terminal:
            self.metrics[eid] = records._replace(heartbeat_at=now)  # a final report's counts are newer

    def on_deploy_failed(self, eid: str, error: str, now: float) -> None:
        if eid in self.graph.executions:
            self.scheduler.apply(self.graph.handle(eg.DeploymentFailed(eid, error, now)), now)

    def on_tm_lost(self, resource_id: str, reason: str, now: float, address: str = "") -> None:
        lost: dict[tuple[str, int], tl.LostTask] = {}  # one per subtask (a speculative copy may share its TaskManager)
        for ex in self.graph.executions.values():
            if ex.slot is not None and ex.slot.resource_id == resource_id and not ex.state.terminal:
                name = f"{ex.name} ({ex.subtask + 1}/{self.chain_by_id[ex.chain_id].parallelism})"
                lost.setdefault(ex.subtask_key, tl.LostTask(ex.chain_id, ex.subtask, name, ex.state))
        if tasks := tuple(lost.values()):  # it held tasks of this attempt
            failing = self.cancel_requested or self.graph.state in (JobStatus.FAILING, JobStatus.CANCELLING)
            counted = self.failover.taskmanager_lost(resource_id, tasks, failing)
            log.warning(
                "%s TaskManager %s (%s) lost with tasks of this job; %s: %s",
                self.tag,
                resource_id,
                address,
                counted,
                reason,
            )
        self.scheduler.apply(self.graph.handle(eg.TaskManagerLost(resource_id, reason, now, address)), now)

    def cancel(self, now: float) -> JobStatus:
        if self.terminal:
            raise ValueError(f"job {self.job_id} already ended {self.final_state}")
        self.cancel_requested = True
        log.info("%s cancel requested", self.tag)
        self._record_result(JobStatus.CANCELED)  # the cancel is final, even across a failover
        if self.failover.restart_at is not None or self.graph.state == JobStatus.CREATED:
            self.failover.restart_at = None
            self.gateway.release_slots(self.job_id)
            self.scheduler.apply(self.graph.handle(eg.CancelRequested(now)), now)
            if not self.terminal:
                self.finish(JobStatus.CANCELED, "", now)
        else:
            self.scheduler.apply(self.graph.handle(eg.CancelRequested(now)), now)
        return self.state

    def trigger_savepoint(self, target: str, stop: bool, now: float) -> str:
        """Take a savepoint (`stop`: then stop the job); returns the request id. ValueError
        saying why when the job cannot take one now; the job is untouched then."""
        if self.terminal:
            raise ValueError(f"job {self.job_id} already ended {self.final_state}")
        if self.ckpt_config is None:
            raise ValueError(
                f"job {self.job_id} runs without checkpointing; savepoints need it "
                "(env.enable_checkpointing(ms) or execution.checkpointing.interval)"
            )
        if self.splits.by_operator:
            raise ValueError(
                f"job {self.job_id} reads connector sources ({', '.join(sorted(self.splits.by_operator))}): "
                "savepoints do not carry their split enumerators' state yet (docs/connectors.md)"
            )
        coordinator = self.coordinator
        if self.graph.restarting:
            raise ValueError(
                f"job {self.job_id} is restarting {len(self.graph.restarting)} region(s) after a failure; "
                "try again when every task runs"
            )
        if coordinator is None or self.state != JobStatus.RUNNING:
            raise ValueError(f"job {self.job_id} is {self.state}, not RUNNING: a savepoint needs every task running")
        target = target or self.checkpointing.savepoints_dir or ""
        check_target(target)
        if (current := self.checkpointing.savepoints.current) is not None:
            raise ValueError(f"job {self.job_id}: savepoint {current.request_id} is in progress")
        return self.checkpointing.request_savepoint(coordinator, target, stop, now)

    # -- live reconfiguration (docs/reconfiguration.md) ---------------------------------------------
    def reconfigure(
        self,
        operator: str,
        parallelism: int,
        new_job: common_pb2.JobGraph | None,
        now: float,
        rebalance_keys: bool = False,
        loads_since: float | None = None,
    ) -> str:
        """Start a live reconfiguration; its id. ValueError (ReconfigurationError) saying why it
        cannot be made now; the job is untouched then. A key rebalance plans on key-group loads
        reported at or after `loads_since` (StaleLoads while one is older)."""
        if self.terminal:
            raise ValueError(f"job {self.job_id} already ended {self.final_state}")
        coordinator = self.coordinator
        if self.ckpt_config is None or coordinator is None:
            raise ValueError(
                f"job {self.job_id} runs without checkpointing; a live reconfiguration switches at a checkpoint "
                "barrier (env.enable_checkpointing(ms))"
            )
        if self.state != JobStatus.RUNNING or any(
            ex.state != ExecutionState.RUNNING for ex in self.graph.executions.values()
        ):
            raise ValueError(f"job {self.job_id} is {self.state} and not every task runs: try again when it does")
        if self.reconfiguration is not None and not self.reconfiguration.ended:
            raise ValueError(f"job {self.job_id}: reconfiguration {self.reconfiguration.outcome.id} is in progress")
        if self.checkpointing.savepoints.current is not None or coordinator.savepoint_wanted:
            raise ValueError(f"job {self.job_id}: a savepoint is in progress; wait for it to end")
        if self.splits.by_operator:
            raise ValueError(
                f"job {self.job_id} reads connector sources ({', '.join(sorted(self.splits.by_operator))}): "
                "their split assignment is per subtask and cannot be reconfigured live yet (docs/connectors.md)"
            )
        load = self._key_group_load(operator, loads_since) if rebalance_keys else None
        plan = make_plan(self.job, operator, parallelism, new_job, slots=len(self.graph.slots), key_group_load=load)
        rid = uuid.uuid4().hex[:12]
        run = ReconfigurationRun(self, rid, plan, f"{self.graph.attempt_tag}.r{len(self.reconfigurations) + 1}", now)
        self.reconfiguration = run
        self.reconfigurations.append(run.outcome)
        run.start()
        return rid

    def _key_group_load(self, operator: str, since: float | None = None) -> dict[int, int]:
        """Input rows per key group of the task running `operator`, from the last heartbeats
        (each arrived at or after `since`: StaleLoads otherwise)."""
        chain = self.chain_of.get(operator)
        chain_id = chain.id if chain else None
        return key_group_load(self.job_id, operator, chain_id, self.graph.executions, self.metrics, since)

    # -- the ReconfigurationPort (jobmanager/reconfiguration/port.py) -------------------------------
    @property
    def session_id(self) -> str:
        return self.gateway.session_id

    def is_current(self, run: object) -> bool:
        return self.reconfiguration is run

    def next_checkpoint_id(self) -> int:
        return self.checkpointing.counter.get()

    def checkpoint(self, event: cc.CoordinatorEvent, now: float) -> None:
        self.checkpointing.handle(event, now)

    def adopt(self, job: common_pb2.JobGraph) -> None:
        """Make `job` the job's graph (a reconfiguration's new one, or back to the old one)."""
        self.topology = Topology(job)

    def add_restore_states(self, states: dict[tuple[str, int], bytes], checkpoint_id: int) -> None:
        self.deployment.add_restore_states(states, checkpoint_id)

    def partition_id_for(self, chain_id: str, target_op: str, subtask: int, tag: str) -> str:
        return self.deployment.partition_id_for(chain_id, target_op, subtask, tag)

    def set_partition_tag(self, producer: str, tag: str, target: str = "") -> None:
        self.deployment.set_partition_tag(producer, tag, target)

    def forget_metrics(self, eids: Iterable[str]) -> None:
        for eid in eids:
            self.metrics.pop(eid, None)

    def apply_graph_actions(self, actions: Iterable[eg.ExecutionGraphAction], now: float) -> None:
        self.scheduler.apply(actions, now)

    def fail_globally(self, reason: str, now: float) -> None:
        self.scheduler.apply(self.graph.handle(eg.GlobalFailure(reason, now)), now)

    def commit_reconfiguration(self, now: float) -> None:
        """The new configuration is the job's: the HA store gets its graph, and a coordinator
        over the new executions takes over from the barrier's checkpoint."""
        self.checkpointing.retire()
        self.checkpointing.coordinator = None
        self.checkpointing.start_coordinator(now)
        ha, job = self.gateway.ha, self.job
        if ha is not None:
            self.run_io(lambda: ha.put_job_graph(self.gateway.guard, self.job_id, job, replace=True), _ignore)

    # -- calls through the gateway (ConnectorPort, JobHost, ReconfigurationPort) ------------------
    def call_task(
        self, eid: str, method: str, request: Any, on_reply: Callable[[Any, str], None] | None = None
    ) -> None:
        if on_reply is None:
            self.gateway.call_task(self, eid, method, request)
        else:
            self.gateway.call_task(self, eid, method, request, on_reply=on_reply)

    def run_io(self, fn: Callable[[], object], done: Callable[[Exception | None], None]) -> None:
        self.gateway.run_io(self, fn, done)

    def reader(self, eid: str) -> tuple[int, str] | None:
        ex = self.graph.executions.get(eid)
        return None if ex is None else (ex.subtask, self.chain_by_id[ex.chain_id].operator_ids[0])

    def connector_sources(self) -> dict[str, tuple[int, Any]]:
        return connector_sources(self.job, self.chain_of)

    def request_splits(
        self, eid: str, operator_id: str, received: int, last_checkpoint: int, idle: bool
    ) -> sc.Assignment | None:
        """A reader's request for splits; None for a late request (it gets nothing)."""
        return self.splits.request(eid, operator_id, received, last_checkpoint, idle)

    # -- the checkpointing adapter's JobHost hooks ------------------------------------------------------
    def source_states(self, checkpoint_id: int) -> dict[str, Any]:
        return self.splits.states_of(checkpoint_id)

    def on_checkpoint_triggered(self, action: cc.TriggerCheckpoint, now: float) -> None:
        self.splits.checkpoint_triggered(action.checkpoint_id)  # before any reader snapshots it
        if action.reconfigure and self.reconfiguration is not None:
            self.reconfiguration.handle(rp.BarrierTriggered(action.checkpoint_id, now), now)

    def on_checkpoint_completed(self, latest: cc.CompletedCheckpoint | None, checkpoint_id: int, now: float) -> None:
        if latest is not None:
            self.counters.number_of_completed_checkpoints += 1
            self.counters.last_checkpoint_duration_ms = int((latest.completion_time - latest.trigger_time) * 1000)
            self.counters.last_checkpoint_size_bytes = latest.size
            self.save_counters()
        if self.reconfiguration is not None:
            self.reconfiguration.handle(rp.BarrierCompleted(checkpoint_id), now)
        self.failover.checkpoint_completed(checkpoint_id, now)

    def on_checkpoint_aborted(self, action: cc.NotifyAborted, now: float) -> None:
        if not action.superseded:
            self.counters.number_of_failed_checkpoints += 1
            self.save_counters()
        if self.reconfiguration is not None:
            self.reconfiguration.handle(rp.BarrierAborted(action.checkpoint_id, action.reason), now)

    def tick(self, now: float) -> None:
        if self.terminal:
            return
        f = self.failover
        if f.restart_at is not None and now >= f.restart_at:
            f.restart_at = None
            self.scheduler.restart(now)
            return
        if f.region_restart_at is not None and now >= f.region_restart_at:
            f.region_restart_at = None
            self.scheduler.apply(self.graph.handle(eg.RestartRegions(now)), now)
        self.scheduler.apply(self.graph.handle(eg.Tick(now)), now)
        self.splits.discover(now)
        if self.reconfiguration is not None and not self.reconfiguration.ended:
            self.reconfiguration.handle(rp.Tick(now), now)
        self.checkpointing.handle(cc.Tick(now), now)

    def on_ack(self, eid: str, checkpoint_id: int, handle: bytes, size: int, now: float) -> AckOutcome:
        return self.checkpointing.on_ack(eid, checkpoint_id, handle, size, now)

    def on_decline(self, eid: str, checkpoint_id: int, reason: str, now: float) -> None:
        self.checkpointing.on_decline(eid, checkpoint_id, reason, now)

    def finish(self, state: JobStatus, failure: str, now: float) -> None:  # noqa: ARG002 — time is an input
        self.final_state = state
        self.failure = failure if state == JobStatus.FAILED else ""
        self.ended_ms = now_ms()
        self.message = ""
        log.info("%s ended %s", self.tag, state)
        self._record_result()
        self.checkpointing.on_job_ended()

    # -- counters, results and status ----------------------------------------------------------------
    def save_counters(self) -> None:
        """Into the HA store (in the background): a new leader's metrics go on from them."""
        ha = self.gateway.ha
        if ha is None:
            return
        counters = common_pb2.JobMetrics()
        counters.CopyFrom(self.counters)
        counters.num_restarts = self.restarts
        self.run_io(lambda: ha.put_job_metrics(self.gateway.guard, self.job_id, counters), _ignore)

    def metrics_now(self) -> common_pb2.JobMetrics:
        """JobInfo.metrics: the counters, the restarts and the current attempt's uptime."""
        out = common_pb2.JobMetrics()
        out.CopyFrom(self.counters)
        out.num_restarts = self.restarts
        if self.state == JobStatus.RUNNING and self.attempt_started_ms:
            out.uptime_ms = max(0, now_ms() - self.attempt_started_ms)
        return out

    def _record_result(self, state: JobStatus | None = None) -> None:
        """Into the job result store (as `state`, default the current one): a new leader
        must not resurrect this job."""
        ha = self.gateway.ha
        if ha is not None:
            info = self.info(0)
            if state is not None:
                info.state = to_proto(state)
            # The job result store keeps the head of a long failure, storage its full text
            # (jobmanager/ha/zookeeper.py); the status shows what a later leader will show.
            self.failure = ha.compact_failure(self.job_id, self.failure)
            self.run_io(lambda: ha.put_job_result(self.gateway.guard, self.job_id, info), _ignore)

    def snapshot(self, free_slots: int) -> JobSnapshot:
        """What the status shows of the job now (master/status.py computes the JobInfo)."""
        g, f, latest = self.graph, self.failover, self.latest
        tasks = task_rows(g, self.metrics, self.gateway.address_of)
        return JobSnapshot(
            job_id=self.job_id,
            name=self.job.name,
            state=self.state,
            terminal=self.terminal,
            attempt=self.attempt,
            restarts=self.restarts,
            leader=self.gateway.address,
            message=self.message,
            failure=self.failure,
            submitted_ms=self.submitted_ms,
            ended_ms=self.ended_ms,
            slots_required=self.slots_required,
            free_slots=free_slots,
            metrics=self.metrics_now(),
            now_ms=now_ms(),
            monotonic_now=time.monotonic(),
            graph_state=g.state,
            restart=RestartStatus(
                pending=f.restart_at is not None,
                decision=None if f.decision is None else (f.decision.restart, f.decision.reason),
                restarting_regions=len(g.restarting),
                regions=len(g.regions),
            ),
            checkpointing=CheckpointStatsSnapshot(
                latest_checkpoint=latest.checkpoint_id if latest is not None else None,
                restored_checkpoint=self.deployment.restored_checkpoint,
                restored_savepoint=self.savepoint.path if self.savepoint is not None else "",
                stopped_with=self.checkpointing.savepoints.stopped_with,
                history=self.checkpointing.history(),
                savepoints=list(self.checkpointing.savepoints),
            ),
            tasks=tasks,
            reconfigurations=[o.to_proto() for o in self.reconfigurations],
            exceptions=list(f.exceptions),
        )

    def info(self, free_slots: int) -> common_pb2.JobInfo:
        """The job's status for clients, states as proto enums."""
        return job_info(self.snapshot(free_slots))
