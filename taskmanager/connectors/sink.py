"""A connector sink at the end of a task's chain (docs/connectors.md).

`ConnectorSink` hands rows to the user's `SinkWriter`; at each checkpoint's snapshot it
asks the writer to prepare what it wrote as committables, which travel in the
checkpoint (inline state); when the checkpoint completes, the `Committer` commits them.
A restore commits the committables of the restored checkpoint again (that checkpoint
completed, but the commit may not have happened before the failure): committers are
idempotent. Without checkpoints, the writer prepares and the committer commits once, at
the end of the input.
"""

from __future__ import annotations

import logging
from typing import Any, Self

from sluice.connectors.api import JSON, Committer, Sink, SinkContext, SinkWriter
from sluice.graph import OperatorKind
from taskmanager.operators.base import Operator, OperatorContext, OperatorSnapshot, Payload
from taskmanager.spark_engine import Batch

log = logging.getLogger("sluice.taskmanager.connectors")


class ConnectorSink(Operator):
    is_sink = True

    def __init__(self, sink: Sink, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.writer: SinkWriter = sink.create_writer(
            SinkContext(
                subtask=ctx.subtask,
                parallelism=ctx.parallelism,
                job_id=ctx.job_id,
                sink_id=ctx.operator_id or ctx.name,
                checkpointing=ctx.checkpointing,
                restored_checkpoint=ctx.restore_checkpoint_id,
            )
        )
        self.committer: Committer | None = sink.create_committer()
        self.pending: dict[int, list[JSON]] = {}  # checkpoint id -> its committables, not committed yet
        self.closed = False

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload["sink"], ctx)

    def process(self, batch: Batch) -> Batch | None:
        self.writer.write(batch.table())
        return None

    def end_input(self) -> Batch | None:
        if not self.ctx.checkpointing:  # no checkpoint will come: commit what there is now
            self._commit(self.writer.prepare_commit(0), 0)
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        committables = self.writer.prepare_commit(checkpoint_id)
        if committables and self.committer is not None:
            self.pending[checkpoint_id] = committables
        return OperatorSnapshot(inline={"pending": [[cid, c] for cid, c in sorted(self.pending.items())]})

    def restore(self, state: OperatorSnapshot) -> None:
        restored: list[list[Any]] = (state.inline or {}).get("pending", [])
        for cid, committables in restored:
            self._commit(committables, int(cid))  # their checkpoint completed: commit (again, if it happened)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for cid in sorted(c for c in self.pending if c <= checkpoint_id):
            self._commit(self.pending.pop(cid), cid)

    def _commit(self, committables: list[JSON], checkpoint_id: int) -> None:
        if self.committer is None or not committables:
            return
        self.committer.commit(committables)
        log.info("%s sink committed %d committable(s) of checkpoint %d", self.ctx.tag, len(committables), checkpoint_id)

    def abort(self) -> None:
        self.close()

    def dispose(self) -> None:
        """The task ended, finished or not (after a finished task's final commit): the writer
        and committer release what they hold (connections, staging files)."""
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        if self.committer is not None:
            self.committer.close()
