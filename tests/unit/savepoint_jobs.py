"""The page_views job graph and a checkpoint of it taken without a cluster, shared by the savepoint
and retained-checkpoint tests."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice import graph
from sluice.api import FileSink, StreamExecutionEnvironment
from sluice.api import environment as env_module
from sluice.checkpoints.storage import CheckpointStorage
from sluice.key_groups import KEY_GROUP


@pytest.fixture(autouse=True)
def no_run_context():
    saved = dict(env_module._context)
    env_module._context.clear()
    yield
    env_module._context.update(saved)


def page_views(parallelism=2, uids=True, extra_map=False):
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism)
    events = env.from_collection([{"url": "/a", "n": 1}])
    if extra_map:  # a new operator before the others: default ids shift, uids do not
        events = events.select("url", "n")
    counts = events.key_by("url").count()
    sink = counts.sink_to(FileSink("/tmp/never-written", columns=("url", "count")))
    if uids:
        counts.uid("counts")
        sink.uid("counts-sink")
    return env.get_job_graph("pv")


def take_checkpoint(tmp_path, job):
    """A completed checkpoint of `job` as tasks would leave it: keyed files and `_metadata`."""
    storage = CheckpointStorage(str(tmp_path / "chk"), "job-1")
    chains = graph.build_chains(job)
    tasks: dict[str, dict[str, dict[str, dict]]] = {}
    for chain in chains:
        for s in range(chain.parallelism):
            handle: dict[str, dict] = {"operators": {}, "keyed": {}}
            for op_id in chain.operator_ids:
                kind = graph.kind_of(next(o for o in job.operators if o.id == op_id))
                if kind == graph.OperatorKind.AGGREGATE:
                    table = pa.table({KEY_GROUP: pa.array([64 * s, 64 * s + 40], pa.int32()), "k": [f"k{s}", f"K{s}"]})
                    lo, hi = (0, 63) if s == 0 else (64, 127)
                    handle["keyed"][op_id] = storage.write_keyed_state(7, op_id, s, table, (lo, hi))
                if kind == graph.OperatorKind.SINK_FILE:
                    handle["operators"][op_id] = {"pending": []}
                if kind == graph.OperatorKind.SOURCE_COLLECTION:
                    handle["operators"][op_id] = {"offset": 1}
            tasks.setdefault(chain.id, {})[str(s)] = handle
    meta = {"job_id": "job-1", "checkpoint_id": 7, "final": False, "timestamp_ms": 1, "attempt": 0, "tasks": tasks}
    return storage, meta, chains
