"""The Python vocabulary (sluice/states.py, sluice/graph.py) and the proto enums
name the same sets: a value added on one side only fails here."""

import pytest

from sluice import graph, states
from sluice.states import ExecutionState, JobStatus
from sluice.v1 import common_pb2, jobmanager_pb2

PAIRS = [
    (states.JobStatus, common_pb2.JobState, "JOB_STATE_", {JobStatus.FAILING, JobStatus.CANCELLING}),
    (states.ExecutionState, common_pb2.ExecutionState, "EXECUTION_STATE_", set()),
    (states.CheckpointStatus, common_pb2.CheckpointStatus, "CHECKPOINT_STATUS_", set()),
    (states.AckOutcome, jobmanager_pb2.AckOutcome, "ACK_OUTCOME_", set()),
    (states.FailureCause, jobmanager_pb2.FailureCause, "FAILURE_CAUSE_", set()),
    (graph.OperatorKind, common_pb2.OperatorKind, "OPERATOR_KIND_", set()),
    (graph.Partitioning, common_pb2.Partitioning, "PARTITIONING_", set()),
]


@pytest.mark.parametrize(("cls", "wrapper", "prefix", "local_only"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_python_and_proto_sets_agree(cls, wrapper, prefix, local_only):
    wire = {name.removeprefix(prefix) for name in wrapper.keys()} - {"UNSPECIFIED"}
    assert wire == {m.name for m in cls} - {m.name for m in local_only}
    for member in cls:
        if member in local_only:
            with pytest.raises(ValueError, match="not sent between processes"):
                states.to_proto(member)
        else:
            assert states.from_proto(cls, states.to_proto(member)) is member


def test_unspecified_and_unknown_values_are_refused():
    with pytest.raises(ValueError, match="must be set"):
        states.from_proto(ExecutionState, 0)
    with pytest.raises(ValueError, match="unknown ExecutionState value 99"):
        states.from_proto(ExecutionState, 99)


def test_members_print_as_their_names():
    """The CLI and `status --json` print members: the names users and scripts read."""
    assert f"{JobStatus.RUNNING}" == "RUNNING" and JobStatus.CANCELED == "CANCELED"
    assert [s.terminal for s in (JobStatus.RUNNING, JobStatus.FINISHED)] == [False, True]
    assert ExecutionState.FAILED.terminal and not ExecutionState.CANCELING.terminal


def test_check_transition():
    table = {ExecutionState.CREATED: (ExecutionState.DEPLOYING,), ExecutionState.DEPLOYING: ()}
    states.check_transition(table, ExecutionState.CREATED, ExecutionState.DEPLOYING, "e1")
    with pytest.raises(states.IllegalTransition, match="e1: DEPLOYING -> RUNNING"):
        states.check_transition(table, ExecutionState.DEPLOYING, ExecutionState.RUNNING, "e1")
