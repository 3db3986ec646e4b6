"""The event-time job API and its checks at submit: what a user writes, the job graph it
builds, and a clear error naming the fix for each bad definition. Also the producer side:
a writer that observes the event time drops null timestamps and keeps the largest one,
and processing-time windows fire on the task's clock."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sluice import graph
from sluice.api import (
    EventTimeSessionWindows,
    FileSink,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
)
from sluice.graph import JobValidationError, OperatorKind, Partitioning
from sluice.key_groups import KEY_GROUP
from taskmanager.network.partition import ResultPartition
from taskmanager.network.record_writer import RecordWriter
from taskmanager.operators.base import OperatorContext
from taskmanager.operators.window import WindowOperator
from taskmanager.spark_engine import Batch

SCHEMA = "url string, user long, ts long"
STRATEGY = WatermarkStrategy.for_bounded_out_of_orderness(2000).with_timestamp_column("ts")


def events(env=None, schema=SCHEMA):
    env = env or StreamExecutionEnvironment()
    return env, env.from_collection([{"url": "/a", "user": 1, "ts": 5}]).select(
        *[f.split()[0] for f in schema.split(", ")]
    )


def job_of(env):
    job = env.get_job_graph("t")
    graph.validate(job, check_paths=False)
    return job


def test_a_windowed_job_builds_a_timestamps_and_a_window_operator_after_key_by():
    env, stream = events()
    counts = (
        stream.assign_timestamps_and_watermarks(STRATEGY)
        .key_by("url")
        .window(SlidingEventTimeWindows.of(60_000, 10_000))
    )
    out = counts.allowed_lateness(500).count()
    out.sink_to(FileSink("/tmp/out", columns=("url", "window_start", "window_end", "count")))
    assert out.schema.names == ["url", "window_start", "window_end", "count"]
    job = job_of(env)
    kinds = {op.id: graph.kind_of(op) for op in job.operators}
    window = next(op for op in job.operators if kinds[op.id] == OperatorKind.WINDOW)
    config = json.loads(window.config)
    assert config["window"] == {"kind": "sliding", "size_ms": 60_000, "slide_ms": 10_000, "offset_ms": 0}
    assert (config["timestamp_column"], config["allowed_lateness_ms"], config["keys"]) == ("ts", 500, ["url"])
    into = next(e for e in job.edges if e.target == window.id)
    assert graph.partitioning_of(into) == Partitioning.HASH and list(into.keys) == ["url"]
    ts = next(op for op in job.operators if kinds[op.id] == OperatorKind.TIMESTAMPS)
    assert json.loads(ts.config)["strategy"]["out_of_orderness_ms"] == 2000


def test_the_late_side_output_is_a_tagged_edge_with_the_input_rows():
    env, stream = events()
    windowed = stream.assign_timestamps_and_watermarks(STRATEGY).key_by("url").window(TumblingEventTimeWindows.of(10))
    late = windowed.side_output_late_data()
    windowed.sum("user").sink_to(FileSink("/tmp/out"))
    assert late.schema.names == ["url", "user", "ts"]
    late.sink_to(FileSink("/tmp/late", columns=("url", "ts")))
    job = job_of(env)
    tagged = [e for e in job.edges if e.output_tag]
    assert [e.output_tag for e in tagged] == [graph.LATE_OUTPUT]
    chains = graph.build_chains(job)
    assert all(len(c.operator_ids) == 1 or graph.LATE_OUTPUT not in [e.output_tag for e in c.outputs] for c in chains)


def test_apply_and_session_windows_are_plain_settings_but_the_function():
    env, stream = events()
    applied = (
        stream.assign_timestamps_and_watermarks(STRATEGY)
        .key_by("user")
        .window(EventTimeSessionWindows.with_gap(30_000))
        .apply(lambda key, start, end, rows: rows.head(1), output_schema="user bigint, window_start bigint")
    )
    applied.print()
    job = job_of(env)
    window = next(op for op in job.operators if graph.kind_of(op) == OperatorKind.WINDOW)
    assert set(window.code) == {"apply"} and json.loads(window.config)["window"]["kind"] == "session"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda s: s.key_by("url").window(TumblingEventTimeWindows.of(10)), "assign_timestamps_and_watermarks"),
        (lambda s: s.window(TumblingEventTimeWindows.of(10)), "key_by(col).window"),
        (lambda s: TumblingEventTimeWindows.of(0), "must be > 0 ms"),
        (lambda s: SlidingEventTimeWindows.of(10, 20), "larger than the window size"),
        (lambda s: s.assign_timestamps_and_watermarks(STRATEGY.with_timestamp_column("when")), "no column 'when'"),
        (lambda s: s.assign_timestamps_and_watermarks(STRATEGY.with_timestamp_column("url")), "url' is string"),
        (lambda s: s.assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps()), "no timestamp"),
        (lambda s: s.key_by("url").window("10s"), "takes a window assigner"),
        (lambda s: WatermarkStrategy.for_bounded_out_of_orderness(-1), ">= 0 ms"),
    ],
)
def test_bad_definitions_fail_when_the_job_is_built_saying_what_to_fix(build, message):
    _env, stream = events()
    with pytest.raises((TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        build(stream)


def test_the_jobmanager_rejects_a_window_graph_without_timestamps_or_aggregates():
    env, stream = events()
    windowed = stream.assign_timestamps_and_watermarks(STRATEGY).key_by("url").window(TumblingEventTimeWindows.of(10))
    windowed._out.print()  # neither aggregates nor apply
    with pytest.raises(JobValidationError, match="either aggregates"):
        job_of(env)

    env, stream = events()
    out = stream.assign_timestamps_and_watermarks(STRATEGY).key_by("url").window(TumblingEventTimeWindows.of(10))
    out.count().print()
    job = env.get_job_graph("t")
    window = next(op for op in job.operators if graph.kind_of(op) == OperatorKind.WINDOW)
    config = json.loads(window.config)
    config["timestamp_column"] = "missing"
    window.config = json.dumps(config)
    with pytest.raises(JobValidationError, match="no column 'missing'"):
        graph.validate(job, check_paths=False)
    config["timestamp_column"], config["window"]["size_ms"] = "ts", -5
    window.config = json.dumps(config)
    with pytest.raises(JobValidationError, match="window size must be > 0"):
        graph.validate(job, check_paths=False)


def test_a_writer_observing_event_time_drops_null_timestamps_and_keeps_the_largest():
    partition = ResultPartition("j/a/c/0-p", 1, 4)
    writer = RecordWriter(partition, Partitioning.FORWARD, [], 0, 128, None, lambda: False, timestamp_column="ts")
    writer.emit(Batch(None, table=pa.table({"url": ["a", "b", "c"], "ts": pa.array([7, None, 9], pa.int64())})))
    assert writer.null_keys_dropped == 1 and writer.take_max_timestamp() == 9
    assert writer.take_max_timestamp() is None  # taken once
    writer.watermark(8)
    kinds = [item and item[0] for item in (partition.subpartitions[0].poll(0) for _ in range(2))]
    assert kinds == ["batch", "watermark"]


def test_processing_time_windows_fire_on_the_tasks_clock(monkeypatch):
    clock = {"now": 1_000_005.0}
    import time as time_module

    monkeypatch.setattr(time_module, "time", lambda: clock["now"] / 1000)
    ctx = OperatorContext(name="w", subtask=0, parallelism=1, job_id="j", restore_checkpoint_id=0, checkpointing=True)
    payload = {
        "keys": ["url"],
        "window": TumblingProcessingTimeWindows.of(1000).to_config(),
        "timestamp_column": None,
        "aggs": {"count": ("count", "*")},
    }
    op = WindowOperator(payload, ctx)
    op.process(Batch(None, table=pa.table({"url": ["a", "a"], KEY_GROUP: pa.array([3, 3], pa.int32())})))
    assert op.on_watermark(10**15) is None  # event time does not drive it
    assert op.on_processing_time(1_000_900) is None
    fired = op.on_processing_time(1_001_000)
    assert fired is not None
    out = fired.table().to_pylist()
    assert out == [{"url": "a", "window_start": 1_000_000, "window_end": 1_001_000, "count": 2}]
