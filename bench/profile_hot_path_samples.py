"""The py-spy samples of bench/profile_hot_path.py sorted into buckets: `parse_raw` reads a `py-spy
record --format raw` file, `classify` turns its sample counts into seconds per bucket (task threads by
the frames on their stack, data-exchange and checkpoint-upload threads, every other thread) and per leaf
frame. Pure.
"""

from __future__ import annotations

import collections
import re


# -- buckets: (name, test on the frames' function names, root first); the first match wins --------
# A test gets the stack's frames, root first, as (function, file) pairs.
def _has(*names):
    return lambda fs: any(f in names for f, _file in fs)


def _under(parent, child):  # `child` called directly from `parent`
    return lambda fs: any(a[0] == parent and b[0] == child for a, b in zip(fs, fs[1:], strict=False))


def _all(*tests):
    return lambda fs: all(t(fs) for t in tests)


SPLIT, TO_ARROW = _has("RecordWriter._split_by_key"), _has("DataFrame.toArrow")
TASK_BUCKETS = [
    ("checkpoint snapshot copy + barrier (Checkpointer.snapshot)", _has("Checkpointer.snapshot")),
    ("sink commit: rename (FileSinkWriter.notify_complete)", _has("FileSinkWriter.notify_complete")),
    ("sink CSV write (FileSinkWriter.process)", _has("FileSinkWriter.process")),
    ("Spark: spark.read.json plan, py4j (FileSource.next_batch)", _has("FileSource.next_batch")),
    (
        "Spark: toArrow, JVM job until the first Arrow batch (open_stream)",
        _all(SPLIT, _has("RecordBatchStreamReader.__init__")),
    ),
    (
        "Spark: toArrow, reading the Arrow stream (ArrowStreamSerializer.load_stream)",
        _all(SPLIT, _has("ArrowStreamSerializer.load_stream")),
    ),
    ("Spark: toArrow, py4j round trips (_collect_as_arrow)", _all(SPLIT, TO_ARROW)),
    ("Arrow combiner: group_by (keyed_aggregate.combine)", _all(SPLIT, _has("combine"))),
    (
        "Spark: projection plan, py4j (select/xxhash64 in _split_by_key)",
        _all(SPLIT, lambda fs: any(file.startswith(("pyspark/", "py4j/")) for _f, file in fs)),
    ),
    ("key-group split: Arrow filter (RecordWriter._split_by_key)", SPLIT),
    ("enqueue / backpressure (ResultSubpartition.add)", _has("ResultSubpartition.add")),
    (
        "state merge: Arrow group_by (KeyedAggregate.process)",
        _all(_has("KeyedAggregate.process"), _has("_group_by", "TableGroupBy.aggregate")),
    ),
    ("state merge: Python fold into the dict (KeyedAggregate.process)", _has("KeyedAggregate.process")),
    ("input concat (pa.concat_tables in Task._run_inputs)", _has("concat_tables")),
    ("idle: input gate wait (InputGate.poll_all)", _has("InputGate.poll_all")),
    ("idle: end of input, waiting for the final checkpoint (Task._run)", _under("Task._run", "Checkpointer.drain")),
    ("control messages (Checkpointer.drain)", _has("Checkpointer.drain")),
    ("task setup (Task._setup)", _has("Task._setup")),
    ("end of input (Task._end_input)", _has("Task._end_input")),
    ("other (task thread)", lambda fs: True),
]
EXCHANGE_BUCKETS = [
    ("checkpoint upload (Checkpointer._upload, snapshot-upload thread)", _has("Checkpointer._upload")),
    ("send: Arrow IPC encode (table_to_ipc in DataExchangeServicer.Subscribe)", _has("table_to_ipc")),
    (
        "send: idle, waiting for a batch (ResultSubpartition.poll in Subscribe)",
        _all(_has("DataExchangeServicer.Subscribe"), _has("ResultSubpartition.poll")),
    ),
    ("send: waiting for credit (_Credit.take)", _has("_Credit.take")),
    ("send: gRPC write (_stream_response_in_pool)", _has("DataExchangeServicer.Subscribe", "_stream_response_in_pool")),
    ("receive: Arrow IPC decode (ipc_to_table in RemoteInputChannel.run)", _has("ipc_to_table")),
    ("receive: idle, waiting for a message (RemoteInputChannel.run)", _has("RemoteInputChannel.run")),
    (
        "local channel: idle wait (LocalInputChannel.run)",
        _all(
            _has("LocalInputChannel.run"), _has("ResultSubpartition.poll", "Semaphore.acquire", "PartitionManager.get")
        ),
    ),
    ("local channel: move to the gate (LocalInputChannel.run)", _has("LocalInputChannel.run")),
    (
        "gRPC plumbing: credit reader, channel spin, request iterator (idle)",
        _has(
            "read_credits",
            "_run_channel_spin_thread.<locals>.channel_spin",
            "_consume_request_iterator.<locals>.consume_request_iterator",
        ),
    ),
]
FRAME = re.compile(r"^(.*) \(([^()]*?)(?::(\d+))?\)$")


def parse_raw(path: str):
    """py-spy raw lines `thread (TID): NAME;frame;...;leaf COUNT` -> [(thread name, [(func, file)], count)]."""
    rows = []
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            parts = stack.split(";")
            name = parts[0].partition("): ")[2] if parts[0].startswith("thread (") else ""
            frames = [(m.group(1), m.group(2)) if (m := FRAME.match(p)) else (p, "") for p in parts[1:]]
            rows.append((name, frames, int(count)))
    return rows


def classify(files: list[tuple[str, float]]) -> dict:
    """Seconds per bucket over all TaskManagers; files = [(raw file, sampling window s)]."""
    task: collections.defaultdict[str, float] = collections.defaultdict(float)
    exch: collections.defaultdict[str, float] = collections.defaultdict(float)
    other = source = rate_sum = 0.0
    leaves: collections.defaultdict[tuple[str, str], float] = collections.defaultdict(float)
    for path, window in files:
        rows = parse_raw(path)
        rounds = sum(n for name, _fr, n in rows if name == "MainThread") or 1
        per, rate_sum = window / rounds, rate_sum + rounds / window
        for _name, fs, n in rows:
            if ("Task._run", "taskmanager/task.py") in fs:
                task[next(b for b, test in TASK_BUCKETS if test(fs))] += n * per
                source += n * per if ("Task._run_source", "taskmanager/task.py") in fs else 0
                via = next((f"{f} ({file})" for f, file in reversed(fs) if file.startswith("taskmanager/")), "")
                leaf = f"{fs[-1][0]} ({fs[-1][1]})" + (f" ← {fs[-2][0]}" if len(fs) > 1 else "")
                leaves[(leaf, via)] += n * per
            elif (b := next((b for b, test in EXCHANGE_BUCKETS if test(fs)), None)) is not None:
                exch[b] += n * per
            else:
                other += n * per
    return {
        "task": task,
        "exchange": exch,
        "other": other,
        "source": source,
        "leaves": leaves,
        "rate": rate_sum / max(1, len(files)),
    }
