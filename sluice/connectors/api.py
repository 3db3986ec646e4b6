"""The public connector API: what a user implements to read from or write to a system
Sluice has no built-in source or sink for (docs/connectors.md).

A **source** is split into work items, `SourceSplit`s (plain data: an id and a JSON
description such as a file name or a stream name with a position). Its
`SplitEnumerator` decides which reader subtask gets which split; its `SourceReader`s,
one per subtask on the TaskManagers, read the splits they were given and remember
how far they are in each (their state in every checkpoint).

Where the enumerator runs: in the JobManager, as in Flink, but only as one of the
built-in enumerators of `sluice.connectors.enumerators` chosen by name and configured
with plain JSON. The JobManager never unpickles a job's code (docs/protocols.md, "Job
graphs"), so `Source.create_enumerator()` runs on the client when the job is built, and
what it returns travels as `{"name": ..., "config": {...}}`; the readers (user code)
run on the TaskManagers only.

A **sink** has a `SinkWriter` per subtask that takes the rows and, at each checkpoint
barrier, hands out *committables* (plain JSON: what to make visible), and a
`Committer` that makes them visible once the checkpoint completed. The committer may
be called again with the same committables after a failure (they are restored from the
checkpoint), so a commit must be idempotent. A sink declares its guarantee:
`EXACTLY_ONCE` (two-phase commit as above) or `AT_LEAST_ONCE` (it writes as it goes;
replays after a failure may write rows twice unless the writes are idempotent).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:  # annotations only: a job file that defines no connector does not load pyarrow
    import pyarrow as pa

JSON = Any  # plain data: str, int, float, bool, None, lists and dicts of those


class ConnectorConfigError(ValueError):
    """A connector's settings are wrong; `field` names the setting (under the operator's config)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclasses.dataclass(frozen=True)
class SourceSplit:
    """One unit of a source's work: `id` is unique within the source; `data` is plain JSON
    (where to read and, in a reader's snapshot, how far it has read)."""

    id: str
    data: dict[str, JSON] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        return {"id": self.id, "data": self.data}

    @classmethod
    def from_json(cls, value: dict[str, JSON]) -> SourceSplit:
        return cls(str(value["id"]), dict(value.get("data") or {}))


class Poll(enum.Enum):
    """What `SourceReader.poll_next` returns when it has no rows."""

    NOTHING_YET = "NOTHING_YET"  # nothing to read now: ask again (checkpoints go on meanwhile)
    END = "END"  # this reader is done: it was told no more splits come, and it read all it had


NOTHING_YET = Poll.NOTHING_YET
END = Poll.END


@dataclasses.dataclass(frozen=True)
class ReaderContext:
    """Where a reader runs."""

    subtask: int
    parallelism: int
    job_id: str
    operator_id: str
    restored_checkpoint: int = 0  # 0: a fresh start


class SourceReader(abc.ABC):
    """Reads the splits assigned to one subtask, on its TaskManager's task thread.

    `add_splits` hands over splits (new ones, or the reader's own from the checkpoint it
    restores); `poll_next` returns rows as an Arrow table, `NOTHING_YET` or `END`;
    `snapshot_state` returns every unfinished split with its position in `data`: what a
    restore hands back to `add_splits`. A split it finished may be left out."""

    no_more_splits: bool = False

    @abc.abstractmethod
    def add_splits(self, splits: list[SourceSplit]) -> None: ...

    @abc.abstractmethod
    def poll_next(self) -> pa.Table | Poll: ...

    @abc.abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> list[SourceSplit]: ...

    def notify_no_more_splits(self) -> None:
        """The enumerator will assign this reader nothing more (a bounded source): return END
        once the splits it has are read."""
        self.no_more_splits = True

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027 — optional hook
        """Checkpoint `checkpoint_id` completed (e.g. acknowledge what it covers upstream)."""

    def close(self) -> None:  # noqa: B027 — optional hook
        """The task ended, failed or was cancelled: release connections."""


class SplitEnumerator(abc.ABC):
    """Discovers splits and assigns them to reader subtasks; runs in the JobManager.

    Only the built-in enumerators (`sluice.connectors.enumerators.ENUMERATORS`) run there:
    the JobManager rebuilds one from its `name` and `config()` (plain JSON) with
    `create`, or from a checkpoint with `restore(config, state)`. Each is a pure state
    machine: the JobManager does its I/O (listing a directory) and hands in the result."""

    name: ClassVar[str]

    @abc.abstractmethod
    def config(self) -> dict[str, JSON]:
        """The settings this enumerator is rebuilt from in the JobManager."""

    @classmethod
    @abc.abstractmethod
    def check_config(cls, config: dict[str, JSON]) -> None:
        """ConnectorConfigError naming the setting that is wrong."""

    @classmethod
    @abc.abstractmethod
    def create(cls, config: dict[str, JSON]) -> Self: ...

    @classmethod
    @abc.abstractmethod
    def restore(cls, config: dict[str, JSON], state: dict[str, JSON]) -> Self: ...

    @abc.abstractmethod
    def start(self, parallelism: int) -> None:
        """The job's attempt starts with `parallelism` readers."""

    def add_reader(self, subtask: int) -> None:  # noqa: B027 — optional hook
        """Reader `subtask` asked for the first time in this attempt."""

    @abc.abstractmethod
    def handle_split_request(self, subtask: int, idle: bool) -> list[SourceSplit]:
        """Reader `subtask` asks (`idle`: it has no unfinished split): the splits it gets now."""

    @abc.abstractmethod
    def add_splits_back(self, splits: list[SourceSplit], subtask: int) -> None:
        """Splits that were assigned to `subtask` and must be assigned again."""

    @abc.abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> dict[str, JSON]:
        """Plain JSON that `restore` takes; stored in the checkpoint's `_metadata`."""

    def exhausted(self) -> bool:
        """True when no split will ever be assigned again (bounded sources)."""
        return False

    def discovery(self, now: float) -> dict[str, JSON] | None:  # noqa: ARG002 — static by default
        """What the JobManager should look up now to find new splits (None: nothing)."""
        return None

    def on_discovered(self, found: list[str], now: float) -> None:  # noqa: B027 — optional hook
        """The result of the lookup `discovery` asked for."""

    def discovery_failed(self) -> None:  # noqa: B027 — optional hook
        """The lookup `discovery` asked for failed: ask again later."""


class Source(abc.ABC):
    """A source the job API takes with `env.from_source(source)`. Pickled with the job for
    its readers; `create_enumerator` runs on the client when the job is built."""

    bounded: bool = True  # False: the readers never end (then no BATCH mode)
    schema: str | None = None  # Spark DDL of the rows, when known (checked against the job at submit)

    @abc.abstractmethod
    def create_enumerator(self) -> SplitEnumerator:
        """One of the built-in enumerators (sluice.connectors.enumerators), configured."""

    @abc.abstractmethod
    def create_reader(self, ctx: ReaderContext) -> SourceReader: ...


class DeliveryGuarantee(enum.StrEnum):
    EXACTLY_ONCE = "EXACTLY_ONCE"  # writes become visible once, at the checkpoint that covers them
    AT_LEAST_ONCE = "AT_LEAST_ONCE"  # writes are visible at once; a replay after a failure may repeat them


@dataclasses.dataclass(frozen=True)
class SinkContext:
    """Where a writer runs. `sink_id` names the sink in the job (its operator id): a
    transactional sink keys its commit markers by job id, sink id and subtask."""

    subtask: int
    parallelism: int
    job_id: str
    sink_id: str
    checkpointing: bool
    restored_checkpoint: int = 0


class SinkWriter(abc.ABC):
    """Takes one subtask's rows on its task thread."""

    @abc.abstractmethod
    def write(self, table: pa.Table) -> None: ...

    @abc.abstractmethod
    def prepare_commit(self, checkpoint_id: int) -> list[JSON]:
        """At a checkpoint barrier (or at the end of a job without checkpoints): make the rows
        written since the last call durable but not visible, and describe them as committables
        (plain JSON, carried in the checkpoint). An at-least-once writer flushes and returns []."""

    def close(self) -> None:  # noqa: B027 — optional hook
        """The task ended, failed or was cancelled."""


class Committer(abc.ABC):
    """Makes committables visible once their checkpoint completed. Idempotent: after a
    failure the committables of the restored checkpoint are committed again."""

    @abc.abstractmethod
    def commit(self, committables: list[JSON]) -> None: ...

    def close(self) -> None:  # noqa: B027 — optional hook
        """The task ended, failed or was cancelled."""


class Sink(abc.ABC):
    """A sink the job API takes with `stream.sink_to(sink)`; pickled with the job."""

    guarantee: ClassVar[DeliveryGuarantee] = DeliveryGuarantee.EXACTLY_ONCE

    @abc.abstractmethod
    def create_writer(self, ctx: SinkContext) -> SinkWriter: ...

    def create_committer(self) -> Committer | None:
        """None: the writer's writes are final (an at-least-once sink)."""
        return None
