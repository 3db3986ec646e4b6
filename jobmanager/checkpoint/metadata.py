"""The `_metadata` of a completed checkpoint, as the JobManager writes and reads it.

Pure functions (no I/O; jobmanager/job_master.py writes and reads the file
through sluice/checkpoints/storage.py; docs/checkpoints.md has the protocol):

    {"job_id": ..., "checkpoint_id": n, "final": bool, "timestamp_ms": ..., "attempt": a,
     "tasks": {<chain id>: {"<subtask>": <state handle of that execution>}},
     "operator_kinds": {<operator id>: <kind>}, "max_parallelism": m}

A state handle is the JSON a task acknowledged with: its operators' state
("operators") and its keyed state handles by operator ("keyed"). A restored
subtask gets its own operator state and the keyed handles of every subtask
of its chain, by operator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sluice.checkpoints import savepoint
from sluice.checkpoints.storage import CheckpointCorrupt
from sluice.graph import DEFAULT_MAX_PARALLELISM, Chain, kind_of
from sluice.v1 import common_pb2


def build(
    job_id: str,
    checkpoint_id: int,
    final: bool,
    timestamp_ms: int,
    attempt: int,
    handles: Mapping[str, object],
    task_of: Callable[[str], tuple[str, int]],
    job: common_pb2.JobGraph | None = None,
) -> dict[str, Any]:
    """The metadata of a checkpoint from its handles by execution id; `task_of` maps an
    execution id to its (chain id, subtask). With `job`, also its operators' kinds and max
    parallelism: what a new job resumed from this checkpoint checks its own against
    (sluice/checkpoints/retained.py)."""
    tasks: dict[str, dict[str, object]] = {}
    for eid, handle in handles.items():
        chain_id, subtask = task_of(eid)
        tasks.setdefault(chain_id, {})[str(subtask)] = handle
    out: dict[str, Any] = {
        "job_id": job_id,
        "checkpoint_id": checkpoint_id,
        "final": final,
        "timestamp_ms": timestamp_ms,
        "attempt": attempt,
        "tasks": tasks,
    }
    if job is not None:
        out["operator_kinds"] = {op.id: str(kind_of(op)) for op in job.operators}
        out["max_parallelism"] = job.max_parallelism or DEFAULT_MAX_PARALLELISM
    return out


def restore_states(
    metadata: dict[str, Any], chains: Iterable[Chain], where: str, job: common_pb2.JobGraph | None = None
) -> dict[tuple[str, int], bytes]:
    """The restore state of every (chain id, subtask); CheckpointCorrupt naming `where`
    (the metadata's path) when a task's state is incomplete. A checkpoint taken before a
    live reconfiguration changed a task's parallelism (its tasks ran at others than
    `chains`) is mapped by operator instead (sluice/checkpoints/savepoint.py, `map_states`)."""
    out = {}
    tasks = metadata["tasks"]
    chains = list(chains)
    if job is not None and any(c.id in tasks and len(tasks[c.id]) != c.parallelism for c in chains):
        try:
            return savepoint.map_states(savepoint.by_operator(metadata, job), where, job, chains)
        except savepoint.SavepointError as exc:
            raise CheckpointCorrupt(str(exc)) from None
    for chain in chains:
        by_subtask = tasks.get(chain.id)
        if by_subtask is None or len(by_subtask) != chain.parallelism:
            raise CheckpointCorrupt(
                f"checkpoint {metadata['checkpoint_id']} has no complete state for task {chain.name!r} in {where}"
            )
        keyed: dict[str, list[Any]] = {}
        for handle in by_subtask.values():
            for op_id, h in handle.get("keyed", {}).items():
                keyed.setdefault(op_id, []).append(h)
        for s in range(chain.parallelism):
            out[(chain.id, s)] = json.dumps(
                {"operators": by_subtask[str(s)].get("operators", {}), "keyed": keyed}
            ).encode()
    return out
