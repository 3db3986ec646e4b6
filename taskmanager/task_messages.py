"""What a task and the rest of its TaskManager tell each other.

* Control messages: RPC threads post them to the task's queue
  (Task.trigger_checkpoint, notify_complete, notify_aborted); the task
  thread handles them between batches (Task._drain_control).
* Reports: a task reports its state changes, acknowledgements and declines
  to a `TaskReports` (taskmanager/leader_connection.py sends them to the
  leader, in order). A failure carries its cause, so the JobManager acts on a
  broken stream from another TaskManager without reading the traceback.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

from sluice.states import ExecutionState, FailureCause
from taskmanager.network.input_gate import ChannelError

if TYPE_CHECKING:
    from taskmanager.task import Task


# -- reports ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a task FAILED: its traceback and a cause the JobManager acts on."""

    error: str
    cause: FailureCause
    unreachable_peer: str = ""  # host:port of the TaskManager whose stream broke (PEER_UNREACHABLE)

    @classmethod
    def of(cls, exc: BaseException, error: str) -> Failure:
        if isinstance(exc, ChannelError) and exc.peer:
            return cls(error, FailureCause.PEER_UNREACHABLE, exc.peer)
        return cls(error, FailureCause.TASK_ERROR)


class TaskReports(Protocol):
    """Where a task reports to (taskmanager/leader_connection.py): in order, off the task thread."""

    def report(
        self, task: Task, state: ExecutionState, failure: Failure | None = None, end_of_input: bool = False
    ) -> None: ...

    def acknowledge(self, task: Task, checkpoint_id: int, handle: bytes, size: int) -> None: ...

    def decline(self, task: Task, checkpoint_id: int, reason: str) -> None: ...


# -- control messages (from RPC threads to the task thread) ----------------------------------------
@dataclasses.dataclass(frozen=True)
class TriggerCheckpoint:
    checkpoint_id: int


@dataclasses.dataclass(frozen=True)
class CheckpointComplete:
    checkpoint_id: int
    final: bool


@dataclasses.dataclass(frozen=True)
class CheckpointAborted:
    checkpoint_id: int


ControlMessage = TriggerCheckpoint | CheckpointComplete | CheckpointAborted
