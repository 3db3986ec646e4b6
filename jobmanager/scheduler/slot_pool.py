"""The JobManager's slot pool: which TaskManagers are alive, which slots they
offer, and which job holds which slot.

Theory of operation
-------------------
A pure state machine (docs/architecture.md): ``SlotPool.handle(event)`` takes
one event dataclass and returns a list of action dataclasses. It does no I/O,
starts no threads and never reads a clock; time arrives as ``now`` in events.
The adapter turns RPCs into events and actions into RPCs/log lines.

State:
  * TaskManagers, by resource id: address, slot count, time of the last
    registration/heartbeat, the identity that registered it (the common name
    of its certificate, or None on a plaintext cluster), and the owner (job id
    or None) of every slot.
  * Allocations: job id -> the SlotIds it holds (in placement order).
  * The wait queue: job ids in arrival order, each with the slot count it
    needs and the ``available`` value it was last told about.

Rules:
  * A request is all-or-nothing: a job gets exactly ``count`` slots at once,
    or it waits. A request the cluster could never satisfy still waits;
    telling the user is the caller's job. An *elastic* request (``minimum``,
    a BATCH job's: docs/batch.md) takes as many free slots as there are, up
    to ``count``, once at least ``minimum`` are free. An *extending* request
    (``extend``) adds slots to what the job holds — replacements for slots a
    lost TaskManager took with it, for a region restart — and its
    SlotsAllocated carries only the added ones (``added``).
  * Whenever slots may have been freed (registration, release) the queue is
    served in arrival order: each waiting job that fits is allocated. A job
    that does not fit does not block later, smaller jobs (no reservation), so
    an oversized request never stalls the cluster.
  * Placement spreads a job: each slot is taken from the TaskManager with the
    most free slots (ties: lowest resource id), lowest free index first.
  * After every event, each still-waiting job whose ``available`` (the free
    slot count) differs from what it was last told gets JobWaitingForSlots.
  * A slot is free only when no job holds it here *and* its TaskManager's
    last slot report (``HeartbeatReceived.held``, Flink's SlotReport) did not
    say it is still held: a released job's task that has not stopped yet
    (cancelled, still running) keeps its slot until the TaskManager says it
    ended, so no other job is placed there.
  * A resource id belongs to the identity that registered it while that
    TaskManager lives (docs/protocols.md, "Fencing"). Its re-registration is
    refused (RegistrationRejected, nothing changes) when it comes from another
    identity, or — without identities, where an address is all a TaskManager
    has to show — from another address or with another slot count. The same
    identity registering again with another address or slot count is the
    TaskManager restarted: the old one is lost and the new one registered.
    The same registration again only refreshes ``last_heartbeat``.
  * A TaskManager is lost on disconnect, on re-registration by its identity
    with a different address/slot count, or on a Tick where ``now -
    last_heartbeat > heartbeat_timeout`` (strictly greater). Ticks further
    apart than ``heartbeat_timeout / 2`` mean the JobManager itself was not
    watching (paused, starved): that gap is added to every ``last_heartbeat``
    (never past ``now``) before expiry is judged, so its lateness is not
    taken for their silence. Its slots vanish;
    jobs that held some keep the rest (the caller decides whether to release
    them). Once lost, its resource id is free for anyone to register.
  * Order of actions within one event: TaskManagerLost (by resource id),
    then SlotsAllocated (queue order), then JobWaitingForSlots (queue order).

Time going backwards: timestamps are taken as given and never rejected. A
heartbeat never moves ``last_heartbeat`` backwards (max is kept), and a stale
Tick is harmless because expiry is monotonic in ``now``. ``SlotsRequested.now``
is accepted for symmetry/logging by the adapter and not used here.

Expected races get explicit outcomes, not exceptions: a heartbeat or
disconnect for an unknown resource id returns ``[UnknownTaskManager(id)]``
(the adapter tells that TaskManager to register again); a conflicting
registration returns ``[RegistrationRejected(id, reason)]``; releasing a job
that holds nothing returns ``[]``. Illegal input (slots < 1, count < 1, a second
request for a job that holds or awaits slots) raises ValueError before any
state is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class SlotId:
    resource_id: str
    index: int


# ---- events ---------------------------------------------------------------
@dataclass(frozen=True)
class TaskManagerRegistered:
    resource_id: str
    address: str
    slots: int
    now: float
    identity: str | None = None  # the caller's certificate common name; None on plaintext


@dataclass(frozen=True)
class HeartbeatReceived:
    resource_id: str
    now: float
    held: frozenset[int] | None = None  # slot indexes the TaskManager says tasks still hold; None: no report


@dataclass(frozen=True)
class TaskManagerDisconnected:
    resource_id: str
    reason: str


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class SlotsRequested:
    job_id: str
    count: int
    now: float
    minimum: int | None = None  # elastic: any count in minimum..count (None: exactly count)
    extend: bool = False  # more slots for a job that holds some


@dataclass(frozen=True)
class SlotsReleased:
    job_id: str


SlotPoolEvent: TypeAlias = (
    TaskManagerRegistered | HeartbeatReceived | TaskManagerDisconnected | Tick | SlotsRequested | SlotsReleased
)


# ---- actions --------------------------------------------------------------
@dataclass(frozen=True)
class SlotsAllocated:
    job_id: str
    slots: tuple[SlotId, ...]
    added: bool = False  # an extending request's slots, on top of those the job holds


@dataclass(frozen=True)
class JobWaitingForSlots:
    job_id: str
    required: int
    available: int


@dataclass(frozen=True)
class TaskManagerLost:
    resource_id: str
    address: str
    reason: str
    affected_jobs: tuple[str, ...]


@dataclass(frozen=True)
class UnknownTaskManager:
    resource_id: str


@dataclass(frozen=True)
class RegistrationRejected:
    """A registration of a resource id that a living TaskManager of another identity
    (or, without identities, at another address) holds; nothing changed."""

    resource_id: str
    reason: str


SlotPoolAction: TypeAlias = (
    SlotsAllocated | JobWaitingForSlots | TaskManagerLost | UnknownTaskManager | RegistrationRejected
)
Actions: TypeAlias = list[SlotPoolAction]


# ---- query results --------------------------------------------------------
@dataclass(frozen=True)
class TaskManagerInfo:
    resource_id: str
    address: str
    slots: int
    free: int
    last_heartbeat: float
    identity: str | None = None


# ---- internal state -------------------------------------------------------
@dataclass
class _TaskManager:
    address: str
    owners: list[str | None]  # owners[i] = job holding slot i, or None
    last_heartbeat: float
    identity: str | None = None  # who registered it (certificate common name), None on plaintext
    held: frozenset[int] = frozenset()  # slots its last slot report said are held by tasks

    def free_indices(self) -> list[int]:
        return [i for i, owner in enumerate(self.owners) if owner is None and i not in self.held]


@dataclass
class _Waiting:
    required: int
    told_available: int | None = None  # last JobWaitingForSlots value sent
    minimum: int | None = None  # elastic request: at least this many, up to `required`
    extend: bool = False


class SlotPool:
    def __init__(self, heartbeat_timeout: float) -> None:
        if not heartbeat_timeout > 0:
            raise ValueError(f"heartbeat_timeout must be > 0, got {heartbeat_timeout!r}")
        self.heartbeat_timeout = heartbeat_timeout
        self._tms: dict[str, _TaskManager] = {}
        self._allocations: dict[str, list[SlotId]] = {}
        self._waiting: dict[str, _Waiting] = {}  # insertion order = FIFO
        self._last_tick: float | None = None

    def handle(self, event: SlotPoolEvent) -> list[SlotPoolAction]:
        match event:
            case TaskManagerRegistered():
                return self._on_registered(event)
            case HeartbeatReceived():
                return self._on_heartbeat(event)
            case TaskManagerDisconnected():
                return self._on_disconnected(event)
            case Tick():
                return self._on_tick(event)
            case SlotsRequested():
                return self._on_requested(event)
            case SlotsReleased():
                return self._on_released(event)
            case _:
                raise TypeError(f"SlotPool cannot handle {type(event).__name__}")

    # ---- transitions ------------------------------------------------------
    def _on_registered(self, ev: TaskManagerRegistered) -> Actions:
        if not isinstance(ev.slots, int) or ev.slots < 1:
            raise ValueError(f"TaskManager {ev.resource_id!r}: slots must be >= 1, got {ev.slots!r}")
        actions: Actions = []
        known = self._tms.get(ev.resource_id)
        if known is not None:
            same = known.address == ev.address and len(known.owners) == ev.slots
            if known.identity != ev.identity:
                return [RegistrationRejected(ev.resource_id, "it is registered by another identity")]
            if same:
                known.last_heartbeat = max(known.last_heartbeat, ev.now)
                return []
            if ev.identity is None:
                return [
                    RegistrationRejected(
                        ev.resource_id,
                        f"it is registered at {known.address} with {len(known.owners)} slots",
                    )
                ]
            actions.append(self._lose(ev.resource_id, "re-registered with a different address/slots"))
        self._tms[ev.resource_id] = _TaskManager(ev.address, [None] * ev.slots, ev.now, ev.identity)
        return actions + self._serve_waiting()

    def _on_heartbeat(self, ev: HeartbeatReceived) -> Actions:
        tm = self._tms.get(ev.resource_id)
        if tm is None:
            return [UnknownTaskManager(ev.resource_id)]
        tm.last_heartbeat = max(tm.last_heartbeat, ev.now)
        if ev.held is None or ev.held == tm.held:
            return []
        tm.held = frozenset(i for i in ev.held if 0 <= i < len(tm.owners))
        return self._serve_waiting()

    def _on_disconnected(self, ev: TaskManagerDisconnected) -> Actions:
        if ev.resource_id not in self._tms:
            return [UnknownTaskManager(ev.resource_id)]
        return [self._lose(ev.resource_id, ev.reason), *self._serve_waiting()]

    def _on_tick(self, ev: Tick) -> Actions:
        if self._last_tick is not None and ev.now - self._last_tick > self.heartbeat_timeout / 2:
            gap = ev.now - self._last_tick  # our own lateness (module docstring), not theirs
            for tm in self._tms.values():
                tm.last_heartbeat = min(ev.now, tm.last_heartbeat + gap)
        self._last_tick = max(ev.now, self._last_tick or ev.now)
        expired = sorted(rid for rid, tm in self._tms.items() if ev.now - tm.last_heartbeat > self.heartbeat_timeout)
        actions: Actions = []
        for rid in expired:
            silent_for = ev.now - self._tms[rid].last_heartbeat
            reason = f"no heartbeat for {silent_for:g}s (timeout {self.heartbeat_timeout:g}s)"
            actions.append(self._lose(rid, reason))
        return actions + self._serve_waiting()

    def _on_requested(self, ev: SlotsRequested) -> Actions:
        if not isinstance(ev.count, int) or ev.count < 1:
            raise ValueError(f"job {ev.job_id}: slot count must be >= 1, got {ev.count!r}")
        if ev.minimum is not None and not (isinstance(ev.minimum, int) and 1 <= ev.minimum <= ev.count):
            raise ValueError(f"job {ev.job_id}: minimum must be in 1..{ev.count}, got {ev.minimum!r}")
        if ev.job_id in self._allocations and not ev.extend:
            raise ValueError(f"job {ev.job_id} already holds slots; release them first")
        if ev.job_id in self._waiting:
            raise ValueError(f"job {ev.job_id} is already waiting for slots")
        self._waiting[ev.job_id] = _Waiting(ev.count, minimum=ev.minimum, extend=ev.extend)
        return self._serve_waiting()

    def _on_released(self, ev: SlotsReleased) -> Actions:
        self._waiting.pop(ev.job_id, None)  # a job cancelled while waiting
        for slot in self._allocations.pop(ev.job_id, []):
            self._tms[slot.resource_id].owners[slot.index] = None
        return self._serve_waiting()

    # ---- decisions --------------------------------------------------------
    def _lose(self, resource_id: str, reason: str) -> TaskManagerLost:
        """Remove a TaskManager and its slots from every allocation."""
        tm = self._tms.pop(resource_id)
        affected = tuple(sorted({job for job in tm.owners if job is not None}))
        for job in affected:
            kept = [s for s in self._allocations[job] if s.resource_id != resource_id]
            if kept:
                self._allocations[job] = kept
            else:  # nothing left: the job may request again
                del self._allocations[job]
        return TaskManagerLost(resource_id, tm.address, reason, affected)

    def _serve_waiting(self) -> Actions:
        """Allocate every waiting job that fits (arrival order), then tell the
        rest about a changed number of available slots."""
        actions: Actions = []
        for job_id, waiting in list(self._waiting.items()):
            free = self.free_slots()
            count = min(free, waiting.required) if waiting.minimum is not None else waiting.required
            if (waiting.minimum or waiting.required) <= free:
                del self._waiting[job_id]
                extend = waiting.extend and job_id in self._allocations
                actions.append(SlotsAllocated(job_id, self._place(job_id, count), added=extend))
        available = self.free_slots()
        for job_id, waiting in self._waiting.items():
            if waiting.told_available != available:
                waiting.told_available = available
                actions.append(JobWaitingForSlots(job_id, waiting.minimum or waiting.required, available))
        return actions

    def _place(self, job_id: str, count: int) -> tuple[SlotId, ...]:
        """Take `count` free slots (caller checked they exist), spreading
        across TaskManagers: most free first, ties by resource id."""
        chosen: list[SlotId] = []
        for _ in range(count):
            rid = min(self._tms, key=lambda r: (-len(self._tms[r].free_indices()), r))
            index = self._tms[rid].free_indices()[0]
            self._tms[rid].owners[index] = job_id
            chosen.append(SlotId(rid, index))
        self._allocations[job_id] = [*self._allocations.get(job_id, []), *chosen]
        return tuple(chosen)

    # ---- queries (read-only) ----------------------------------------------
    def total_slots(self) -> int:
        return sum(len(tm.owners) for tm in self._tms.values())

    def draining_slots(self) -> int:
        """Slots no job holds here that their TaskManager still reports held (a task still stopping)."""
        return sum(sum(1 for i in tm.held if tm.owners[i] is None) for tm in self._tms.values())

    def free_slots(self) -> int:
        return sum(len(tm.free_indices()) for tm in self._tms.values())

    def taskmanagers(self) -> list[TaskManagerInfo]:
        return [
            TaskManagerInfo(rid, tm.address, len(tm.owners), len(tm.free_indices()), tm.last_heartbeat, tm.identity)
            for rid, tm in sorted(self._tms.items())
        ]

    def registered(self, resource_id: str) -> TaskManagerInfo | None:
        """The living TaskManager of `resource_id`, or None."""
        tm = self._tms.get(resource_id)
        if tm is None:
            return None
        return TaskManagerInfo(
            resource_id, tm.address, len(tm.owners), len(tm.free_indices()), tm.last_heartbeat, tm.identity
        )

    def allocation(self, job_id: str) -> tuple[SlotId, ...]:
        return tuple(self._allocations.get(job_id, ()))

    def address_of(self, resource_id: str) -> str:
        if resource_id not in self._tms:
            raise KeyError(f"unknown TaskManager {resource_id!r}")
        return self._tms[resource_id].address

    def waiting_jobs(self) -> list[str]:
        return list(self._waiting)
