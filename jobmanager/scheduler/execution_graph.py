"""ExecutionGraph: the life of one job's tasks, as a pure state machine.

Theory of operation
-------------------
A job is a set of chains (tasks), each with a parallelism; every (chain,
subtask) pair is an *execution* with a unique execution id. The job waits in
CREATED until the slot pool hands it its slots (`SlotsAssigned`); then every
execution is deployed at once (streaming jobs run all tasks together) and the
job is RUNNING. TaskManagers report each execution's state
(`TaskStateReported`). When every execution FINISHED, the job is FINISHED.
The first FAILED execution (or a lost TaskManager) fails the job: the other
executions are cancelled and, once they all reached a terminal state (or
`cancel_timeout` passed — a TaskManager may be gone), the job is FAILED with
the first failure as root cause (`root_cause`: the task, its reported
`FailureCause` and its error, which the JobMaster's failure classification
and exception history read). A cancel request works the same way and ends
CANCELED.

Inputs are events, outputs are actions; time arrives in events. Reports that
no longer apply (late, duplicate, for an unknown execution) return an
explicit `Ignored` outcome instead of raising. Transitions are data
(`JOB_TRANSITIONS`, `TASK_TRANSITIONS`, keyed by the `JobStatus` and
`ExecutionState` members of sluice/states.py); an illegal one raises
`IllegalTransition` and leaves the state unchanged. A state reported as a
plain name (`"RUNNING"`) is turned into its member on the way in, so stored
states are always members.

Execution ids are built here, by `execution_id()`, and only here; nothing
parses them apart (reports carry the job id beside the execution id).

Pipelined regions and fine-grained recovery (docs/batch.md)
-----------------------------------------------------------
The graph knows the job's pipelined regions (jobmanager/scheduler/pipelined_regions.py).
With region failover (`region_failover`), a failed execution restarts only the regions
`regions_to_restart` names: their executions are cancelled, the job stays RUNNING, the
graph returns `RegionsFailed` (the JobMaster asks its restart strategy and answers with
`RestartRegions`, or fails the job globally) and, once both the answer came and every
execution of those regions ended, it replaces each of their subtasks by a new execution
(its `run` one higher, its id tagged `~<run>`) and returns `RegionsRestarted` then
`DeployExecutions`. A streaming failure that would restart every region is a full
failure instead (`_fail`): a new attempt of the whole job, as with `full` failover.

BATCH (`batch`): edges are blocking, so a subtask (a chain's subtask: chained operators
run in one task) is its own region. Slots are a pool the job holds, one task per slot;
`_schedule` deploys a pending subtask once every producer it reads has FINISHED and its
results are still there, in topological order, as slots free up (lazy scheduling: a job
of parallelism 8 runs in 2 slots). A producer's results are released (`ReleasePartitions`)
once every consumer finished; a restart needing a released or lost result re-runs its
producer too (backtracking). Speculation (`speculation`, on `Tick`): a running subtask
slower than `multiplier` x the median run time of its vertex's finished subtasks, once
`min_finished` of them finished, gets one backup execution on another TaskManager; the
first attempt to finish becomes the subtask's current execution and the other is
cancelled.
"""

from __future__ import annotations

import math
import statistics

from jobmanager.scheduler.execution_graph_events import (
    Actions,
    CancelExecutions,
    CancelRequested,
    DeployExecutions,
    DeploymentFailed,
    ExecutionGraphAction,
    ExecutionGraphEvent,
    GlobalFailure,
    Ignored,
    JobStatusChanged,
    JobTerminated,
    RegionsFailed,
    RegionsRestarted,
    ReleasePartitions,
    ReplaceChains,
    RequestSlots,
    RestartRegions,
    SlotsAdded,
    SlotsAssigned,
    TaskManagerLost,
    TaskStateReported,
    Tick,
)
from jobmanager.scheduler.execution_graph_state import (
    CANCEL_TIMEOUT,
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    ChainInfo,
    Execution,
    ExecutionGraphState,
    RootCause,
    Speculation,
    execution_id,
    run_suffix,
)
from jobmanager.scheduler.pipelined_regions import regions_to_restart
from sluice.states import ExecutionState, IllegalTransition, JobStatus

# The events, actions and model are also reached through this module.
__all__ = [
    "Actions",
    "CANCEL_TIMEOUT",
    "CancelExecutions",
    "CancelRequested",
    "ChainInfo",
    "DeployExecutions",
    "DeploymentFailed",
    "Execution",
    "ExecutionGraph",
    "ExecutionGraphAction",
    "ExecutionGraphEvent",
    "ExecutionGraphState",
    "GlobalFailure",
    "Ignored",
    "JOB_TRANSITIONS",
    "JobStatusChanged",
    "JobTerminated",
    "RegionsFailed",
    "RegionsRestarted",
    "ReleasePartitions",
    "ReplaceChains",
    "RequestSlots",
    "RestartRegions",
    "RootCause",
    "SlotsAdded",
    "SlotsAssigned",
    "Speculation",
    "TASK_TRANSITIONS",
    "TaskManagerLost",
    "TaskStateReported",
    "Tick",
    "execution_id",
    "run_suffix",
]


class ExecutionGraph(ExecutionGraphState):
    # -- dispatch ---------------------------------------------------------------
    def handle(self, event: ExecutionGraphEvent) -> list[ExecutionGraphAction]:
        match event:
            case SlotsAssigned():
                return self._on_slots(event)
            case SlotsAdded():
                return self._on_slots_added(event)
            case RestartRegions():
                return self._on_restart_regions(event)
            case TaskStateReported():
                return self._on_report(event)
            case DeploymentFailed():
                return self._on_deployment_failed(event)
            case TaskManagerLost():
                return self._on_tm_lost(event)
            case GlobalFailure():
                return self._on_global_failure(event)
            case CancelRequested():
                return self._on_cancel(event)
            case Tick():
                return self._on_tick(event)
            case ReplaceChains():
                return self._on_replace(event)
            case _:
                raise TypeError(f"not an ExecutionGraph event: {event!r}")

    def _on_slots(self, ev: SlotsAssigned) -> Actions:
        if self.state != JobStatus.CREATED:
            return [Ignored(f"slots assigned while {self.state}")]
        if self.batch:
            if not ev.slots:
                raise ValueError("a batch job needs at least 1 slot")
            actions = self._set_job(JobStatus.RUNNING)
            self.slots = tuple(ev.slots)
            return actions + self._schedule(ev.now)
        if len(ev.slots) < self.slots_required:
            raise ValueError(f"need {self.slots_required} slots, got {len(ev.slots)}")
        actions = self._set_job(JobStatus.RUNNING)
        self.slots = tuple(ev.slots)
        for ex in self.executions.values():
            ex.slot = ev.slots[ex.subtask]
            self._deploying(ex, ev.now)
        return [*actions, DeployExecutions(tuple(self.executions))]

    def _on_slots_added(self, ev: SlotsAdded) -> Actions:
        if self.state != JobStatus.RUNNING:
            return [Ignored(f"slots added while {self.state}")]
        self._slots_requested = False
        if self.batch:
            self.slots = (*[s for s in self.slots if s not in self.lost_slots], *ev.slots)
            return self._schedule(ev.now)
        added = list(ev.slots)
        self.slots = tuple(added.pop(0) if s in self.lost_slots and added else s for s in self.slots)
        self.slots = (*self.slots, *added)
        return self._maybe_restart(ev.now)

    def _on_report(self, ev: TaskStateReported) -> Actions:
        state = ExecutionState(ev.state)  # the edge: a plain name becomes its member (ValueError if none)
        ex = self.executions.get(ev.execution_id)
        if ex is None:
            return [Ignored(f"unknown execution {ev.execution_id}")]
        if ex.state == state:
            return [Ignored(f"duplicate report {state} for {ev.execution_id}")]
        if state not in TASK_TRANSITIONS[ex.state]:
            return [Ignored(f"late report {state} for {ev.execution_id} in {ex.state}")]
        if self.state == JobStatus.CREATED:  # nothing was deployed: a report cannot be about this attempt
            return [Ignored(f"report {state} for {ev.execution_id} before deployment")]
        asked = ex.state == ExecutionState.CANCELING
        self._set_task(ex, state)
        where = f"task {ex.name} ({ex.subtask + 1}/{self._parallelism(ex)})"
        task = where.removeprefix("task ")
        if self.state == JobStatus.RUNNING and self._superseded(ex):
            return self._drop_attempt(ex, ev.now)  # a speculative race's other attempt, or a cancelled loser
        if state == ExecutionState.FINISHED:
            ex.ended_at = ev.now
            actions = self._won(ex)
            if self.batch and self.state == JobStatus.RUNNING:
                return actions + self._released_after(ex) + self._schedule(ev.now) + self._check_done()
            return actions + self._check_done()
        if state == ExecutionState.FAILED:
            ex.error = ev.error
            backup = self._live_rival(ex)
            if backup is not None and self.state == JobStatus.RUNNING:  # its backup runs on: it counts now
                self.current[ex.subtask_key] = backup.execution_id
                return self._drop_attempt(ex, ev.now)
            return self._failover(
                [ex], f"{where} failed:\n{ev.error}", ev.now, RootCause(task, ex.chain_id, ev.error, ev.cause)
            )
        if state == ExecutionState.CANCELED and self.state == JobStatus.RUNNING and not asked:  # nobody asked
            ex.error = ev.error or "cancelled on its TaskManager"
            failure = f"{where} was cancelled unexpectedly: {ex.error}"
            return self._failover([ex], failure, ev.now, RootCause(task, ex.chain_id, failure))
        if self.state == JobStatus.RUNNING and self.restarting:
            return self._maybe_restart(ev.now)
        return self._check_done()

    def _on_deployment_failed(self, ev: DeploymentFailed) -> Actions:
        return self._on_report(
            TaskStateReported(ev.execution_id, ExecutionState.FAILED, f"deployment failed: {ev.error}", ev.now)
        )

    def _on_tm_lost(self, ev: TaskManagerLost) -> Actions:
        self.lost_slots.update(s for s in self.slots if s.resource_id == ev.resource_id)
        on_it = [ex for ex in self.executions.values() if ex.slot is not None and ex.slot.resource_id == ev.resource_id]
        lost = [ex for ex in on_it if not ex.state.terminal]
        if self.batch and self.state == JobStatus.RUNNING:
            # finished producers whose results were there and are still needed: produced again
            needed = {
                ex.subtask_key
                for ex in on_it
                if ex.state == ExecutionState.FINISHED
                and self.current.get(ex.subtask_key) == ex.execution_id
                and not self._consumers_done(ex.subtask_key)
            }
            self.unavailable |= needed
        if not lost:
            if self.batch and self.state == JobStatus.RUNNING:
                return self._schedule(ev.now)
            return []
        where = f"TaskManager {ev.resource_id}" + (f" ({ev.address})" if ev.address else "")
        for ex in lost:
            self._set_task(ex, ExecutionState.FAILED)
            ex.error = f"{where} lost: {ev.reason}"
        # The task it ran: a body that kills its TaskManager (os._exit, a crash in native code) shows here.
        names = [f"{ex.name} ({ex.subtask + 1}/{self._parallelism(ex)})" for ex in lost]
        tasks = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        failure = f"{where} was lost while running task {tasks}: {ev.reason}"
        first = lost[0]
        root = RootCause(names[0], first.chain_id, failure, None, ev.resource_id)
        if self.state == JobStatus.RUNNING:
            kept = [ex for ex in lost if self._superseded(ex)]
            actions: Actions = []
            for ex in kept:
                actions += self._drop_attempt(ex, ev.now)
            lost = [ex for ex in lost if ex not in kept]
            if not lost:
                return actions + (self._schedule(ev.now) if self.batch else [])
            return actions + self._failover(lost, failure, ev.now, root)
        return self._fail(failure, ev.now, root)

    def _on_global_failure(self, ev: GlobalFailure) -> Actions:
        if self.state == JobStatus.CREATED:
            for ex in self.executions.values():
                self._set_task(ex, ExecutionState.CANCELED)
            self.failure, self.root_cause = ev.reason, RootCause("", "", ev.reason)
            return [*self._set_job(JobStatus.FAILED), JobTerminated(JobStatus.FAILED, ev.reason)]
        return self._fail(ev.reason, ev.now, RootCause("", "", ev.reason))

    def _on_cancel(self, ev: CancelRequested) -> Actions:
        if self.state.terminal or self.state == JobStatus.CANCELLING:
            return [Ignored(f"cancel while {self.state}")]
        if self.state == JobStatus.CREATED:
            for ex in self.executions.values():
                self._set_task(ex, ExecutionState.CANCELED)
            return [*self._set_job(JobStatus.CANCELED), JobTerminated(JobStatus.CANCELED, "")]
        if self.state == JobStatus.FAILING:  # already winding down; the end state stays FAILED
            return [Ignored("cancel while FAILING")]
        actions = self._set_job(JobStatus.CANCELLING)
        self._ending_since = ev.now
        self.region_restart.regions.clear()
        return actions + self._cancel_running() + self._check_done()

    def _on_tick(self, ev: Tick) -> Actions:
        if self.state == JobStatus.RUNNING:
            actions: Actions = []
            pending = self.region_restart
            if pending.regions and pending.since is not None:
                if ev.now - pending.since >= self.cancel_timeout:
                    for ex in self._in_regions(pending.regions):
                        if not ex.state.terminal:
                            self._set_task(ex, ExecutionState.CANCELED)
                            ex.error = f"no answer to cancel within {self.cancel_timeout}s"
                    actions += self._maybe_restart(ev.now)
            if self.speculation is not None:
                actions += self._speculate(ev.now)
            return actions
        if self.state not in (JobStatus.FAILING, JobStatus.CANCELLING) or self._ending_since is None:
            return []
        if ev.now - self._ending_since < self.cancel_timeout:
            return []
        for ex in self.executions.values():
            if not ex.state.terminal:
                self._set_task(ex, ExecutionState.CANCELED)
                ex.error = f"no answer to cancel within {self.cancel_timeout}s"
        return self._check_done()

    def _on_replace(self, ev: ReplaceChains) -> Actions:
        if self.state != JobStatus.RUNNING:
            return [Ignored(f"replace while {self.state}")]
        replaced = {c.id for c in ev.chains}
        old = [ex for ex in self.executions.values() if ex.chain_id in replaced]
        if any(ex.state != ExecutionState.FINISHED for ex in old):
            raise ValueError(f"chains {sorted(replaced)} still have executions that did not finish")
        if any(c.parallelism > len(self.slots) for c in ev.chains) or ev.tag in self.tags.values():
            raise ValueError(f"{len(self.slots)} slots and tag {ev.tag!r} cannot hold {ev.chains}")
        for ex in old:
            del self.executions[ex.execution_id]
            self.current.pop(ex.subtask_key, None)
        new = []
        for c in ev.chains:
            self.tags[c.id] = ev.tag
            self.parallelism[c.id] = c.parallelism
            for i in range(c.parallelism):
                eid = execution_id(self.job_id, ev.tag, c.id, i)
                ex = Execution(eid, c.id, c.name, i, slot=self.slots[i])
                self._add(ex)
                self._deploying(ex, ev.now)
                new.append(eid)
        self._compute_regions()
        return [DeployExecutions(tuple(new))]

    # -- region failover --------------------------------------------------------
    def _failover(self, failed: list[Execution], failure: str, now: float, root: RootCause) -> Actions:
        """Restart the regions `failed` needs restarted, or the whole job (`_fail`)."""
        if self.state != JobStatus.RUNNING or not self.region_failover:
            return self._fail(failure, now, root)
        new: set[int] = set()
        for ex in failed:
            if self.region_index[ex.subtask_key] in self.restarting:
                continue  # its region is already restarting: a consequence, not a new failure
            for region in regions_to_restart(self.parallelism, self.edges, ex.subtask_key, self.unavailable):
                index = self.regions.index(region)
                if any(self._deployed_once(v) for v in region):  # a region never deployed has nothing to redo
                    new.add(index)
        if not new:
            return self._maybe_restart(now)
        if not self.batch and len(new | self.restarting) == len(self.regions):
            return self._fail(failure, now, root)  # every region restarts: a new attempt of the job
        self.root_cause = root
        self.region_restart.begin(new, now)
        cancel = []
        for ex in self._in_regions(new):
            if ex.state in (ExecutionState.DEPLOYING, ExecutionState.RUNNING):
                self._set_task(ex, ExecutionState.CANCELING)
                cancel.append(ex.execution_id)
            elif ex.state == ExecutionState.CREATED and ex.slot is None and self.batch:
                pass  # never deployed: replaced when the restart comes
        actions: Actions = [RegionsFailed(tuple(sorted(new)), failure, root)]
        if cancel:
            actions.append(CancelExecutions(tuple(cancel)))
        return actions

    def _on_restart_regions(self, ev: RestartRegions) -> Actions:
        if self.state != JobStatus.RUNNING or not self.restarting:
            return [Ignored(f"restart of regions while {self.state}")]
        self.region_restart.wanted = True
        return self._maybe_restart(ev.now)

    def _in_regions(self, regions: set[int]) -> list[Execution]:
        return [ex for ex in self.executions.values() if self.region_index.get(ex.subtask_key) in regions]

    def _maybe_restart(self, now: float) -> Actions:
        """Replace the restarting regions' executions once the restart is wanted and they all ended."""
        if not self.restarting or not self.region_restart.wanted:
            return []
        old = self._in_regions(self.restarting)
        if any(not ex.state.terminal for ex in old):
            return []
        subtasks = sorted({v for r in self.restarting for v in self.regions[r]})
        if not self.batch:
            missing = {self.slots[i] for _, i in subtasks if self.slots[i] in self.lost_slots}
            if missing:
                if self._slots_requested:
                    return []
                self._slots_requested = True
                return [RequestSlots(len(missing))]
        for ex in old:
            del self.executions[ex.execution_id]
        new: list[Execution] = []
        for chain, i in subtasks:
            previous = max((ex.run for ex in old if ex.subtask_key == (chain, i)), default=0)
            run = previous + 1
            tag = self.tags[chain] + run_suffix(run)
            ex = Execution(execution_id(self.job_id, tag, chain, i), chain, self.names[chain], i, run=run)
            self._add(ex)
            self.unavailable.discard((chain, i))
            new.append(ex)
        self.region_restart.clear()
        actions: Actions = [
            RegionsRestarted(tuple(ex.execution_id for ex in new), tuple(ex.execution_id for ex in old))
        ]
        if self.batch:
            return actions + self._schedule(now)
        for ex in new:
            ex.slot = self.slots[ex.subtask]
            self._deploying(ex, now)
        return [*actions, DeployExecutions(tuple(ex.execution_id for ex in new))]

    # -- batch scheduling -------------------------------------------------------
    def _schedule(self, now: float) -> Actions:
        """BATCH: deploy every pending subtask whose inputs are complete, while slots are free."""
        if self.state != JobStatus.RUNNING:
            return []
        actions: Actions = []
        restarting = {v for r in self.restarting for v in self.regions[r]}
        lost_needed = {
            p
            for v, eid in self.current.items()
            if self.executions[eid].state == ExecutionState.CREATED and v not in restarting
            for p in self._producers(v)
            if p in self.unavailable and p not in restarting
        }
        if lost_needed:  # a pending subtask needs a result that is gone: produce it again first
            for p in sorted(lost_needed):
                ex = self.current_execution(*p)
                if ex.state == ExecutionState.FINISHED:
                    self.region_restart.regions.add(self.region_index[p])
            if self.restarting:
                self.region_restart.wanted = True
                actions += self._maybe_restart(now)
                if self.restarting:
                    return actions
        free = self._free_slots()
        deploy: list[str] = []
        for region in self.regions:
            if not free:
                break
            for v in sorted(region):
                ex = self.current_execution(*v)
                if ex.state != ExecutionState.CREATED or v in restarting:
                    continue
                producers = self._producers(v)
                if any(not self._finished(p) or p in self.unavailable for p in producers):
                    continue
                if not free:
                    break
                ex.slot = free.pop(0)
                self._deploying(ex, now)
                deploy.append(ex.execution_id)
        if deploy:
            actions.append(DeployExecutions(tuple(deploy)))
        elif not self._busy_slots() and not self._free_slots() and not self._slots_requested:
            pending = sum(1 for eid in self.current.values() if self.executions[eid].state == ExecutionState.CREATED)
            if pending:  # every slot was lost with its TaskManager: ask for more
                self._slots_requested = True
                actions.append(RequestSlots(max(self.parallelism.values()), minimum=1))
        return actions

    def _released_after(self, ex: Execution) -> Actions:
        """BATCH: the results of `ex`'s producers that no consumer needs any more."""
        release = []
        for p in sorted(self._producers(ex.subtask_key)):
            if self._finished(p) and self._consumers_done(p) and p not in self.unavailable:
                self.unavailable.add(p)  # released: a later re-run of a consumer produces it again
                release.append(self.current_execution(*p))
        return [ReleasePartitions(tuple(release))] if release else []

    # -- speculation ------------------------------------------------------------
    def _won(self, ex: Execution) -> Actions:
        """`ex` FINISHED: it is its subtask's current execution; its still-running rivals are cancelled."""
        self.current[ex.subtask_key] = ex.execution_id
        cancel = []
        for other in self._attempts(ex.subtask_key):
            if other is not ex and other.state in (ExecutionState.DEPLOYING, ExecutionState.RUNNING):
                self._set_task(other, ExecutionState.CANCELING)
                cancel.append(other.execution_id)
        return [CancelExecutions(tuple(cancel))] if cancel else []

    def _drop_attempt(self, ex: Execution, now: float) -> Actions:
        """An attempt that lost a speculative race ended: forget it (its results are not used)."""
        if not ex.state.terminal:
            return []
        del self.executions[ex.execution_id]
        actions: Actions = []
        if ex.state == ExecutionState.FINISHED:
            actions.append(ReleasePartitions((ex,)))
        if self.batch:
            actions += self._schedule(now)
        return actions + self._check_done()

    def _speculate(self, now: float) -> Actions:
        spec = self.speculation
        if spec is None:
            return []
        free = self._free_slots()
        deploy: list[str] = []
        for chain, p in self.parallelism.items():
            if not free:
                break
            primaries = [self.current_execution(chain, i) for i in range(p)]
            done = [ex for ex in primaries if ex.state == ExecutionState.FINISHED]
            if len(done) < max(1, math.ceil(spec.min_finished * p)) or len(done) == p:
                continue
            durations = sorted(
                ex.ended_at - ex.started_at for ex in done if ex.ended_at is not None and ex.started_at is not None
            )
            if not durations:
                continue
            threshold = max(spec.multiplier * statistics.median(durations), spec.min_runtime)
            for ex in primaries:
                if ex.state != ExecutionState.RUNNING or ex.started_at is None or now - ex.started_at <= threshold:
                    continue
                if any(o.speculative for o in self._attempts(ex.subtask_key)):
                    continue  # one backup per subtask
                elsewhere = [s for s in free if ex.slot is None or s.resource_id != ex.slot.resource_id]
                if not elsewhere:
                    continue
                slot = elsewhere[0]
                free.remove(slot)
                run = 1 + max(o.run for o in self._attempts(ex.subtask_key))
                tag = self.tags[chain] + run_suffix(run)
                backup = Execution(
                    execution_id(self.job_id, tag, chain, ex.subtask),
                    chain,
                    ex.name,
                    ex.subtask,
                    run=run,
                    speculative=True,
                    slot=slot,
                )
                self._add(backup)
                self._deploying(backup, now)
                deploy.append(backup.execution_id)
        return [DeployExecutions(tuple(deploy))] if deploy else []

    # -- helpers ----------------------------------------------------------------
    def _fail(self, failure: str, now: float, root: RootCause) -> Actions:
        if self.state in (JobStatus.FAILING, JobStatus.CANCELLING) or self.state.terminal:
            return self._check_done()
        self.failure, self.root_cause = failure, root
        actions = self._set_job(JobStatus.FAILING)
        self._ending_since = now
        self.region_restart.regions.clear()
        return actions + self._cancel_running() + self._check_done()

    _END_OF = {
        JobStatus.RUNNING: JobStatus.FINISHED,
        JobStatus.FAILING: JobStatus.FAILED,
        JobStatus.CANCELLING: JobStatus.CANCELED,
    }

    def _check_done(self) -> Actions:
        if self.state == JobStatus.RUNNING and self.speculation is not None:
            # A race's loser still being cancelled (a body that does not notice) does not hold the
            # job back: its TaskManager keeps reporting its slot as held until it stops.
            losers = [
                eid
                for eid, ex in self.executions.items()
                if ex.state == ExecutionState.CANCELING and self.current.get(ex.subtask_key) != eid
            ]
            current = [self.executions[eid] for eid in self.current.values()]
            if losers and all(ex.state == ExecutionState.FINISHED for ex in current) and not self.restarting:
                for eid in losers:
                    del self.executions[eid]
        states = [ex.state for ex in self.executions.values()]
        if not all(s.terminal for s in states):
            return []
        end = self._END_OF.get(self.state)
        if end is None:
            return []
        if end == JobStatus.FINISHED and self.restarting:
            return []  # a region restart is pending
        if end == JobStatus.FINISHED and any(s != ExecutionState.FINISHED for s in states):
            # failures and cancels move the job to FAILING first
            raise IllegalTransition(f"job RUNNING with terminal tasks {sorted(set(states))}")
        return [*self._set_job(end), JobTerminated(end, self.failure)]
