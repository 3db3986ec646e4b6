"""What a running job does, as `sluice run` (attached) and `sluice status` show it.

Pure formatting from a `JobInfo` (GetJob's answer): the job's input and output rates (the sum
over its tasks of `TaskStatus.io`), its last completed checkpoint (id, age, duration, size),
restarts, and backpressure as Flink grades it — the share of time a task waited for room
downstream (`backPressuredTimeMsPerSecond` / 1000): at most 10 % OK, at most 50 % LOW, else
HIGH — as rich renderables or plain lines; and the watch loop of an attached `sluice run`.

`watch` polls GetJob about once a second until the job ends. On a terminal (stdout and stderr)
it animates a panel (`rich.live.Live`) on stderr; elsewhere (CI, pipes, tests) it prints one
plain line per state change, exception and checkpoint, and nothing else. Either way the lines an
attached run always printed keep their form (`  <job id>: RUNNING`, `  <job id>: attempt 0
failed in task ...`, `  <job id>: leader changed: now HOST:PORT`, see `JobManagerClient.wait`).
Ctrl-C while watching asks "cancel the job or detach?" when stdin is a terminal; without one it
detaches: `Detached` carries the job id out of the job file to `sluice run`, which exits 0.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sluice.client import JobManagerClient, SluiceError, _exception_line
from sluice.states import CheckpointStatus, JobStatus, from_proto
from sluice.units import format_bytes
from sluice.v1 import common_pb2

POLL = 0.25  # seconds between two GetJob calls while watching: a short job's end shows at once
OK_AT_MOST = 100.0  # backpressured ms per second (10 %) still OK, as in Flink's web UI
LOW_AT_MOST = 500.0  # ... (50 %) LOW; above: HIGH
_SOURCE_KINDS = (
    common_pb2.OPERATOR_KIND_SOURCE_FILES,
    common_pb2.OPERATOR_KIND_SOURCE_GENERATOR,
    common_pb2.OPERATOR_KIND_SOURCE_COLLECTION,
)


class Detached(BaseException):
    """The user detached from an attached `sluice run` (Ctrl-C): the job keeps running.
    A BaseException, as KeyboardInterrupt is, so a job file's `except Exception` lets it pass."""

    def __init__(self, job_id: str):
        super().__init__(job_id)
        self.job_id = job_id


# -- pure formatting -----------------------------------------------------------------------------
def backpressure_level(backpressured_ms_per_second: float) -> str:
    """Flink's grading of a task's backpressure: OK (<= 10 % of the time), LOW (<= 50 %), HIGH."""
    if backpressured_ms_per_second <= OK_AT_MOST:
        return "OK"
    if backpressured_ms_per_second <= LOW_AT_MOST:
        return "LOW"
    return "HIGH"


def format_rate(per_second: float) -> str:
    """Records per second, grouped: `12,345`; small rates with a decimal: `0.5`."""
    return f"{per_second:,.1f}" if 0 < per_second < 10 else f"{per_second:,.0f}"


def format_age(seconds: float) -> str:
    """`4s`, `2m 5s`, `1h 3m`."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    return f"{s // 3600}h {s % 3600 // 60}m"


def task_label(task: common_pb2.TaskStatus) -> str:
    """`aggregate by url -> counts sink (2/2)`: the chain and its subtask, counted from 1."""
    return f"{task.operator} ({task.subtask + 1})"


def restored_text(info: common_pb2.JobInfo) -> str | None:
    """Where the job's state came from: `restored from checkpoint 7`, `started from savepoint
    PATH`, or None (a fresh start: nothing to say)."""
    if info.HasField("restored_checkpoint"):
        return f"restored from checkpoint {info.restored_checkpoint}"
    if info.restored_savepoint:
        return f"started from savepoint {info.restored_savepoint}"
    return None


@dataclass(frozen=True)
class LastCheckpoint:
    checkpoint_id: int
    age_s: float | None  # since it completed; None when the history no longer holds it
    duration_ms: int
    size_bytes: int


@dataclass(frozen=True)
class Summary:
    """A job's progress at one GetJob, as `sluice run` shows it."""

    job_id: str
    name: str
    state: str
    message: str
    records_in_per_second: float  # the sum over the job's tasks
    records_out_per_second: float
    restarts: int
    checkpoint: LastCheckpoint | None
    completed_checkpoints: int
    failed_checkpoints: int
    backpressure_ms_per_second: float  # the worst task's
    backpressure_task: str  # which task that is ("" when no task runs)
    restored: str | None

    @property
    def backpressure(self) -> str:
        return backpressure_level(self.backpressure_ms_per_second)


def last_checkpoint(info: common_pb2.JobInfo, now_ms: int) -> LastCheckpoint | None:
    """The job's last completed checkpoint: from its checkpoint history, else the id alone
    (with the duration and size of JobInfo.metrics)."""
    for ck in reversed(info.checkpoints):
        if from_proto(CheckpointStatus, ck.status) == CheckpointStatus.COMPLETED:
            ended = ck.trigger_ms + ck.duration_ms
            return LastCheckpoint(ck.checkpoint_id, max(now_ms - ended, 0) / 1000, ck.duration_ms, ck.size_bytes)
    if info.HasField("last_completed_checkpoint"):
        m = info.metrics
        return LastCheckpoint(
            info.last_completed_checkpoint, None, m.last_checkpoint_duration_ms, m.last_checkpoint_size_bytes
        )
    return None


def summarize(info: common_pb2.JobInfo, now_ms: int) -> Summary:
    tasks = list(info.tasks)
    worst = max(tasks, key=lambda t: t.io.backpressured_ms_per_second, default=None)
    statuses = [from_proto(CheckpointStatus, c.status) for c in info.checkpoints]
    m = info.metrics
    return Summary(
        job_id=info.job_id,
        name=info.name,
        state=str(from_proto(JobStatus, info.state)),
        message=info.message,
        records_in_per_second=sum(t.io.records_in_per_second for t in tasks),
        records_out_per_second=sum(t.io.records_out_per_second for t in tasks),
        restarts=max(info.restarts, m.num_restarts),
        checkpoint=last_checkpoint(info, now_ms),
        completed_checkpoints=max(m.number_of_completed_checkpoints, statuses.count(CheckpointStatus.COMPLETED)),
        failed_checkpoints=max(m.number_of_failed_checkpoints, statuses.count(CheckpointStatus.FAILED)),
        backpressure_ms_per_second=worst.io.backpressured_ms_per_second if worst is not None else 0.0,
        backpressure_task=task_label(worst) if worst is not None and worst.io.backpressured_ms_per_second else "",
        restored=restored_text(info),
    )


def checkpoint_text(c: LastCheckpoint | None) -> str:
    if c is None:
        return "none yet"
    age = "" if c.age_s is None else f", {format_age(c.age_s)} ago"
    return f"{c.checkpoint_id}{age}, took {c.duration_ms} ms, {format_bytes(c.size_bytes)}"


def backpressure_text(s: Summary) -> str:
    worst = f" (worst {s.backpressure_ms_per_second:.0f} ms/s: {s.backpressure_task})" if s.backpressure_task else ""
    return f"{s.backpressure}{worst}"


def rates_text(s: Summary) -> str:
    return f"{format_rate(s.records_in_per_second)} records/s in, {format_rate(s.records_out_per_second)} out"


_LEVEL_STYLE = {"OK": "green", "LOW": "yellow", "HIGH": "red"}
_STATE_STYLE = {"RUNNING": "green", "FINISHED": "blue", "FAILED": "red", "CANCELED": "yellow", "RESTARTING": "yellow"}


def render(s: Summary, hint: str = "") -> RenderableType:
    """The live panel of an attached `sluice run`."""
    head = Text.assemble((s.name, "bold"), f" {s.job_id}  ", (s.state, _STATE_STYLE.get(s.state, "")))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    if s.message:
        grid.add_row("message", Text(s.message))
    grid.add_row("records/s", Text(rates_text(s)))
    ck = checkpoint_text(s.checkpoint)
    if s.failed_checkpoints:
        ck += f"  ({s.completed_checkpoints} completed, {s.failed_checkpoints} failed)"
    grid.add_row("checkpoint", Text(ck))
    grid.add_row("restarts", Text(str(s.restarts)))
    bp = Text(s.backpressure, style=_LEVEL_STYLE[s.backpressure])
    if s.backpressure_task:
        bp.append(f" (worst {s.backpressure_ms_per_second:.0f} ms/s: {s.backpressure_task})")
    grid.add_row("backpressure", bp)
    if s.restored:
        grid.add_row("state", Text(s.restored))
    parts: list[RenderableType] = [head, grid]
    if hint:
        parts.append(Text(hint, style="dim"))
    return Group(*parts)


def checkpoint_line(ck: common_pb2.CheckpointStats, s: Summary) -> str:
    """One plain line for a checkpoint that ended, with the job's rates and backpressure then."""
    status = from_proto(CheckpointStatus, ck.status)
    if status == CheckpointStatus.COMPLETED:
        what = f"checkpoint {ck.checkpoint_id} completed in {ck.duration_ms} ms, {format_bytes(ck.size_bytes)}"
    else:
        what = f"checkpoint {ck.checkpoint_id} {status}" + (f": {ck.failure}" if ck.failure else "")
    return f"{what}; {rates_text(s)}; backpressure {backpressure_text(s)}"


class ProgressLines:
    """The plain lines an attached run prints, poll after poll: each new exception-history
    entry, each checkpoint that ended, and the job's state (with its message) when it changed.
    The state and exception lines are those of `JobManagerClient.wait(progress=True)`."""

    def __init__(self) -> None:
        self._state_line: str | None = None
        self._exceptions: set[tuple[int, int, str, str]] = set()
        self._checkpoints: set[int] = set()

    def lines(self, info: common_pb2.JobInfo, now_ms: int) -> list[str]:
        out = []
        for e in info.exceptions:
            key = (e.time_ms, e.attempt, e.task, e.cause)
            if key not in self._exceptions:
                self._exceptions.add(key)
                out.append(_exception_line(e))
        summary: Summary | None = None
        for ck in info.checkpoints:
            ended = from_proto(CheckpointStatus, ck.status) in (CheckpointStatus.COMPLETED, CheckpointStatus.FAILED)
            if ended and ck.checkpoint_id not in self._checkpoints:
                self._checkpoints.add(ck.checkpoint_id)
                summary = summary or summarize(info, now_ms)
                out.append(checkpoint_line(ck, summary))
        state = from_proto(JobStatus, info.state)
        line = f"{state}" + (f" — {info.message}" if info.message else "")
        if line != self._state_line:
            self._state_line = line
            out.append(line)
        return out


# -- sluice status ---------------------------------------------------------------------------------
def source_chains(job: common_pb2.JobGraph | None) -> tuple[set[str], set[str]]:
    """The ids and the names of a job's source operators (a chain's id is its head's id)."""
    if job is None:
        return set(), set()
    sources = [op for op in job.operators if op.kind in _SOURCE_KINDS]
    return {op.id for op in sources}, {op.name for op in sources}


def maybe_source(task: common_pb2.TaskStatus) -> bool:
    """A task `records_in_shown` may show other records in for, if it is a source: is the job
    graph worth asking for?"""
    return not task.counters.records_in and task.counters.records_out > 0 and " -> " not in task.operator


def records_in_shown(task: common_pb2.TaskStatus, sources: tuple[set[str], set[str]]) -> int:
    """A task's records in as `sluice status` shows them. A source reads rather than receives:
    its rows read are its records_in (a TaskManager counts them there); from one that reports 0
    the rows its chain produced stand for them when the chain is the source alone."""
    if not maybe_source(task):
        return task.counters.records_in
    ids, names = sources
    is_source = task.chain_id in ids if task.chain_id else task.operator in names
    return task.counters.records_out if is_source else task.counters.records_in


def io_dict(io: common_pb2.TaskIOMetrics) -> dict[str, Any]:
    """`TaskStatus.io` as `status --json` gives it: every field by its proto name."""
    return {f.name: getattr(io, f.name) for f in io.DESCRIPTOR.fields}


def metrics_dict(m: common_pb2.JobMetrics) -> dict[str, Any]:
    """`JobInfo.metrics` as `status --json` gives it: every field by its proto name."""
    return {f.name: getattr(m, f.name) for f in m.DESCRIPTOR.fields}


def task_io_cells(task: common_pb2.TaskStatus) -> list[str]:
    """The cells `sluice status` adds per task: in/s, out/s, busy and backpressured ms/s, level."""
    io = task.io
    level = backpressure_level(io.backpressured_ms_per_second)
    return [
        format_rate(io.records_in_per_second),
        format_rate(io.records_out_per_second),
        f"{io.busy_ms_per_second:.0f}",
        f"{io.backpressured_ms_per_second:.0f}",
        f"[{_LEVEL_STYLE[level]}]{level}[/{_LEVEL_STYLE[level]}]",
    ]


# -- the watch loop ------------------------------------------------------------------------------
def _now_ms() -> int:
    return int(time.time() * 1000)


def watch(
    client: JobManagerClient,
    job_id: str,
    timeout: float | None = None,
    poll: float = POLL,
    console: Console | None = None,
    animate: bool | None = None,
    stdin: TextIO | None = None,
) -> common_pb2.JobInfo:
    """Follow the job until it ends (module docstring); its last JobInfo. `Detached` when
    the user detached with Ctrl-C; SluiceError after `timeout` seconds."""
    console = console or Console(stderr=True, soft_wrap=True, highlight=False)
    stdin = stdin if stdin is not None else sys.stdin
    if animate is None:
        animate = sys.stdout.isatty() and console.is_terminal
    progress = ProgressLines()
    deadline = None if timeout is None else time.monotonic() + timeout
    live: Live | None = None

    def say(line: str) -> None:
        text = Text(f"  {job_id}: {line}")
        if live is not None:
            live.console.print(text)
        else:
            console.print(text, markup=False, highlight=False)
            console.file.flush()

    hooks = client.on_leader_change, client.on_unavailable
    client.on_leader_change = lambda address: say(f"leader changed: now {address}")
    client.on_unavailable = lambda reason: say(f"JobManager unavailable ({reason}); finding the leader")
    try:
        while True:
            try:
                if animate and live is None:
                    live = Live(console=console, refresh_per_second=4, transient=True)
                    live.start()
                info = _follow(client, job_id, progress, say, live, (deadline, timeout), poll)
                if live is not None:
                    live.stop()
                return info
            except KeyboardInterrupt:
                if live is not None:
                    live.stop()
                    live = None
                if not _cancel_wanted(console, stdin, job_id):
                    console.print(
                        Text(
                            f"detached: job {job_id} keeps running; watch it with `sluice status {job_id}` "
                            f"or `sluice logs {job_id} --follow`, stop it with `sluice cancel {job_id}`"
                        )
                    )
                    raise Detached(job_id) from None
                state = client.cancel(job_id)
                say(f"cancel requested (state {state}); waiting for CANCELED")
    finally:
        if live is not None:
            live.stop()
        client.on_leader_change, client.on_unavailable = hooks


def _follow(
    client: JobManagerClient,
    job_id: str,
    progress: ProgressLines,
    say: Callable[[str], None],
    live: Live | None,
    deadline: tuple[float | None, float | None],
    poll: float,
) -> common_pb2.JobInfo:
    hint = "Ctrl-C: cancel the job or detach"
    while True:
        info = client.get(job_id)
        now = _now_ms()
        for line in progress.lines(info, now):
            say(line)
        state = from_proto(JobStatus, info.state)
        if state.terminal:
            return info
        if live is not None:
            live.update(render(summarize(info, now), hint), refresh=True)
        if deadline[0] is not None and time.monotonic() > deadline[0]:
            raise SluiceError(f"job {job_id} still {state} after {deadline[1]}s")
        time.sleep(poll)


def _cancel_wanted(console: Console, stdin: TextIO, job_id: str) -> bool:
    """Ask on a terminal whether Ctrl-C meant cancel (c) or detach (D, the default); detach
    without one (nobody to ask)."""
    if not stdin.isatty():
        console.print(Text(f"interrupted without a terminal to ask: detaching from job {job_id}"))
        return False
    try:
        console.print(Text(f"cancel the job {job_id} or detach? [c/D] "), end="")
        answer = stdin.readline()
    except (KeyboardInterrupt, EOFError):
        console.print()
        return False
    return answer.strip().lower() in ("c", "cancel")


@contextlib.contextmanager
def attached(watcher: Callable[..., common_pb2.JobInfo] = watch) -> Iterator[None]:
    """While active, an attached `env.execute()` in the job file waits for its job through
    `watcher` (the execution context's `watcher`, sluice/api/environment.py) instead of
    `JobManagerClient.wait`'s plain polling (`sluice run` without --detach)."""
    from sluice.api import environment

    environment._context["watcher"] = watcher
    try:
        yield
    finally:
        environment._context.pop("watcher", None)
