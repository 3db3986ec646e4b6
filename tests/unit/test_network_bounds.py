"""Bounded exchange between tasks on one TaskManager (threads, no sockets):
subpartition capacity, consumer credit, END handling, key-group ranges."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest
from helpers import wait_until

from sluice.key_groups import owner
from taskmanager.network.input_gate import InputGate, LocalInputChannel
from taskmanager.network.partition import (
    BARRIER,
    BATCH,
    END,
    PartitionManager,
    PartitionReleased,
    ResultPartition,
    ResultSubpartition,
    TaskCancelled,
)

DEADLINE = 5.0


def table(i: int) -> pa.Table:
    return pa.table({"i": [i]})


class CancelFlag:
    """The `cancelled` callable a task passes to add(); it is only consulted while
    the producer waits on a full subpartition, so `checks` proves blocking."""

    def __init__(self) -> None:
        self.flag = False
        self.checks = 0

    def __call__(self) -> bool:
        self.checks += 1
        return self.flag


class Producer(threading.Thread):
    def __init__(self, sub: ResultSubpartition, items, cancelled: CancelFlag):
        super().__init__(daemon=True)
        self.sub, self.items, self.cancelled = sub, list(items), cancelled
        self.attempted = 0  # items handed to add()
        self.added = 0  # add() calls that returned
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for item in self.items:
                self.attempted += 1
                self.sub.add(item, self.cancelled)
                self.added += 1
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            self.error = exc


def polled(sub: ResultSubpartition, timeout: float) -> tuple[Any, Any]:
    """The next item, which the test expects within `timeout`."""
    item = sub.poll(timeout)
    assert item is not None, f"nothing within {timeout}s"
    return item


def blocked(producer: Producer, checks_before: int = 0):
    return lambda: producer.is_alive() and producer.cancelled.checks > checks_before


# -- ResultSubpartition -------------------------------------------------------------
def test_full_subpartition_blocks_the_producer_until_the_consumer_polls():
    sub = ResultSubpartition(capacity=2)
    p = Producer(sub, [(BATCH, table(i)) for i in range(3)], CancelFlag())
    p.start()
    wait_until(blocked(p), DEADLINE, "producer blocked on the 3rd batch")
    assert (p.attempted, p.added, sub.backlog()) == (3, 2, 2)

    item = polled(sub, DEADLINE)
    assert item[0] == BATCH and item[1].equals(table(0))
    p.join(DEADLINE)
    assert not p.is_alive() and p.error is None
    assert (p.added, sub.backlog()) == (3, 2)
    assert [polled(sub, DEADLINE)[1]["i"][0].as_py() for _ in range(2)] == [1, 2]


def test_control_items_never_block_on_a_full_subpartition():
    sub = ResultSubpartition(capacity=1)
    cancelled = CancelFlag()
    sub.add((BATCH, table(0)), cancelled)
    sub.add((BARRIER, 7), cancelled)  # returns at once although full
    sub.add((END, None), cancelled)
    assert cancelled.checks == 0
    assert sub.backlog() == 3
    assert [polled(sub, 0)[0] for _ in range(3)] == [BATCH, BARRIER, END]


def test_cancelled_producer_blocked_on_a_full_subpartition_raises_task_cancelled():
    sub = ResultSubpartition(capacity=2)
    p = Producer(sub, [(BATCH, table(i)) for i in range(5)], CancelFlag())
    p.start()
    wait_until(blocked(p), DEADLINE, "producer blocked")
    p.cancelled.flag = True
    p.join(DEADLINE)
    assert not p.is_alive()
    assert isinstance(p.error, TaskCancelled)
    assert (p.attempted, p.added, sub.backlog()) == (3, 2, 2)


def test_released_subpartition_unblocks_the_producer_with_partition_released():
    sub = ResultSubpartition(capacity=1)
    p = Producer(sub, [(BATCH, table(i)) for i in range(3)], CancelFlag())
    p.start()
    wait_until(blocked(p), DEADLINE, "producer blocked")
    sub.release()
    p.join(DEADLINE)
    assert not p.is_alive()
    assert isinstance(p.error, PartitionReleased)
    assert p.added < 3


def test_nothing_is_added_to_a_released_subpartition():
    sub = ResultSubpartition(capacity=1)
    p = Producer(sub, [(BATCH, table(i)) for i in range(3)], CancelFlag())
    p.start()
    wait_until(blocked(p), DEADLINE, "producer blocked")
    sub.release()
    p.join(DEADLINE)
    assert isinstance(p.error, PartitionReleased)
    assert p.added == 1  # the blocked batch must not count as added
    assert sub.backlog() == 0
    assert sub.poll(timeout=DEADLINE) is None  # released: nothing to hand out, no waiting


def test_poll_on_empty_subpartition_returns_none_after_its_timeout():
    sub = ResultSubpartition(capacity=2)
    assert sub.poll(timeout=0.0) is None
    assert sub.poll(timeout=0.05) is None


def test_poll_wakes_up_when_an_item_arrives():
    sub = ResultSubpartition(capacity=2)
    got = []
    consumer = threading.Thread(target=lambda: got.append(sub.poll(timeout=DEADLINE)), daemon=True)
    consumer.start()
    sub.add((BARRIER, 3))
    consumer.join(DEADLINE)
    assert got == [(BARRIER, 3)]


# -- LocalInputChannel + InputGate ------------------------------------------------------
CAPACITY, CREDIT = 2, 2


@pytest.fixture
def local_exchange():
    consumed: list[str] = []
    partitions = PartitionManager()
    partition = ResultPartition("job/0/src->map/0", 1, CAPACITY, on_consumed=consumed.append)
    partitions.register(partition)
    gate = InputGate()
    channel = LocalInputChannel(gate, 0, partition.partition_id, 0, CREDIT, partitions)
    gate.add(channel)
    yield partition, gate, channel, consumed
    gate.close()
    partition.release()


def test_consumer_that_never_polls_bounds_what_the_producer_can_produce(local_exchange):
    partition, gate, channel, _ = local_exchange
    sub = partition.subpartitions[0]
    p = Producer(sub, [(BATCH, table(i)) for i in range(50)] + [(END, None)], CancelFlag())
    gate.start()
    p.start()
    wait_until(
        lambda: len(channel.buffer) == CREDIT and sub.backlog() == CAPACITY,
        DEADLINE,
        "channel filled to its credit and subpartition to its capacity",
    )
    # nothing can move any more: the producer stays blocked on its next batch
    checks = p.cancelled.checks
    wait_until(blocked(p, checks), DEADLINE, "producer blocked by backpressure")
    # producer side: capacity in the subpartition, one batch in hand; consumer side: credit
    assert p.added == CAPACITY + CREDIT
    assert p.attempted == CAPACITY + CREDIT + 1
    assert (len(channel.buffer), sub.backlog()) == (CREDIT, CAPACITY)

    # taking the batches returns credit, and the rest flows through in order
    seen, ends = [], 0

    def drain():
        nonlocal ends
        for ch, item in gate.poll_all(timeout=0.1):
            assert ch is channel
            if item[0] == BATCH:
                seen.append(item[1]["i"][0].as_py())
            elif item[0] == END:
                ends += 1
        return ends

    wait_until(drain, DEADLINE, "END from the producer", interval=0.001)
    assert seen == list(range(50))
    assert ends == 1
    p.join(DEADLINE)
    assert p.error is None and not p.is_alive()


def test_poll_all_returns_everything_buffered_and_end_ends_the_channel(local_exchange):
    partition, gate, channel, consumed = local_exchange
    sub = partition.subpartitions[0]
    gate.start()
    sub.add((BATCH, table(0)))
    sub.add((BATCH, table(1)))
    wait_until(lambda: len(channel.buffer) == CREDIT, DEADLINE, "two batches buffered")
    taken = gate.poll_all(timeout=DEADLINE)
    assert [(c is channel, kind) for c, (kind, _) in taken] == [(True, BATCH), (True, BATCH)]
    assert [t[1][1].equals(table(i)) for i, t in enumerate(taken)] == [True, True]
    assert not channel.ended and not gate.finished
    assert len(channel.buffer) == 0

    # the credit came back: two more batches fit into the channel; the END waits
    # behind them in the subpartition until the consumer takes them
    sub.add((BATCH, table(2)))
    sub.add((BATCH, table(3)))
    sub.add((END, None))
    wait_until(lambda: len(channel.buffer) == CREDIT, DEADLINE, "two more batches buffered")
    assert sub.backlog() == 1
    taken = gate.poll_all(timeout=DEADLINE)
    assert [kind for _, (kind, _) in taken] == [BATCH, BATCH]
    assert taken[0][1][1].equals(table(2)) and taken[1][1][1].equals(table(3))
    assert not channel.ended
    wait_until(lambda: len(channel.buffer) == 1, DEADLINE, "END buffered")
    taken = gate.poll_all(timeout=DEADLINE)
    assert taken == [(channel, (END, None))]
    assert channel.ended and gate.finished
    wait_until(lambda: consumed == [partition.partition_id], DEADLINE, "partition marked consumed")
    assert gate.poll_all(timeout=0.0) == []


def test_poll_all_on_nothing_returns_empty_after_its_timeout(local_exchange):
    _, gate, channel, _ = local_exchange
    gate.start()
    assert gate.poll_all(timeout=0.05) == []
    assert not channel.ended


def test_gate_finishes_only_when_every_channel_ended():
    partitions = PartitionManager()
    parts = [ResultPartition(f"p{i}", 1, CAPACITY) for i in range(2)]
    gate = InputGate()
    for i, part in enumerate(parts):
        partitions.register(part)
        gate.add(LocalInputChannel(gate, i, part.partition_id, 0, CREDIT, partitions))
    gate.start()
    try:
        parts[0].subpartitions[0].add((END, None))
        wait_until(lambda: gate.poll_all(timeout=0.05) or gate.channels[0].ended, DEADLINE, "first END")
        assert gate.channels[0].ended and not gate.channels[1].ended
        assert not gate.finished
        parts[1].subpartitions[0].add((END, None))
        wait_until(lambda: (gate.poll_all(timeout=0.05), gate.finished)[1], DEADLINE, "gate finished")
    finally:
        gate.close()


# -- key groups -------------------------------------------------------------------------
@pytest.mark.parametrize("max_parallelism", [128, 7, 1])
def test_key_groups_map_contiguously_and_evenly_to_subtasks(max_parallelism):
    for p in range(1, max_parallelism + 1):
        owners = [owner(kg, p, max_parallelism) for kg in range(max_parallelism)]
        assert owners == sorted(owners), (p, owners)  # contiguous ranges, in subtask order
        assert set(owners) == set(range(p)), p  # every subtask gets a range
        sizes = [owners.count(i) for i in range(p)]
        assert max(sizes) - min(sizes) <= 1, (p, sizes)
        assert sum(sizes) == max_parallelism


def test_key_group_ranges_for_128_over_3():
    owners = [owner(kg, 3, 128) for kg in range(128)]
    assert owners.index(1) == 43 and owners.index(2) == 86
    assert [owners.count(i) for i in range(3)] == [43, 43, 42]
