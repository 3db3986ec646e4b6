"""The operators a chain may hold, by kind; the source heading one (`make_source_for`).

To add an operator: implement `Operator` (taskmanager/operators/base.py), add
its kind to `OperatorKind` with its descriptor (sluice/kinds/table.py) and a
method to the job API (sluice/api/), and map the kind here;
tests/unit/test_operator_kinds.py checks every kind has its class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.connectors.api import ReaderContext
from sluice.graph import OperatorKind
from taskmanager.connectors.sink import ConnectorSink
from taskmanager.connectors.source import ConnectorSource
from taskmanager.network.combiner import Combiner
from taskmanager.operators.base import Operator, OperatorContext, Payload, Source
from taskmanager.operators.broadcast_process import BroadcastProcess
from taskmanager.operators.deduplicate import Deduplicate
from taskmanager.operators.interval_join import IntervalJoin
from taskmanager.operators.keyed_aggregate import KeyedAggregate
from taskmanager.operators.keyed_process import KeyedProcess
from taskmanager.operators.sinks import FileSinkWriter, PrintSink
from taskmanager.operators.sources import SOURCES, make_source
from taskmanager.operators.sqlite_sink import SqliteSinkWriter
from taskmanager.operators.table_join import TableJoin
from taskmanager.operators.timestamps import TimestampAssigner
from taskmanager.operators.transforms import SparkBody
from taskmanager.operators.window import WindowOperator
from taskmanager.operators.window_join import WindowJoin

OPERATORS: dict[OperatorKind, type[Operator]] = {
    OperatorKind.MAP: SparkBody,
    OperatorKind.FILTER: SparkBody,
    OperatorKind.FLAT_MAP: SparkBody,
    OperatorKind.SELECT: SparkBody,
    OperatorKind.AGGREGATE: KeyedAggregate,
    OperatorKind.SINK_FILE: FileSinkWriter,
    OperatorKind.SINK_PRINT: PrintSink,
    OperatorKind.SINK_SQLITE: SqliteSinkWriter,
    OperatorKind.TIMESTAMPS: TimestampAssigner,
    OperatorKind.WINDOW: WindowOperator,
    OperatorKind.PROCESS: KeyedProcess,
    OperatorKind.INTERVAL_JOIN: IntervalJoin,
    OperatorKind.JOIN_TABLE: TableJoin,
    OperatorKind.BROADCAST_PROCESS: BroadcastProcess,
    OperatorKind.WINDOW_JOIN: WindowJoin,
    OperatorKind.SINK_CONNECTOR: ConnectorSink,
    OperatorKind.DEDUPLICATE: Deduplicate,
}


def make_operator(kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Operator:
    """Build the operator of `kind` for one deployment (ValueError for a kind no chain may hold)."""
    cls = OPERATORS.get(kind)
    if cls is None:
        raise ValueError(f"operator {ctx.name} of kind {kind} cannot be chained here")
    return cls.create(kind, payload, ctx)


def combiner_for(kind: OperatorKind, payload: Payload) -> Combiner | None:
    """What a producer may pre-aggregate before a hash exchange into an operator of `kind`."""
    cls = OPERATORS.get(kind)
    return cls.combiner_for(payload) if cls is not None else None


def runtime_class(kind: OperatorKind) -> type[Operator] | type[Source] | None:
    """The class a TaskManager runs an operator of `kind` with: an `Operator` in a chain, or the
    `Source` heading one (a connector source's is built by the task, which gives it the
    split requests: taskmanager/task.py). None for a kind this TaskManager cannot run."""
    if kind == OperatorKind.SOURCE_CONNECTOR:
        return ConnectorSource
    source = SOURCES.get(kind)
    if isinstance(source, type) and issubclass(source, Source):
        return source
    return OPERATORS.get(kind)


def make_source_for(
    kind: OperatorKind,
    payload: Payload,
    ctx: OperatorContext,
    request_splits: Callable[[str, int, int, bool], Any] | None,
) -> Source:
    """The source heading a chain: a connector source's reader (docs/connectors.md), asking the
    JobManager for splits through `request_splits` (the TaskManager's leader connection), or a
    built-in source (`make_source`)."""
    if kind != OperatorKind.SOURCE_CONNECTOR:
        return make_source(
            kind, payload, ctx.subtask, ctx.parallelism, ctx.engine, batch=ctx.batch, reads=ctx.source_reads
        )
    if request_splits is None:
        raise RuntimeError("this task's reports cannot request splits: connector sources need a leader connection")
    reader = ReaderContext(
        subtask=ctx.subtask,
        parallelism=ctx.parallelism,
        job_id=ctx.job_id,
        operator_id=ctx.operator_id,
        restored_checkpoint=ctx.restore_checkpoint_id,
    )
    return ConnectorSource(payload, reader, ctx.engine, request_splits, tag=ctx.tag)
