"""Scripted inputs to the pure CheckpointCoordinator shared by its tests (checkpoint, savepoint,
reconfiguration protocol): executions, a coordinator, acks from every execution."""

from __future__ import annotations

import copy

from jobmanager.checkpoint.coordinator import (
    Acknowledge,
    AckResult,
    CheckpointConfig,
    CheckpointCoordinator,
    CheckpointPersisted,
    FinalCheckpointRequested,
    PersistCheckpoint,
    Tick,
)
from jobmanager.checkpoint.id_counter import InMemoryCheckpointIDCounter
from sluice.states import AckOutcome

SRC = ("j/0/src/0", "j/0/src/1")


SINK = ("j/0/sink/0",)


ALL = SRC + SINK


def make(interval=10.0, now=0.0, counter=None, restored=None, **cfg) -> CheckpointCoordinator:
    return CheckpointCoordinator(
        "j", CheckpointConfig(interval, **cfg), counter or InMemoryCheckpointIDCounter(), SRC, ALL, now, restored
    )


def ack(c, eid, cid, now, size=1):
    return c.handle(Acknowledge(eid, cid, f"h{cid}:{eid}", size, now))


def handles(cid):
    return {eid: f"h{cid}:{eid}" for eid in ALL}


def ack_all(c, cid, now, size=1):
    """Ack from every execution; returns the last ack's actions."""
    for eid in ALL[:-1]:
        assert ack(c, eid, cid, now, size) == [AckResult(eid, cid, AckOutcome.SUCCESS)]
    return ack(c, ALL[-1], cid, now, size)


def run_checkpoint(c, now, final=False):
    """Tick (or final request) at `now`, ack all, persist at `now`+1; returns the persisted actions."""
    ev = FinalCheckpointRequested(now) if final else Tick(now)
    [trigger] = c.handle(ev)
    cid = trigger.checkpoint_id
    assert ack_all(c, cid, now)[-1] == PersistCheckpoint(cid, handles(cid), final)
    return c.handle(CheckpointPersisted(cid, now + 1))


def state(c):
    return copy.deepcopy({k: v for k, v in vars(c).items() if k != "counter"}), c.counter.get()
