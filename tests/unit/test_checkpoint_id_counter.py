"""The CheckpointIDCounter contract, and its run against the in-memory counter.

``CheckpointIDCounterContract`` is the one contract suite (Flink's
``CheckpointIDCounterTestBase``); each backing runs it by subclassing it as
``Test...`` and implementing ``make_counter()`` to return a fresh counter
(for ZooKeeper: one on a fresh chroot). The base is not named ``Test...`` so
pytest does not collect it on its own.
"""

from __future__ import annotations

import abc
import threading

import pytest

from jobmanager.checkpoint.id_counter import CheckpointIDCounter, InMemoryCheckpointIDCounter


class CheckpointIDCounterContract(abc.ABC):
    @abc.abstractmethod
    def make_counter(self) -> CheckpointIDCounter:
        """A fresh counter that has never handed out an id."""

    def test_is_a_checkpoint_id_counter(self):
        assert isinstance(self.make_counter(), CheckpointIDCounter)

    def test_first_id_is_one(self):
        counter = self.make_counter()
        assert counter.get() == 1
        assert counter.get_and_increment() == 1

    def test_get_does_not_advance(self):
        counter = self.make_counter()
        assert [counter.get() for _ in range(3)] == [1, 1, 1]
        assert counter.get_and_increment() == 1

    def test_ids_are_consecutive_and_get_shows_the_next(self):
        counter = self.make_counter()
        for expected in range(1, 11):
            assert counter.get() == expected
            assert counter.get_and_increment() == expected
        assert counter.get() == 11

    def test_concurrent_callers_never_get_the_same_id(self):
        counter = self.make_counter()
        got: list[int] = []
        lock = threading.Lock()

        def take():
            ids = [counter.get_and_increment() for _ in range(25)]
            with lock:
                got.extend(ids)

        threads = [threading.Thread(target=take) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert sorted(got) == list(range(1, 101))
        assert counter.get() == 101


class TestInMemoryCheckpointIDCounter(CheckpointIDCounterContract):
    def make_counter(self) -> CheckpointIDCounter:
        return InMemoryCheckpointIDCounter()


def test_in_memory_counter_starts_where_told():
    counter = InMemoryCheckpointIDCounter(start=5)
    assert counter.get() == 5
    assert counter.get_and_increment() == 5
    assert counter.get() == 6


@pytest.mark.parametrize("start", [0, -1, 1.5, True, "1", None])
def test_in_memory_counter_rejects_bad_start(start):
    with pytest.raises(ValueError, match="start"):
        InMemoryCheckpointIDCounter(start=start)


def test_counter_interface_is_abstract():
    with pytest.raises(TypeError):
        CheckpointIDCounter()  # type: ignore[abstract]  # the point of the test
