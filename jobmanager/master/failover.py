"""Failover: whether and when a failed attempt, or failed regions, restart (Flink's
ExecutionFailureHandler with its restart strategy), and the exception history.

A deterministic failure fails the job without asking the restart strategy (`decide`): a
task's NON_RECOVERABLE report, or the same task error on two consecutive attempts with no
checkpoint completed in between (`RepeatedFailureDetector`,
jobmanager/scheduler/restart_strategy.py). So does a job one of whose tasks was on
`max_tm_losses` TaskManagers that died while it started or ran, with no checkpoint completed
in between (`jobmanager.taskmanager-loss.max-per-job`; the rule is in
jobmanager/scheduler/taskmanager_losses.py): a body that kills its TaskManager (`os._exit`,
a crash in native code) fails its own job instead of taking down every TaskManager of the
cluster in turn, while unrelated losses restart it.

As in Flink, the decision is made when an attempt starts failing: the status can say at
once whether the job will restart, and the restart delay runs while tasks cancel. Times are
inputs (`now`, `now_ms`); the JobMaster carries the decisions out.
"""

from __future__ import annotations

from collections.abc import Callable

from jobmanager.master.exception_history import ExceptionEntry, ExceptionHistory, bounded
from jobmanager.scheduler import taskmanager_losses as tl
from jobmanager.scheduler.execution_graph import ExecutionGraph, RootCause
from jobmanager.scheduler.restart_strategy import (
    FailureSignature,
    RepeatedFailureDetector,
    RestartDecision,
    RestartStrategy,
    exception_line,
    exception_type,
)
from sluice.states import FailureCause, JobStatus

ChainName = Callable[[str], str]  # chain id -> its name, for messages


class ExecutionFailureHandler:
    """One job's restart decisions, across its attempts, and when the next restart is due."""

    def __init__(self, restart: RestartStrategy, max_tm_losses: int) -> None:
        self.restart = restart
        self.repeated = RepeatedFailureDetector()
        self.max_tm_losses = max_tm_losses
        self.tm_losses = tl.TaskManagerLosses(max_tm_losses)  # losses attributed to its tasks, since a checkpoint
        self.exceptions = ExceptionHistory()
        self.restart_at: float | None = None  # the next attempt's start
        self.region_restart_at: float | None = None  # a region failover's restart, after the strategy's delay
        self.forced_decision: RestartDecision | None = None  # a region failover the strategy refused
        self.decision: RestartDecision | None = None  # made when an attempt starts failing
        self.failed_at = 0.0  # ... at this time: the restart delay counts from it

    def decide(self, root: RootCause | None, chain_name: Callable[[str], str], now: float) -> RestartDecision:
        """Restart after the current attempt's failure (its root cause `root`)? A deterministic
        failure (see the module docstring) is not restarted and uses no attempt of the restart
        strategy."""
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
            return RestartDecision(
                False,
                0.0,
                f"the same error in task {chain_name(root.chain_id)} on {self.repeated.repeats} consecutive attempts "
                f"with no checkpoint completed in between: a deterministic error ({line})",
            )
        return self.restart.on_failure(now)

    def regions_failed(
        self, g: ExecutionGraph, failure: str, chain_name: ChainName, now: float, now_ms: int
    ) -> RestartDecision:
        """Some regions of `g` are being cancelled: restart them after the decision's delay
        (`region_restart_at`), or, refused, the job fails with the decision already made."""
        self.exceptions.failed(now_ms)
        decision = self.decide(g.root_cause, chain_name, now)
        self.exceptions.record(g.root_cause, failure, g.attempt, decision.restart, now_ms)
        if decision.restart:
            self.region_restart_at = now + decision.delay
        else:
            self.forced_decision = decision
        return decision

    def attempt_failing(
        self, g: ExecutionGraph, chain_name: ChainName, cancelled: bool, now: float, now_ms: int
    ) -> None:
        """The attempt started failing: decide now, so the status says whether it will restart."""
        self.exceptions.failed(now_ms)
        if self.forced_decision is not None:  # a region failover the strategy refused
            self.decision, self.failed_at = self.forced_decision, now
        elif not cancelled:
            self.decision, self.failed_at = self.decide(g.root_cause, chain_name, now), now

    def attempt_ended(
        self,
        g: ExecutionGraph,
        state: JobStatus,
        failure: str,
        cancelled: bool,
        chain_name: ChainName,
        now: float,
        now_ms: int,
    ) -> RestartDecision | None:
        """The attempt ended in `state`: None when the job ends with it (not FAILED, or
        cancelled), else the decision; a restart is due at `restart_at` then."""
        forced, self.forced_decision = self.forced_decision, None
        decided, self.decision = self.decision, None
        if state == JobStatus.FAILED and cancelled:  # cancelled while failing: not restarted
            self.exceptions.record(g.root_cause, failure, g.attempt, False, now_ms)
        if state != JobStatus.FAILED or cancelled:
            return None
        # An attempt that failed before it ran (CREATED -> FAILED) is decided here.
        if decided is None:
            self.exceptions.failed(now_ms)
        decision, failed_at = (
            (decided, self.failed_at) if decided else (self.decide(g.root_cause, chain_name, now), now)
        )
        if forced is None:  # a refused region failover is in the history already
            self.exceptions.record(g.root_cause, failure, g.attempt, decision.restart, now_ms)
        if decision.restart:
            self.restart_at = max(now, failed_at + decision.delay)  # the delay counts from the failure
        return decision

    def restore_failed(self, failure: str, attempt: int, now_ms: int) -> None:
        """A new attempt could not read what it restores: into the history, not restarted."""
        self.exceptions.add(ExceptionEntry(now_ms, attempt, "", exception_line(failure), bounded(failure), False))

    def taskmanager_lost(self, resource_id: str, tasks: tuple[tl.LostTask, ...], failing: bool) -> str:
        """Count a lost TaskManager against the tasks it held; what the log line says of it."""
        outcome = self.tm_losses.lost(tl.TaskManagerLost(resource_id, tasks, failing))
        if isinstance(outcome, tl.Attributed):
            return f"counts against {', '.join(outcome.tasks)} ({outcome.most} of {self.max_tm_losses} allowed)"
        return f"not counted: {outcome.why}"

    def checkpoint_completed(self, checkpoint_id: int, now: float) -> None:
        """Progress: the strategy's failure rate, a repeated error and TaskManager losses start over."""
        self.restart.on_success(now)
        self.repeated.on_success()  # a repeated error is no longer a replay of the same input
        self.tm_losses.handle(tl.CheckpointCompleted(checkpoint_id))

    @property
    def will_restart(self) -> bool:
        """Of an attempt failing now: no decision yet, or one to restart."""
        return self.decision is None or self.decision.restart
