"""FileSource with monitor_interval: files that appear later are read once,
by exactly one subtask, and a restored source reads only what its checkpoint
had not. Spark is replaced by a reader that records the paths it is asked
for; the clock is an input. Also: how the source adds up malformed rows from
its batches' observations, without Spark."""

from __future__ import annotations

import os

import pytest

from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from taskmanager.operators.sources import IDLE, FileSource
from taskmanager.spark_engine import Batch


class PathsSource(FileSource):
    """A FileSource whose batches are the lists of paths it would hand to Spark."""

    def _read(self, paths: list[str]):
        return paths


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def put(directory, name: str) -> None:
    """Make a file visible atomically, as writers of a monitored directory must."""
    hidden = directory / f".{name}"
    hidden.write_text('{"url": "/a", "user": 1, "ts": 0}\n')
    os.replace(hidden, directory / name)


def source(directory, subtask=0, parallelism=1, clock=None, **extra) -> FileSource:
    payload = {
        **extra,
        "path": str(directory),
        "format": "json",
        "schema": "url string, user long, ts long",
        "suffix": ".jsonl",
        "monitor_interval": 1.0,
    }
    return PathsSource(payload, subtask, parallelism, engine=None, clock=clock or Clock())


def read_all(src: FileSource) -> list[str]:
    out = []
    while (batch := src.next_batch()) is not IDLE:
        assert batch is not None, "a monitoring source never ends"
        out += [os.path.basename(p) for p in batch._df]
        src.batch_done(0.0)
    return out


def test_files_that_appear_later_are_read_after_the_next_listing(tmp_path):
    clock = Clock()
    src = source(tmp_path, clock=clock)
    assert src.next_batch() is IDLE  # an empty directory is fine: files come later
    put(tmp_path, "a.jsonl")
    assert src.next_batch() is IDLE  # listed at t=0 already; the next listing is due at t=1
    clock.t = 1.0
    assert read_all(src) == ["a.jsonl"]
    put(tmp_path, "b.jsonl")
    put(tmp_path, "c.jsonl")
    (tmp_path / ".d.jsonl").write_text("half written")  # hidden: not read
    clock.t = 2.0
    assert read_all(src) == ["b.jsonl", "c.jsonl"]
    clock.t = 3.0
    assert src.next_batch() is IDLE
    assert src.offset == 3


def test_subtasks_split_the_files_and_keep_their_files_as_more_arrive(tmp_path):
    clock = Clock()
    subtasks = [source(tmp_path, i, 3, clock) for i in range(3)]
    names = [f"f{i:03d}.jsonl" for i in range(40)]
    for n in names[:20]:
        put(tmp_path, n)
    first = [read_all(s) for s in subtasks]
    for n in names[20:]:
        put(tmp_path, n)
    clock.t = 1.0
    second = [read_all(s) for s in subtasks]
    everything = sorted(sum(first, []) + sum(second, []))
    assert everything == names  # each file once, by one subtask
    assert all(first) and all(second)
    for i in range(3):  # a file's owner does not depend on which files arrived with it
        again = source(tmp_path, i, 3, clock)
        assert sorted(read_all(again)) == sorted(first[i] + second[i])


def test_forget_after_bounds_the_names_kept_and_never_reads_a_file_twice(tmp_path):
    clock = Clock()
    src = source(tmp_path, clock=clock, forget_after_ms=10_000)
    for i, n in enumerate(("a.jsonl", "b.jsonl", "c.jsonl")):
        put(tmp_path, n)
        os.utime(tmp_path / n, (1_000 + i * 4, 1_000 + i * 4))  # modified at 1000 s, 1004 s, 1008 s
    assert read_all(src) == ["a.jsonl", "b.jsonl", "c.jsonl"]
    put(tmp_path, "d.jsonl")
    os.utime(tmp_path / "d.jsonl", (1_030, 1_030))
    clock.t = 1.0
    assert read_all(src) == ["d.jsonl"]
    assert sorted(src.snapshot()["done"]) == ["d.jsonl"]  # a, b and c are older than 1030 s - 10 s: forgotten
    put(tmp_path, "late.jsonl")
    os.utime(tmp_path / "late.jsonl", (1_005, 1_005))  # appears now, but older than the horizon: not read
    clock.t = 2.0
    assert read_all(src) == [] and src.monitor is not None and src.monitor.files_ignored >= 1
    restored = source(tmp_path, clock=Clock(), forget_after_ms=10_000)
    restored.restore(src.snapshot())
    assert read_all(restored) == []  # a, b, c and late stay unread after a restore too


def test_restore_reads_only_what_the_checkpoint_had_not(tmp_path):
    clock = Clock()
    for n in ("a.jsonl", "b.jsonl"):
        put(tmp_path, n)
    src = source(tmp_path, clock=clock)
    assert read_all(src) == ["a.jsonl", "b.jsonl"]
    handle = src.snapshot()
    put(tmp_path, "c.jsonl")
    clock.t = 1.0
    assert read_all(src) == ["c.jsonl"]  # read after the checkpoint: lost with a failure
    restored = source(tmp_path, clock=Clock())
    restored.restore(handle)
    assert restored.offset == 2
    assert read_all(restored) == ["c.jsonl"]


@pytest.mark.parametrize("bad", [0, -5, "1s", True])
def test_bad_monitor_interval_is_rejected_with_what_to_fix(tmp_path, bad):
    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match="monitor_interval_ms must be a positive number"):
        env.from_files(str(tmp_path), monitor_interval_ms=bad)


def test_a_monitored_directory_may_start_empty_but_a_bounded_one_may_not(tmp_path):
    def job(monitor):
        env = StreamExecutionEnvironment()
        env.from_files(str(tmp_path), monitor_interval_ms=monitor, schema="url string").sink_to(
            FileSink(str(tmp_path / "out"))
        )
        return env.get_job_graph("j")

    graph.validate(job(500), check_paths=True)
    with pytest.raises(graph.JobValidationError, match="no input files"):
        graph.validate(job(None), check_paths=True)


def test_a_monitored_directory_that_starts_empty_needs_a_schema(tmp_path):
    env = StreamExecutionEnvironment()
    with pytest.raises(ValueError, match="needs schema=") as info:
        env.from_files(str(tmp_path), format="csv", monitor_interval_ms=100)
    assert str(tmp_path) in str(info.value)
    env.from_files(str(tmp_path), format="text", monitor_interval_ms=100)  # text always has its one column


# -- malformed rows: the source adds up its batches' observations --------------------------------
class Future:
    def __init__(self) -> None:
        self.completed = False

    def isCompleted(self) -> bool:  # the JVM future's method name
        return self.completed


class Observation:
    """What pyspark's Observation offers the source: the JVM object's future, and `get`."""

    def __init__(self, malformed: int, fails: bool = False) -> None:
        self._jo = type("JvmObservation", (), {})()
        self.future = Future()
        self._jo.future = lambda: self.future
        self.metrics, self.fails = {"malformed": malformed}, fails

    @property
    def get(self) -> dict:
        if self.fails:
            raise RuntimeError("the batch's Spark job failed")
        return self.metrics


def test_malformed_rows_are_counted_once_each_batch_has_run(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"url": "/a"}\n')
    src = source(tmp_path)
    first, second, broken = Observation(2), Observation(1), Observation(7, fails=True)
    src.reader.pending = [first, second, broken]
    src.batch_done(0.0)  # no action ran yet: nothing is known, nothing blocks
    assert (src.records_malformed, len(src.reader.pending)) == (0, 3)
    first.future.completed = broken.future.completed = True
    src.batch_done(0.0)
    assert (src.records_malformed, src.reader.pending) == (2, [second])
    second.future.completed = True
    src.batch_done(0.0)
    assert (src.records_malformed, src.reader.pending) == (3, [])


def test_a_file_that_arrives_before_the_next_listing_is_pending_input_at_once(tmp_path):
    """Idleness asks the source whether it has input (docs/event-time.md, "Idleness"): with its
    queue dry it lists the directory again whatever the interval, so a subtask whose own file
    waits unlisted is not idle, and its next batch reads that file without waiting the interval."""
    clock = Clock()
    put(tmp_path, "a.jsonl")
    src = source(tmp_path, clock=clock)
    assert read_all(src) == ["a.jsonl"]
    assert not src.has_pending_input()  # nothing of its own: it may go idle
    clock.t = 0.1  # far inside the 1 s interval
    put(tmp_path, "b.jsonl")
    assert src.next_batch() is IDLE  # its own listing waits for the interval
    assert src.has_pending_input()  # idleness asks: listed now, b is pending
    batch = src.next_batch()
    assert isinstance(batch, Batch) and [os.path.basename(p) for p in batch._df] == ["b.jsonl"]
