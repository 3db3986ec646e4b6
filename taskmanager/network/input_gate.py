"""Input gates: a consumer task's view of one upstream chain, one input
channel per upstream subtask.

Each channel buffers at most `credit` batches (its credit): a local channel
moves items from the producer's subpartition on this TaskManager, a remote
channel receives them over a DataExchange stream and returns credit to the
producer as the task takes batches. So in-flight data per channel is
bounded by the producer's subpartition capacity plus the consumer's credit.
The task takes everything buffered at once (adaptive batching). A local
channel reads a blocking partition (BATCH) the same way, through its
`reader`: the producer finished before, so its file is read from the start.

A remote channel whose producer is not deployed yet (NOT_FOUND, UNAVAILABLE
before the first message) subscribes again with backoff until
CONNECT_TIMEOUT (tenacity). Any other break fails the task with a
ChannelError naming the peer TaskManager, which the task reports to the
JobManager as the failure cause (docs/architecture.md, "Errors").
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from sluice import rpc
from sluice.retries import RetryCallState, retrying
from sluice.serialization import ipc_to_table
from sluice.v1 import dataexchange_pb2, dataexchange_pb2_grpc
from taskmanager.network.partition import (
    BARRIER,
    BATCH,
    END,
    STATUS,
    WATERMARK,
    Item,
    Partition,
    PartitionManager,
    SubpartitionReader,
)

log = logging.getLogger("sluice.taskmanager.network")

CONNECT_TIMEOUT = 60.0  # how long a consumer waits for its producer to be deployed


class ChannelError(Exception):
    """An input channel broke. `peer` is the host:port of the producing TaskManager when
    the stream from another TaskManager broke (None for a channel within this one)."""

    def __init__(self, message: str, peer: str | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class _ProducerNotReady(Exception):
    """The producer's partition is not served (yet): subscribe again."""

    def __init__(self, err: grpc.RpcError) -> None:
        super().__init__(f"{err.code().name}: {err.details()}")


class InputChannel:
    def __init__(self, gate: InputGate, index: int, partition_id: str, subpartition: int, credit: int) -> None:
        self.gate, self.index = gate, index
        self.partition_id, self.subpartition = partition_id, subpartition
        self.credit = credit
        self.buffer: collections.deque[Item] = collections.deque()
        self.ended = False
        self.received_any = False  # an item arrived: the producer is there, a break is not retried
        self.global_index = index  # across all gates of the task; set by the task
        self._thread = threading.Thread(target=self._run_safely, name=f"in-{partition_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run_safely(self) -> None:
        try:
            self.run()
        except Exception as exc:  # noqa: BLE001 — surfaces in the task thread
            if not self.gate.closed:
                peer = exc.peer if isinstance(exc, ChannelError) else None
                self.gate.fail(
                    ChannelError(f"input from {self.partition_id}[{self.subpartition}] broke: {exc}", peer=peer)
                )

    def run(self) -> None:
        raise NotImplementedError

    def returned_credit(self, n: int) -> None:
        pass


class LocalInputChannel(InputChannel):
    def __init__(
        self,
        gate: InputGate,
        index: int,
        partition_id: str,
        subpartition: int,
        credit: int,
        partitions: PartitionManager,
    ) -> None:
        super().__init__(gate, index, partition_id, subpartition, credit)
        self.partitions = partitions
        self._space = threading.Semaphore(credit)

    def run(self) -> None:
        deadline = time.monotonic() + CONNECT_TIMEOUT
        partition: Partition | None = None
        while partition is None:  # waits for the producer's deployment on this TaskManager
            if self.gate.closed:
                return
            partition = self.partitions.get(self.partition_id, timeout=0.5)
            if partition is None and time.monotonic() > deadline:
                raise ChannelError(f"producer partition {self.partition_id} not found within {CONNECT_TIMEOUT}s")
        # a pipelined subpartition's queue, or a fresh pass over a blocking partition's file
        sub = partition.reader(self.subpartition)
        try:
            self._read(partition, sub)
        finally:
            sub.close()

    def _read(self, partition: Partition, sub: SubpartitionReader) -> None:
        while not self.gate.closed:
            while not self._space.acquire(timeout=0.2):
                if self.gate.closed:
                    return
            item = None
            while item is None and not self.gate.closed:
                item = sub.poll(0.2)
                if item is None and sub.released:
                    raise ChannelError(
                        f"producer partition {self.partition_id} was released before its end "
                        "(its producer failed or was cancelled)"
                    )
            if item is None:
                return
            self.gate.deliver(self, item)
            if item[0] != BATCH:
                self._space.release()  # only batches use credit
            if item[0] == END:
                partition.consumed(self.subpartition)
                return

    def returned_credit(self, n: int) -> None:
        for _ in range(n):
            self._space.release()


class RemoteInputChannel(InputChannel):
    def __init__(
        self, gate: InputGate, index: int, partition_id: str, subpartition: int, credit: int, address: str
    ) -> None:
        super().__init__(gate, index, partition_id, subpartition, credit)
        self.address = address
        self._requests: queue.Queue[int | None] = queue.Queue()

    def _request_iter(self) -> Iterator[dataexchange_pb2.ConsumerMessage]:
        yield dataexchange_pb2.ConsumerMessage(
            request=dataexchange_pb2.PartitionRequest(
                partition_id=self.partition_id, subpartition=self.subpartition, initial_credit=self.credit
            )
        )
        while True:
            n = self._requests.get()
            if n is None:
                return
            yield dataexchange_pb2.ConsumerMessage(credit=n)

    def run(self) -> None:
        with rpc.channel(self.address) as channel:  # mutual TLS with the TaskManager's certificate
            stub = dataexchange_pb2_grpc.DataExchangeStub(channel)
            # The producer may not be deployed yet: subscribe again until the deadline.
            retry = retrying(
                deadline=CONNECT_TIMEOUT,
                stopped=self.gate.closed_event,  # closing the gate ends the wait
                retry_on=_ProducerNotReady,
                first_wait=0.05,
                max_wait=1.0,
                before_sleep=self._log_wait,
            )
            try:
                retry(self._subscribe, stub)
            except _ProducerNotReady as exc:
                if self.gate.closed:
                    return
                raise ChannelError(f"{self.address}: {exc}", peer=self.address) from None

    def _log_wait(self, state: RetryCallState) -> None:
        log.debug(
            "%s waiting for partition %s[%d] at %s (attempt %d: %s); subscribing again in %.2fs",
            self.gate.tag,
            self.partition_id,
            self.subpartition,
            self.address,
            state.attempt_number,
            state.outcome.exception() if state.outcome else "",
            state.upcoming_sleep,
        )

    def _subscribe(self, stub: dataexchange_pb2_grpc.DataExchangeStub) -> None:
        """One subscription: deliver what arrives until END (raises _ProducerNotReady to retry)."""
        if self.gate.closed:
            return
        self._requests = queue.Queue()
        call = stub.Subscribe(self._request_iter())
        self.gate.on_close(call.cancel)
        try:
            for msg in call:
                kind = msg.WhichOneof("kind")
                if kind == "batch":
                    self.gate.deliver(self, (BATCH, ipc_to_table(msg.batch)))
                elif kind == "barrier":
                    self.gate.deliver(self, (BARRIER, msg.barrier.checkpoint_id))
                elif kind == "watermark":
                    self.gate.deliver(self, (WATERMARK, msg.watermark.timestamp_ms))
                elif kind == "status":
                    self.gate.deliver(self, (STATUS, msg.status.idle))
                elif kind == "end":
                    self.gate.deliver(self, (END, None))
                    return
            if self.gate.closed:
                return
            raise ChannelError(f"stream from {self.address} ended before END", peer=self.address)
        except grpc.RpcError as err:
            if self.gate.closed:
                return
            if err.code() == grpc.StatusCode.ABORTED:  # the producer's partition was released: not a peer failure
                raise ChannelError(f"{self.address}: {err.details()}") from None
            if (
                err.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
                and not self.buffer
                and not self.received_any
            ):
                raise _ProducerNotReady(err) from None
            raise ChannelError(f"{self.address}: {err.code().name}: {err.details()}", peer=self.address) from None
        finally:
            self._requests.put(None)

    def returned_credit(self, n: int) -> None:
        self._requests.put(n)


class InputGate:
    def __init__(self, tag: str = "") -> None:
        self.tag = tag  # the task's correlation ids, for log lines
        self.channels: list[InputChannel] = []
        self._cond = threading.Condition()
        self._error: Exception | None = None
        self.closed_event = threading.Event()
        self._closers: list[Callable[[], object]] = []

    def add(self, channel: InputChannel) -> None:
        self.channels.append(channel)

    def start(self) -> None:
        for c in self.channels:
            c.start()

    def deliver(self, channel: InputChannel, item: Item) -> None:
        with self._cond:
            channel.received_any = True
            channel.buffer.append(item)
            self._cond.notify_all()

    def fail(self, error: Exception) -> None:
        with self._cond:
            self._error = self._error or error
            self._cond.notify_all()

    def on_close(self, fn: Callable[[], object]) -> None:
        self._closers.append(fn)

    @property
    def finished(self) -> bool:
        return all(c.ended for c in self.channels)

    def wake(self) -> None:
        """Wake a task waiting in poll_all (e.g. a control message arrived)."""
        with self._cond:
            self._cond.notify_all()

    def poll_all(
        self, timeout: float, is_blocked: Callable[[int], bool] = lambda _channel: False
    ) -> list[tuple[InputChannel, Item]]:
        """Everything buffered on the channels that are not blocked, in order, up to and
        including each channel's next barrier (after a barrier the channel may be blocked
        for alignment). Waits up to `timeout` for the first item; returns credit for the
        batches taken."""
        with self._cond:

            def ready() -> bool:
                return any(c.buffer and not is_blocked(c.global_index) for c in self.channels)

            if not ready() and self._error is None:
                self._cond.wait(timeout)
            if self._error is not None:
                raise self._error
            taken: list[tuple[InputChannel, Item]] = []
            for c in self.channels:
                if is_blocked(c.global_index):
                    continue
                n = 0
                while c.buffer:
                    item = c.buffer.popleft()
                    taken.append((c, item))
                    if item[0] == BATCH:
                        n += 1
                    elif item[0] == END:
                        c.ended = True
                    elif item[0] == BARRIER:
                        break
                if n:
                    c.returned_credit(n)
            return taken

    @property
    def closed(self) -> bool:
        return self.closed_event.is_set()

    def close(self) -> None:
        self.closed_event.set()
        for fn in self._closers:
            try:
                fn()
            except Exception:  # noqa: BLE001 — closing: a failed cancel changes nothing
                pass
