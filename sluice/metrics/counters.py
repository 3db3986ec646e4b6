"""A task's counters (`TaskCounters`, proto/sluice/v1/common.proto) as the REST API,
`sluice status` and Prometheus show them (docs/monitoring.md).

Every renderer iterates the message's fields (`COUNTERS`): a new counter is a new
field of `TaskCounters` and its increment on the TaskManager, shown everywhere
under names derived from the field (`records_foo`: REST key `records-foo`,
status column `foo`, metric `numRecordsFoo`, summed per REST vertex). `NAMES`
keeps the names the counters had before they were one message, which outside
tools read; add an entry only to name a new counter otherwise.
"""

from __future__ import annotations

import dataclasses

from sluice.v1 import common_pb2


@dataclasses.dataclass(frozen=True)
class Counter:
    field: str  # the TaskCounters field
    rest: str  # its key in the REST API's subtask metrics (and vertex metrics, when summed there)
    column: str  # its column in `sluice status` ("": not a column)
    metric: str  # Flink's metric name: Prometheus shows `taskmanager_job_task_<metric>`
    help: str  # the Prometheus help text
    vertex: bool = True  # summed over a vertex's subtasks in the REST API's vertex metrics


NAMES: dict[str, Counter] = {
    c.field: c
    for c in (
        Counter(
            "records_in", "read-records", "records in", "numRecordsIn", "rows the task took in (a source: rows read)"
        ),
        Counter("records_out", "write-records", "records out", "numRecordsOut", "rows the task's chain produced"),
        Counter("records_sent", "sent-records", "sent", "numRecordsSent", "rows sent to the next tasks"),
        Counter(
            "records_malformed",
            "records-malformed",
            "malformed",
            "numRecordsMalformed",
            "input rows the source could not parse",
            vertex=False,
        ),
        Counter(
            "records_dropped",
            "records-dropped",
            "dropped",
            "numRecordsDropped",
            "rows dropped: malformed, with a null key or timestamp",
        ),
        Counter(
            "records_late_dropped",
            "records-late-dropped",
            "",
            "numLateRecordsDropped",
            "rows a window dropped after its allowed lateness",
            vertex=False,
        ),
    )
}


def _derived(field: str) -> Counter:
    """The names of a counter `NAMES` does not list, from its field name."""
    words = field.split("_")
    return Counter(
        field,
        rest=field.replace("_", "-"),
        column=" ".join(words[1:] if words[0] == "records" and len(words) > 1 else words),
        metric="num" + "".join(w.capitalize() for w in words),
        help=field.replace("_", " "),
    )


COUNTERS: tuple[Counter, ...] = tuple(
    NAMES.get(f.name) or _derived(f.name) for f in common_pb2.TaskCounters.DESCRIPTOR.fields
)


def values(counters: common_pb2.TaskCounters) -> dict[str, int]:
    """Every counter by its field name, in field order (unset: 0)."""
    return {c.field: int(getattr(counters, c.field)) for c in COUNTERS}


def rest_metrics(counters: common_pb2.TaskCounters) -> dict[str, int]:
    """A subtask's counters as the REST API names them."""
    return {c.rest: int(getattr(counters, c.field)) for c in COUNTERS}


def vertex_sums(tasks: list[common_pb2.TaskCounters]) -> dict[str, int]:
    """The counters a REST vertex sums over its subtasks, as the REST API names them."""
    return {c.rest: sum(int(getattr(t, c.field)) for t in tasks) for c in COUNTERS if c.vertex}


def add(total: common_pb2.TaskCounters, part: common_pb2.TaskCounters) -> None:
    """Add every counter of `part` to `total`."""
    for c in COUNTERS:
        setattr(total, c.field, getattr(total, c.field) + getattr(part, c.field))
