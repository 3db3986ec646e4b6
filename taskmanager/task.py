"""Task: one subtask of a chain, run on its own thread.

The head of the chain is either a source (it produces batches until its
input is exhausted) or one input gate per upstream chain (it takes
everything buffered on all channels at once: big batches under load, small
ones when idle). Each batch passes through the chained operators and is
written to every result partition of the chain's tail. At the end of the
input the operators flush (sinks commit) and END is sent downstream.
"""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Callable

import pyarrow as pa

from sluice import graph
from sluice.v1 import taskmanager_pb2
from taskmanager.network.input_gate import InputGate, LocalInputChannel, RemoteInputChannel
from taskmanager.network.partition import BATCH, END, PartitionManager, ResultPartition, TaskCancelled
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.keyed_aggregate import KeyedAggregate
from taskmanager.operators.sinks import FileSinkWriter, PrintSink
from taskmanager.operators.sources import make_source
from taskmanager.operators.transforms import SparkBody
from taskmanager.spark_engine import Batch, SparkEngine

log = logging.getLogger("sluice.taskmanager.task")

SUBPARTITION_CAPACITY = 2   # batches a producer may queue per consumer
CHANNEL_CREDIT = 2          # batches a consumer buffers per channel


class Task:
    def __init__(self, tdd: taskmanager_pb2.TaskDeploymentDescriptor, engine: SparkEngine,
                 partitions: PartitionManager, own_address: str,
                 report: Callable[["Task", str, str], None]):
        self.tdd = tdd
        self.execution_id = tdd.execution_id
        self.job_id = tdd.job_id
        self.engine = engine
        self.partitions = partitions
        self.own_address = own_address
        self.report = report
        self.state = "DEPLOYING"
        self.records_in = 0
        self._sink_rows = 0
        self._cancel = threading.Event()
        self._gates: list[InputGate] = []
        self._writers: list[RecordWriter] = []
        self._operators: list = []
        self._thread = threading.Thread(target=self._run, name=f"task-{tdd.chain_id}-{tdd.subtask_index}", daemon=True)
        self.tag = f"[job {tdd.job_id} attempt {tdd.attempt} task {tdd.chain_id}#{tdd.subtask_index}]"

    @property
    def records_out(self) -> int:
        """Rows written to result partitions, or to the sink for a sink chain."""
        return sum(w.records_out for w in self._writers) + self._sink_rows

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()
        for g in self._gates:
            g.close()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    # -- setup ----------------------------------------------------------------------
    def _setup(self):
        tdd = self.tdd
        ops = {op.id: op for op in tdd.job.operators}
        maxp = tdd.job.max_parallelism or graph.DEFAULT_MAX_PARALLELISM
        for out in tdd.outputs:
            partition = ResultPartition(out.partition_id, out.num_subpartitions, SUBPARTITION_CAPACITY,
                                        on_consumed=self.partitions.release)
            target = ops[out.target_chain]
            combiner = None
            if target.kind == "aggregate" and out.partitioning == "hash":
                combiner = graph.loads_payload(target.payload)["aggs"]
            self._writers.append(RecordWriter(partition, out.partitioning, out.key, tdd.subtask_index, maxp,
                                              combiner, self.cancelled))
            self.partitions.register(partition)
        head = ops[tdd.operator_ids[0]]
        source = None
        if head.kind in graph.SOURCE_KINDS:
            source = make_source(head.kind, graph.loads_payload(head.payload), tdd.subtask_index, tdd.parallelism,
                                 self.engine)
            rest = tdd.operator_ids[1:]
        else:
            rest = tdd.operator_ids
            for gate_desc in tdd.inputs:
                gate = InputGate()
                for i, ch in enumerate(gate_desc.channels):
                    # Our subpartition index in the producer's partition is our subtask index.
                    if ch.address == self.own_address:
                        gate.add(LocalInputChannel(gate, i, ch.partition_id, tdd.subtask_index, CHANNEL_CREDIT,
                                                   self.partitions))
                    else:
                        gate.add(RemoteInputChannel(gate, i, ch.partition_id, tdd.subtask_index, CHANNEL_CREDIT,
                                                    ch.address))
                self._gates.append(gate)
        for op_id in rest:
            op = ops[op_id]
            payload = graph.loads_payload(op.payload)
            name = op.name or op.id
            if op.kind in graph.BODY_KINDS or op.kind == "select":
                self._operators.append(SparkBody(op.kind, payload, name))
            elif op.kind == "aggregate":
                self._operators.append(KeyedAggregate(payload, name))
            elif op.kind == "sink_file":
                self._operators.append(FileSinkWriter(payload, tdd.subtask_index, tdd.job_id, tdd.attempt))
            elif op.kind == "sink_print":
                self._operators.append(PrintSink(tdd.subtask_index, tdd.parallelism))
            else:
                raise ValueError(f"operator {op.id} of kind {op.kind} cannot be chained here")
        return source

    # -- run ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            source = self._setup()
            self.state = "RUNNING"
            self.report(self, "RUNNING", "")
            log.info("%s running %s", self.tag, self.tdd.chain_id)
            if source is not None:
                self._run_source(source)
            else:
                self._run_inputs()
            if self.cancelled():
                raise TaskCancelled()
            self._end_input()
            self.state = "FINISHED"
            log.info("%s finished: %d records in, %d out", self.tag, self.records_in, self.records_out)
            self.report(self, "FINISHED", "")
        except TaskCancelled:
            self._abort()
            self.state = "CANCELED"
            log.info("%s canceled", self.tag)
            self.report(self, "CANCELED", "")
        except Exception:  # noqa: BLE001 — the traceback goes to the JobManager
            self._abort()
            if self.cancelled():
                self.state = "CANCELED"
                self.report(self, "CANCELED", "")
                return
            error = traceback.format_exc()
            self.state = "FAILED"
            log.error("%s failed:\n%s", self.tag, error)
            self.report(self, "FAILED", error)
        finally:
            for g in self._gates:
                g.close()

    def _run_source(self, source) -> None:
        while not self.cancelled():
            batch = source.next_batch()
            if batch is None:
                return
            self._process(batch)

    def _run_inputs(self) -> None:
        for g in self._gates:
            g.start()
        while not self.cancelled():
            if all(g.finished for g in self._gates):
                return
            tables = []
            for g in self._gates:
                for _channel, (kind, value) in g.poll_all(timeout=0.2 / len(self._gates)):
                    if kind == BATCH:
                        tables.append(value)
            if tables:
                table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
                self.records_in += table.num_rows
                self._process(Batch(self.engine, table=table))

    def _process(self, batch: Batch | None, start: int = 0) -> None:
        for op in self._operators[start:]:
            if batch is None:
                return
            if isinstance(op, (FileSinkWriter, PrintSink)):
                op.process(batch)
                self._sink_rows += batch.table().num_rows
                return
            batch = op.process(batch)
        if batch is None:
            return
        if len(self._writers) > 1:
            batch = Batch(self.engine, table=batch.table())  # materialize once for several outputs
        for w in self._writers:
            w.emit(batch)

    def _end_input(self) -> None:
        for i, op in enumerate(self._operators):
            out = op.end_input()
            if out is not None:
                self._process(out, start=i + 1)
        for w in self._writers:
            w.end()

    def _abort(self) -> None:
        for op in self._operators:
            if hasattr(op, "abort"):
                op.abort()
        for w in self._writers:
            self.partitions.release(w.partition.partition_id)
