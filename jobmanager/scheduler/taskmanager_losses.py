"""Which TaskManager losses count against a job (`jobmanager.taskmanager-loss.max-per-job`).

A body that kills its TaskManager (`os._exit`, a crash in native code) must fail its own job
instead of taking down every TaskManager of the cluster in turn; a loss the job did not
cause (a host carrying two TaskManagers reboots, a machine is drained) must restart it under
its restart strategy like any other failure (docs/protocols.md, failure detection). The rule:

* A loss is **attributed** to a task — one subtask of one chain — when the task was on the
  lost TaskManager **starting, restoring or running** (execution state DEPLOYING or
  RUNNING) in an attempt that was not already failing or being cancelled. Tasks already
  being cancelled (CANCELING), or an attempt already failing (FAILING, CANCELLING, a cancel
  requested) count nothing: a second TaskManager of a rebooting host, lost while the
  attempt winds down after the first, is a consequence, not a second cause.
* Each attributed loss adds one to the count of every task it is attributed to. The counts
  start again when a checkpoint completes (the job made progress).
* The job fails instead of restarting when the attempt's root cause is a TaskManager loss
  and some task's count has reached `max-per-job` (default 2): the same task was on that
  many TaskManagers that died under it with no checkpoint in between. Losses spread over
  different tasks restart the job, however many.

So a poison body, which dies again wherever its task goes, fails its job on its
`max-per-job`-th loss; a host that takes two TaskManagers down at once costs one restart.

Pure: events in, outcomes out; the JobMaster (jobmanager/job_master.py) feeds it and asks
`exhausted()` when it decides on a restart.
"""

from __future__ import annotations

import dataclasses

from sluice.states import ExecutionState

ATTRIBUTABLE = frozenset({ExecutionState.DEPLOYING, ExecutionState.RUNNING})  # starting, restoring, running


@dataclasses.dataclass(frozen=True)
class LostTask:
    chain_id: str
    subtask: int
    name: str  # "<chain name> (<subtask+1>/<parallelism>)", for the messages
    state: ExecutionState  # when its TaskManager was declared lost


@dataclasses.dataclass(frozen=True)
class TaskManagerLost:
    resource_id: str
    tasks: tuple[LostTask, ...]  # the job's tasks of the current attempt that were on it, not yet ended
    attempt_failing: bool  # the attempt was already failing or being cancelled


@dataclasses.dataclass(frozen=True)
class CheckpointCompleted:
    checkpoint_id: int


Event = TaskManagerLost | CheckpointCompleted


@dataclasses.dataclass(frozen=True)
class Attributed:
    """The loss counts against these tasks; `most` is the highest count among them now."""

    resource_id: str
    tasks: tuple[str, ...]
    most: int


@dataclasses.dataclass(frozen=True)
class NotAttributed:
    resource_id: str
    why: str


@dataclasses.dataclass(frozen=True)
class Reset:
    checkpoint_id: int


Outcome = Attributed | NotAttributed | Reset


@dataclasses.dataclass(frozen=True)
class Exhausted:
    """A task reached the limit: the job fails instead of restarting."""

    task: str
    losses: int
    limit: int


class TaskManagerLosses:
    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"jobmanager.taskmanager-loss.max-per-job must be an int >= 1, got {limit!r}")
        self.limit = limit
        self._counts: dict[tuple[str, int], int] = {}  # (chain id, subtask) -> attributed losses
        self._names: dict[tuple[str, int], str] = {}

    def handle(self, event: Event) -> Outcome:
        match event:
            case CheckpointCompleted():
                self._counts.clear()
                return Reset(event.checkpoint_id)
            case TaskManagerLost():
                return self.lost(event)
            case _:
                raise TypeError(f"not an event of TaskManagerLosses: {event!r}")

    def lost(self, ev: TaskManagerLost) -> Attributed | NotAttributed:
        """`handle` of a TaskManagerLost, typed for the caller that logs the outcome."""
        keys = [(t.chain_id, t.subtask) for t in ev.tasks]
        if len(set(keys)) != len(keys) or any(s < 0 for _c, s in keys):
            raise ValueError(f"TaskManager {ev.resource_id}: tasks must be distinct subtasks >= 0, got {keys}")
        if ev.attempt_failing:
            return NotAttributed(ev.resource_id, "the attempt was already failing or being cancelled")
        starting_or_running = [t for t in ev.tasks if t.state in ATTRIBUTABLE]
        if not starting_or_running:
            return NotAttributed(ev.resource_id, "no task of the job was starting or running there")
        for t in starting_or_running:
            key = (t.chain_id, t.subtask)
            self._counts[key] = self._counts.get(key, 0) + 1
            self._names[key] = t.name
        most = max(self._counts[(t.chain_id, t.subtask)] for t in starting_or_running)
        return Attributed(ev.resource_id, tuple(t.name for t in starting_or_running), most)

    def count(self, chain_id: str, subtask: int) -> int:
        return self._counts.get((chain_id, subtask), 0)

    def exhausted(self) -> Exhausted | None:
        """The task with the most attributed losses, once it reached the limit (first by id on a tie)."""
        if not self._counts:
            return None
        key = max(sorted(self._counts), key=lambda k: self._counts[k])
        losses = self._counts[key]
        return Exhausted(self._names[key], losses, self.limit) if losses >= self.limit else None
