"""The interfaces of what a task runs: the operators of its chain and its source.

A task (taskmanager/task.py, its chain taskmanager/operator_chain.py) knows
operators only through `Operator`: it builds them with `make_operator`
(taskmanager/operators/registry.py), passes each batch down the chain with
`process`, calls `end_input` at the end of its input, and drives checkpoints
with `snapshot`, `restore` and `notify_checkpoint_complete`; `abort` when it
fails or is cancelled. What differs between operators is asked through hooks
with neutral defaults, never by `isinstance`: `wire` (the chain's outputs and
late-data side output), `add_counters` (the task's counters), and for event
time `uses_event_time`, `generates_watermarks` with `after_batch`,
`idle_check` and `current_watermark` (taskmanager/event_time.py). A new
operator subclasses `Operator`, overrides what it needs and registers its
kinds in taskmanager/operators/registry.py (with the kind and its descriptor in
sluice/kinds/table.py, and the job API); the task's modules do not change.

State: `snapshot` returns an `OperatorSnapshot`. Small state (`inline`, a
JSON-able dict) travels in the task's state handle; keyed state (`keyed`, an
Arrow table with the key group of each row in column
sluice.key_groups.KEY_GROUP) is written to checkpoint storage per key-group
range and, on restore, read back for the task's own range, so keyed
operators rescale.

A source heads a chain instead of an input gate: `Source` is its interface,
built by `make_source` (taskmanager/operators/sources.py).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Self

import pyarrow as pa

from sluice.eventtime.watermarks import WatermarkAction
from sluice.graph import OperatorKind
from sluice.job_options import SourceReads
from sluice.v1.common_pb2 import TaskCounters
from taskmanager.network.combiner import Combiner
from taskmanager.spark_engine import Batch

Payload = dict[str, Any]  # an operator's settings as the job API wrote them (sluice.graph.operator_settings)


@dataclasses.dataclass(frozen=True)
class OperatorContext:
    """What an operator learns about where it runs (one per operator and deployment)."""

    name: str  # the operator's name, else its id (for messages)
    subtask: int
    parallelism: int
    job_id: str
    restore_checkpoint_id: int  # 0: starting from scratch
    checkpointing: bool  # checkpoints are on: commit at checkpoints, not at the end of the input
    tag: str = ""  # the task's correlation ids, to start log lines with
    engine: Any = None  # the TaskManager's SparkEngine, for batches an operator makes itself
    operator_id: str = ""  # the operator's id in the job graph
    # BATCH mode (sluice.graph.is_batch): the input is bounded and read whole before the end, checkpointing
    # is off; operators that stream updates emit final results at end_input, sinks commit once per subtask
    batch: bool = False
    # where keyed state lives (taskmanager/state/backend.py StateBackendConfig; None: memory)
    state_backend: Any = None
    # the task's counters an operator counts into (`ctx.counters.<field> += n`, on the task thread;
    # proto/sluice/v1/common.proto TaskCounters): a new counter is a field there and that increment
    counters: TaskCounters | None = None
    # how a file source sizes its reads (sluice/job_options.py execution.source.*)
    source_reads: SourceReads = SourceReads()


@dataclasses.dataclass(frozen=True)
class OperatorSnapshot:
    """One operator's state in a checkpoint (None: the operator has no state of that shape)."""

    inline: dict[str, Any] | None = None  # JSON-able; travels in the task's state handle
    keyed: pa.Table | None = None  # rows carrying their key group; written to checkpoint storage
    # a native state backend's snapshot (taskmanager/state/rocksdb_backend.py RocksDBSnapshot), uploaded
    # by the task; on restore, a taskmanager/state/backend.py NativeRestore of the handles to read
    native: Any = None


class Operator(abc.ABC):
    """One operator of a chain, run on the task's thread. Only `create` and `process` are
    required; everything else defaults to a stateless operator."""

    is_sink: ClassVar[bool] = False  # terminates the chain; the task counts its input rows as output
    two_inputs: ClassVar[bool] = False  # heads a chain with two inputs, each handed over apart (process_input)
    input_order: ClassVar[tuple[int, int]] = (0, 1)  # which input's rows of one poll go first
    left_input: str = ""  # a two-input head: its left input's operator id (the task maps gates to sides)
    # works in event time: its task sends the final watermark at the end of its input even when
    # no watermark reached it (a window, a timestamp assigner)
    uses_event_time: ClassVar[bool] = False
    # the chain's watermarks come from here on (assign_timestamps_and_watermarks): upstream ones stop
    # here, and the task asks `after_batch` and `idle_check` instead (taskmanager/event_time.py)
    generates_watermarks: ClassVar[bool] = False

    @classmethod
    @abc.abstractmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:
        """Build the operator for a deployment (the registry calls this)."""

    @classmethod
    def combiner_for(cls, payload: Payload) -> Combiner | None:  # noqa: ARG003 — the default has no combiner
        """What producers may pre-aggregate before a hash exchange into this operator."""
        return None

    @abc.abstractmethod
    def process(self, batch: Batch) -> Batch | None:
        """Transform one batch; None: nothing goes further down the chain."""

    def end_input(self) -> Batch | None:
        """The input ended: a last batch to pass down the chain, if any."""
        return None

    def process_input(self, batch: Batch, side: int) -> Batch | None:  # noqa: ARG002 — one input by default
        """A two-input operator's rows of input `side` (0: left, 1: right)."""
        return self.process(batch)

    def on_watermark(self, watermark: int) -> Batch | None:  # noqa: ARG002 — most operators keep no timers
        """The input watermark advanced to `watermark` (ms; docs/event-time.md): rows it makes
        due (fired windows) to pass down the chain before the watermark goes on."""
        return None

    def on_processing_time(self, now_ms: int) -> Batch | None:  # noqa: ARG002 — most keep no timers
        """The task's clock read `now_ms` (called between batches): rows due by processing time."""
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:  # noqa: ARG002 — the default has no state
        """A consistent copy of the state, taken on the task thread (written elsewhere)."""
        return OperatorSnapshot()

    def restore(self, state: OperatorSnapshot) -> None:  # noqa: B027 — optional hook
        """Continue from a checkpoint: `inline` as snapshotted, `keyed` the rows of this
        subtask's key groups (None when the checkpoint holds none)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027 — optional hook
        """Checkpoint `checkpoint_id` completed: make its effects visible (e.g. commit)."""

    def abort(self) -> None:  # noqa: B027 — optional hook
        """The task failed or was cancelled: discard uncommitted work (best effort)."""

    def dispose(self) -> None:  # noqa: B027 — optional hook
        """The task ended, whichever way: release local resources (a state backend's files)."""

    # -- hooks of the task's chain (taskmanager/operator_chain.py, taskmanager/event_time.py) --------
    def wire(self, has_outputs: bool, late_output: Callable[[pa.Table], None] | None) -> None:  # noqa: B027 — optional hook
        """The chain is built: whether it has outputs (they read the event-time column as they
        materialize a batch), and where late rows go (None: the job does not read them)."""

    def add_counters(self, counters: TaskCounters) -> None:  # noqa: B027 — optional hook
        """Add what this operator keeps count of itself (e.g. in its checkpointed state) to its
        task's counters (proto/sluice/v1/common.proto); a plain count goes into `ctx.counters`."""

    def after_batch(self, observed: int | None, now_ms: int) -> list[WatermarkAction]:  # noqa: ARG002 — for generates_watermarks
        """A batch went through the chain (`observed`: the largest timestamp its outputs saw):
        the watermarks to send on. Asked only of an operator that `generates_watermarks`."""
        return []

    def idle_check(self, now_ms: int, has_pending_input: Callable[[], bool]) -> list[WatermarkAction]:  # noqa: ARG002 — for generates_watermarks
        """No input now: the watermarks or idleness to send on. Asked only of an operator that
        `generates_watermarks`."""
        return []

    @property
    def current_watermark(self) -> int | None:
        """The watermark this operator generated last (None: none yet, or it generates none)."""
        return None


class Idle(enum.Enum):
    """The type of IDLE (one member, so that `batch is IDLE` narrows the type)."""

    IDLE = "IDLE"


IDLE = Idle.IDLE  # Source.next_batch(): nothing to read now, ask again (an unbounded source)


class Source(abc.ABC):
    """The head of a source chain. Its state is its position in its input (`snapshot`),
    a JSON-able dict restored with `restore`: everything before it is not read again."""

    offset: int  # progress, for log lines (batch and snapshot lines tools read)
    idle_wait: float = 0.1  # seconds to wait for control messages after next_batch() returned IDLE
    records_read: int = 0  # rows read: the task's records_in (counted by Spark for file sources)
    records_malformed: int = 0  # input rows it could not parse (a metric; a file source counts them)
    records_dropped: int = 0  # of those, the rows it dropped (on_error "drop")
    bad_record_samples: Sequence[str] = ()  # a few malformed lines, truncated, with their file

    @abc.abstractmethod
    def next_batch(self) -> Batch | Idle | None:
        """The next batch, IDLE (nothing now, ask again) or None (the input is exhausted)."""

    def snapshot(self) -> dict[str, Any]:
        return {"offset": self.offset}

    def restore(self, handle: dict[str, Any]) -> None:
        self.offset = int(handle["offset"])

    def describe_offset(self) -> str:
        return f"offset {self.offset}"

    def batch_done(self, seconds: float) -> None:  # noqa: B027 — optional hook
        """How long the last batch took through the chain (fed back by the task)."""

    def snapshot_at(self, checkpoint_id: int) -> dict[str, Any]:  # noqa: ARG002 — most sources snapshot their offset
        """The state in checkpoint `checkpoint_id` (a connector source asks its reader per checkpoint)."""
        return self.snapshot()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027 — optional hook
        """Checkpoint `checkpoint_id` completed (a connector source tells its reader)."""

    def close(self) -> None:  # noqa: B027 — optional hook
        """The task failed or was cancelled: release the input (best effort)."""

    def add_counters(self, counters: TaskCounters) -> None:
        """Add what this source counted to its task's counters: rows read are the task's rows in."""
        counters.records_in += self.records_read
        counters.records_malformed += self.records_malformed
        counters.records_dropped += self.records_dropped

    def has_pending_input(self) -> bool:
        """Whether input is waiting for this subtask after next_batch() returned IDLE: a file or
        split assigned to it and not read yet, or one in progress. Asked only when the idleness
        timeout passed; a subtask with pending input is never idle (docs/event-time.md,
        "Idleness"). A source that never returns IDLE needs no answer."""
        return False
