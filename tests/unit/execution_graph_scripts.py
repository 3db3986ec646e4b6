"""A small ExecutionGraph (two sources, two aggregates, a sink) and its slots, shared by the
execution graph's and the reconfiguration protocol's tests."""

from jobmanager.scheduler.execution_graph import (
    ChainInfo,
    ExecutionGraph,
    SlotsAssigned,
    TaskStateReported,
)
from jobmanager.scheduler.slot_pool import SlotId

JOB = "job1"


TIMEOUT = 10.0


SLOTS = (SlotId("tm-a", 0), SlotId("tm-b", 0))


SRC0, SRC1 = "job1/0/src/0", "job1/0/src/1"


AGG0, AGG1 = "job1/0/agg/0", "job1/0/agg/1"


SINK0 = "job1/0/sink/0"


ALL = (SRC0, SRC1, AGG0, AGG1, SINK0)


def new_graph(**kwargs) -> ExecutionGraph:
    chains = [ChainInfo("src", "source -> map", 2), ChainInfo("agg", "aggregate", 2), ChainInfo("sink", "print", 1)]
    return ExecutionGraph(JOB, chains, cancel_timeout=TIMEOUT, **kwargs)


def running_graph() -> ExecutionGraph:
    g = new_graph()
    g.handle(SlotsAssigned(SLOTS, 0.0))
    for eid in ALL:
        assert g.handle(TaskStateReported(eid, "RUNNING", now=1.0)) == []
    return g
