"""The JobMaster's scheduler (Flink's SchedulerNG, DefaultScheduler): one job's attempts.

It owns the current attempt's ExecutionGraph (pure core), starts attempts (restoring every
task from the latest completed checkpoint, or the savepoint a job started from), and carries
out the graph's actions: deployments and cancellations through the gateway, status changes,
region failovers and restarts, whose restart decisions the ExecutionFailureHandler
(failover.py) makes, and the attempt's end. It works for its JobMaster (jobmanager/job_master.py),
whose collaborators (checkpointing, deployment, splits, failover) it uses; everything runs
under the dispatcher's lock, and log lines carry the job's correlation id (`JobMaster.tag`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, assert_never

from jobmanager.checkpoint import metadata
from jobmanager.checkpoint.shared_registry import metadata_handles
from jobmanager.connectors import coordinator as sc
from jobmanager.master.checkpointing import now_ms
from jobmanager.scheduler import execution_graph as eg
from jobmanager.scheduler.pipelined_regions import RegionEdge
from sluice.checkpoints.storage import CheckpointCorrupt
from sluice.states import JobStatus
from sluice.v1 import taskmanager_pb2

if TYPE_CHECKING:
    from jobmanager.job_master import JobMaster

log = logging.getLogger("sluice.jobmanager.job")


class Scheduler:
    def __init__(self, jm: JobMaster, graph: eg.ExecutionGraph) -> None:
        self.jm = jm
        self.graph = graph  # replaced by each attempt

    # -- attempts ----------------------------------------------------------------------------
    def start_attempt(self, attempt: int, now: float) -> None:  # noqa: ARG002 — time is an input, as for events
        self.jm.deployment.start_attempt()  # every task of an attempt starts from one checkpoint
        self.jm.splits.start_attempt(self.jm.connector_sources(), self.jm.deployment.restored_checkpoint or 0)
        infos = [eg.ChainInfo(c.id, c.name, c.parallelism) for c in self.jm.chains]
        x = self.jm.execution
        self.graph = eg.ExecutionGraph(
            self.jm.job_id,
            infos,
            attempt=attempt,
            cancel_timeout=self.jm.cancel_timeout,
            attempt_tag=f"{self.jm.gateway.session_id[:8]}.{attempt}",
            edges=self.region_edges(),
            region_failover=x.region_failover,
            batch=self.jm.batch,
            speculation=eg.Speculation(x.multiplier, x.min_finished, x.min_runtime) if x.speculative else None,
        )
        self.jm.checkpointing.end_of_input = set()
        self.jm.attempt_started_ms = now_ms()
        self.jm.failover.region_restart_at = None
        if self.jm.batch:  # as many slots as are free, up to the widest stage: regions run as slots free up
            self.jm.gateway.request_slots(self.jm.job_id, self.jm.slots_required, minimum=1)
        else:
            self.jm.gateway.request_slots(self.jm.job_id, self.jm.slots_required)

    def region_edges(self) -> list[RegionEdge]:
        """The edges between chains, as the pipelined-region computation sees them. A forward
        edge between two chains is wired to every upstream subtask (its barriers and watermarks
        reach each consumer), so it joins regions like an all-to-all edge."""
        return [
            RegionEdge(self.jm.chain_of[e.source].id, chain.id, pointwise=False, blocking=self.jm.batch)
            for chain in self.jm.chains
            for e in chain.inputs
        ]

    # -- execution graph actions ----------------------------------------------------------------------
    def apply(self, actions: Iterable[eg.ExecutionGraphAction], now: float) -> None:
        for action in actions:
            match action:
                case eg.DeployExecutions():
                    for eid in action.execution_ids:
                        self.jm.call_task(eid, "SubmitTask", self.deployment_descriptor(eid))
                case eg.CancelExecutions():
                    for eid in action.execution_ids:
                        self.jm.call_task(
                            eid,
                            "CancelTask",
                            taskmanager_pb2.CancelTaskRequest(
                                leader_session_id=self.jm.gateway.session_id, job_id=self.jm.job_id, execution_id=eid
                            ),
                        )
                case eg.JobStatusChanged():
                    self._on_status_changed(action, now)
                case eg.JobTerminated():
                    self._attempt_ended(action.state, action.failure, now)
                case eg.Ignored():
                    pass  # a report that no longer applies; on_task_state tells the caller
                case eg.RegionsFailed():
                    self._on_regions_failed(action, now)
                case eg.RegionsRestarted():
                    self._on_regions_restarted(action, now)
                case eg.RequestSlots():
                    log.info("%s asking for %d more slot(s)", self.jm.tag, action.count)
                    self.jm.gateway.request_slots(self.jm.job_id, action.count, action.minimum, action.extend)
                case eg.ReleasePartitions():
                    # the TaskManagers holding these executions' blocking results delete them
                    for resource_id, ids in self.jm.deployment.partitions_by_taskmanager(
                        self.graph, action.executions
                    ).items():
                        if ids:
                            self.jm.gateway.release_partitions(self.jm, resource_id, ids)
                case _:
                    assert_never(action)

    def deployment_descriptor(self, eid: str) -> taskmanager_pb2.TaskDeploymentDescriptor:
        """Only for deployed executions: every execution of the attempt holds a slot."""
        storage = self.jm.storage
        return self.jm.deployment.descriptor(
            self.graph, eid, self.jm.gateway.session_id, storage.uri if storage else "", self.jm.gateway.address_of
        )

    # -- failover: region failover, attempts ending, restarts (master/failover.py decides) -----------
    def _chain_name(self, chain_id: str) -> str:
        return self.jm.chain_by_id[chain_id].name

    def _on_regions_failed(self, action: eg.RegionsFailed, now: float) -> None:
        """Some regions are being cancelled: restart them after the strategy's delay, or fail the job."""
        decision = self.jm.failover.regions_failed(self.graph, action.failure, self._chain_name, now, now_ms())
        regions = ", ".join(f"r{r}" for r in action.regions)
        if not decision.restart:
            log.error("%s regions %s failed and will not restart (%s)", self.jm.tag, regions, decision.reason)
            failure = f"{action.failure}\n(not restarted: {decision.reason})"
            self.apply(self.graph.handle(eg.GlobalFailure(failure, now)), now)
            return
        self.jm.restarts += 1
        self.jm.save_counters()
        if self.jm.reconfiguration is not None and not self.jm.reconfiguration.ended:  # its barrier cannot complete
            self.jm.reconfiguration.on_job_failing("a region failover", now)
        log.warning(
            "%s region failover: restarting %s (%d of %d regions); %s. Cause: %s",
            self.jm.tag,
            regions,
            len(action.regions),
            len(self.graph.regions),
            decision.reason,
            self.jm.failover.exceptions.last_cause,
        )
        if self.jm.checkpointing.coordinator is not None:  # its pending checkpoint waits for tasks that are gone
            self.jm.checkpointing.tasks_lost("region failover", now)
            self.jm.checkpointing.retire()
            self.jm.checkpointing.coordinator = None  # a new one over the new executions starts with them

    def _on_regions_restarted(self, action: eg.RegionsRestarted, now: float) -> None:
        """New executions replace the restarted regions': in a streaming job they restore the
        latest completed checkpoint, and a new coordinator covers them."""
        self.jm.checkpointing.end_of_input.difference_update(action.replaced)
        self.jm.forget_metrics(action.replaced)
        if self.jm.batch or self.jm.ckpt_config is None:
            return
        latest = self.jm.latest
        if latest is not None:
            try:
                storage, cid = self.jm.checkpointing.storage_checked(), latest.checkpoint_id
                states = metadata.restore_states(
                    storage.read_metadata(cid), self.jm.chains, storage.metadata_path(cid), self.jm.job
                )
            except CheckpointCorrupt as exc:
                self.apply(self.graph.handle(eg.GlobalFailure(f"restore failed: {exc}", now)), now)
                return
            for eid in action.new:
                ex = self.graph.executions[eid]
                key = (ex.chain_id, ex.subtask)
                self.jm.deployment.add_restore_states({key: states[key]}, cid)
        log.info(
            "%s restarting %d task(s) from %s",
            self.jm.tag,
            len(action.new),
            f"checkpoint {latest.checkpoint_id}" if latest else "the attempt's start",
        )
        if self.jm.checkpointing.coordinator is None and self.graph.state == JobStatus.RUNNING:
            self.jm.checkpointing.start_coordinator(now)

    def _on_status_changed(self, action: eg.JobStatusChanged, now: float) -> None:
        log.info("%s %s -> %s", self.jm.tag, action.old, action.new)
        if action.new == JobStatus.RUNNING and self.jm.ckpt_config is not None:
            self.jm.checkpointing.start_coordinator(now)
        elif action.new in (JobStatus.FAILING, JobStatus.CANCELLING):
            if self.jm.checkpointing.savepoints.in_progress:
                self.jm.checkpointing.savepoint_failed(f"the job went {action.new} while the savepoint was taken")
            if self.jm.reconfiguration is not None and not self.jm.reconfiguration.ended:
                self.jm.reconfiguration.on_job_failing(f"job {action.new}", now)
            if action.new == JobStatus.FAILING:
                self.jm.failover.attempt_failing(self.graph, self._chain_name, self.jm.cancel_requested, now, now_ms())
            self.jm.checkpointing.tasks_lost(f"job {action.new}", now)

    def _attempt_ended(self, state: JobStatus, failure: str, now: float) -> None:
        self.jm.gateway.release_slots(self.jm.job_id)
        if self.jm.batch:  # the attempt's blocking results, wherever they are
            for resource_id in sorted(self.jm.deployment.used_taskmanagers):
                self.jm.gateway.release_partitions(self.jm, resource_id, [], all_of_job=True)
        self.jm.checkpointing.retire()  # kept by reference: a checkpoint still persisting completes in its history
        decision = self.jm.failover.attempt_ended(
            self.graph, state, failure, self.jm.cancel_requested, self._chain_name, now, now_ms()
        )
        if decision is None:
            self.jm.finish(state if not self.jm.cancel_requested else JobStatus.CANCELED, failure, now)
        elif not decision.restart:
            log.error("%s failed and will not restart (%s):\n%s", self.jm.tag, decision.reason, failure)
            self.jm.finish(JobStatus.FAILED, f"{failure}\n(not restarted: {decision.reason})", now)
        else:
            self.jm.restarts += 1
            self.jm.save_counters()
            self.jm.failure = failure
            log.warning(
                "%s failed; %s. Cause: %s", self.jm.tag, decision.reason, self.jm.failover.exceptions.last_cause
            )

    def restart(self, now: float, first_attempt: int | None = None) -> None:
        """A new attempt that restores every task from the latest completed checkpoint."""
        self.jm.deployment.restore(None, {})
        self.jm.splits.states = {}
        latest = self.jm.latest
        if latest is None and self.jm.savepoint is not None:  # no checkpoint of its own yet
            self.jm.deployment.restore(self.jm.savepoint.checkpoint_id, self.jm.deployment.savepoint_states)
        if latest is not None:
            try:
                storage, cid = self.jm.checkpointing.storage_checked(), latest.checkpoint_id
                content = storage.read_metadata(cid)
                states = metadata.restore_states(content, self.jm.chains, storage.metadata_path(cid), self.jm.job)
                self.jm.checkpointing.shared_state.register(cid, metadata_handles(content))  # after a failover
                self.jm.splits.restored(dict(content.get("coordinators") or {}), self.jm.connector_sources(), cid)
            except (CheckpointCorrupt, sc.SplitRequestError) as exc:
                log.error("%s cannot restore: %s", self.jm.tag, exc)
                failure = f"restore failed: {exc}"
                self.jm.failover.restore_failed(failure, self.graph.attempt, now_ms())
                self.jm.finish(JobStatus.FAILED, f"restore failed: {exc}", now)
                return
            self.jm.deployment.restore(latest.checkpoint_id, states)
        log.info(
            "%s restarting (restart %d) from %s",
            self.jm.tag,
            self.jm.restarts,
            f"checkpoint {self.jm.deployment.restored_checkpoint}"
            if self.jm.deployment.restored_checkpoint
            else "the beginning",
        )
        self.start_attempt(self.graph.attempt + 1 if first_attempt is None else first_attempt, now)
