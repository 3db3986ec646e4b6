"""CheckpointCoordinator: one job attempt's checkpoints, as a pure state machine.

Theory of operation
-------------------
(docs/checkpoints.md.) Events in, actions out; time arrives in
events; the only outside call is the injected id counter, asked before any
state changes in an event (a failing counter changes nothing). Ids are never
reused; a restored checkpoint's id must be below `counter.get()`.

  * Trigger (Tick): periodic enabled (`interval` > 0), not suspended, job not
    failed, nothing pending, `now - last_trigger >= interval`, `now - last_end
    >= min_pause` (`last_end`: last completion or abort) -> TriggerCheckpoint
    to the sources. The interval clock starts at construction and restarts
    on every trigger and on Resume.
  * FinalCheckpointRequested triggers at once on ALL executions, ignoring
    interval and min_pause, aborting a pending IN_PROGRESS one first (not
    counted). While suspended or PERSISTING it is remembered for the next
    Tick that may trigger; a failed final checkpoint is retried (final) on
    the next Tick; after a completed final checkpoint nothing is triggered.
  * Every execution must ack. Each Acknowledge gets an AckResult first:
    SUCCESS (handle kept); DUPLICATE (this execution's handle is already part
    of the pending, PERSISTING or a retained completed checkpoint: the
    adapter must NOT delete it); UNKNOWN (execution not of this attempt, id
    never triggered here); DISCARDED (aborted or subsumed checkpoint: the
    adapter deletes the late handle itself).
  * Persist before announce: all acks in -> PersistCheckpoint, PERSISTING
    until CheckpointPersisted (-> COMPLETED, NotifyComplete to all, Discard
    of completed ones beyond `retained`, oldest first, the restored one
    counting; failures reset) or PersistFailed. PERSISTING never times out
    and is not aborted by TasksLost or a final request: its state is whole,
    and discarding it while the adapter writes the pointer would leave a
    pointer to deleted files. The adapter must always answer.
  * Timeout (Tick, `now - trigger_time >= timeout`), Decline, PersistFailed
    -> FAILED: NotifyAborted to all, DiscardCheckpoint, consecutive failures
    += 1, FailJob once they exceed `tolerable_failures` (then no triggers).
    The event that aborts never also triggers. TasksLost aborts IN_PROGRESS
    uncounted, forgets a final request (restarted tasks ask again) and
    suspends triggering.
  * ReconfigurationRequested (docs/reconfiguration.md): like a savepoint
    request, a checkpoint taken as soon as one may trigger (even while
    suspended), flagged `reconfigure` on its trigger; its abort is not
    counted. Once it completes the coordinator suspends itself: its
    executions are about to change, and the adapter replaces it.
  * SavepointRequested (docs/savepoints.md): a checkpoint taken now,
    ignoring interval and min_pause, when one may trigger (else on the next
    Tick that may; a final request goes first); its actions carry
    `savepoint`, and the coordinator owns the request's `target` until it
    ends: PersistCheckpoint carries it (`savepoint_target`) so the adapter
    writes the savepoint copy there while persisting, reports where with
    CheckpointPersisted(`savepoint_path`), and the savepoint's completion
    is NotifyComplete's `savepoint_path` (its failure: NotifyAborted with
    `savepoint`). The event and action types are in events.py.
    `stop`: sources stop at its barrier and, once it completes, every task
    finishes (NotifyComplete is final; nothing is triggered after it); an
    abort leaves the job running and is not counted against
    `tolerable_failures`. One savepoint at a time: a second request
    while one is wanted or pending raises ValueError, as does a request once
    the job failed or its final checkpoint completed.

Expected races (late/duplicate/unknown acks, stray declines) get outcomes or
`[]`. Illegal input raises, state unchanged: ValueError (bad config or
arguments, a persistence report for a checkpoint not PERSISTING), TypeError
(unknown event). Status transitions are data (`STATUS_TRANSITIONS`, keyed by
`CheckpointStatus` members); ack outcomes are `AckOutcome` members (both in
sluice/states.py).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable

from jobmanager.checkpoint.events import (
    Acknowledge as Acknowledge,
)
from jobmanager.checkpoint.events import (
    AckResult as AckResult,
)
from jobmanager.checkpoint.events import (
    Actions as Actions,
)
from jobmanager.checkpoint.events import (
    CheckpointConfig as CheckpointConfig,
)
from jobmanager.checkpoint.events import (
    CheckpointPersisted as CheckpointPersisted,
)
from jobmanager.checkpoint.events import (
    CheckpointStats as CheckpointStats,
)
from jobmanager.checkpoint.events import (
    CompletedCheckpoint as CompletedCheckpoint,
)
from jobmanager.checkpoint.events import (
    CoordinatorAction as CoordinatorAction,
)
from jobmanager.checkpoint.events import (
    CoordinatorEvent as CoordinatorEvent,
)
from jobmanager.checkpoint.events import (
    Decline as Decline,
)
from jobmanager.checkpoint.events import (
    DiscardCheckpoint as DiscardCheckpoint,
)
from jobmanager.checkpoint.events import (
    FailJob as FailJob,
)
from jobmanager.checkpoint.events import (
    FinalCheckpointRequested as FinalCheckpointRequested,
)
from jobmanager.checkpoint.events import (
    NotifyAborted as NotifyAborted,
)
from jobmanager.checkpoint.events import (
    NotifyComplete as NotifyComplete,
)
from jobmanager.checkpoint.events import (
    PersistCheckpoint as PersistCheckpoint,
)
from jobmanager.checkpoint.events import (
    PersistFailed as PersistFailed,
)
from jobmanager.checkpoint.events import (
    ReconfigurationRequested as ReconfigurationRequested,
)
from jobmanager.checkpoint.events import (
    Resume as Resume,
)
from jobmanager.checkpoint.events import (
    SavepointRequested as SavepointRequested,
)
from jobmanager.checkpoint.events import (
    Suspend as Suspend,
)
from jobmanager.checkpoint.events import (
    TasksLost as TasksLost,
)
from jobmanager.checkpoint.events import (
    Tick as Tick,
)
from jobmanager.checkpoint.events import (
    TriggerCheckpoint as TriggerCheckpoint,
)
from jobmanager.checkpoint.events import (
    is_int,
)
from jobmanager.checkpoint.id_counter import CheckpointIDCounter
from sluice.states import AckOutcome, CheckpointStatus, check_transition

HISTORY_SIZE = 50

_S = CheckpointStatus
STATUS_TRANSITIONS: dict[CheckpointStatus, tuple[CheckpointStatus, ...]] = {
    _S.IN_PROGRESS: (_S.PERSISTING, _S.FAILED),
    _S.PERSISTING: (_S.COMPLETED, _S.FAILED),
    _S.COMPLETED: (),
    _S.FAILED: (),
}


@dataclasses.dataclass
class _Pending:
    checkpoint_id: int
    trigger_time: float
    final: bool
    status: CheckpointStatus = CheckpointStatus.IN_PROGRESS
    acks: dict[str, tuple[object, int]] = dataclasses.field(default_factory=dict)
    end_time: float | None = None
    failure: str = ""
    savepoint: bool = False
    stop: bool = False
    reconfigure: bool = False
    savepoint_target: str = ""


class CheckpointCoordinator:
    def __init__(
        self,
        job_id: str,
        config: CheckpointConfig,
        counter: CheckpointIDCounter,
        sources: Iterable[str],
        executions: Iterable[str],
        now: float,
        restored: CompletedCheckpoint | None = None,
    ) -> None:
        sources, executions = tuple(sources), tuple(executions)
        if not isinstance(config, CheckpointConfig):
            raise ValueError(f"config must be a CheckpointConfig, got {config!r}")
        if not executions or len(set(executions)) != len(executions):
            raise ValueError(f"job {job_id}: executions must be non-empty and unique, got {executions!r}")
        if not sources or len(set(sources)) != len(sources) or not set(sources) <= set(executions):
            raise ValueError(f"job {job_id}: sources must be non-empty, unique executions, got {sources!r}")
        if restored is not None:
            if not isinstance(restored, CompletedCheckpoint):
                raise ValueError(f"restored must be a CompletedCheckpoint, got {restored!r}")
            if counter.get() <= restored.checkpoint_id:
                raise ValueError(
                    f"job {job_id}: id counter at {counter.get()} would reuse ids up to "
                    f"restored checkpoint {restored.checkpoint_id}"
                )
        self.job_id = job_id
        self.config = config
        self.counter = counter
        self.sources = sources
        self.executions = executions
        self._last_trigger = now  # the interval clock
        self._last_end: float | None = None  # last completion or abort (min_pause)
        self._suspended = False
        self._job_failed = False
        self._final_wanted = False
        self._final_done = False
        self._savepoint_wanted: bool | None = None  # a savepoint to trigger: its stop flag
        self._savepoint_target = ""  # ... and the directory its copy goes to
        self._reconfigure_wanted = False
        self._failures = 0  # consecutive failed checkpoints
        self._pending: _Pending | None = None
        self._completed: list[CompletedCheckpoint] = [restored] if restored is not None else []
        self._history: collections.deque[_Pending] = collections.deque(maxlen=HISTORY_SIZE)
        self._first_id: int | None = None  # first id triggered by this coordinator

    # -- dispatch ---------------------------------------------------------------
    def handle(self, event: CoordinatorEvent) -> list[CoordinatorAction]:
        match event:
            case Tick():
                return self._on_tick(event)
            case FinalCheckpointRequested():
                return self._on_final_requested(event)
            case Acknowledge():
                return self._on_ack(event)
            case Decline():
                return self._on_decline(event)
            case TasksLost():
                return self._on_tasks_lost(event)
            case CheckpointPersisted():
                return self._on_persisted(event)
            case PersistFailed():
                return self._on_persist_failed(event)
            case SavepointRequested():
                return self._on_savepoint_requested(event)
            case ReconfigurationRequested():
                return self._on_reconfiguration_requested(event)
            case Suspend():
                return self._on_suspend()
            case Resume():
                return self._on_resume(event)
            case _:
                raise TypeError(f"not a CheckpointCoordinator event: {event!r}")

    # -- transitions ------------------------------------------------------------
    def _on_tick(self, ev: Tick) -> Actions:
        p = self._pending
        if (
            p is not None
            and p.status == CheckpointStatus.IN_PROGRESS
            and ev.now - p.trigger_time >= self.config.timeout
        ):
            return self._abort(
                f"checkpoint {p.checkpoint_id} expired after {self.config.timeout:g}s "
                f"({len(p.acks)}/{len(self.executions)} acks)",
                ev.now,
                counted=True,
            )
        if not self._may_trigger():
            return []
        if self._final_wanted:
            return self._trigger(self.counter.get_and_increment(), ev.now, final=True)
        if self._savepoint_wanted is not None:
            return self._trigger(self.counter.get_and_increment(), ev.now, final=False, stop=self._savepoint_wanted)
        if self._reconfigure_wanted:
            return self._trigger(self.counter.get_and_increment(), ev.now, final=False)
        cfg = self.config
        if cfg.interval is None or cfg.interval <= 0 or ev.now - self._last_trigger < cfg.interval:
            return []  # not periodic, or not due
        if self._last_end is not None and ev.now - self._last_end < cfg.min_pause:
            return []
        return self._trigger(self.counter.get_and_increment(), ev.now, final=False)

    def _on_final_requested(self, ev: FinalCheckpointRequested) -> Actions:
        if self._job_failed or self._final_done:
            return []
        p = self._pending
        if p is not None and p.final and p.status == CheckpointStatus.IN_PROGRESS:
            return []  # already taking it
        if self._suspended or (p is not None and p.status == CheckpointStatus.PERSISTING):
            self._final_wanted = True
            return []  # served by the next Tick that may trigger
        cid = self.counter.get_and_increment()  # before any change: a failing counter changes nothing
        self._final_wanted = True
        actions: Actions = []
        if p is not None:
            actions = self._abort(
                f"checkpoint {p.checkpoint_id} superseded by the final checkpoint",
                ev.now,
                counted=False,
                superseded=True,
            )
        return actions + self._trigger(cid, ev.now, final=True)

    def _on_savepoint_requested(self, ev: SavepointRequested) -> Actions:
        if self._job_failed or self._final_done:
            raise ValueError(f"job {self.job_id}: no savepoint can be taken, the job is ending")
        p = self._pending
        if self._savepoint_wanted is not None or (p is not None and p.savepoint):
            raise ValueError(f"job {self.job_id}: a savepoint is already in progress; wait for it to end")
        if self._reconfigure_wanted or (p is not None and p.reconfigure):
            raise ValueError(f"job {self.job_id}: a reconfiguration is in progress; wait for it to end")
        if not self._may_trigger() or self._final_wanted:
            self._savepoint_wanted, self._savepoint_target = ev.stop, ev.target
            return []  # served by the next Tick that may trigger
        cid = self.counter.get_and_increment()  # before any change: a failing counter changes nothing
        self._savepoint_wanted, self._savepoint_target = ev.stop, ev.target
        return self._trigger(cid, ev.now, final=False, stop=ev.stop)

    def _on_reconfiguration_requested(self, ev: ReconfigurationRequested) -> Actions:
        if self._job_failed or self._final_done or self._final_wanted:
            raise ValueError(f"job {self.job_id}: no reconfiguration now, the job is ending")
        p = self._pending
        if self._savepoint_wanted is not None or (p is not None and (p.savepoint or p.reconfigure)):
            raise ValueError(f"job {self.job_id}: a savepoint or reconfiguration is in progress; wait for it")
        self._suspended = False
        if p is not None:
            self._reconfigure_wanted = True
            return []  # served by the next Tick that may trigger
        cid = self.counter.get_and_increment()
        self._reconfigure_wanted = True
        return self._trigger(cid, ev.now, final=False)

    def _on_ack(self, ev: Acknowledge) -> Actions:
        if not is_int(ev.size) or ev.size < 0:
            raise ValueError(
                f"ack from {ev.execution_id} for checkpoint {ev.checkpoint_id}: "
                f"size must be an int >= 0, got {ev.size!r}"
            )
        outcome = self._ack_outcome(ev)
        result: Actions = [AckResult(ev.execution_id, ev.checkpoint_id, outcome)]
        p = self._pending
        if outcome != AckOutcome.SUCCESS or p is None:  # SUCCESS implies a pending checkpoint
            return result
        p.acks[ev.execution_id] = (ev.handle, ev.size)
        if len(p.acks) < len(self.executions):
            return result
        self._set_status(p, CheckpointStatus.PERSISTING)
        handles = {eid: p.acks[eid][0] for eid in self.executions}
        return [*result, PersistCheckpoint(p.checkpoint_id, handles, p.final, p.savepoint, p.savepoint_target)]

    def _ack_outcome(self, ev: Acknowledge) -> AckOutcome:
        if ev.execution_id not in self.executions:
            return AckOutcome.UNKNOWN
        p, cid = self._pending, ev.checkpoint_id
        if p is not None and p.checkpoint_id == cid:
            if p.status == CheckpointStatus.IN_PROGRESS and ev.execution_id not in p.acks:
                return AckOutcome.SUCCESS
            return AckOutcome.DUPLICATE
        if any(c.checkpoint_id == cid for c in self._completed):
            return AckOutcome.DUPLICATE  # its handles are live: the adapter must keep them
        if any(h.checkpoint_id == cid for h in self._history):
            return AckOutcome.DISCARDED
        if self._first_id is not None and self._history and self._first_id <= cid < self._history[0].checkpoint_id:
            return AckOutcome.DISCARDED  # older than the history remembers, triggered here
        return AckOutcome.UNKNOWN

    def _on_decline(self, ev: Decline) -> Actions:
        p = self._pending
        if (
            p is None
            or p.checkpoint_id != ev.checkpoint_id
            or p.status != CheckpointStatus.IN_PROGRESS
            or ev.execution_id not in self.executions
        ):
            return []  # late or foreign: nothing pending to abort
        return self._abort(
            f"checkpoint {p.checkpoint_id} declined by {ev.execution_id}: {ev.reason}", ev.now, counted=True
        )

    def _on_tasks_lost(self, ev: TasksLost) -> Actions:
        self._suspended = True
        self._final_wanted = False
        self._savepoint_wanted, self._savepoint_target = None, ""  # the adapter fails the request
        self._reconfigure_wanted = False
        p = self._pending
        if p is None or p.status != CheckpointStatus.IN_PROGRESS:
            return []
        return self._abort(f"checkpoint {p.checkpoint_id} aborted, tasks lost: {ev.reason}", ev.now, counted=False)

    def _on_persisted(self, ev: CheckpointPersisted) -> Actions:
        p = self._persisting(ev.checkpoint_id, "CheckpointPersisted")
        self._set_status(p, CheckpointStatus.COMPLETED)
        p.end_time = ev.now
        self._pending = None
        self._last_end = ev.now
        self._failures = 0
        if p.final or p.stop:
            self._final_wanted, self._final_done = False, True
        if p.reconfigure:  # the executions change now: the adapter replaces this coordinator
            self._suspended = True
        handles = {eid: p.acks[eid][0] for eid in self.executions}
        size = sum(s for _, s in p.acks.values())
        self._completed.append(
            CompletedCheckpoint(p.checkpoint_id, handles, p.trigger_time, ev.now, size, p.final, p.savepoint)
        )
        path = ev.savepoint_path if p.savepoint else ""
        actions: Actions = [NotifyComplete(p.checkpoint_id, self.executions, p.final or p.stop, path)]
        while len(self._completed) > self.config.retained:
            actions.append(DiscardCheckpoint(self._completed.pop(0).checkpoint_id))
        return actions

    def _on_persist_failed(self, ev: PersistFailed) -> Actions:
        p = self._persisting(ev.checkpoint_id, "PersistFailed")
        return self._abort(f"checkpoint {p.checkpoint_id} could not be persisted: {ev.reason}", ev.now, counted=True)

    def _on_suspend(self) -> Actions:
        self._suspended = True
        return []

    def _on_resume(self, ev: Resume) -> Actions:
        if self._suspended:
            self._suspended = False
            self._last_trigger = ev.now
        return []

    # -- helpers ----------------------------------------------------------------
    def _may_trigger(self) -> bool:
        return not (self._job_failed or self._final_done or self._suspended or self._pending is not None)

    def _trigger(self, cid: int, now: float, final: bool, stop: bool = False) -> Actions:
        """Trigger `cid`; a savepoint when one is wanted and this is not the final checkpoint."""
        if self._first_id is None:
            self._first_id = cid
        savepoint = not final and self._savepoint_wanted is not None
        target = self._savepoint_target if savepoint else ""
        if savepoint:
            self._savepoint_wanted, self._savepoint_target = None, ""
        stop = stop and savepoint
        reconfigure = not final and not savepoint and self._reconfigure_wanted
        if reconfigure:
            self._reconfigure_wanted = False
        self._pending = _Pending(
            cid, now, final, savepoint=savepoint, stop=stop, reconfigure=reconfigure, savepoint_target=target
        )
        self._history.append(self._pending)
        self._last_trigger = now
        targets = self.executions if final else self.sources
        return [TriggerCheckpoint(cid, now, targets, final, savepoint, stop, reconfigure)]

    def _abort(self, reason: str, now: float, counted: bool, superseded: bool = False) -> Actions:
        p = self._pending
        if p is None:
            raise ValueError(f"job {self.job_id}: nothing pending to abort ({reason})")
        self._set_status(p, CheckpointStatus.FAILED)
        p.end_time, p.failure = now, reason
        self._pending = None
        self._last_end = now
        actions: Actions = [
            NotifyAborted(p.checkpoint_id, self.executions, reason, p.savepoint, superseded),
            DiscardCheckpoint(p.checkpoint_id, tuple(h for h, _size in p.acks.values())),
        ]
        if counted and not (p.savepoint or p.reconfigure):  # a failed savepoint or reconfiguration fails only itself
            self._failures += 1
            if self._failures > self.config.tolerable_failures and not self._job_failed:
                self._job_failed = True
                actions.append(
                    FailJob(
                        f"job {self.job_id}: {self._failures} consecutive failed checkpoints "
                        f"exceed tolerable_failures={self.config.tolerable_failures}; "
                        f"last: {reason}"
                    )
                )
        return actions

    def _persisting(self, cid: int, what: str) -> _Pending:
        p = self._pending
        if p is None or p.checkpoint_id != cid or p.status != CheckpointStatus.PERSISTING:
            now = "nothing" if p is None else f"checkpoint {p.checkpoint_id} {p.status}"
            raise ValueError(f"job {self.job_id}: {what} for checkpoint {cid}, but {now} is pending")
        return p

    @staticmethod
    def _set_status(p: _Pending, new: CheckpointStatus) -> None:
        check_transition(STATUS_TRANSITIONS, p.status, new, f"checkpoint {p.checkpoint_id}")
        p.status = new

    # -- queries (read-only) ----------------------------------------------------
    @property
    def savepoint_wanted(self) -> bool:
        return self._savepoint_wanted is not None

    @property
    def pending_id(self) -> int | None:
        return None if self._pending is None else self._pending.checkpoint_id

    def latest_completed(self) -> CompletedCheckpoint | None:
        return self._completed[-1] if self._completed else None

    def completed(self) -> list[CompletedCheckpoint]:
        return list(self._completed)

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def history(self) -> list[CheckpointStats]:
        return [
            CheckpointStats(
                p.checkpoint_id,
                p.status,
                p.trigger_time,
                p.end_time,
                sum(s for _, s in p.acks.values()),
                len(p.acks),
                len(self.executions),
                p.failure,
                sum(full_size(h, s) for h, s in p.acks.values()),
            )
            for p in self._history
        ]


def full_size(handle: object, size: int) -> int:
    """The bytes of the whole state an acknowledged `handle` holds: its `size` (what the task
    wrote), with each incremental keyed handle's `full_size` (its earlier files too) in place of
    its own `size`."""
    keyed = handle.get("keyed") if isinstance(handle, dict) else None
    if not isinstance(keyed, dict):
        return size
    for h in keyed.values():
        if isinstance(h, dict) and is_int(h.get("full_size")) and is_int(h.get("size")):
            size += h["full_size"] - h["size"]
    return max(size, 0)
