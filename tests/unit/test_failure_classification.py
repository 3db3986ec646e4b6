"""Which failures restarting cannot fix: the TaskManager's classification (`Failure.of` in
taskmanager/task_messages.py) and the JobManager's repeated-failure rule and exception line
(jobmanager/scheduler/restart_strategy.py). No Spark session: pyspark's exceptions are built
by hand."""

from __future__ import annotations

import pickle
import sys
import traceback

import cloudpickle
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, PySparkPicklingError

from jobmanager.scheduler.restart_strategy import (
    FailureSignature,
    RepeatedFailureDetector,
    exception_line,
    exception_type,
)
from sluice import graph
from sluice.states import FailureCause
from sluice.v1 import common_pb2
from taskmanager.network.input_gate import ChannelError
from taskmanager.task_messages import Failure


def raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 — the test inspects whatever was raised
        return exc
    raise AssertionError("nothing raised")


def cause_of(exc: BaseException) -> FailureCause:
    return Failure.of(exc, "traceback").cause


def analysis(condition: str) -> AnalysisException:
    return AnalysisException(message=f"[{condition}] ...", errorClass=condition, messageParameters={})


def _import_missing() -> None:
    import sluice_no_such_module  # type: ignore[import-not-found]  # noqa: F401 — the import error is the point


@pytest.mark.parametrize(
    "exc",
    [
        raised(_import_missing),
        ImportError("cannot import name 'x' from 'y'"),
        pickle.UnpicklingError("invalid load key"),
        PySparkPicklingError(message="could not serialize", errorClass="X", messageParameters={}),
        analysis("UNRESOLVED_COLUMN.WITH_SUGGESTION"),
        analysis("DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES"),
        analysis("PARSE_SYNTAX_ERROR"),
        raised(lambda: pa.table({"k": [1]}).select(["sum"])),
        raised(lambda: pa.table({"k": [1]}).schema.field("sum")),
    ],
    ids=lambda e: type(e).__name__,
)
def test_deterministic_errors_are_non_recoverable(exc):
    assert cause_of(exc) == FailureCause.NON_RECOVERABLE


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad record"),
        KeyError("user_id"),  # a user's dict lookup: may depend on the data
        KeyError('Field "x" does not exist in schema', "more"),
        ZeroDivisionError("division by zero"),
        ConnectionResetError(104, "Connection reset by peer"),
        analysis("PATH_NOT_FOUND"),  # the path may appear
        analysis("TABLE_OR_VIEW_NOT_FOUND"),
        RuntimeError("wrapped"),
    ],
    ids=lambda e: f"{type(e).__name__}-{e}",
)
def test_other_errors_stay_task_errors(exc):
    assert cause_of(exc) == FailureCause.TASK_ERROR


def test_an_import_error_raised_from_is_found_but_not_one_merely_handled():
    def wrapped() -> None:
        try:
            _import_missing()
        except ImportError as exc:
            raise RuntimeError("loading the helpers failed") from exc

    def handled() -> None:
        try:
            _import_missing()
        except ImportError:
            raise ValueError("fallback failed") from None

    assert cause_of(raised(wrapped)) == FailureCause.NON_RECOVERABLE
    assert cause_of(raised(handled)) == FailureCause.TASK_ERROR


def test_code_that_does_not_unpickle_is_non_recoverable(tmp_path, monkeypatch):
    (tmp_path / "helpers_for_payload.py").write_text("def body(df):\n    return df\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import helpers_for_payload  # type: ignore[import-not-found]  # written by the test above

    config, code = graph.encode_operator({"body": helpers_for_payload.body})  # pickled by reference
    op = common_pb2.OperatorSpec(id="2-map", name="parse", kind=common_pb2.OPERATOR_KIND_MAP, config=config, code=code)
    del helpers_for_payload.body  # the TaskManager's copy of the module lacks it
    exc = raised(lambda: graph.operator_settings(op))
    assert str(exc).startswith("operator 'parse' (2-map): code.body cannot be unpickled here: AttributeError: ")
    assert isinstance(exc.__cause__, AttributeError)  # not an error type that is deterministic by itself
    assert cause_of(exc) == FailureCause.NON_RECOVERABLE
    sys.modules.pop("helpers_for_payload", None)
    assert cause_of(raised(lambda: cloudpickle.loads(b"garbage"))) == FailureCause.NON_RECOVERABLE
    op.code["body"] = cloudpickle.dumps(42)
    exc = raised(lambda: graph.operator_settings(op))
    assert str(exc) == "operator 'parse' (2-map): code.body is not callable: int"
    assert cause_of(exc) == FailureCause.NON_RECOVERABLE


def test_a_broken_stream_names_its_peer():
    failure = Failure.of(ChannelError("stream broke", peer="10.0.0.2:6124"), "tb")
    assert failure == Failure("tb", FailureCause.PEER_UNREACHABLE, "10.0.0.2:6124")


# -- exception lines ---------------------------------------------------------------------------
def test_exception_line_of_a_real_chained_traceback():
    def fail() -> None:
        try:
            raise KeyError("k")
        except KeyError:
            raise ValueError("bad record 7\nsecond line of the message") from None

    try:
        fail()
    except ValueError:
        text = traceback.format_exc()
    assert exception_line(text) == "ValueError: bad record 7"

    def chained() -> None:
        try:
            raise KeyError("k")
        except KeyError:
            raise ValueError("during handling")  # noqa: B904 — the implicit chain is the point

    try:
        chained()
    except ValueError:
        text = traceback.format_exc()
    assert "During handling" in text and exception_line(text) == "ValueError: during handling"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "TaskManager tm-1 lost: no heartbeat for 6s (timeout 6s)",
            "TaskManager tm-1 lost: no heartbeat for 6s (timeout 6s)",
        ),
        ("\n  checkpointing failed: 3 declined\nmore\n", "checkpointing failed: 3 declined"),
        ("", ""),
        ("x" * 600, "x" * 497 + "..."),
    ],
)
def test_exception_line_without_a_traceback_is_the_first_line(text, line):
    assert exception_line(text) == line


def test_exception_line_of_a_traceback_cut_after_its_last_frame_is_its_last_line():
    assert exception_line('Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n') == "g()"


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("ValueError: bad", "ValueError"),
        ("pyspark.errors.exceptions.captured.AnalysisException: [UNRESOLVED_COLUMN] x", "AnalysisException"),
        ("KeyboardInterrupt", "KeyboardInterrupt"),
        ("TaskManager tm-1 lost: x", ""),
        ("deployment failed: refused", ""),
    ],
)
def test_exception_type(line, kind):
    assert exception_type(line) == kind


# -- the repeated-failure rule ----------------------------------------------------------------
A = FailureSignature("chain-1", "ValueError: bad record")


def test_the_same_error_twice_in_a_row_is_deterministic():
    d = RepeatedFailureDetector()
    assert d.on_failure(A) is False
    assert d.on_failure(A) is True


@pytest.mark.parametrize(
    "between",
    [
        FailureSignature("chain-2", "ValueError: bad record"),  # another operator
        FailureSignature("chain-1", "ValueError: bad record 2"),  # another message
        None,  # a failure that is no task error (a lost TaskManager, a failed checkpoint)
        FailureSignature("chain-1", "ConnectionRefusedError: [Errno 111] Connection refused"),
        "checkpoint",
    ],
)
def test_anything_in_between_starts_the_count_again(between):
    d = RepeatedFailureDetector()
    d.on_failure(A)
    if between == "checkpoint":
        d.on_success()
    else:
        assert d.on_failure(between) is False
    assert d.on_failure(A) is False
    assert d.on_failure(A) is True


def test_transient_errors_are_never_deterministic():
    d = RepeatedFailureDetector()
    timeout = FailureSignature("chain-1", "TimeoutError: timed out")
    assert [d.on_failure(timeout) for _ in range(4)] == [False] * 4


def test_more_repeats_can_be_asked_for_and_fewer_than_two_cannot():
    d = RepeatedFailureDetector(repeats=3)
    assert [d.on_failure(A) for _ in range(3)] == [False, False, True]
    with pytest.raises(ValueError, match="repeats: expected an integer >= 2"):
        RepeatedFailureDetector(repeats=1)
