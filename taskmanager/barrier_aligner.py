"""BarrierAligner: aligned checkpoint barriers for a task with several input
channels, as a pure state machine (no threads, no I/O, no clock).

Theory of operation
-------------------
Asynchronous barrier snapshotting (Carbone et al. 2015): sources inject
barrier *n* into their output streams; a task whose state must reflect
exactly the records before barrier *n* on every input has to *align*. The
channels (numbered 0..channels-1 across all input gates) are independent
FIFO streams, so barriers arrive at different times:

* IDLE --first barrier n (newer than any seen)--> ALIGNING(n); its channel
  is blocked (the task stops reading it, records after the barrier belong
  to checkpoint n+1).
* Each further barrier n blocks its channel. When every channel that has not
  ended is blocked, alignment is complete: ``Snapshot(n)`` (the task takes
  its snapshot and forwards the barrier) then ``Unblock(blocked)``; -> IDLE.
  A single-channel task therefore snapshots on its first barrier.
* ``EndOfPartition`` removes a channel from the set that must deliver the
  barrier; during alignment that can complete it. A blocked channel that
  ends is simply forgotten (it is not waited for and not unblocked).
* A barrier m > n during alignment of n means n can never align on that
  channel: n is subsumed -> ``AlignmentAborted(n)``, ``Unblock(blocked)``,
  then m's alignment starts with that channel blocked (and may complete at
  once).
* ``CheckpointAbortedNotice(n)`` from the JobManager aborts alignment of n;
  for an n not seen yet it is remembered, and n's first barrier is then
  ignored (it still subsumes older alignments).

Every checkpoint id is aligned at most once: barriers with an id older than
the current alignment, or of an alignment already done (snapshotted or
aborted), and a second barrier on an already blocked channel are outcomes
(``Ignored``), not errors. Protocol violations (a channel number out of
range, a barrier on a channel that already ended) raise ``ValueError`` and
leave the state unchanged. Transitions are data (``TRANSITIONS``, keyed by
``AlignerState``); an illegal one raises ``IllegalTransition``
(sluice/states.py).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TypeAlias

from sluice.states import check_transition


# -- states -------------------------------------------------------------------
class AlignerState(enum.StrEnum):
    IDLE = "IDLE"
    ALIGNING = "ALIGNING"


TRANSITIONS: dict[AlignerState, tuple[AlignerState, ...]] = {
    AlignerState.IDLE: (AlignerState.ALIGNING,),  # first barrier of a newer checkpoint
    AlignerState.ALIGNING: (AlignerState.IDLE,),  # snapshot taken, or alignment aborted
}


# -- events -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BarrierReceived:
    channel: int
    checkpoint_id: int


@dataclasses.dataclass(frozen=True)
class EndOfPartition:
    channel: int


@dataclasses.dataclass(frozen=True)
class CheckpointAbortedNotice:
    checkpoint_id: int


AlignerEvent: TypeAlias = BarrierReceived | EndOfPartition | CheckpointAbortedNotice


# -- actions ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Snapshot:
    checkpoint_id: int


@dataclasses.dataclass(frozen=True)
class Unblock:
    channels: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class AlignmentAborted:
    checkpoint_id: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Ignored:
    reason: str


AlignerAction: TypeAlias = Snapshot | Unblock | AlignmentAborted | Ignored
Actions: TypeAlias = list[AlignerAction]


class BarrierAligner:
    def __init__(self, channels: int) -> None:
        if channels < 1:
            raise ValueError(f"a task needs at least 1 input channel, got {channels}")
        self.channels = channels
        self.state = AlignerState.IDLE
        self.current: int | None = None  # checkpoint being aligned
        self.latest: int | None = None  # newest checkpoint id whose barrier was seen
        self._blocked: set[int] = set()
        self._ended: set[int] = set()
        self._aborted_ahead: set[int] = set()  # aborted by the JobManager before any barrier

    # -- queries ------------------------------------------------------------------
    def is_blocked(self, channel: int) -> bool:
        return channel in self._blocked

    def has_ended(self, channel: int) -> bool:
        return channel in self._ended

    @property
    def blocked(self) -> tuple[int, ...]:
        return tuple(sorted(self._blocked))

    @property
    def live_channels(self) -> tuple[int, ...]:
        return tuple(c for c in range(self.channels) if c not in self._ended)

    # -- dispatch -----------------------------------------------------------------
    def handle(self, event: AlignerEvent) -> list[AlignerAction]:
        match event:
            case BarrierReceived():
                return self._on_barrier(event)
            case EndOfPartition():
                return self._on_end(event)
            case CheckpointAbortedNotice():
                return self._on_abort_notice(event)
            case _:
                raise TypeError(f"not a BarrierAligner event: {event!r}")

    def _on_barrier(self, ev: BarrierReceived) -> Actions:
        c, n = ev.channel, ev.checkpoint_id
        self._check_channel(c)
        if c in self._ended:
            raise ValueError(f"barrier {n} on channel {c}, which already ended")
        if self.current is not None and n == self.current:
            if c in self._blocked:
                return [Ignored(f"duplicate barrier {n} on blocked channel {c}")]
            self._blocked.add(c)
            return self._complete_if_aligned()
        if self.latest is not None and n <= self.latest:
            if self.current is not None:
                return [Ignored(f"outdated barrier {n} on channel {c} (aligning {self.current})")]
            return [Ignored(f"outdated barrier {n} on channel {c} (alignment of {self.latest} already done)")]
        # n is newer than anything seen: it subsumes an alignment in progress
        actions = self._abort(f"subsumed by barrier {n} on channel {c}")
        self.latest = n
        aborted = n in self._aborted_ahead
        self._aborted_ahead = {a for a in self._aborted_ahead if a > n}
        if aborted:
            return actions + [Ignored(f"barrier {n} on channel {c}: checkpoint {n} was aborted by the JobManager")]
        self._set(AlignerState.ALIGNING)
        self.current = n
        self._blocked.add(c)
        return actions + self._complete_if_aligned()

    def _on_end(self, ev: EndOfPartition) -> Actions:
        c = ev.channel
        self._check_channel(c)
        if c in self._ended:
            return [Ignored(f"channel {c} already ended")]
        self._ended.add(c)
        self._blocked.discard(c)  # a blocked channel delivered the barrier: forget it
        return self._complete_if_aligned()

    def _on_abort_notice(self, ev: CheckpointAbortedNotice) -> Actions:
        n = ev.checkpoint_id
        if self.current == n:
            return self._abort("aborted by the JobManager")
        if self.latest is not None and n <= self.latest:
            return [Ignored(f"abort of checkpoint {n}: its alignment is not in progress (newest seen {self.latest})")]
        self._aborted_ahead.add(n)
        return [Ignored(f"abort of checkpoint {n} noted before any of its barriers")]

    # -- helpers ------------------------------------------------------------------
    def _complete_if_aligned(self) -> Actions:
        if self.current is None:
            return []
        if any(ch not in self._blocked for ch in self.live_channels):
            return []
        n = self.current
        return [Snapshot(n), *self._release()]

    def _abort(self, reason: str) -> Actions:
        if self.current is None:
            return []
        n = self.current
        return [AlignmentAborted(n, reason), *self._release()]

    def _release(self) -> Actions:
        unblock = tuple(sorted(self._blocked))
        self._set(AlignerState.IDLE)
        self.current = None
        self._blocked.clear()
        return [Unblock(unblock)] if unblock else []

    def _set(self, new: AlignerState) -> None:
        check_transition(TRANSITIONS, self.state, new, "barrier aligner")
        self.state = new

    def _check_channel(self, c: int) -> None:
        if not 0 <= c < self.channels:
            raise ValueError(f"channel {c} does not exist (this task has {self.channels})")
