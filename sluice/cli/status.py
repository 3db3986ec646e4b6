"""`sluice status` and `sluice list`: a job's status as the `--json` object outside tools
read (`job_dict`; its keys never change) and as tables. A task's counters are shown
generically: every `TaskCounters` field (proto/sluice/v1/common.proto), named as
sluice/metrics/counters.py says."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sluice.cli import progress
from sluice.metrics import counters
from sluice.states import (
    CheckpointStatus,
    ExecutionState,
    JobStatus,
    ReconfigurationStatus,
    SavepointStatus,
    from_proto,
)
from sluice.units import format_bytes
from sluice.v1 import common_pb2


def job_dict(info: common_pb2.JobInfo) -> dict[str, Any]:
    """The `status --json` object (`list --json`: without tasks). The proto becomes a dict
    through json_format: fields by their proto names, every field present (an unset
    `optional` one is absent: null here), int64 as numbers, enums as numbers that become
    StrEnum names without prefix ("RUNNING"). Renamed keys and ISO times are mapped here."""
    d = json_format.MessageToDict(
        info,
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
        use_integers_for_enums=True,
        unquote_int64_if_possible=True,
    )
    return {
        "job_id": d["job_id"],
        "name": d["name"],
        "state": from_proto(JobStatus, d["state"]),
        "restarts": d["restarts"],
        "last_completed_checkpoint": d.get("last_completed_checkpoint"),
        "restored_checkpoint": d.get("restored_checkpoint"),
        "restored_savepoint": d["restored_savepoint"] or None,
        "savepoint": d["savepoint"] or None,
        "reconfigurations": [
            {
                "id": r["id"],
                "kind": r["kind"],
                "operator": r["operator"],
                **({"parallelism": r["parallelism"]} if r["kind"] == "parallelism" else {}),
                **(
                    {
                        "moved_key_groups": r["moved_key_groups"],
                        "from_subtask": r["from_subtask"],
                        "to_subtask": r["to_subtask"],
                    }
                    if r["kind"] == "rebalance-keys"
                    else {}
                ),
                "status": from_proto(ReconfigurationStatus, r["status"]),
                "affected": {"redeployed": r["redeployed"], "switched": r["switched"]},
                "checkpoint_id": r["checkpoint_id"] or None,
                "trigger": iso(r["trigger_ms"]),
                "pause_ms": r["pause_ms"],
                **({"failure": r["failure"]} if r["failure"] else {}),
            }
            for r in d["reconfigurations"]
        ],
        "savepoints": [
            {
                "id": r["request_id"],
                "status": from_proto(SavepointStatus, r["status"]),
                "stop": r["stop"],
                "checkpoint_id": r["checkpoint_id"] or None,
                "path": r["path"] or None,
                "trigger": iso(r["trigger_ms"]),
                "duration_ms": r["duration_ms"],
                **({"failure": r["failure"]} if r["failure"] else {}),
            }
            for r in d["savepoints"]
        ],
        "leader": d["leader"],
        "message": d["message"],
        "failure": d["failure"] or None,
        "submitted": iso(d["submitted_ms"]),
        "ended": iso(d["ended_ms"]) if d["ended_ms"] else None,
        "slots_required": d["slots_required"],
        "records_dropped": d["records_dropped"],
        "records_late_dropped": d["records_late_dropped"],
        "bad_record_samples": d["bad_record_samples"],
        "checkpoints": [
            {
                "id": c["checkpoint_id"],
                "status": from_proto(CheckpointStatus, c["status"]),
                "trigger": iso(c["trigger_ms"]),
                "duration_ms": c["duration_ms"],
                "size_bytes": c["size_bytes"],
                "acks": c["acks"],
                "expected": c["expected"],
                **({"failure": c["failure"]} if c["failure"] else {}),
            }
            for c in d["checkpoints"]
        ],
        "tasks": [
            {
                "operator": t["operator"],
                "subtask": t["subtask"],
                "state": from_proto(ExecutionState, t["state"]),
                "taskmanager": t["taskmanager"],
                **counters.values(task.counters),  # every TaskCounters field by its proto name
                "watermark": int(t["watermark"]) if t.get("watermark") is not None else None,
                **({"error": t["error"]} if t["error"] else {}),
                "chain_id": task.chain_id,
                "attempt": task.attempt,
                "execution_attempt": task.execution_attempt,  # +1 per region restart or backup attempt
                "speculative": task.speculative,
                "region": task.region,
                "io": progress.io_dict(task.io),  # rates, time shares (ms/s), queues, checkpoint timings
                "backpressure": progress.backpressure_level(task.io.backpressured_ms_per_second),
            }
            for t, task in zip(d["tasks"], info.tasks, strict=True)
        ],
        "exceptions": [
            {
                "time": iso(e["time_ms"]),
                "attempt": e["attempt"],
                "task": e["task"],
                "cause": e["cause"],
                "traceback": e["traceback"],
                "restarted": e["restarted"],
            }
            for e in d["exceptions"]
        ],
        "metrics": progress.metrics_dict(info.metrics),  # the job's counters (restarts, checkpoints, uptime)
    }


# what `list --json` leaves out of each job's `status --json` object (ListJobs returns summaries)
NOT_LISTED = ("tasks", "checkpoints", "exceptions", "savepoints", "reconfigurations")


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def print_status(console: Console, info: common_pb2.JobInfo, job: common_pb2.JobGraph | None, as_json: bool) -> None:
    """`sluice status`: the job's `status --json` object, or its tables (`job`: the job graph, to
    tell which tasks are sources, whose rows read are their records in)."""
    d = job_dict(info)
    if as_json:
        print(json.dumps(d, indent=2))
        return
    console.print(
        f"[bold]{d['name']}[/bold] {d['job_id']}  {styled(d['state'])}  restarts {d['restarts']}  leader {d['leader']}",
        highlight=False,
    )
    if d["message"]:
        console.print(f"  {d['message']}", highlight=False)
    restored = progress.restored_text(info)
    if restored:
        console.print(Text(f"  {restored}"), highlight=False)
    sources = progress.source_chains(job)
    shown = [c for c in counters.COUNTERS if c.column]  # the counters with a column, in field order
    t = Table(
        "operator",
        "subtask",
        "state",
        "taskmanager",
        *(c.column for c in shown),
        "watermark",
        "in/s",
        "out/s",
        "busy ms/s",
        "bp ms/s",
        "backpressure",
    )
    for task, pb in zip(d["tasks"], info.tasks, strict=True):
        t.add_row(
            task["operator"],
            str(task["subtask"]),
            styled(task["state"]),
            task["taskmanager"],
            # a source's records in: its rows read (progress.records_in_shown)
            *(str(progress.records_in_shown(pb, sources) if c.field == "records_in" else task[c.field]) for c in shown),
            "-" if task["watermark"] is None else str(task["watermark"]),
            *progress.task_io_cells(pb),
        )
    console.print(t)
    if d["records_dropped"]:
        console.print(
            f"numRecordsDropped {d['records_dropped']} (malformed, with a null key or timestamp)", highlight=False
        )
    if d["records_late_dropped"]:
        console.print(
            f"numLateRecordsDropped {d['records_late_dropped']} (after their window's allowed lateness)",
            highlight=False,
        )
    if d["bad_record_samples"]:
        console.print("malformed records (a sample, file: line):", highlight=False)
        for line in d["bad_record_samples"]:
            console.print(Text(f"  {line}"), highlight=False)  # not markup: input text
    if d["checkpoints"]:
        ct = Table("checkpoint", "status", "duration", "size", "acks", title="checkpoints (most recent last)")
        for ck in d["checkpoints"][-10:]:
            ct.add_row(
                str(ck["id"]),
                styled(ck["status"]),
                f"{ck['duration_ms']} ms",
                format_bytes(ck["size_bytes"]),
                f"{ck['acks']}/{ck['expected']}",
            )
        console.print(ct)
    print_exceptions(console, d["exceptions"])
    if d["failure"]:
        console.print("[red]root cause:[/red]", highlight=False)
        console.print(d["failure"], highlight=False, markup=False)


def print_exceptions(console: Console, entries: list[dict[str, Any]], last: int = 5) -> None:
    """The last few entries of the exception history, one cause line each (`--json`: all, with tracebacks)."""
    if not entries:
        return
    shown = entries[-last:]
    more = f", {len(entries) - len(shown)} earlier in status --json" if len(entries) > len(shown) else ""
    et = Table("time", "attempt", "task", "cause", "restarted", title=f"exceptions (most recent last{more})")
    for e in shown:
        et.add_row(
            e["time"],
            str(e["attempt"]),
            Text(e["task"] or "-"),
            Text(e["cause"]),  # not markup: a cause may hold [brackets]
            "yes" if e["restarted"] else "[red]no[/red]",
        )
    console.print(et)


COLORS: dict[str, str] = {
    JobStatus.RUNNING: "green",
    JobStatus.FINISHED: "blue",
    JobStatus.FAILED: "red",
    JobStatus.CANCELED: "yellow",
    JobStatus.RESTARTING: "yellow",
    CheckpointStatus.COMPLETED: "blue",
    CheckpointStatus.IN_PROGRESS: "green",
}


def styled(state: str) -> str:
    color = COLORS.get(state)  # members are str: a task's or checkpoint's FAILED finds JobStatus.FAILED
    return f"[{color}]{state}[/{color}]" if color else state
