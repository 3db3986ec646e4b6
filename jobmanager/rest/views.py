"""Proto -> JSON shaping of the REST API (docs/monitoring.md), in the shapes of Apache Flink's
REST API where Flink has one. Pure: protos and a clock reading in, plain dicts out; no I/O, no
dispatcher, no gRPC (tests/unit/test_architecture.py keeps it that way).

A vertex is a chain (`sluice.graph.build_chains`), named by its head operator's id, which is
also `TaskStatus.chain_id`. Time shares of a task are in ms per second (0..1000); Flink's
backpressure ratios are those over 1000. Values a view cannot name (an enum value from a newer
JobManager) show as "UNKNOWN" rather than failing the request.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from sluice import graph
from sluice.metrics import counters
from sluice.states import CheckpointStatus, ExecutionState, JobStatus, SavepointStatus, from_proto
from sluice.v1 import common_pb2, jobmanager_pb2

S = TypeVar("S", bound=enum.StrEnum)

# Flink's thresholds on the share of time a subtask is back-pressured (BackPressureStatsTracker).
BACKPRESSURE_OK_MAX = 0.10
BACKPRESSURE_LOW_MAX = 0.5

TERMINAL_EXECUTION = ("FINISHED", "CANCELED", "FAILED")


def state_name(cls: type[S], value: int) -> str:
    """The member name of a proto enum value, "UNKNOWN" for a value this process cannot name."""
    try:
        return str(from_proto(cls, value))
    except ValueError:
        return "UNKNOWN"


def backpressure_level(ratio: float) -> str:
    """Flink's level for a back-pressured time share 0..1: ok (<= 0.10), low (<= 0.5), high."""
    if ratio <= BACKPRESSURE_OK_MAX:
        return "ok"
    if ratio <= BACKPRESSURE_LOW_MAX:
        return "low"
    return "high"


def _ratio(ms_per_second: float) -> float:
    return round(min(max(ms_per_second / 1000.0, 0.0), 1.0), 4)


def _duration(start_ms: int, end_ms: int, now_ms: int) -> int:
    if not start_ms:
        return -1
    return max(0, (end_ms or now_ms) - start_ms)


def task_counts(tasks: Iterable[common_pb2.TaskStatus]) -> dict[str, int]:
    """Flink's `tasks` object: how many subtasks are in each state (lower-case names), and `total`."""
    counts = {s.lower(): 0 for s in ExecutionState}
    total = 0
    for t in tasks:
        name = state_name(ExecutionState, t.state).lower()
        counts[name] = counts.get(name, 0) + 1
        total += 1
    return {"total": total, **counts}


def vertex_status(states: Iterable[str]) -> str:
    """A vertex's status from its subtasks' states, as Flink aggregates them: all alike is that
    state; else a failure, then winding down, then running (some may have finished)."""
    seen = set(states)
    if not seen:
        return "CREATED"
    if len(seen) == 1:
        return next(iter(seen))
    _E = ExecutionState
    for state in (_E.FAILED, _E.CANCELING, _E.CANCELED, _E.RUNNING, _E.FINISHED, _E.DEPLOYING):
        if state in seen:
            return str(_E.RUNNING if state == _E.FINISHED else state)
    return "CREATED"


# -- cluster ------------------------------------------------------------------------------------
def overview(
    cluster: jobmanager_pb2.ClusterOverview, jobs: Iterable[common_pb2.JobInfo], version: str
) -> dict[str, Any]:
    """GET /overview."""
    by_state: dict[str, int] = {}
    for job in jobs:
        name = state_name(JobStatus, job.state)
        by_state[name] = by_state.get(name, 0) + 1
    running = sum(by_state.get(s, 0) for s in ("CREATED", "RUNNING", "RESTARTING"))
    return {
        "taskmanagers": len(cluster.taskmanagers),
        "slots-total": cluster.total_slots,
        "slots-available": cluster.free_slots,
        "jobs-running": running,
        "jobs-finished": by_state.get("FINISHED", 0),
        "jobs-cancelled": by_state.get("CANCELED", 0),
        "jobs-failed": by_state.get("FAILED", 0),
        "sluice-version": version,
        "leader": cluster.leader,
    }


def taskmanagers(cluster: jobmanager_pb2.ClusterOverview, now_ms: int) -> dict[str, Any]:
    """GET /taskmanagers: Flink's list, with the gRPC address as `path`."""
    return {
        "taskmanagers": [
            {
                "id": tm.resource_id,
                "path": tm.address,
                "address": tm.address,
                "slotsNumber": tm.slots,
                "freeSlots": tm.free_slots,
                "timeSinceLastHeartbeat": int(tm.seconds_since_heartbeat * 1000),
                "lastHeartbeat": now_ms - int(tm.seconds_since_heartbeat * 1000),
            }
            for tm in cluster.taskmanagers
        ]
    }


def taskmanager_ids(cluster: jobmanager_pb2.ClusterOverview) -> dict[str, str]:
    """address -> resource id of the TaskManagers the leader knows."""
    return {tm.address: tm.resource_id for tm in cluster.taskmanagers}


# -- jobs ---------------------------------------------------------------------------------------
def job_summary(job: common_pb2.JobInfo, now_ms: int) -> dict[str, Any]:
    """One entry of GET /jobs/overview."""
    return {
        "jid": job.job_id,
        "name": job.name,
        "state": state_name(JobStatus, job.state),
        "start-time": job.submitted_ms or -1,
        "end-time": job.ended_ms or -1,
        "duration": _duration(job.submitted_ms, job.ended_ms, now_ms),
        "last-modification": job.ended_ms or now_ms,
        "tasks": task_counts(job.tasks),
        "restarts": job.restarts,
        "failure": job.failure or None,
    }


def jobs_overview(jobs: Iterable[common_pb2.JobInfo], now_ms: int) -> dict[str, Any]:
    """GET /jobs/overview: newest first, as Flink's dashboard lists them."""
    entries = [job_summary(j, now_ms) for j in jobs]
    entries.sort(key=lambda e: (e["start-time"], e["jid"]), reverse=True)
    return {"jobs": entries}


class Vertex:
    """A chain of a job: from its graph when the leader has it, else from its tasks."""

    def __init__(self, vid: str, name: str, parallelism: int, operators: list[dict[str, Any]]) -> None:
        self.id, self.name, self.parallelism, self.operators = vid, name, parallelism, operators
        self.tasks: list[common_pb2.TaskStatus] = []


def vertices(info: common_pb2.JobInfo, job_graph: common_pb2.JobGraph | None) -> list[Vertex]:
    """The job's vertices in topological order (sources first), each with its current tasks."""
    out: dict[str, Vertex] = {}
    if job_graph is not None and job_graph.operators:
        ops = {op.id: op for op in job_graph.operators}
        for chain in graph.build_chains(job_graph):
            operators = [
                {"id": op_id, "name": ops[op_id].name, "kind": graph.kind_of(ops[op_id]).name}
                for op_id in chain.operator_ids
            ]
            out[chain.id] = Vertex(chain.id, chain.name, chain.parallelism, operators)
    for task in info.tasks:
        vertex = out.get(task.chain_id)
        if vertex is None:  # no graph (a job ended under an earlier leader) or a task of a retired chain
            vertex = out[task.chain_id] = Vertex(task.chain_id, task.operator, 0, [])
        vertex.tasks.append(task)
    for vertex in out.values():
        vertex.tasks.sort(key=lambda t: t.subtask)
        vertex.parallelism = vertex.parallelism or len(vertex.tasks)
    return list(out.values())


def vertex_metrics(tasks: list[common_pb2.TaskStatus]) -> dict[str, Any]:
    """A vertex's metrics: sums of its subtasks' counters (those sluice/metrics/counters.py sums
    per vertex) and rates, the maximum of their time shares."""
    io = [t.io for t in tasks]
    backpressured = max((i.backpressured_ms_per_second for i in io), default=0.0)
    return {
        **counters.vertex_sums([t.counters for t in tasks]),
        "read-bytes": sum(i.bytes_in for i in io),
        "write-bytes": sum(i.bytes_out for i in io),
        "read-records-per-second": round(sum(i.records_in_per_second for i in io), 3),
        "write-records-per-second": round(sum(i.records_out_per_second for i in io), 3),
        "read-bytes-per-second": round(sum(i.bytes_in_per_second for i in io), 3),
        "write-bytes-per-second": round(sum(i.bytes_out_per_second for i in io), 3),
        "busy-ms-per-second-max": round(max((i.busy_ms_per_second for i in io), default=0.0), 3),
        "idle-ms-per-second-max": round(max((i.idle_ms_per_second for i in io), default=0.0), 3),
        "backpressured-ms-per-second-max": round(backpressured, 3),
        "backpressure-level": backpressure_level(_ratio(backpressured)),
    }


def plan(info: common_pb2.JobInfo, job_graph: common_pb2.JobGraph | None) -> dict[str, Any]:
    """Flink's `plan`: one node per vertex with its inputs (ship strategy = partitioning), and the
    same edges as a flat list."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    if job_graph is not None and job_graph.operators:
        chains = graph.build_chains(job_graph)
        owner = graph.chain_of(chains)
        for chain in chains:
            inputs = []
            for num, e in enumerate(chain.inputs):
                source = owner[e.source].id
                partitioning = graph.partitioning_of(e).name
                inputs.append(
                    {
                        "num": num,
                        "id": source,
                        "ship_strategy": partitioning,
                        "keys": list(e.keys),
                        "side-output": e.output_tag or None,
                        "exchange": "pipelined_bounded",
                    }
                )
                edges.append(
                    {
                        "source": source,
                        "target": chain.id,
                        "partitioning": partitioning,
                        "keys": list(e.keys),
                        "side-output": e.output_tag or None,
                    }
                )
            nodes.append(
                {
                    "id": chain.id,
                    "parallelism": chain.parallelism,
                    "operator": "",
                    "operator_strategy": "",
                    "description": chain.name,
                    "operators": list(chain.operator_ids),
                    "inputs": inputs,
                }
            )
    else:
        for v in vertices(info, None):
            nodes.append({"id": v.id, "parallelism": v.parallelism, "description": v.name, "inputs": []})
    return {"jid": info.job_id, "name": info.name, "type": "STREAMING", "nodes": nodes, "edges": edges}


def job_detail(info: common_pb2.JobInfo, job_graph: common_pb2.JobGraph | None, now_ms: int) -> dict[str, Any]:
    """GET /jobs/{id}."""
    state = state_name(JobStatus, info.state)
    out_vertices = []
    for v in vertices(info, job_graph):
        out_vertices.append(
            {
                "id": v.id,
                "name": v.name,
                "parallelism": v.parallelism,
                "maxParallelism": job_graph.max_parallelism if job_graph is not None else -1,
                "status": vertex_status(state_name(ExecutionState, t.state) for t in v.tasks),
                "tasks": task_counts(v.tasks),
                "operators": v.operators,
                "metrics": vertex_metrics(v.tasks),
            }
        )
    return {
        "jid": info.job_id,
        "name": info.name,
        "isStoppable": state == JobStatus.RUNNING,
        "state": state,
        "start-time": info.submitted_ms or -1,
        "end-time": info.ended_ms or -1,
        "duration": _duration(info.submitted_ms, info.ended_ms, now_ms),
        "now": now_ms,
        "restarts": info.restarts,
        "message": info.message or None,
        "failure": info.failure or None,
        "leader": info.leader,
        "slots-required": info.slots_required,
        "vertices": out_vertices,
        "status-counts": task_counts(info.tasks),
        "plan": plan(info, job_graph),
        "metrics": {
            "numRestarts": info.metrics.num_restarts,
            "uptime": info.metrics.uptime_ms,
            "numberOfCompletedCheckpoints": info.metrics.number_of_completed_checkpoints,
            "numberOfFailedCheckpoints": info.metrics.number_of_failed_checkpoints,
            "lastCheckpointDuration": info.metrics.last_checkpoint_duration_ms,
            "lastCheckpointSize": info.metrics.last_checkpoint_size_bytes,
            "numRecordsDropped": info.records_dropped,
            "numLateRecordsDropped": info.records_late_dropped,
        },
    }


# -- checkpoints --------------------------------------------------------------------------------
def _checkpoint(c: common_pb2.CheckpointStats, savepoint_ids: set[int]) -> dict[str, Any]:
    status = state_name(CheckpointStatus, c.status)
    return {
        "className": "completed"
        if status == CheckpointStatus.COMPLETED
        else "failed"
        if status == CheckpointStatus.FAILED
        else "pending",
        "id": c.checkpoint_id,
        "status": status,
        "is_savepoint": c.checkpoint_id in savepoint_ids,
        "trigger_timestamp": c.trigger_ms,
        "latest_ack_timestamp": c.trigger_ms + c.duration_ms if c.duration_ms else -1,
        "end_to_end_duration": c.duration_ms,
        "state_size": c.full_size_bytes or c.size_bytes,  # the whole state; checkpointed: what it wrote
        "checkpointed_size": c.size_bytes,
        "num_subtasks": c.expected,
        "num_acknowledged_subtasks": c.acks,
        "failure_message": c.failure or None,
    }


def checkpoints(info: common_pb2.JobInfo) -> dict[str, Any]:
    """GET /jobs/{id}/checkpoints: counts, latest and history (newest first, as Flink's)."""
    savepoint_ids = {s.checkpoint_id for s in info.savepoints if s.checkpoint_id}
    history = [_checkpoint(c, savepoint_ids) for c in info.checkpoints]
    history.reverse()
    completed = [h for h in history if h["status"] == CheckpointStatus.COMPLETED]
    failed = [h for h in history if h["status"] == CheckpointStatus.FAILED]
    in_progress = [h for h in history if h["className"] == "pending"]
    durations = [h["end_to_end_duration"] for h in completed]
    sizes = [h["state_size"] for h in completed]
    restored = None
    if info.HasField("restored_checkpoint"):
        restored = {
            "id": info.restored_checkpoint,
            "is_savepoint": bool(info.restored_savepoint),
            "external_path": info.restored_savepoint or None,
        }
    return {
        "counts": {
            "restored": 1 if restored else 0,
            "total": max(
                len(history),
                info.metrics.number_of_completed_checkpoints + info.metrics.number_of_failed_checkpoints,
            ),
            "in_progress": len(in_progress),
            "completed": max(len(completed), info.metrics.number_of_completed_checkpoints),
            "failed": max(len(failed), info.metrics.number_of_failed_checkpoints),
        },
        "summary": {
            "end_to_end_duration": _stats(durations),
            "state_size": _stats(sizes),
        },
        "latest": {
            "completed": completed[0] if completed else None,
            "savepoint": next((h for h in completed if h["is_savepoint"]), None),
            "failed": failed[0] if failed else None,
            "restored": restored,
        },
        "history": history,
    }


def _stats(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"min": 0, "max": 0, "avg": 0}
    return {"min": min(values), "max": max(values), "avg": sum(values) // len(values)}


# -- exceptions ---------------------------------------------------------------------------------
def exceptions(info: common_pb2.JobInfo) -> dict[str, Any]:
    """GET /jobs/{id}/exceptions: the root exception (the latest) and the history, newest first."""
    entries = [
        {
            "exceptionName": e.cause.split(":", 1)[0] if e.cause else "",
            "cause": e.cause,
            "stacktrace": e.traceback,
            "timestamp": e.time_ms,
            "taskName": e.task or None,
            "attempt": e.attempt,
            "restarted": e.restarted,
        }
        for e in reversed(info.exceptions)
    ]
    root = entries[0] if entries else None
    return {
        "root-exception": (root["stacktrace"] or root["cause"]) if root else (info.failure or None),
        "timestamp": root["timestamp"] if root else None,
        "all-exceptions": [],
        "truncated": False,
        "exceptionHistory": {"entries": entries, "truncated": False},
    }


# -- one vertex ---------------------------------------------------------------------------------
def find_vertex(info: common_pb2.JobInfo, job_graph: common_pb2.JobGraph | None, vertex_id: str) -> Vertex | None:
    return next((v for v in vertices(info, job_graph) if v.id == vertex_id), None)


def subtask(t: common_pb2.TaskStatus, tm_ids: Mapping[str, str]) -> dict[str, Any]:
    io = t.io
    return {
        "subtask": t.subtask,
        "status": state_name(ExecutionState, t.state),
        "attempt": t.attempt,
        "endpoint": t.taskmanager or None,
        "taskmanager-id": tm_ids.get(t.taskmanager) if t.taskmanager else None,
        "error": t.error or None,
        "metrics": {
            **counters.rest_metrics(t.counters),  # every TaskCounters field (sluice/metrics/counters.py)
            "read-bytes": io.bytes_in,
            "write-bytes": io.bytes_out,
            "read-records-per-second": round(io.records_in_per_second, 3),
            "write-records-per-second": round(io.records_out_per_second, 3),
            "read-bytes-per-second": round(io.bytes_in_per_second, 3),
            "write-bytes-per-second": round(io.bytes_out_per_second, 3),
            "busy-ms-per-second": round(io.busy_ms_per_second, 3),
            "idle-ms-per-second": round(io.idle_ms_per_second, 3),
            "backpressured-ms-per-second": round(io.backpressured_ms_per_second, 3),
            "input-queue-usage": round(io.input_queue_usage, 4),
            "output-queue-usage": round(io.output_queue_usage, 4),
            "watermark": t.watermark if t.HasField("watermark") else None,
            "checkpoint": {
                "id": io.checkpoint_id,
                "alignment-ms": io.checkpoint_alignment_ms,
                "sync-ms": io.checkpoint_sync_ms,
                "async-ms": io.checkpoint_async_ms,
            },
        },
    }


def vertex_detail(
    info: common_pb2.JobInfo, vertex: Vertex, max_parallelism: int, tm_ids: Mapping[str, str], now_ms: int
) -> dict[str, Any]:
    """GET /jobs/{id}/vertices/{vertex_id}."""
    return {
        "id": vertex.id,
        "name": vertex.name,
        "jid": info.job_id,
        "parallelism": vertex.parallelism,
        "maxParallelism": max_parallelism,
        "now": now_ms,
        "status": vertex_status(state_name(ExecutionState, t.state) for t in vertex.tasks),
        "operators": vertex.operators,
        "metrics": vertex_metrics(vertex.tasks),
        "subtasks": [subtask(t, tm_ids) for t in vertex.tasks],
    }


def backpressure(vertex: Vertex, now_ms: int) -> dict[str, Any]:
    """GET /jobs/{id}/vertices/{vertex_id}/backpressure, in Flink's shape (from the tasks' time
    shares, which they measure continuously: the status is always `ok`, never `deprecated`)."""
    subtasks: list[dict[str, Any]] = []
    worst = 0.0
    for t in vertex.tasks:
        if state_name(ExecutionState, t.state) in TERMINAL_EXECUTION:
            continue
        ratio = _ratio(t.io.backpressured_ms_per_second)
        worst = max(worst, ratio)
        subtasks.append(
            {
                "subtask": t.subtask,
                "attemptNumber": t.attempt,
                "backpressureLevel": backpressure_level(ratio),
                "ratio": ratio,
                "idleRatio": _ratio(t.io.idle_ms_per_second),
                "busyRatio": _ratio(t.io.busy_ms_per_second),
            }
        )
    return {
        "status": "ok",
        "backpressureLevel": backpressure_level(worst),
        "end-timestamp": now_ms,
        "subtasks": subtasks,
    }


# -- savepoints ---------------------------------------------------------------------------------
def savepoint_status(info: common_pb2.JobInfo, request_id: str) -> dict[str, Any] | None:
    """GET /jobs/{id}/savepoints/{request_id} in Flink's asynchronous-operation shape; None when
    the job has no such request."""
    for s in info.savepoints:
        if s.request_id != request_id:
            continue
        status = state_name(SavepointStatus, s.status)
        out: dict[str, Any] = {
            "status": {"id": "IN_PROGRESS" if status == SavepointStatus.IN_PROGRESS else "COMPLETED"},
            "savepoint-status": status,
            "stop": s.stop,
            "checkpoint-id": s.checkpoint_id or None,
            "trigger-timestamp": s.trigger_ms,
            "duration": s.duration_ms,
        }
        if status == SavepointStatus.COMPLETED:
            out["operation"] = {"location": s.path}
        elif status == SavepointStatus.FAILED:
            out["operation"] = {"failure-cause": {"class": "SavepointFailed", "stack-trace": s.failure}}
        return out
    return None
