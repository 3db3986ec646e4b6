"""The JobMaster's adapter around the connector sources' split enumerators (docs/connectors.md).

`SplitAssignment` holds one attempt's `SourceCoordinators` (coordinator.py, pure core) and the
enumerator states a restore starts them from; it answers readers' `RequestSplits`, snapshots
the enumerators at each checkpoint trigger and runs their lookups (lookups.py) on the I/O pool,
off the dispatcher's lock. It knows the job only through `ConnectorPort`, the few things it
asks of it: everything runs under the dispatcher's lock, like the JobMaster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from jobmanager.connectors import coordinator as sc
from jobmanager.connectors import lookups
from sluice import graph
from sluice.v1 import common_pb2

log = logging.getLogger("sluice.jobmanager.job")


class ConnectorPort(Protocol):
    """What split assignment needs of its job."""

    @property
    def tag(self) -> str: ...  # the job's correlation id, "[job J attempt A]"
    def reader(self, eid: str) -> tuple[int, str] | None: ...  # (subtask, its chain's head operator) of an execution
    def run_io(self, fn: Callable[[], object], done: Callable[[Exception | None], None]) -> None: ...


def connector_sources(job: common_pb2.JobGraph, chain_of: dict[str, graph.Chain]) -> dict[str, tuple[int, Any]]:
    """operator id -> (parallelism, enumerator spec) of every connector source of `job`."""
    out = {}
    for op in job.operators:
        if graph.kind_of(op) == graph.OperatorKind.SOURCE_CONNECTOR:
            out[op.id] = (chain_of[op.id].parallelism, graph.operator_config(op)["enumerator"])
    return out


class SplitAssignment:
    def __init__(self, port: ConnectorPort) -> None:
        self.port = port
        self.sources = sc.SourceCoordinators({})
        # rebuilt per attempt from the restored checkpoint's `_metadata` ("coordinators"), fresh without one
        self.states: dict[str, Any] = {}

    @property
    def by_operator(self) -> dict[str, sc.SourceCoordinator]:
        return self.sources.by_operator

    def restored(self, states: dict[str, Any], specs: dict[str, tuple[int, Any]], checkpoint_id: int) -> None:
        """The enumerators' states of a checkpoint to restore; SplitRequestError when they do not restore."""
        self.states = states
        sc.SourceCoordinators.build(specs, states, checkpoint_id)  # restorable?

    def start_attempt(self, specs: dict[str, tuple[int, Any]], checkpoint_id: int) -> None:
        self.sources = sc.SourceCoordinators.build(specs, self.states, checkpoint_id)

    def request(
        self, eid: str, operator_id: str, received: int, last_checkpoint: int, idle: bool
    ) -> sc.Assignment | None:
        """A reader's request for splits; None when `eid` is not an execution of this attempt
        headed by `operator_id` (a late request: it gets nothing)."""
        reader = self.port.reader(eid)
        coordinator = self.sources.by_operator.get(operator_id)
        if reader is None or coordinator is None or reader[1] != operator_id:
            return None
        subtask = reader[0]
        assignment = coordinator.request(subtask, received, last_checkpoint, idle)
        if assignment.splits:
            log.info(
                "%s source %s subtask %d: assignments %d..%d (%s)",
                self.port.tag,
                operator_id,
                subtask,
                assignment.first,
                assignment.first + len(assignment.splits) - 1,
                ", ".join(str(s["id"]) for s in assignment.splits[:5]),
            )
        return assignment

    def checkpoint_triggered(self, checkpoint_id: int) -> None:
        self.sources.checkpoint_triggered(checkpoint_id)

    def states_of(self, checkpoint_id: int) -> dict[str, Any]:
        return self.sources.states_of(checkpoint_id)

    def discover(self, now: float) -> None:
        """Run the lookups the enumerators ask for (listing a directory, scanning Redis for
        streams: lookups.py) off the lock."""
        sources = self.sources
        for lookup in sources.lookups(now):
            found: list[str] = []

            def listing(what: dict[str, Any] = lookup.what, found: list[str] = found) -> None:
                found.extend(lookups.run(what))

            def done(error: Exception | None, lookup: sc.Lookup = lookup, found: list[str] = found) -> None:
                if self.sources is sources:  # else a new attempt's enumerators replaced these
                    sources.on_discovered(lookup, None if error else found, time.monotonic())

            self.port.run_io(listing, done)
