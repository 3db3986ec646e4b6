"""What a task and the rest of its TaskManager tell each other.

* Control messages: RPC threads post them to the task's queue
  (Task.trigger_checkpoint, notify_complete, notify_aborted); the task
  thread handles them between batches (Task._drain_control).
* Reports: a task reports its state changes, acknowledgements and declines
  to a `TaskReports` (taskmanager/leader_connection.py sends them to the
  leader, in order). A failure carries its cause, so the JobManager acts on a
  broken stream from another TaskManager without reading the traceback, and
  fails the job at once on an error no retry can fix (`NON_RECOVERABLE`,
  see `non_recoverable`).
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from typing import TYPE_CHECKING, Protocol

from sluice.schema_inference import MALFORMED_FAILURE, PARQUET_FAILURE
from sluice.states import ExecutionState, FailureCause
from taskmanager.network.input_gate import ChannelError

if TYPE_CHECKING:
    from taskmanager.task import Task


# -- reports ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a task FAILED: its traceback and a cause the JobManager acts on."""

    error: str
    cause: FailureCause
    unreachable_peer: str = ""  # host:port of the TaskManager whose stream broke (PEER_UNREACHABLE)

    @classmethod
    def of(cls, exc: BaseException, error: str) -> Failure:
        if isinstance(exc, ChannelError) and exc.peer:
            return cls(error, FailureCause.PEER_UNREACHABLE, exc.peer)
        if non_recoverable(exc):
            return cls(error, FailureCause.NON_RECOVERABLE)
        return cls(error, FailureCause.TASK_ERROR)


# Spark analysis errors about the columns or types a job names (error conditions, the part
# before the first dot): the same plan over the same schema fails the same way every time.
# Conditions about things that may change (a path, a table) are left out.
NON_RECOVERABLE_CONDITIONS = frozenset(
    {
        "UNRESOLVED_COLUMN",
        "UNRESOLVED_FIELD",
        "UNRESOLVED_MAP_KEY",
        "UNRESOLVED_ROUTINE",
        "UNRESOLVED_USING_COLUMN_FOR_JOIN",
        "COLUMN_NOT_FOUND",
        "FIELD_NOT_FOUND",
        "AMBIGUOUS_REFERENCE",
        "AMBIGUOUS_COLUMN_OR_FIELD",
        "DATATYPE_MISMATCH",
        "INVALID_EXTRACT_BASE_FIELD_TYPE",
        "INVALID_EXTRACT_FIELD_TYPE",
        "NUM_COLUMNS_MISMATCH",
        "PARSE_SYNTAX_ERROR",
        "WRONG_NUM_ARGS",
    }
)
# pyarrow's KeyError for a column a table or schema does not have (Table.select and
# Table.column: 'Field "x" does not exist in schema'; Schema.field: 'Column x does not exist in schema')
_ARROW_MISSING_FIELD = re.compile(r'^(Field ".*"|Column .*) does not exist in schema$', re.DOTALL)


def non_recoverable(exc: BaseException) -> bool:
    """True for an error that fails the same way on every retry: a missing module
    (ImportError), an operator's code that cannot be pickled or unpickled, a Spark analysis error
    on a column or type (`NON_RECOVERABLE_CONDITIONS`), a column missing from an Arrow
    table. Conservative: anything else stays TASK_ERROR, for the restart strategy (and the
    JobManager's repeated-failure rule) to decide. `exc` and the exceptions it was raised
    `from` are checked."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _non_recoverable_one(current):
            return True
        current = current.__cause__
    return False


def _non_recoverable_one(exc: BaseException) -> bool:
    if isinstance(exc, ImportError | pickle.PicklingError | pickle.UnpicklingError):
        return True
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        if _ARROW_MISSING_FIELD.match(exc.args[0]):
            return True
    if _raised_loading_payload(exc):
        return True
    if MALFORMED_FAILURE in str(exc):  # a file source with on_error="fail" met a malformed row
        return True
    if PARQUET_FAILURE in str(exc):  # a Parquet source met a file it cannot read as its schema says
        return True
    return _spark_analysis_error(exc)


def _raised_loading_payload(exc: BaseException) -> bool:
    """Raised while unpickling an operator's code (sluice.graph.loads_code): the job's bytes do
    not load on this TaskManager (a missing module or attribute, another version), or a body
    is not callable."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "loads_code" and code.co_filename.endswith(("sluice/graph.py", "sluice\\graph.py")):
            return True
        tb = tb.tb_next
    return False


def _spark_analysis_error(exc: BaseException) -> bool:
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # no pyspark here: nothing can have raised its exceptions
        return False
    if not isinstance(exc, AnalysisException):
        return False
    condition = exc.getCondition() or ""
    return condition.split(".", 1)[0] in NON_RECOVERABLE_CONDITIONS


class TaskReports(Protocol):
    """Where a task reports to (taskmanager/leader_connection.py): in order, off the task thread."""

    def report(
        self, task: Task, state: ExecutionState, failure: Failure | None = None, end_of_input: bool = False
    ) -> None: ...

    def acknowledge(self, task: Task, checkpoint_id: int, handle: bytes, size: int) -> None: ...

    def decline(self, task: Task, checkpoint_id: int, reason: str) -> None: ...


# -- control messages (from RPC threads to the task thread) ----------------------------------------
@dataclasses.dataclass(frozen=True)
class TriggerCheckpoint:
    checkpoint_id: int
    stop: bool = False  # stop with a savepoint (docs/savepoints.md)


@dataclasses.dataclass(frozen=True)
class CheckpointComplete:
    checkpoint_id: int
    final: bool


@dataclasses.dataclass(frozen=True)
class CheckpointAborted:
    checkpoint_id: int


ControlMessage = TriggerCheckpoint | CheckpointComplete | CheckpointAborted
