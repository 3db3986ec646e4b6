"""DataExchange servicer: the producer side of a remote input channel.

A consumer opens `Subscribe`, names a partition and subpartition, and
announces its initial credit; this side sends at most that many batches,
then waits for more credit (barriers and END need none). The partition may
not be deployed yet: we wait briefly, then answer NOT_FOUND and the
consumer retries. A partition released under a subscription (its producer
failed or was cancelled) ends the stream with ABORTED: the stream waits on
its subpartition and never polls a released one again. A subscription reads
through `partition.reader(subpartition)`: a pipelined subpartition's queue,
or a fresh pass over a blocking partition's file (BATCH), which waits while
its producer has not finished (taskmanager/network/blocking_partition.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import assert_never

import grpc

from sluice.serialization import table_to_ipc
from sluice.v1 import dataexchange_pb2, dataexchange_pb2_grpc
from taskmanager.network.partition import ItemKind, PartitionManager

log = logging.getLogger("sluice.taskmanager.exchange")


class _Credit:
    def __init__(self, initial: int) -> None:
        self.value = initial
        self.cond = threading.Condition()

    def add(self, n: int) -> None:
        with self.cond:
            self.value += n
            self.cond.notify_all()

    def take(self, active: Callable[[], bool]) -> bool:
        with self.cond:
            while self.value <= 0:
                if not active():
                    return False
                self.cond.wait(0.2)
            self.value -= 1
            return True


class DataExchangeServicer(dataexchange_pb2_grpc.DataExchangeServicer):
    def __init__(self, partitions: PartitionManager) -> None:
        self.partitions = partitions

    def Subscribe(
        self, request_iterator: Iterator[dataexchange_pb2.ConsumerMessage], context: grpc.ServicerContext
    ) -> Iterator[dataexchange_pb2.DataMessage]:
        try:
            first = next(request_iterator)
        except StopIteration:
            return
        if first.WhichOneof("kind") != "request":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a PartitionRequest")
        req = first.request
        partition = self.partitions.get(req.partition_id, timeout=1.0)
        if partition is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"partition {req.partition_id} is not (yet) produced here")
            return  # abort() raises; this tells the type checker
        if not 0 <= req.subpartition < partition.num_subpartitions:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"subpartition {req.subpartition} out of range")
        credit = _Credit(max(1, req.initial_credit))

        def read_credits() -> None:
            try:
                for msg in request_iterator:
                    if msg.WhichOneof("kind") == "credit":
                        credit.add(msg.credit)
            except Exception:  # noqa: BLE001 — the stream closed
                pass

        threading.Thread(target=read_credits, daemon=True, name="credit-reader").start()

        sub = partition.reader(req.subpartition)
        try:
            while context.is_active():
                item = sub.poll(0.2)
                if item is None:
                    if sub.released:
                        context.abort(
                            grpc.StatusCode.ABORTED,
                            f"partition {req.partition_id} was released before its end: its producer failed "
                            "or was cancelled (or, for a blocking partition, the JobManager released it)",
                        )
                    continue
                kind, value = item
                match kind:
                    case ItemKind.BATCH:
                        if not credit.take(context.is_active):
                            return
                        yield dataexchange_pb2.DataMessage(batch=table_to_ipc(value), backlog=sub.backlog())
                    case ItemKind.BARRIER:
                        yield dataexchange_pb2.DataMessage(barrier=dataexchange_pb2.Barrier(checkpoint_id=value))
                    case ItemKind.WATERMARK:
                        yield dataexchange_pb2.DataMessage(watermark=dataexchange_pb2.Watermark(timestamp_ms=value))
                    case ItemKind.STATUS:
                        yield dataexchange_pb2.DataMessage(status=dataexchange_pb2.StreamStatus(idle=value))
                    case ItemKind.END:
                        yield dataexchange_pb2.DataMessage(end=dataexchange_pb2.EndOfPartition())
                        partition.consumed(req.subpartition)
                        return
                    case _:
                        assert_never(kind)
        finally:
            sub.close()
