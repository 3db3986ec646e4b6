"""Task deployment (Flink's TaskDeploymentDescriptor and result partition ids).

`TaskDeployment` builds each execution's deployment descriptor: its chain, slot, inputs (the
partitions of its producers, at their TaskManagers' addresses) and outputs, and the state it
restores — the attempt's restored checkpoint or savepoint, or what a region failover or a live
reconfiguration deploys it from. It names result partitions: an attempt's tag, or that of the
live reconfiguration that last redeployed either side. Runs under the dispatcher's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from jobmanager.scheduler import execution_graph as eg
from jobmanager.scheduler.slot_pool import SlotId
from sluice import graph
from sluice.v1 import common_pb2, taskmanager_pb2

RestoreStates = dict[tuple[str, int], bytes]  # (chain id, subtask) -> its state to restore


class Topology(Protocol):
    """The job's graph and chains as deployment reads them (a reconfiguration may replace them)."""

    @property
    def job(self) -> common_pb2.JobGraph: ...
    @property
    def chain_by_id(self) -> dict[str, graph.Chain]: ...
    @property
    def chain_of(self) -> dict[str, graph.Chain]: ...


def partition_id(job_id: str, attempt: str, chain_id: str, target_op: str, subtask: int) -> str:
    """The one place result partition ids are built; they are opaque everywhere else."""
    return f"{job_id}/{attempt}/{chain_id}->{target_op}/{subtask}"


def output_descriptor(
    partition_id: str, edge: common_pb2.EdgeSpec, target: graph.Chain, job: common_pb2.JobGraph
) -> taskmanager_pb2.ResultPartitionDescriptor:
    """A task's output along `edge` into the chain `target` of `job` (a deployment, or the
    new outputs a live reconfiguration switches a task to)."""
    return taskmanager_pb2.ResultPartitionDescriptor(
        partition_id=partition_id,
        target_chain=target.id,
        partitioning=edge.partitioning,
        keys=edge.keys,
        output_tag=edge.output_tag,
        num_subpartitions=target.parallelism,
        key_group_owners=graph.key_group_owners(job, target.id),
    )


def deployed(slot: SlotId | None, what: str) -> SlotId:
    if slot is None:
        raise ValueError(f"{what} has no slot: the attempt is not deployed")
    return slot


class TaskDeployment:
    """Deployment descriptors and partition ids of one job's executions."""

    def __init__(self, job_id: str, topology: Topology, batch: bool) -> None:
        self.job_id, self.topology, self.batch = job_id, topology, batch
        self.restored_checkpoint: int | None = None  # the checkpoint (or savepoint) the attempt restores
        self.restore_states: RestoreStates = {}  # ... its states
        self._overrides: dict[tuple[str, int], tuple[int, bytes]] = {}  # subtasks deployed from another one
        self._partition_tags: dict[tuple[str, str], str] = {}
        self.used_taskmanagers: set[str] = set()  # of the attempt: a batch job's results are there
        self.savepoint_states: RestoreStates = {}  # of the savepoint a job started from, until a checkpoint

    def start_attempt(self) -> None:
        """Every task of an attempt starts from one checkpoint, its partitions named with the attempt's tag."""
        self._partition_tags, self._overrides = {}, {}
        self.used_taskmanagers = set()

    def restore(self, checkpoint_id: int | None, states: RestoreStates) -> None:
        self.restored_checkpoint, self.restore_states = checkpoint_id, states

    def add_restore_states(self, states: RestoreStates, checkpoint_id: int) -> None:
        """Subtasks deployed from `checkpoint_id` instead (a region failover, a live reconfiguration)."""
        for key, state in states.items():
            self._overrides[key] = (checkpoint_id, state)

    def set_partition_tag(self, producer: str, tag: str, target: str = "") -> None:
        """Partitions of `producer` (for `target`; "": for every target) are named with `tag`."""
        self._partition_tags[(producer, target)] = tag

    def partition_id_for(self, chain_id: str, target_op: str, subtask: int, tag: str) -> str:
        return partition_id(self.job_id, tag, chain_id, target_op, subtask)

    def _ptag(self, g: eg.ExecutionGraph, producer: str, target: str) -> str:
        """The tag in the ids of the partitions `producer` writes for `target` (chain ids): the
        attempt's (unique across attempts and leaders), or that of the live reconfiguration that
        last redeployed either side."""
        return self._partition_tags.get((producer, target)) or self._partition_tags.get((producer, "")) or g.attempt_tag

    def descriptor(
        self,
        g: eg.ExecutionGraph,
        eid: str,
        session_id: str,
        checkpoint_dir: str,
        address_of: Callable[[str], str | None],
    ) -> taskmanager_pb2.TaskDeploymentDescriptor:
        """Only for deployed executions: every execution of the attempt holds a slot."""
        ex = g.executions[eid]
        job, chain_of = self.topology.job, self.topology.chain_of
        chain = self.topology.chain_by_id[ex.chain_id]
        tdd = taskmanager_pb2.TaskDeploymentDescriptor(
            leader_session_id=session_id,
            job_id=self.job_id,
            attempt=g.attempt,
            execution_id=eid,
            chain_id=chain.id,
            operator_ids=list(chain.operator_ids),
            subtask_index=ex.subtask,
            parallelism=chain.parallelism,
            slot_index=deployed(ex.slot, eid).index,
            job=job,
            checkpoint_dir=checkpoint_dir,
        )
        run = eg.run_suffix(ex.run)
        override = self._overrides.get((chain.id, ex.subtask))
        if override is not None:  # a subtask deployed by a live reconfiguration or a region failover
            tdd.restore_checkpoint_id, tdd.restore_state = override
        elif self.restored_checkpoint is not None:
            tdd.restore_checkpoint_id = self.restored_checkpoint
            tdd.restore_state = self.restore_states[(chain.id, ex.subtask)]
        for edge in chain.inputs:
            upstream = chain_of[edge.source]
            gate = tdd.inputs.add(upstream_chain=upstream.id)
            for j in range(upstream.parallelism):
                producer = g.current_execution(upstream.id, j)  # a speculative race's winner
                slot = deployed(producer.slot, f"{upstream.id}/{j}")
                tag = self._ptag(g, upstream.id, chain.id) + eg.run_suffix(producer.run)
                pid = self.partition_id_for(upstream.id, edge.target, j, tag)
                gate.channels.add(partition_id=pid, address=address_of(slot.resource_id) or "")
        for edge in chain.outputs:
            target = chain_of[edge.target]
            pid = self.partition_id_for(chain.id, edge.target, ex.subtask, self._ptag(g, chain.id, target.id) + run)
            tdd.outputs.append(output_descriptor(pid, edge, target, job))
            tdd.outputs[-1].blocking = self.batch
        return tdd

    def partition_ids_of(self, g: eg.ExecutionGraph, ex: eg.Execution) -> list[str]:
        chain = self.topology.chain_by_id[ex.chain_id]
        chain_of = self.topology.chain_of
        return [
            self.partition_id_for(
                chain.id, e.target, ex.subtask, self._ptag(g, chain.id, chain_of[e.target].id) + eg.run_suffix(ex.run)
            )
            for e in chain.outputs
        ]

    def partitions_by_taskmanager(
        self, g: eg.ExecutionGraph, executions: Iterable[eg.Execution]
    ) -> dict[str, list[str]]:
        """The blocking results of these executions, by the TaskManager holding them."""
        by_tm: dict[str, list[str]] = {}
        for ex in executions:
            if ex.slot is not None:
                by_tm.setdefault(ex.slot.resource_id, []).extend(self.partition_ids_of(g, ex))
        return by_tm
