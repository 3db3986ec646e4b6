"""JobMaster: one job across its attempts.

Each attempt is an ExecutionGraph (pure core) with, when checkpointing is on,
a CheckpointCoordinator (pure core). The JobMaster feeds them events and
carries out their actions through the dispatcher's gateway (slots and RPCs)
and checkpoint storage. When an attempt fails, the restart strategy decides;
a new attempt restores every task from the latest completed checkpoint,
read back from storage — a checkpoint that cannot be read fails the job
loudly, never a silent start from empty state.

A deterministic failure fails the job without asking the restart strategy
(`_decide`): a task's NON_RECOVERABLE report, or the same task error on two
consecutive attempts with no checkpoint completed in between
(`RepeatedFailureDetector`, jobmanager/scheduler/restart_strategy.py). So
does a job one of whose tasks was on `max_tm_losses` TaskManagers that died
while it started or ran, with no checkpoint completed in between
(`jobmanager.taskmanager-loss.max-per-job`; the rule is in
jobmanager/scheduler/taskmanager_losses.py): a body that kills its
TaskManager (`os._exit`, a crash in native code) fails its own job instead of
taking down every TaskManager of the cluster in turn, while unrelated losses
restart it.

Exception history, as Flink keeps it: the root cause of every failed attempt
— restarted or final — with its time, attempt, task, one-line cause and
traceback (at most `TRACEBACK_LIMIT` characters), the last `HISTORY_SIZE`
entries, in `JobInfo.exceptions`. An ended job's JobInfo goes to the job
result store, so its history outlives a JobManager failover; a running job
taken over by a new leader starts a fresh history there.

All methods run under the dispatcher's lock; storage writes and RPCs run on
its thread pool and come back through `gateway.locked`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol, assert_never, cast

from jobmanager.checkpoint import coordinator as cc
from jobmanager.checkpoint import metadata, state_handles
from jobmanager.checkpoint.id_counter import CheckpointIDCounter, InMemoryCheckpointIDCounter
from jobmanager.checkpoint.shared_registry import SharedStateRegistry, left_behind, metadata_handles
from jobmanager.connectors import coordinator as sc
from jobmanager.connectors import lookups
from jobmanager.reconfiguration import protocol as rp
from jobmanager.reconfiguration.plan import make_plan
from jobmanager.reconfiguration.runner import Outcome, ReconfigurationRun
from jobmanager.scheduler import execution_graph as eg
from jobmanager.scheduler import taskmanager_losses as tl
from jobmanager.scheduler.pipelined_regions import RegionEdge
from jobmanager.scheduler.restart_strategy import (
    FailureSignature,
    RepeatedFailureDetector,
    RestartDecision,
    RestartStrategy,
    exception_line,
    exception_type,
    from_config,
)
from jobmanager.scheduler.slot_pool import SlotId
from sluice import config, graph, job_options
from sluice.checkpoints import savepoint as sp
from sluice.checkpoints.storage import CheckpointCorrupt, CheckpointStorage
from sluice.states import AckOutcome, ExecutionState, FailureCause, JobStatus, SavepointStatus, to_proto
from sluice.v1 import common_pb2, taskmanager_pb2

log = logging.getLogger("sluice.jobmanager.job")

PAST_ATTEMPTS_SHOWN = 8  # ended attempts whose checkpoints the status still lists (then the last 50 of all)

HISTORY_SIZE = 32  # exception history entries kept per job
SAVEPOINTS_SHOWN = 16  # savepoint requests a job's status keeps
MAX_TARGET_LENGTH = 4096  # characters of a savepoint target directory
TRACEBACK_LIMIT = 8192  # characters of a traceback kept in the history (the job result store is a ZooKeeper node)


class Gateway(Protocol):
    """What a JobMaster needs from the dispatcher."""

    def request_slots(self, job_id: str, count: int, minimum: int | None = None, extend: bool = False) -> None: ...
    def release_slots(self, job_id: str) -> None: ...
    def address_of(self, resource_id: str) -> str | None: ...
    def call_task(
        self,
        job: JobMaster,
        execution_id: str,
        method: str,
        request: Any,
        on_reply: Callable[[Any, str], None] | None = None,
    ) -> None: ...
    def run_io(self, job: JobMaster, fn: Callable[[], object], done: Callable[[Exception | None], None]) -> None: ...
    def release_partitions(
        self, job: JobMaster, resource_id: str, partition_ids: Sequence[str], all_of_job: bool = False
    ) -> None: ...
    def guard(self) -> Any: ...
    @property
    def ha(self) -> Any: ...
    @property
    def session_id(self) -> str: ...
    @property
    def address(self) -> str: ...


def checkpoint_config(config: dict[str, str]) -> cc.CheckpointConfig | None:
    """The job's checkpoint options read through sluice/job_options.py; None when checkpointing is off.
    A bad value or an unknown execution.*/state.* key raises JobConfigError (a ValueError naming the key)."""
    o = job_options.checkpointing(config)
    if o.interval <= 0:
        return None
    return cc.CheckpointConfig(
        interval=o.interval,
        timeout=o.timeout,
        min_pause=o.min_pause,
        tolerable_failures=o.tolerable_failures,
        retained=o.retained,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


NO_COUNTERS = common_pb2.TaskCounters()  # a task not heard from yet


class TaskRecords(NamedTuple):
    """A task's counters as its TaskManager last reported them (heartbeats and task states);
    `TaskCounters` in proto/sluice/v1/common.proto says what each counts."""

    counters: common_pb2.TaskCounters = NO_COUNTERS  # never changed in place: a report brings new ones
    bad_record_samples: tuple[str, ...] = ()  # a few malformed lines, truncated (the TaskManager's)
    watermark: int | None = None  # the task's current input watermark (ms)
    key_group_records: tuple[tuple[int, int], ...] = ()  # a keyed task's input rows per key group (heartbeats)
    io: common_pb2.TaskIOMetrics | None = None  # rates, time shares, queues (heartbeats; docs/monitoring.md)
    heartbeat: bool = False  # from a heartbeat (which carries the key-group loads), not only a state report


BAD_RECORD_SAMPLES = 5  # in a job's status: the first tasks' samples, at most this many
SAMPLE_CHARS = 200  # each sample truncated to this many characters, whatever a TaskManager sent


def task_records(m: Any) -> TaskRecords:
    """The counters of a heartbeat's `TaskMetrics` or a `TaskExecutionState` (same fields)."""
    counters = common_pb2.TaskCounters()
    counters.CopyFrom(m.counters)
    return TaskRecords(
        counters,
        tuple(s[:SAMPLE_CHARS] for s in m.bad_record_samples[:BAD_RECORD_SAMPLES]),
        m.watermark if m.HasField("watermark") else None,
        tuple(sorted(m.key_group_records.items())) if hasattr(m, "key_group_records") else (),
        finite_io(m.io) if hasattr(m, "io") and m.HasField("io") else None,
        hasattr(m, "key_group_records"),
    )


def finite_io(io: common_pb2.TaskIOMetrics) -> common_pb2.TaskIOMetrics:
    """A TaskManager's I/O metrics with what no honest one sends (NaN, infinities, negative
    values) made 0, so that JSON clients and Prometheus get numbers."""
    out = common_pb2.TaskIOMetrics()
    out.CopyFrom(io)
    for field, value in out.ListFields():
        if isinstance(value, float) and (not math.isfinite(value) or value < 0):
            setattr(out, field.name, 0.0)
        elif isinstance(value, int) and value < 0:
            setattr(out, field.name, 0)
    return out


@dataclasses.dataclass
class SavepointRequest:
    """One savepoint request (`SavepointInfo` in proto/sluice/v1/common.proto)."""

    request_id: str
    stop: bool
    target: str
    trigger_ms: int
    status: SavepointStatus = SavepointStatus.IN_PROGRESS
    checkpoint_id: int = 0
    path: str = ""
    failure: str = ""
    end_ms: int = 0


@dataclasses.dataclass(frozen=True)
class ExceptionEntry:
    """One entry of the exception history (`ExceptionEntry` in proto/sluice/v1/common.proto)."""

    time_ms: int
    attempt: int
    task: str
    cause: str
    traceback: str
    restarted: bool


def bounded(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """`text` cut to about `limit` characters: its head and its tail, where a traceback says what failed."""
    if len(text) <= limit:
        return text
    head = limit // 8
    tail = limit - head
    return f"{text[:head]}\n... ({len(text) - limit} characters cut) ...\n{text[-tail:]}"


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
        self.job_id, self.job, self.gateway = job_id, job, gateway
        self.chains = graph.build_chains(job)
        self.chain_by_id = {c.id: c for c in self.chains}
        self.chain_of = graph.chain_of(self.chains)
        config = dict(job.config)
        self.execution = job_options.execution(config)  # runtime mode, failover, speculation (docs/batch.md)
        self.batch = self.execution.batch
        # BATCH needs no checkpoints: a failed region runs again from its persisted inputs
        self.ckpt_config = None if self.batch else checkpoint_config(config)  # raises ValueError on bad settings
        self.restart: RestartStrategy = from_config(config)
        ckpt_dir = config.get("state.checkpoints.dir") or checkpoint_dir
        if self.ckpt_config is not None and not ckpt_dir:
            raise ValueError(
                "config.execution.checkpointing.interval: checkpointing needs state.checkpoints.dir "
                "(set it in the job or start the JobManager with --checkpoint-dir)"
            )
        self.storage = CheckpointStorage(ckpt_dir, job_id) if self.ckpt_config is not None and ckpt_dir else None
        self.counter = counter or InMemoryCheckpointIDCounter()
        self.cancel_timeout = cancel_timeout
        self.slots_required = graph.slots_required(job)
        self.submitted_ms, self.ended_ms = _now_ms(), 0
        self.message = ""
        self.restarts = 0
        # the job's counters (JobInfo.metrics): kept in the HA store, a new leader goes on from them
        self.counters = common_pb2.JobMetrics()
        self._attempt_started_ms = 0
        self.restored_checkpoint: int | None = None
        self.latest: cc.CompletedCheckpoint | None = None
        # shared state files of incremental checkpoints, by the retained checkpoints that need them
        self.shared_state = SharedStateRegistry()
        self.final_state: JobStatus | None = None
        self.failure = ""
        self._cancel_requested = False
        self._restart_at: float | None = None
        self._region_restart_at: float | None = None  # a region failover's restart, after the strategy's delay
        self._forced_decision: RestartDecision | None = None  # a region failover the strategy refused
        # Made when an attempt starts failing, as in Flink: the status can say at once
        # whether the job will restart, and the restart delay runs while tasks cancel.
        self._decision: RestartDecision | None = None
        self._failed_at = 0.0
        self._failed_ms = 0
        self.repeated = RepeatedFailureDetector()
        self.max_tm_losses = max_tm_losses
        self.tm_losses = tl.TaskManagerLosses(max_tm_losses)  # losses attributed to its tasks, since a checkpoint
        self.exceptions: collections.deque[ExceptionEntry] = collections.deque(maxlen=HISTORY_SIZE)
        # coordinators of ended attempts, newest last: their checkpoints stay in the status
        self._past_coordinators: list[cc.CheckpointCoordinator] = []
        self.metrics: dict[str, TaskRecords] = {}
        self._restore_states: dict[tuple[str, int], bytes] = {}
        # connector sources' split enumerators (docs/connectors.md): rebuilt per attempt from the
        # restored checkpoint's `_metadata` ("coordinators"), fresh without one
        self._source_states: dict[str, Any] = {}
        self.sources = sc.SourceCoordinators({})
        self.graph = eg.ExecutionGraph(job_id, [], cancel_timeout=cancel_timeout)  # replaced by start()
        self.coordinator: cc.CheckpointCoordinator | None = None
        self.savepoints: collections.deque[SavepointRequest] = collections.deque(maxlen=SAVEPOINTS_SHOWN)
        # Live reconfiguration (docs/reconfiguration.md): the one in progress, the past ones for the status
        self.reconfiguration: ReconfigurationRun | None = None
        self.reconfigurations: collections.deque[Outcome] = collections.deque(maxlen=SAVEPOINTS_SHOWN)
        self._partition_tags: dict[tuple[str, str], str] = {}
        self._restore_override: dict[tuple[str, int], tuple[int, bytes]] = {}
        self._savepoint_request: SavepointRequest | None = None  # the one in progress
        self.stopped_with: str = ""  # the savepoint of a job stopped with one
        self.savepoints_dir = job_options.SAVEPOINTS_DIR.read(config) or (
            f"{ckpt_dir.rstrip('/')}/savepoints" if ckpt_dir else None
        )
        # A job started from a savepoint restores from it until a checkpoint of its own completes.
        self.savepoint = savepoint
        self._savepoint_states: dict[tuple[str, int], bytes] = {}
        if savepoint is not None:
            allow = job_options.SAVEPOINT_IGNORE_UNCLAIMED.read(config)
            self._savepoint_states = sp.restore_states(savepoint, job, self.chains, allow)  # raises SavepointError

    def start(self, now: float, recover_from: int | None = None) -> None:
        """First attempt; a JobManager that took over a running job restores it from
        `recover_from`, its latest completed checkpoint in the HA store."""
        if recover_from is None:
            self.restarts = int(self.counters.num_restarts)  # a job recovered before its first checkpoint
            if self.savepoint is not None:
                self._restore_states = self._savepoint_states
                self.restored_checkpoint = self.savepoint.checkpoint_id
                log.info("%s starting from savepoint %s", self.tag, self.savepoint.path)
            self._start_attempt(0, now)
            return
        self.restarts = int(self.counters.num_restarts) + 1  # the job's tasks restart under the new leader
        self._save_counters()
        self.latest = cc.CompletedCheckpoint(recover_from, {}, now, now, 0)
        self._restart(now, first_attempt=0)

    # -- attempts -------------------------------------------------------------------------------
    def _start_attempt(self, attempt: int, now: float) -> None:  # noqa: ARG002 — time is an input, as for events
        self._partition_tags, self._restore_override = {}, {}  # every task of an attempt starts from one checkpoint
        self.sources = sc.SourceCoordinators.build(
            self._connector_sources(), self._source_states, self.restored_checkpoint or 0
        )
        infos = [eg.ChainInfo(c.id, c.name, c.parallelism) for c in self.chains]
        x = self.execution
        self.graph = eg.ExecutionGraph(
            self.job_id,
            infos,
            attempt=attempt,
            cancel_timeout=self.cancel_timeout,
            attempt_tag=f"{self.gateway.session_id[:8]}.{attempt}",
            edges=self.region_edges(),
            region_failover=x.region_failover,
            batch=self.batch,
            speculation=eg.Speculation(x.multiplier, x.min_finished, x.min_runtime) if x.speculative else None,
        )
        self.end_of_input: set[str] = set()
        self._attempt_started_ms = _now_ms()
        self._region_restart_at = None
        self._used_taskmanagers: set[str] = set()
        if self.batch:  # as many slots as are free, up to the widest stage: regions run as slots free up
            self.gateway.request_slots(self.job_id, self.slots_required, minimum=1)
        else:
            self.gateway.request_slots(self.job_id, self.slots_required)

    def region_edges(self) -> list[RegionEdge]:
        """The edges between chains, as the pipelined-region computation sees them. A forward
        edge between two chains is wired to every upstream subtask (its barriers and watermarks
        reach each consumer), so it joins regions like an all-to-all edge."""
        return [
            RegionEdge(self.chain_of[e.source].id, chain.id, pointwise=False, blocking=self.batch)
            for chain in self.chains
            for e in chain.inputs
        ]

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
        if self._restart_at is not None or (self.attempt > 0 and self.graph.state == JobStatus.CREATED):
            return JobStatus.RESTARTING
        if self.graph.state == JobStatus.FAILING:  # winding down after a failure
            will_restart = not self._cancel_requested and (self._decision is None or self._decision.restart)
            # not restarting: FAILED once the remaining tasks stopped
            return JobStatus.RESTARTING if will_restart else JobStatus.RUNNING
        return JobStatus.RUNNING if self.graph.state == JobStatus.CANCELLING else self.graph.state

    @property
    def terminal(self) -> bool:
        return self.final_state is not None

    # -- events from the dispatcher -----------------------------------------------------------------
    def on_slots(self, slots: Sequence[SlotId], now: float, added: bool = False) -> None:
        self.message = ""
        self._used_taskmanagers.update(s.resource_id for s in slots)
        if added or self.graph.state == JobStatus.RUNNING:  # replacements, or more room for a batch job
            self._apply(self.graph.handle(eg.SlotsAdded(tuple(slots), now)), now)
            return
        self._apply(self.graph.handle(eg.SlotsAssigned(tuple(slots), now)), now)

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
                io=previous.io, key_group_records=previous.key_group_records, heartbeat=previous.heartbeat
            )
        self.metrics[eid] = reported
        if end_of_input and state == ExecutionState.RUNNING:
            self._on_end_of_input(eid, now)
            return True
        actions = self.graph.handle(eg.TaskStateReported(eid, state, error, now, cause))
        self._apply(actions, now)
        run = self.reconfiguration
        if run is not None and not run.ended and not any(isinstance(a, eg.Ignored) for a in actions):
            if state == ExecutionState.FINISHED and eid in run.retiring:
                run.handle(rp.Retired(eid), now)
            elif state == ExecutionState.RUNNING and eid in run.new_executions:
                run.handle(rp.Running(eid, now), now)
        return not any(isinstance(a, eg.Ignored) for a in actions)

    def on_deploy_failed(self, eid: str, error: str, now: float) -> None:
        if eid in self.graph.executions:
            self._apply(self.graph.handle(eg.DeploymentFailed(eid, error, now)), now)

    def on_tm_lost(self, resource_id: str, reason: str, now: float, address: str = "") -> None:
        lost: dict[tuple[str, int], tl.LostTask] = {}  # one per subtask (a speculative copy may share its TaskManager)
        for ex in self.graph.executions.values():
            if ex.slot is not None and ex.slot.resource_id == resource_id and not ex.state.terminal:
                name = f"{ex.name} ({ex.subtask + 1}/{self.chain_by_id[ex.chain_id].parallelism})"
                lost.setdefault(ex.subtask_key, tl.LostTask(ex.chain_id, ex.subtask, name, ex.state))
        if tasks := tuple(lost.values()):  # it held tasks of this attempt
            failing = self._cancel_requested or self.graph.state in (JobStatus.FAILING, JobStatus.CANCELLING)
            outcome = self.tm_losses.lost(tl.TaskManagerLost(resource_id, tasks, failing))
            counted = (
                f"counts against {', '.join(outcome.tasks)} ({outcome.most} of {self.max_tm_losses} allowed)"
                if isinstance(outcome, tl.Attributed)
                else f"not counted: {outcome.why}"
            )
            log.warning(
                "%s TaskManager %s (%s) lost with tasks of this job; %s: %s",
                self.tag,
                resource_id,
                address,
                counted,
                reason,
            )
        self._apply(self.graph.handle(eg.TaskManagerLost(resource_id, reason, now, address)), now)

    def cancel(self, now: float) -> JobStatus:
        if self.terminal:
            raise ValueError(f"job {self.job_id} already ended {self.final_state}")
        self._cancel_requested = True
        log.info("%s cancel requested", self.tag)
        self._record_result(JobStatus.CANCELED)  # the cancel is final, even across a failover
        if self._restart_at is not None or self.graph.state == JobStatus.CREATED:
            self._restart_at = None
            self.gateway.release_slots(self.job_id)
            self._apply(self.graph.handle(eg.CancelRequested(now)), now)
            if not self.terminal:
                self._finish(JobStatus.CANCELED, "", now)
        else:
            self._apply(self.graph.handle(eg.CancelRequested(now)), now)
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
        if self.sources.by_operator:
            raise ValueError(
                f"job {self.job_id} reads connector sources ({', '.join(sorted(self.sources.by_operator))}): "
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
        target = target or self.savepoints_dir or ""
        if not target or len(target) > MAX_TARGET_LENGTH or "\0" in target:
            raise ValueError("savepoint directory: give --dir (a directory or URI of at most 4096 characters)")
        if self._savepoint_request is not None:
            raise ValueError(f"job {self.job_id}: savepoint {self._savepoint_request.request_id} is in progress")
        actions = coordinator.handle(cc.SavepointRequested(stop, now))  # raises ValueError, nothing changed
        request = SavepointRequest(uuid.uuid4().hex[:12], stop, target, _now_ms())
        self.savepoints.append(request)
        self._savepoint_request = request
        log.info("%s %s requested into %s", self.tag, "stop with savepoint" if stop else "savepoint", target)
        self._apply_checkpoint(coordinator, actions, now)
        return request.request_id

    # -- live reconfiguration (docs/reconfiguration.md) ---------------------------------------------
    def reconfigure(
        self,
        operator: str,
        parallelism: int,
        new_job: common_pb2.JobGraph | None,
        now: float,
        rebalance_keys: bool = False,
    ) -> str:
        """Start a live reconfiguration; its id. ValueError (ReconfigurationError) saying why it
        cannot be made now; the job is untouched then."""
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
        if self._savepoint_request is not None or coordinator.savepoint_wanted:
            raise ValueError(f"job {self.job_id}: a savepoint is in progress; wait for it to end")
        if self.sources.by_operator:
            raise ValueError(
                f"job {self.job_id} reads connector sources ({', '.join(sorted(self.sources.by_operator))}): "
                "their split assignment is per subtask and cannot be reconfigured live yet (docs/connectors.md)"
            )
        load = self._key_group_load(operator) if rebalance_keys else None
        plan = make_plan(self.job, operator, parallelism, new_job, slots=len(self.graph.slots), key_group_load=load)
        rid = uuid.uuid4().hex[:12]
        run = ReconfigurationRun(self, rid, plan, f"{self._attempt_tag}.r{len(self.reconfigurations) + 1}", now)
        self.reconfiguration = run
        self.reconfigurations.append(run.outcome)
        run.start()
        return rid

    def _key_group_load(self, operator: str) -> dict[int, int]:
        """Input rows per key group of the task running `operator`, from the last heartbeats."""
        chain = self.chain_of.get(operator)
        load: dict[int, int] = {}
        for eid, ex in self.graph.executions.items():
            if chain is not None and ex.chain_id == chain.id:
                records = self.metrics.get(eid, TaskRecords())
                if not records.heartbeat:  # its load is unknown, not zero: a plan now could move the wrong way
                    raise ValueError(
                        f"job {self.job_id}: the key-group load of subtask {ex.subtask} of {operator!r} has not "
                        "reached the JobManager yet (heartbeats carry it); try again in a moment"
                    )
                load.update(records.key_group_records)
        return load

    def adopt(self, job: common_pb2.JobGraph) -> None:
        """Make `job` the job's graph (a reconfiguration's new one, or back to the old one)."""
        self.job = job
        self.chains = graph.build_chains(job)
        self.chain_by_id = {c.id: c for c in self.chains}
        self.chain_of = graph.chain_of(self.chains)
        self.slots_required = graph.slots_required(job)

    def add_restore_states(self, states: dict[tuple[str, int], bytes], checkpoint_id: int) -> None:
        for key, state in states.items():
            self._restore_override[key] = (checkpoint_id, state)

    def apply_graph_actions(self, actions: Iterable[eg.ExecutionGraphAction], now: float) -> None:
        self._apply(actions, now)

    def apply_checkpoint_actions(self, actions: Iterable[cc.CoordinatorAction], now: float) -> None:
        if self.coordinator is not None:
            self._apply_checkpoint(self.coordinator, actions, now)

    def fail_globally(self, reason: str, now: float) -> None:
        self._apply(self.graph.handle(eg.GlobalFailure(reason, now)), now)

    def commit_reconfiguration(self, now: float) -> None:
        """The new configuration is the job's: the HA store gets its graph, and a coordinator
        over the new executions takes over from the barrier's checkpoint."""
        old = self.coordinator
        if old is not None and old not in self._past_coordinators:
            self._past_coordinators = [*self._past_coordinators[-(PAST_ATTEMPTS_SHOWN - 1) :], old]
        self.coordinator = None
        self._start_coordinator(now)
        ha, job = self.gateway.ha, self.job
        if ha is not None:
            self.gateway.run_io(
                self, lambda: ha.put_job_graph(self.gateway.guard, self.job_id, job, replace=True), _ignore
            )

    def _savepoint_ended(self, failure: str = "", path: str = "") -> None:
        request, self._savepoint_request = self._savepoint_request, None
        if request is None:
            return
        request.end_ms = _now_ms()
        if failure:
            request.status, request.failure = SavepointStatus.FAILED, failure
            log.warning("%s savepoint %s failed: %s", self.tag, request.request_id, failure)
        else:
            request.status, request.path = SavepointStatus.COMPLETED, path
            log.info("%s savepoint %s completed: %s", self.tag, request.request_id, path)
            if request.stop:
                self.stopped_with = path

    def tick(self, now: float) -> None:
        if self.terminal:
            return
        if self._restart_at is not None and now >= self._restart_at:
            self._restart_at = None
            self._restart(now)
            return
        if self._region_restart_at is not None and now >= self._region_restart_at:
            self._region_restart_at = None
            self._apply(self.graph.handle(eg.RestartRegions(now)), now)
        self._apply(self.graph.handle(eg.Tick(now)), now)
        self._discover_splits(now)
        if self.reconfiguration is not None and not self.reconfiguration.ended:
            self.reconfiguration.handle(rp.Tick(now), now)
        if self.coordinator is not None:
            self._apply_checkpoint(self.coordinator, self.coordinator.handle(cc.Tick(now)), now)

    def on_ack(self, eid: str, checkpoint_id: int, handle: bytes, size: int, now: float) -> AckOutcome:
        coordinator = self.coordinator
        if coordinator is None or eid not in self.graph.executions:
            return AckOutcome.UNKNOWN
        storage, chain_id = self._storage(), self.graph.executions[eid].chain_id
        # Raises InvalidStateHandle (the ack is rejected; the checkpoint waits for a valid one)
        # when the handle points outside this checkpoint's directory: jobmanager/checkpoint/state_handles.py.
        parsed = state_handles.parse(
            handle,
            storage.checkpoint_dir(checkpoint_id),
            self.chain_by_id[chain_id].operator_ids,
            self.job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM,
            state_handles.resolver_for(storage.fs),
        )
        actions = coordinator.handle(cc.Acknowledge(eid, checkpoint_id, parsed, size, now))
        outcome = next((a.outcome for a in actions if isinstance(a, cc.AckResult)), AckOutcome.UNKNOWN)
        self._apply_checkpoint(coordinator, actions, now)
        return outcome

    def on_decline(self, eid: str, checkpoint_id: int, reason: str, now: float) -> None:
        coordinator = self.coordinator
        if coordinator is not None and eid in self.graph.executions:
            log.warning("%s checkpoint %d declined by %s: %s", self.tag, checkpoint_id, eid, reason)
            self._apply_checkpoint(coordinator, coordinator.handle(cc.Decline(eid, checkpoint_id, reason, now)), now)

    # -- execution graph actions ----------------------------------------------------------------------
    def _apply(self, actions: Iterable[eg.ExecutionGraphAction], now: float) -> None:
        for action in actions:
            match action:
                case eg.DeployExecutions():
                    for eid in action.execution_ids:
                        self.gateway.call_task(self, eid, "SubmitTask", self.deployment_descriptor(eid))
                case eg.CancelExecutions():
                    for eid in action.execution_ids:
                        self.gateway.call_task(
                            self,
                            eid,
                            "CancelTask",
                            taskmanager_pb2.CancelTaskRequest(
                                leader_session_id=self.gateway.session_id, job_id=self.job_id, execution_id=eid
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
                    log.info("%s asking for %d more slot(s)", self.tag, action.count)
                    self.gateway.request_slots(self.job_id, action.count, action.minimum, action.extend)
                case eg.ReleasePartitions():
                    self._release_partitions(action.executions)
                case _:
                    assert_never(action)

    # -- region failover and batch results (docs/batch.md) ----------------------------------------
    def _on_regions_failed(self, action: eg.RegionsFailed, now: float) -> None:
        """Some regions are being cancelled: restart them after the strategy's delay, or fail the job."""
        self._failed_ms = _now_ms()
        decision = self._decide(now)
        self._record_exception(action.failure, restarted=decision.restart)
        regions = ", ".join(f"r{r}" for r in action.regions)
        if not decision.restart:
            log.error("%s regions %s failed and will not restart (%s)", self.tag, regions, decision.reason)
            self._forced_decision = decision
            failure = f"{action.failure}\n(not restarted: {decision.reason})"
            self._apply(self.graph.handle(eg.GlobalFailure(failure, now)), now)
            return
        self.restarts += 1
        self._save_counters()
        self._region_restart_at = now + decision.delay
        if self.reconfiguration is not None and not self.reconfiguration.ended:  # its barrier cannot complete
            self.reconfiguration.on_job_failing("a region failover", now)
        log.warning(
            "%s region failover: restarting %s (%d of %d regions); %s. Cause: %s",
            self.tag,
            regions,
            len(action.regions),
            len(self.graph.regions),
            decision.reason,
            self.exceptions[-1].cause,
        )
        coordinator = self.coordinator
        if coordinator is not None:  # its pending checkpoint waits for tasks that are gone
            self._apply_checkpoint(coordinator, coordinator.handle(cc.TasksLost("region failover", now)), now)
            if coordinator not in self._past_coordinators:
                self._past_coordinators = [*self._past_coordinators[-(PAST_ATTEMPTS_SHOWN - 1) :], coordinator]
            self.coordinator = None  # a new one over the new executions starts with them

    def _on_regions_restarted(self, action: eg.RegionsRestarted, now: float) -> None:
        """New executions replace the restarted regions': in a streaming job they restore the
        latest completed checkpoint, and a new coordinator covers them."""
        self.end_of_input.difference_update(action.replaced)
        for eid in action.replaced:
            self.metrics.pop(eid, None)
        if self.batch or self.ckpt_config is None:
            return
        if self.latest is not None:
            try:
                storage, cid = self._storage(), self.latest.checkpoint_id
                states = metadata.restore_states(
                    storage.read_metadata(cid), self.chains, storage.metadata_path(cid), self.job
                )
            except CheckpointCorrupt as exc:
                self._apply(self.graph.handle(eg.GlobalFailure(f"restore failed: {exc}", now)), now)
                return
            for eid in action.new:
                ex = self.graph.executions[eid]
                self._restore_override[(ex.chain_id, ex.subtask)] = (cid, states[(ex.chain_id, ex.subtask)])
        log.info(
            "%s restarting %d task(s) from %s",
            self.tag,
            len(action.new),
            f"checkpoint {self.latest.checkpoint_id}" if self.latest else "the attempt's start",
        )
        if self.coordinator is None and self.graph.state == JobStatus.RUNNING:
            self._start_coordinator(now)

    def _partition_ids_of(self, ex: eg.Execution) -> list[str]:
        chain = self.chain_by_id[ex.chain_id]
        tag = lambda target: self._ptag(chain.id, target) + eg.run_suffix(ex.run)  # noqa: E731 — one use
        return [
            self.partition_id_for(chain.id, e.target, ex.subtask, tag(self.chain_of[e.target].id))
            for e in chain.outputs
        ]

    def _release_partitions(self, executions: Iterable[eg.Execution]) -> None:
        """Tell the TaskManagers holding these executions' blocking results to delete them."""
        by_tm: dict[str, list[str]] = {}
        for ex in executions:
            if ex.slot is not None:
                by_tm.setdefault(ex.slot.resource_id, []).extend(self._partition_ids_of(ex))
        for resource_id, ids in by_tm.items():
            if ids:
                self.gateway.release_partitions(self, resource_id, ids)

    def _on_status_changed(self, action: eg.JobStatusChanged, now: float) -> None:
        log.info("%s %s -> %s", self.tag, action.old, action.new)
        if action.new == JobStatus.RUNNING and self.ckpt_config is not None:
            self._start_coordinator(now)
        elif action.new in (JobStatus.FAILING, JobStatus.CANCELLING):
            if self._savepoint_request is not None and self._savepoint_request.status == SavepointStatus.IN_PROGRESS:
                self._savepoint_ended(failure=f"the job went {action.new} while the savepoint was taken")
            if self.reconfiguration is not None and not self.reconfiguration.ended:
                self.reconfiguration.on_job_failing(f"job {action.new}", now)
            if action.new == JobStatus.FAILING:
                self._failed_ms = _now_ms()
                if self._forced_decision is not None:  # a region failover the strategy refused
                    self._decision, self._failed_at = self._forced_decision, now
                elif not self._cancel_requested:
                    self._decision, self._failed_at = self._decide(now), now
            coordinator = self.coordinator
            if coordinator is not None:
                self._apply_checkpoint(coordinator, coordinator.handle(cc.TasksLost(f"job {action.new}", now)), now)

    def _attempt_ended(self, state: JobStatus, failure: str, now: float) -> None:
        self.gateway.release_slots(self.job_id)
        if self.batch:  # the attempt's blocking results, wherever they are
            for resource_id in sorted(self._used_taskmanagers):
                self.gateway.release_partitions(self, resource_id, [], all_of_job=True)
        forced, self._forced_decision = self._forced_decision, None
        if self.coordinator is not None and self.coordinator not in self._past_coordinators:
            # kept by reference: a checkpoint still persisting completes in its history
            self._past_coordinators = [*self._past_coordinators[-(PAST_ATTEMPTS_SHOWN - 1) :], self.coordinator]
        decided, self._decision = self._decision, None
        if state == JobStatus.FAILED and self._cancel_requested:  # cancelled while failing: not restarted
            self._record_exception(failure, restarted=False)
        if state != JobStatus.FAILED or self._cancel_requested:
            self._finish(state if not self._cancel_requested else JobStatus.CANCELED, failure, now)
            return
        # An attempt that failed before it ran (CREATED -> FAILED) is decided here.
        if decided is None:
            self._failed_ms = _now_ms()
        decision, failed_at = (decided, self._failed_at) if decided else (self._decide(now), now)
        if forced is None:  # a refused region failover is in the history already
            self._record_exception(failure, restarted=decision.restart)
        if not decision.restart:
            log.error("%s failed and will not restart (%s):\n%s", self.tag, decision.reason, failure)
            self._finish(JobStatus.FAILED, f"{failure}\n(not restarted: {decision.reason})", now)
            return
        self.restarts += 1
        self._save_counters()
        self.failure = failure
        self._restart_at = max(now, failed_at + decision.delay)  # the delay counts from the failure
        log.warning("%s failed; %s. Cause: %s", self.tag, decision.reason, self.exceptions[-1].cause)

    def _decide(self, now: float) -> RestartDecision:
        """Restart after the current attempt's failure? A deterministic failure (see the module
        docstring) is not restarted and uses no attempt of the restart strategy."""
        root = self.graph.root_cause
        if root is None:
            self.repeated.on_failure(None)
            return self.restart.on_failure(now)
        line = exception_line(root.error)
        if root.lost_taskmanager and (limit := self.tm_losses.exhausted()) is not None:
            self.repeated.on_failure(None)
            return RestartDecision(
                False,
                0.0,
                f"task {limit.task} was on {limit.losses} TaskManagers that exited while it started or ran, "
                f"with no checkpoint completed in between (jobmanager.taskmanager-loss.max-per-job: {limit.limit}); "
                f"it may be killing its TaskManager: {line}",
            )
        if root.cause == FailureCause.NON_RECOVERABLE:
            self.repeated.on_failure(None)
            kind = exception_type(line) or "see the cause"
            return RestartDecision(False, 0.0, f"non-recoverable error ({kind}) in task {root.task}")
        signature = FailureSignature(root.chain_id, line) if root.cause == FailureCause.TASK_ERROR and line else None
        if self.repeated.on_failure(signature):
            chain = self.chain_by_id[root.chain_id].name
            return RestartDecision(
                False,
                0.0,
                f"the same error in task {chain} on {self.repeated.repeats} consecutive attempts "
                f"with no checkpoint completed in between: a deterministic error ({line})",
            )
        return self.restart.on_failure(now)

    def _record_exception(self, failure: str, restarted: bool) -> None:
        """Into the exception history: the root cause of the attempt that just failed."""
        root = self.graph.root_cause
        text = root.error if root is not None else failure
        task = root.task if root is not None else ""
        self.exceptions.append(
            ExceptionEntry(
                self._failed_ms or _now_ms(), self.attempt, task, exception_line(text), bounded(text), restarted
            )
        )
        self._failed_ms = 0

    def _restart(self, now: float, first_attempt: int | None = None) -> None:
        """A new attempt that restores every task from the latest completed checkpoint."""
        self._restore_states, self._source_states = {}, {}
        self.restored_checkpoint = None
        if self.latest is None and self.savepoint is not None:  # no checkpoint of its own yet
            self._restore_states = self._savepoint_states
            self.restored_checkpoint = self.savepoint.checkpoint_id
        if self.latest is not None:
            try:
                storage, cid = self._storage(), self.latest.checkpoint_id
                content = storage.read_metadata(cid)
                self._restore_states = metadata.restore_states(
                    content, self.chains, storage.metadata_path(cid), self.job
                )
                self.shared_state.register(cid, metadata_handles(content))  # after a failover: its files stay
                self._source_states = dict(content.get("coordinators") or {})
                sc.SourceCoordinators.build(self._connector_sources(), self._source_states, cid)  # restorable?
            except (CheckpointCorrupt, sc.SplitRequestError) as exc:
                log.error("%s cannot restore: %s", self.tag, exc)
                failure = f"restore failed: {exc}"
                self.exceptions.append(
                    ExceptionEntry(_now_ms(), self.attempt, "", exception_line(failure), bounded(failure), False)
                )
                self._finish(JobStatus.FAILED, f"restore failed: {exc}", now)
                return
            self.restored_checkpoint = self.latest.checkpoint_id
        log.info(
            "%s restarting (restart %d) from %s",
            self.tag,
            self.restarts,
            f"checkpoint {self.restored_checkpoint}" if self.restored_checkpoint else "the beginning",
        )
        self._start_attempt(self.attempt + 1 if first_attempt is None else first_attempt, now)

    def _storage(self) -> CheckpointStorage:
        """Checkpoint storage; only called with checkpointing on (a checkpoint exists, or a coordinator runs)."""
        if self.storage is None:
            raise CheckpointCorrupt(f"job {self.job_id} has checkpoints but no state.checkpoints.dir")
        return self.storage

    def _finish(self, state: JobStatus, failure: str, now: float) -> None:  # noqa: ARG002 — time is an input
        self.final_state = state
        self.failure = failure if state == JobStatus.FAILED else ""
        self.ended_ms = _now_ms()
        self.message = ""
        log.info("%s ended %s", self.tag, state)
        self._record_result()

    def _save_counters(self) -> None:
        """Into the HA store (in the background): a new leader's metrics go on from them."""
        ha = self.gateway.ha
        if ha is None:
            return
        counters = common_pb2.JobMetrics()
        counters.CopyFrom(self.counters)
        counters.num_restarts = self.restarts
        self.gateway.run_io(self, lambda: ha.put_job_metrics(self.gateway.guard, self.job_id, counters), _ignore)

    def metrics_now(self) -> common_pb2.JobMetrics:
        """JobInfo.metrics: the counters, the restarts and the current attempt's uptime."""
        out = common_pb2.JobMetrics()
        out.CopyFrom(self.counters)
        out.num_restarts = self.restarts
        if self.state == JobStatus.RUNNING and self._attempt_started_ms:
            out.uptime_ms = max(0, _now_ms() - self._attempt_started_ms)
        return out

    def _record_result(self, state: JobStatus | None = None) -> None:
        """Into the job result store (as `state`, default the current one): a new leader
        must not resurrect this job."""
        ha = self.gateway.ha
        if ha is not None:
            info = self.info(0)
            if state is not None:
                info.state = cast(common_pb2.JobState, to_proto(state))
            # The job result store keeps the head of a long failure, storage its full text
            # (jobmanager/ha/zookeeper.py); the status shows what a later leader will show.
            self.failure = ha.compact_failure(self.job_id, self.failure)
            self.gateway.run_io(self, lambda: ha.put_job_result(self.gateway.guard, self.job_id, info), _ignore)

    # -- checkpoints ---------------------------------------------------------------------------------
    def _start_coordinator(self, now: float) -> None:
        executions = list(self.graph.executions)
        sources = [eid for eid, ex in self.graph.executions.items() if not self.chain_by_id[ex.chain_id].inputs]
        config = self.ckpt_config
        if config is None:
            return  # checkpointing is off
        if self.latest is not None:  # an earlier attempt or leader may have left other checkpoints
            storage, keep, upper = self._storage(), self.latest.checkpoint_id, self.counter.get()
            dropped = [c for c in self.shared_state.registered() if c != keep and c < upper]
            files = [f for c in dropped for f in self.shared_state.discard(c)]
            kept = self.shared_state.files_of(keep)

            def clean() -> None:  # only ids handed out before this attempt's coordinator
                for cid in storage.list_checkpoints():
                    if cid != keep and cid < upper:
                        # an older leader's checkpoint this registry never knew: its shared files
                        # from its own metadata (docs/state-backends.md, shared-file lifetime)
                        try:
                            handles = metadata_handles(storage.read_metadata(cid))
                        except CheckpointCorrupt:
                            handles = []
                        storage.delete_files(left_behind(handles, kept, storage.shared_dir()))
                        storage.discard(cid)
                storage.delete_files(files)

            self.gateway.run_io(self, clean, _ignore)
        self.coordinator = cc.CheckpointCoordinator(
            self.job_id, config, self.counter, sources, executions, now, restored=self.latest
        )

    def _on_end_of_input(self, eid: str, now: float) -> None:
        self.end_of_input.add(eid)
        coordinator = self.coordinator
        if coordinator is None:
            return
        pending = coordinator.pending_id
        if pending is not None:  # its barrier can no longer reach this task: trigger it directly
            self._send_trigger(eid, pending, final=False)
        if self.end_of_input == set(self.graph.executions):
            log.info("%s every task reached end of input: final checkpoint", self.tag)
            self._apply_checkpoint(coordinator, coordinator.handle(cc.FinalCheckpointRequested(now)), now)

    def _send_trigger(self, eid: str, checkpoint_id: int, final: bool, stop: bool = False) -> None:
        self.gateway.call_task(
            self,
            eid,
            "TriggerCheckpoint",
            taskmanager_pb2.TriggerCheckpointRequest(
                leader_session_id=self.gateway.session_id,
                job_id=self.job_id,
                execution_id=eid,
                checkpoint_id=checkpoint_id,
                timestamp_ms=_now_ms(),
                final=final,
                stop=stop,
            ),
        )

    def _notify(self, method: str, targets: Iterable[str], checkpoint_id: int, final: bool = False) -> None:
        for eid in targets:
            self.gateway.call_task(
                self,
                eid,
                method,
                taskmanager_pb2.CheckpointNotification(
                    leader_session_id=self.gateway.session_id,
                    job_id=self.job_id,
                    execution_id=eid,
                    checkpoint_id=checkpoint_id,
                    final=final,
                ),
            )

    def _apply_checkpoint(
        self, coordinator: cc.CheckpointCoordinator, actions: Iterable[cc.CoordinatorAction], now: float
    ) -> None:
        """Carry out the actions `coordinator` returned."""
        for action in actions:
            match action:
                case cc.TriggerCheckpoint():
                    log.info(
                        "%s triggering checkpoint %d%s",
                        self.tag,
                        action.checkpoint_id,
                        " (final)" if action.final else "",
                    )
                    targets = set(action.targets) | (set() if action.final else self.end_of_input)
                    self.sources.checkpoint_triggered(action.checkpoint_id)  # before any reader snapshots it
                    if action.savepoint and self._savepoint_request is not None:
                        self._savepoint_request.checkpoint_id = action.checkpoint_id
                    if action.reconfigure and self.reconfiguration is not None:
                        self.reconfiguration.handle(rp.BarrierTriggered(action.checkpoint_id, now), now)
                    if action.stop:  # every task is told: it idles once it has snapshotted
                        targets = set(self.graph.executions)
                    for eid in sorted(targets):
                        self._send_trigger(eid, action.checkpoint_id, action.final, action.stop)
                case cc.PersistCheckpoint():
                    self._persist(coordinator, action)
                case cc.NotifyComplete():
                    log.info("%s checkpoint %d completed", self.tag, action.checkpoint_id)
                    self.latest = coordinator.latest_completed()
                    if self.latest is not None:
                        self.counters.number_of_completed_checkpoints += 1
                        self.counters.last_checkpoint_duration_ms = int(
                            (self.latest.completion_time - self.latest.trigger_time) * 1000
                        )
                        self.counters.last_checkpoint_size_bytes = self.latest.size
                        self._save_counters()
                    self._notify("NotifyCheckpointComplete", action.targets, action.checkpoint_id, action.final)
                    if self.reconfiguration is not None:
                        self.reconfiguration.handle(rp.BarrierCompleted(action.checkpoint_id), now)
                    self.restart.on_success(now)
                    self.repeated.on_success()  # progress: a repeated error is no longer a replay of the same input
                    self.tm_losses.handle(tl.CheckpointCompleted(action.checkpoint_id))
                case cc.NotifyAborted():
                    log.warning("%s checkpoint %d aborted: %s", self.tag, action.checkpoint_id, action.reason)
                    if not action.superseded:
                        self.counters.number_of_failed_checkpoints += 1
                        self._save_counters()
                    if action.savepoint:
                        self._savepoint_ended(failure=action.reason)
                    if self.reconfiguration is not None:
                        self.reconfiguration.handle(rp.BarrierAborted(action.checkpoint_id, action.reason), now)
                    if self.graph.state == JobStatus.RUNNING:
                        self._notify("NotifyCheckpointAborted", action.targets, action.checkpoint_id)
                case cc.DiscardCheckpoint():
                    self._discard(action.checkpoint_id, action.handles)
                case cc.FailJob():
                    failure = eg.GlobalFailure(f"checkpointing failed: {action.reason}", now)
                    self._apply(self.graph.handle(failure), now)
                case cc.AckResult():
                    pass  # on_ack returns its outcome to the TaskManager
                case _:
                    assert_never(action)

    def _persist(self, coordinator: cc.CheckpointCoordinator, action: cc.PersistCheckpoint) -> None:
        """Persist before announcing: `_metadata` first, then CheckpointPersisted."""
        executions = self.graph.executions
        content = metadata.build(
            self.job_id,
            action.checkpoint_id,
            action.final,
            _now_ms(),
            self.attempt,
            action.handles,
            lambda eid: (executions[eid].chain_id, executions[eid].subtask),
            self.job,
        )
        if coordinators := self.sources.states_of(action.checkpoint_id):
            content["coordinators"] = coordinators  # the split enumerators' state at the trigger
        storage, cid, retained, ha = self._storage(), action.checkpoint_id, coordinator.config.retained, self.gateway.ha
        request = self._savepoint_request if action.savepoint else None
        plan = sp.plan(content, self.job) if request is not None else None
        written: list[str] = []

        def persist() -> None:
            path = storage.write_metadata(cid, content)
            if request is not None and plan is not None:  # the savepoint copy, before the checkpoint counts
                written.append(sp.write(plan, storage.fs, request.target, self.job_id))
            if ha is not None:  # the pointer in ZooKeeper, guarded by our leadership
                ha.add_checkpoint(self.gateway.guard, self.job_id, cid, path, retained)

        def done(error: Exception | None) -> None:
            if self.coordinator is not coordinator:
                return  # a newer attempt: this result no longer matters
            now = time.monotonic()
            event = cc.CheckpointPersisted(cid, now) if error is None else cc.PersistFailed(cid, str(error), now)
            if error is None:  # before the discards its completion brings
                self.shared_state.register(cid, action.handles.values())
            if error is None and request is not None and request is self._savepoint_request:
                self._savepoint_ended(path=written[0])
            self._apply_checkpoint(coordinator, coordinator.handle(event), now)

        self.gateway.run_io(self, persist, done)

    def _discard(self, checkpoint_id: int, handles: tuple[object, ...] = ()) -> None:
        if self.terminal and checkpoint_id in self.shared_state.registered():
            # a completed checkpoint of an ended job is retained: a new job may be resuming from it
            log.info("%s ended: checkpoint %d retained", self.tag, checkpoint_id)
            return
        storage = self._storage()
        files = self.shared_state.discard(checkpoint_id, handles)  # shared files no retained checkpoint needs
        if files:
            log.info("%s checkpoint %d discarded: %d shared state files go", self.tag, checkpoint_id, len(files))

        def discard() -> None:
            storage.discard(checkpoint_id)
            storage.delete_files(files)

        self.gateway.run_io(self, discard, _ignore)

    # -- connector sources (docs/connectors.md) -------------------------------------------------------
    def _connector_sources(self) -> dict[str, tuple[int, dict[str, Any]]]:
        """operator id -> (parallelism, enumerator spec) of every connector source."""
        out = {}
        for op in self.job.operators:
            if graph.kind_of(op) == graph.OperatorKind.SOURCE_CONNECTOR:
                out[op.id] = (self.chain_of[op.id].parallelism, graph.operator_config(op)["enumerator"])
        return out

    def request_splits(
        self, eid: str, operator_id: str, received: int, last_checkpoint: int, idle: bool
    ) -> sc.Assignment | None:
        """A reader's request for splits; None when `eid` is not an execution of this attempt
        headed by `operator_id` (a late request: it gets nothing)."""
        ex = self.graph.executions.get(eid)
        coordinator = self.sources.by_operator.get(operator_id)
        if ex is None or coordinator is None or self.chain_by_id[ex.chain_id].operator_ids[0] != operator_id:
            return None
        assignment = coordinator.request(ex.subtask, received, last_checkpoint, idle)
        if assignment.splits:
            log.info(
                "%s source %s subtask %d: assignments %d..%d (%s)",
                self.tag,
                operator_id,
                ex.subtask,
                assignment.first,
                assignment.first + len(assignment.splits) - 1,
                ", ".join(str(s["id"]) for s in assignment.splits[:5]),
            )
        return assignment

    def _discover_splits(self, now: float) -> None:
        """Run the lookups the enumerators ask for (listing a directory, scanning Redis for
        streams: jobmanager/connectors/lookups.py) off the lock."""
        sources = self.sources
        for lookup in sources.lookups(now):
            found: list[str] = []

            def listing(what: dict[str, Any] = lookup.what, found: list[str] = found) -> None:
                found.extend(lookups.run(what))

            def done(error: Exception | None, lookup: sc.Lookup = lookup, found: list[str] = found) -> None:
                if self.sources is sources:  # else a new attempt's enumerators replaced these
                    sources.on_discovered(lookup, None if error else found, time.monotonic())

            self.gateway.run_io(self, listing, done)

    # -- deployment ----------------------------------------------------------------------------------
    def deployment_descriptor(self, eid: str) -> taskmanager_pb2.TaskDeploymentDescriptor:
        """Only for deployed executions: every execution of the attempt holds a slot."""
        g, ex = self.graph, self.graph.executions[eid]
        chain = self.chain_by_id[ex.chain_id]
        tdd = taskmanager_pb2.TaskDeploymentDescriptor(
            leader_session_id=self.gateway.session_id,
            job_id=self.job_id,
            attempt=g.attempt,
            execution_id=eid,
            chain_id=chain.id,
            operator_ids=list(chain.operator_ids),
            subtask_index=ex.subtask,
            parallelism=chain.parallelism,
            slot_index=_deployed(ex.slot, eid).index,
            job=self.job,
            checkpoint_dir=self.storage.uri if self.storage else "",
        )
        run = eg.run_suffix(ex.run)
        override = self._restore_override.get((chain.id, ex.subtask))
        if override is not None:  # a subtask deployed by a live reconfiguration
            tdd.restore_checkpoint_id, tdd.restore_state = override
        elif self.restored_checkpoint is not None:
            tdd.restore_checkpoint_id = self.restored_checkpoint
            tdd.restore_state = self._restore_states[(chain.id, ex.subtask)]
        for edge in chain.inputs:
            upstream = self.chain_of[edge.source]
            gate = tdd.inputs.add(upstream_chain=upstream.id)
            for j in range(upstream.parallelism):
                producer = g.current_execution(upstream.id, j)  # a speculative race's winner
                slot = _deployed(producer.slot, f"{upstream.id}/{j}")
                tag = self._ptag(upstream.id, chain.id) + eg.run_suffix(producer.run)
                pid = self.partition_id_for(upstream.id, edge.target, j, tag)
                gate.channels.add(partition_id=pid, address=self.gateway.address_of(slot.resource_id) or "")
        for edge in chain.outputs:
            target = self.chain_of[edge.target]
            pid = self.partition_id_for(chain.id, edge.target, ex.subtask, self._ptag(chain.id, target.id) + run)
            tdd.outputs.append(self.output_descriptor(pid, edge, target, self.job))
            tdd.outputs[-1].blocking = self.batch
        return tdd

    @staticmethod
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

    def partition_id_for(self, chain_id: str, target_op: str, subtask: int, tag: str) -> str:
        return partition_id(self.job_id, tag, chain_id, target_op, subtask)

    def _ptag(self, producer: str, target: str) -> str:
        """The tag in the ids of the partitions `producer` writes for `target` (chain ids): the
        attempt's, or that of the live reconfiguration that last redeployed either side."""
        return (
            self._partition_tags.get((producer, target))
            or self._partition_tags.get((producer, ""))
            or self._attempt_tag
        )

    def set_partition_tag(self, producer: str, tag: str, target: str = "") -> None:
        """Partitions of `producer` (for `target`; "": for every target) are named with `tag`."""
        self._partition_tags[(producer, target)] = tag

    @property
    def _attempt_tag(self) -> str:
        """Unique across attempts and leaders (a new leader counts attempts from 0 again)."""
        return self.graph.attempt_tag

    # -- status ---------------------------------------------------------------------------------------
    def info(self, free_slots: int) -> common_pb2.JobInfo:
        """The job's status for clients, states as proto enums."""
        g, state = self.graph, self.state
        info = common_pb2.JobInfo(
            job_id=self.job_id,
            name=self.job.name,
            state=cast(common_pb2.JobState, to_proto(state)),
            restarts=self.restarts,
            leader=self.gateway.address,
            message=self.message,
            failure=self.failure if state == JobStatus.FAILED else "",
            submitted_ms=self.submitted_ms,
            ended_ms=self.ended_ms,
            slots_required=self.slots_required,
            slots_available=free_slots,
        )
        if self.latest is not None:
            info.last_completed_checkpoint = self.latest.checkpoint_id
        if self.restored_checkpoint is not None:
            info.restored_checkpoint = self.restored_checkpoint
        if self.savepoint is not None:
            info.restored_savepoint = self.savepoint.path
        info.metrics.CopyFrom(self.metrics_now())
        info.savepoint = self.stopped_with if state == JobStatus.FINISHED else ""
        info.reconfigurations.extend(o.to_proto() for o in self.reconfigurations)
        for r in self.savepoints:
            info.savepoints.add(
                request_id=r.request_id,
                status=cast(common_pb2.SavepointStatus, to_proto(r.status)),
                path=r.path,
                failure=r.failure,
                checkpoint_id=r.checkpoint_id,
                stop=r.stop,
                trigger_ms=r.trigger_ms,
                duration_ms=(r.end_ms or _now_ms()) - r.trigger_ms,
            )
        if not self.terminal:
            if self._restart_at is not None:
                cause = self.exceptions[-1].cause if self.exceptions else "failure"
                info.message = f"restarting after: {cause}"
            elif g.state == JobStatus.FAILING:
                info.message = "failing: cancelling the remaining tasks" + (
                    ""
                    if self._decision is None
                    else f"; {'then ' if self._decision.restart else 'will not restart: '}{self._decision.reason}"
                )
            elif g.state == JobStatus.CANCELLING:
                info.message = "cancelling"
            elif g.restarting:
                cause = self.exceptions[-1].cause if self.exceptions else "failure"
                info.message = f"restarting {len(g.restarting)} of {len(g.regions)} regions after: {cause}"
        for ex in g.executions.values():
            address = self.gateway.address_of(ex.slot.resource_id) if ex.slot is not None else ""
            records = self.metrics.get(ex.execution_id, TaskRecords())
            info.tasks.add(
                operator=ex.name,
                subtask=ex.subtask,
                state=to_proto(ex.state),
                taskmanager=address or (ex.slot.resource_id if ex.slot else ""),
                error=ex.error,
                counters=records.counters,
                bad_record_samples=records.bad_record_samples,
                watermark=records.watermark,
                io=records.io,
                chain_id=ex.chain_id,
                attempt=self.attempt,
                execution_attempt=ex.run,
                speculative=ex.speculative,
                region=g.region_name(ex),
            )
            info.records_dropped += records.counters.records_dropped
            info.records_late_dropped += records.counters.records_late_dropped
            room = BAD_RECORD_SAMPLES - len(info.bad_record_samples)
            info.bad_record_samples.extend(records.bad_record_samples[: max(room, 0)])
        coordinators = list(self._past_coordinators)
        if self.coordinator is not None and self.coordinator not in coordinators:
            coordinators.append(self.coordinator)
        history = [stats for c in coordinators for stats in c.history()]
        for st in history[-50:]:
            end = st.end_time if st.end_time is not None else time.monotonic()
            info.checkpoints.add(
                checkpoint_id=st.checkpoint_id,
                status=to_proto(st.status),
                trigger_ms=int(_now_ms() - (time.monotonic() - st.trigger_time) * 1000),
                duration_ms=int((end - st.trigger_time) * 1000),
                size_bytes=st.size,
                failure=st.failure,
                acks=st.acks,
                expected=st.expected,
            )
        for e in self.exceptions:
            info.exceptions.add(
                time_ms=e.time_ms,
                attempt=e.attempt,
                task=e.task,
                cause=e.cause,
                traceback=e.traceback,
                restarted=e.restarted,
            )
        return info


def partition_id(job_id: str, attempt: str, chain_id: str, target_op: str, subtask: int) -> str:
    """The one place result partition ids are built; they are opaque everywhere else."""
    return f"{job_id}/{attempt}/{chain_id}->{target_op}/{subtask}"


def _deployed(slot: SlotId | None, what: str) -> SlotId:
    if slot is None:
        raise ValueError(f"{what} has no slot: the attempt is not deployed")
    return slot


def _ignore(error: Exception | None) -> None:
    """For background I/O whose failure only needs the log line run_io writes."""
