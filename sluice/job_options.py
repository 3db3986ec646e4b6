"""Job options: the keys a job sets with ``env.set_config(key, value)`` (and
``env.enable_checkpointing(ms)``), in the shape of Flink's ConfigOption: each
has one home here with its default, its parser and its meaning.

A job's configuration is a string map carried in the job graph. The
JobManager reads it when the job is submitted (a bad value or an unknown key
is a ``JobValidationError`` on field ``config`` whose message names the key)
and again when it recovers the job after a failover:

* checkpointing: jobmanager/master/checkpointing.py ``checkpoint_config`` through
  :func:`checkpointing`;
* restarts: jobmanager/scheduler/restart_strategy.py ``from_config``, reading
  each ``restart-strategy*`` option with ``option.read(config)``.

Durations take a unit (``500ms``, ``60s``, ``2min``, ``1h``; sluice/units.py);
a bare number keeps the unit the key always had: milliseconds for the
checkpoint keys, seconds for the restart-strategy keys. Keys outside the
families ``execution.``, ``state.`` and ``restart-strategy`` belong to the job
and are not checked, unless they look like a mistyped option (``look_alike``:
another case or ``_`` for ``-``, a family left out such as
``checkpointing.interval``, or a near spelling): those are errors with a "did
you mean", as an unknown key inside a family is. The job API checks each
option as it is set (``check_option``), so a job file fails at the line that
set it.

This module imports only the standard library and sluice/units.py: a pure core
(restart_strategy.py) uses it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sluice import units

T = TypeVar("T")


class JobConfigError(ValueError):
    """A bad job option; the message starts with ``<key>:``."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class JobOption(Generic[T]):
    key: str
    parse: Callable[[Any], T]  # raises ValueError saying what it accepts
    default: T
    accepts: str  # what a value looks like (the reference table's "value" column)
    help: str
    default_text: str | None = None  # how the reference shows the default (None: from the value)

    def read(self, config: Mapping[str, Any]) -> T:
        """This option's value in a job's configuration: parsed, or the default when absent."""
        raw = config.get(self.key)
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise JobConfigError(f"{self.key}: {exc}", self.key) from None


# -- value types ----------------------------------------------------------------------------
def _duration(bare: str, *, positive: bool = False) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        return units.parse_duration(value, bare, positive=positive)

    return parse


def _interval(value: Any) -> float:
    """An empty interval has always meant "no checkpoints", like 0."""
    if isinstance(value, str) and not value.strip():
        return 0.0
    return units.parse_duration(value, "ms")


def _integer(minimum: int) -> Callable[[Any], int]:
    wanted = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"

    def parse(value: Any) -> int:
        try:
            n = int(str(value).strip()) if not isinstance(value, bool) else -1
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise ValueError(f"expected {wanted}, got {value!r}")
        return n

    return parse


def _number(accepted: str, ok: Callable[[float], bool]) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        try:
            x = float(str(value).strip()) if not isinstance(value, bool) else float("nan")
        except ValueError:
            x = float("nan")
        if not (math.isfinite(x) and ok(x)):
            raise ValueError(f"expected {accepted}, got {value!r}")
        return x

    return parse


def _choice(*names: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        name = str(value).strip().lower()
        if name not in names:
            raise ValueError(f"expected one of {', '.join(names)}, got {value!r}")
        return name

    return parse


def _directory(value: Any) -> str | None:
    """Empty means "the JobManager's state.checkpoints.dir", as it always did."""
    text = str(value).strip()
    return text or None


def _boolean(value: Any) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return text == "true"


def _ms(what: str) -> str:
    return f"duration ({what}; a bare number is milliseconds)"


def _s(what: str) -> str:
    return f"duration ({what}; a bare number is seconds)"


# -- the table ------------------------------------------------------------------------------
CHECKPOINTING_INTERVAL: JobOption[float] = JobOption(
    "execution.checkpointing.interval",
    _interval,
    0.0,
    _ms(">= 0"),
    "time between checkpoints; 0 leaves checkpointing off. `env.enable_checkpointing(ms)` sets it",
    "0 (off)",
)
CHECKPOINTING_TIMEOUT: JobOption[float] = JobOption(
    "execution.checkpointing.timeout",
    _duration("ms", positive=True),
    60.0,
    _ms("> 0"),
    "a checkpoint not completed this long after its trigger is aborted",
)
CHECKPOINTING_MIN_PAUSE: JobOption[float] = JobOption(
    "execution.checkpointing.min-pause",
    _duration("ms"),
    0.0,
    _ms(">= 0"),
    "least time between the end of one checkpoint and the next trigger",
)
CHECKPOINTING_TOLERABLE_FAILURES: JobOption[int] = JobOption(
    "execution.checkpointing.tolerable-failed-checkpoints",
    _integer(0),
    0,
    "integer >= 0",
    "consecutive failed checkpoints tolerated before the job fails",
)
CHECKPOINTS_DIR: JobOption[str | None] = JobOption(
    "state.checkpoints.dir",
    _directory,
    None,
    "path or pyarrow.fs URI",
    "where this job's checkpoints go: a path every process sees, or a URI such as s3://bucket/path",
    "the JobManager's `state.checkpoints.dir`",
)
CHECKPOINTS_NUM_RETAINED: JobOption[int] = JobOption(
    "state.checkpoints.num-retained",
    _integer(1),
    2,
    "integer >= 1",
    "completed checkpoints kept; older ones are deleted. They stay when the job ends (cancelled, failed "
    "or finished), and `sluice run --from-savepoint <dir>/<job id>/chk-<n>` resumes from one",
)


def _ttl(value: Any) -> float | None:
    """Empty means no time-to-live."""
    if isinstance(value, str) and not value.strip():
        return None
    return units.parse_duration(value, "ms", positive=True)


STATE_TTL: JobOption[float | None] = JobOption(
    "state.ttl",
    _ttl,
    None,
    _ms("> 0; empty: none"),
    "default time-to-live of the keyed state of process functions (`ttl_ms=` on a state overrides it): "
    "an entry expires this long after its last write",
    "none",
)

STATE_BACKEND: JobOption[str] = JobOption(
    "state.backend",
    _choice("memory", "rocksdb"),
    "memory",
    "memory | rocksdb",
    "where keyed state lives (aggregates, process functions' state and timers, windows with aggregates): "
    "Python dicts, of which a checkpoint pickles again what changed since the last one (aggregates, "
    "process functions; windows whole) (memory), or an embedded RocksDB per task and operator on "
    "the TaskManager's disk, memory bounded whatever the number of keys (rocksdb; docs/state-backends.md)",
)
STATE_BACKEND_INCREMENTAL: JobOption[bool] = JobOption(
    "state.backend.incremental",
    _boolean,
    True,
    "true | false",
    "rocksdb, and a keyed aggregate on memory: a checkpoint uploads only the state files (memory: the "
    "changed keys' rows) the last completed one lacks and references the rest (false: everything, every "
    "checkpoint)",
    "true",
)

SAVEPOINTS_DIR: JobOption[str | None] = JobOption(
    "state.savepoints.dir",
    _directory,
    None,
    "directory or URI",
    "where `sluice savepoint` and `sluice stop` write this job's savepoints when given no `--dir`",
    "<checkpoint dir>/savepoints",
)
SAVEPOINT_PATH: JobOption[str | None] = JobOption(
    "execution.savepoint.path",
    _directory,
    None,
    "savepoint directory",
    "the savepoint, or retained checkpoint (`<checkpoint dir>/<job id>/chk-<n>`), the job starts from "
    "(`sluice run --from-savepoint` sets it)",
    "none",
)
SAVEPOINT_IGNORE_UNCLAIMED: JobOption[bool] = JobOption(
    "execution.savepoint.ignore-unclaimed-state",
    _boolean,
    False,
    "true | false",
    "start even when the savepoint holds state of operators the job no longer has (that state is dropped; "
    "`--allow-non-restored-state` sets it)",
)

RESTART_STRATEGY: JobOption[str] = JobOption(
    "restart-strategy",
    _choice("none", "fixed-delay", "exponential-delay"),
    "fixed-delay",
    "none | fixed-delay | exponential-delay",
    "whether and when a failed job restarts",
)
FIXED_DELAY_ATTEMPTS: JobOption[int] = JobOption(
    "restart-strategy.fixed-delay.attempts",
    _integer(0),
    3,
    "integer >= 0",
    "fixed-delay: restarts in the job's life; success does not give attempts back",
)
FIXED_DELAY_DELAY: JobOption[float] = JobOption(
    "restart-strategy.fixed-delay.delay",
    _duration("s"),
    0.5,
    _s(">= 0"),
    "fixed-delay: wait between a failure and the restart",
)
EXPONENTIAL_INITIAL_BACKOFF: JobOption[float] = JobOption(
    "restart-strategy.exponential-delay.initial-backoff",
    _duration("s", positive=True),
    0.5,
    _s("> 0"),
    "exponential-delay: wait before the first restart",
)
EXPONENTIAL_MAX_BACKOFF: JobOption[float] = JobOption(
    "restart-strategy.exponential-delay.max-backoff",
    _duration("s"),
    30.0,
    _s(">= initial-backoff"),
    "exponential-delay: longest wait",
)
EXPONENTIAL_MULTIPLIER: JobOption[float] = JobOption(
    "restart-strategy.exponential-delay.backoff-multiplier",
    _number("a number >= 1.0", lambda x: x >= 1.0),
    2.0,
    "number >= 1.0",
    "exponential-delay: each further failure multiplies the wait by this",
)
EXPONENTIAL_RESET_THRESHOLD: JobOption[float] = JobOption(
    "restart-strategy.exponential-delay.reset-backoff-threshold",
    _duration("s", positive=True),
    60.0,
    _s("> 0"),
    "exponential-delay: running this long after a restart resets the wait and the attempt count",
)
EXPONENTIAL_JITTER: JobOption[float] = JobOption(
    "restart-strategy.exponential-delay.jitter-factor",
    _number("a number between 0.0 and 1.0", lambda x: 0.0 <= x <= 1.0),
    0.0,
    "number 0.0-1.0",
    "exponential-delay: spreads each wait over wait * (1 ± jitter)",
)
EXPONENTIAL_ATTEMPTS: JobOption[int | None] = JobOption(
    "restart-strategy.exponential-delay.attempts",
    _integer(0),
    None,
    "integer >= 0",
    "exponential-delay: restarts allowed between two resets",
    "unlimited",
)

RUNTIME_MODE: JobOption[str] = JobOption(
    "execution.runtime-mode",
    lambda value: _choice("streaming", "batch")(value).upper(),
    "STREAMING",
    "STREAMING | BATCH",
    "BATCH (bounded sources only): blocking exchanges through local files, regions scheduled as their "
    "inputs complete, final results once, no checkpoints (docs/batch.md). `env.set_runtime_mode` sets it",
)
FAILOVER_STRATEGY: JobOption[str] = JobOption(
    "jobmanager.execution.failover-strategy",
    _choice("region", "full"),
    "region",
    "region | full",
    "a failed task restarts only the pipelined regions that must restart (region), or every task (full)",
)
SPECULATIVE_ENABLED: JobOption[bool] = JobOption(
    "execution.batch.speculative.enabled",
    _boolean,
    False,
    "true | false",
    "BATCH: start a backup attempt of a straggling task on another TaskManager; the first to finish wins",
    "false",
)
SPECULATIVE_MULTIPLIER: JobOption[float] = JobOption(
    "execution.batch.speculative.multiplier",
    _number("a number >= 1.0", lambda x: x >= 1.0),
    1.5,
    "number >= 1.0",
    "BATCH: a task is slow when it ran longer than this times the median of its vertex's finished tasks",
)
SPECULATIVE_MIN_FINISHED: JobOption[float] = JobOption(
    "execution.batch.speculative.min-finished",
    _number("a number between 0.0 and 1.0", lambda x: 0.0 < x <= 1.0),
    0.75,
    "number 0.0-1.0",
    "BATCH: share of a vertex's tasks that must have finished before its slow ones are speculated on",
)
SPECULATIVE_MIN_RUNTIME: JobOption[float] = JobOption(
    "execution.batch.speculative.min-runtime",
    _duration("ms"),
    1.0,
    _ms(">= 0"),
    "BATCH: a task is never slow before it ran this long",
    "1 s",
)

SOURCE_BATCH_DURATION: JobOption[float] = JobOption(
    "execution.source.batch-duration",
    _duration("ms", positive=True),
    1.0,
    _ms("> 0"),
    "how long one read of a file source (one Spark call) should take: the source sizes each call in bytes of "
    "its backlog so that it takes about this long. Longer calls pay Spark's fixed cost per call less often; "
    "a checkpoint barrier waits behind at most one call",
    "1 s",
)
SOURCE_MAX_FILES_PER_READ: JobOption[int] = JobOption(
    "execution.source.max-files-per-read",
    _integer(1),
    256,
    "integer >= 1",
    "at most this many files in one read of a file source (one Spark call), whatever their size "
    "(Structured Streaming's maxFilesPerTrigger): a lower cap makes more, smaller reads, so a backlog "
    "is read in more steps with checkpoints between them",
)
SOURCE_MALFORMED_COLUMNS: JobOption[str] = JobOption(
    "execution.source.malformed-columns",
    _choice("all", "read"),
    "all",
    "all | read",
    "which columns of a JSON file source's schema make a row malformed when their value does not parse: "
    "all (Spark parses and checks every column of every row, whichever the job reads) or read (the "
    "columns the job reads and the schema's first one: Spark parses only those, and a bad value in another "
    "column goes unseen, as in Spark and Flink; ~20 % less Spark time per page-views call, bench/README.md). "
    "A line that is not JSON is malformed either way; CSV always checks every field",
)

CHECKPOINT_OPTIONS: tuple[JobOption[Any], ...] = (
    CHECKPOINTING_INTERVAL,
    CHECKPOINTING_TIMEOUT,
    CHECKPOINTING_MIN_PAUSE,
    CHECKPOINTING_TOLERABLE_FAILURES,
    CHECKPOINTS_DIR,
    CHECKPOINTS_NUM_RETAINED,
)
RESTART_OPTIONS: tuple[JobOption[Any], ...] = (
    RESTART_STRATEGY,
    FIXED_DELAY_ATTEMPTS,
    FIXED_DELAY_DELAY,
    EXPONENTIAL_INITIAL_BACKOFF,
    EXPONENTIAL_MAX_BACKOFF,
    EXPONENTIAL_MULTIPLIER,
    EXPONENTIAL_RESET_THRESHOLD,
    EXPONENTIAL_JITTER,
    EXPONENTIAL_ATTEMPTS,
)
SAVEPOINT_OPTIONS: tuple[JobOption[Any], ...] = (SAVEPOINTS_DIR, SAVEPOINT_PATH, SAVEPOINT_IGNORE_UNCLAIMED)
EXECUTION_OPTIONS: tuple[JobOption[Any], ...] = (
    RUNTIME_MODE,
    FAILOVER_STRATEGY,
    SPECULATIVE_ENABLED,
    SPECULATIVE_MULTIPLIER,
    SPECULATIVE_MIN_FINISHED,
    SPECULATIVE_MIN_RUNTIME,
    SOURCE_BATCH_DURATION,
    SOURCE_MAX_FILES_PER_READ,
    SOURCE_MALFORMED_COLUMNS,
)
JOB_OPTIONS: tuple[JobOption[Any], ...] = (
    CHECKPOINT_OPTIONS
    + (STATE_TTL, STATE_BACKEND, STATE_BACKEND_INCREMENTAL)
    + SAVEPOINT_OPTIONS
    + RESTART_OPTIONS
    + EXECUTION_OPTIONS
)
BY_KEY: dict[str, JobOption[Any]] = {o.key: o for o in JOB_OPTIONS}

# Families the JobManager owns: a key in one of them that the table lacks is a typo.
CHECKPOINT_FAMILIES = ("execution.", "state.")
RESTART_FAMILIES = ("restart-strategy",)
FAILOVER_FAMILIES = ("jobmanager.execution.",)
FAMILIES = CHECKPOINT_FAMILIES + RESTART_FAMILIES + FAILOVER_FAMILIES
# Groups of keys listed together when a key is unknown (longest prefix first).
_GROUPS = (
    "restart-strategy.fixed-delay.",
    "restart-strategy.exponential-delay.",
    "restart-strategy",
    "execution.checkpointing.",
    "execution.savepoint.",
    "execution.batch.speculative.",
    "execution.",
    "jobmanager.execution.",
    "state.checkpoints.",
    "state.savepoints.",
    "state.",
)


def look_alike(key: str) -> str | None:
    """The option a key outside the families was most likely meant to be, or None (a key of the
    job's own): the same key in another case or with `_` for `-`, a key without its family
    (`checkpointing.interval`, `checkpoints.dir`), or a spelling close to an option's."""
    normal = key.strip().lower().replace("_", "-")
    for option_key in BY_KEY:
        if normal == option_key or normal == option_key.split(".", 1)[-1]:
            return option_key
    # in a family but for its case (`State.x`): the closest option; else only a near spelling
    close = difflib.get_close_matches(normal, list(BY_KEY), n=1, cutoff=0.6 if normal.startswith(FAMILIES) else 0.85)
    if close:
        return close[0]
    suffixes = {k.split(".", 1)[-1]: k for k in BY_KEY if "." in k}  # `checkpoint.interval`
    close = difflib.get_close_matches(normal, list(suffixes), n=1, cutoff=0.85)
    return suffixes[close[0]] if close else None


def check_keys(config: Mapping[str, Any], families: tuple[str, ...] = FAMILIES) -> None:
    """JobConfigError for the first key of `families` that no option has, or that looks like a
    mistyped option (`look_alike`), with a did-you-mean."""
    for key in sorted(config):
        if key in BY_KEY:
            continue
        if not key.startswith(families):
            meant = look_alike(key) if families == FAMILIES else None
            if meant is not None:
                raise JobConfigError(
                    f"{key}: unknown job option; did you mean {meant!r}? (Keys outside "
                    f"{', '.join(repr(f) for f in FAMILIES)} belong to the job, but this one looks like an option "
                    "of Sluice's)",
                    key,
                )
            continue
        close = difflib.get_close_matches(key, list(BY_KEY), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        group = next(g for g in _GROUPS if key.startswith(g))
        accepted = [k for k in BY_KEY if k.startswith(group)]
        raise JobConfigError(f"{key}: unknown job option{hint} Accepted keys: {', '.join(accepted)}", key)


def check_option(key: str, value: Any) -> None:
    """One option as the job API sets it (env.set_config): JobConfigError for an unknown or
    mistyped key or a bad value."""
    check_keys({key: value})
    if key in BY_KEY:
        BY_KEY[key].read({key: value})


def validate(config: Mapping[str, Any]) -> None:
    """Every job option of `config` known and well-formed (JobConfigError otherwise)."""
    check_keys(config)
    for option in JOB_OPTIONS:
        option.read(config)


@dataclass(frozen=True)
class Checkpointing:
    """The checkpoint options of one job, typed; durations in seconds."""

    interval: float  # 0: checkpointing off
    timeout: float
    min_pause: float
    tolerable_failures: int
    retained: int
    directory: str | None  # None: the JobManager's state.checkpoints.dir


def checkpointing(config: Mapping[str, Any]) -> Checkpointing:
    """The checkpoint options of a job's configuration (JobConfigError names a bad key)."""
    check_keys(config, CHECKPOINT_FAMILIES)
    return Checkpointing(
        interval=CHECKPOINTING_INTERVAL.read(config),
        timeout=CHECKPOINTING_TIMEOUT.read(config),
        min_pause=CHECKPOINTING_MIN_PAUSE.read(config),
        tolerable_failures=CHECKPOINTING_TOLERABLE_FAILURES.read(config),
        retained=CHECKPOINTS_NUM_RETAINED.read(config),
        directory=CHECKPOINTS_DIR.read(config),
    )


@dataclass(frozen=True)
class Execution:
    """How a job runs: its runtime mode, failover strategy and speculation (BATCH)."""

    batch: bool
    region_failover: bool
    speculative: bool
    multiplier: float
    min_finished: float
    min_runtime: float  # seconds


def execution(config: Mapping[str, Any]) -> Execution:
    """The execution options of a job's configuration (JobConfigError names a bad key)."""
    return Execution(
        batch=RUNTIME_MODE.read(config) == "BATCH",
        region_failover=FAILOVER_STRATEGY.read(config) == "region",
        speculative=SPECULATIVE_ENABLED.read(config),
        multiplier=SPECULATIVE_MULTIPLIER.read(config),
        min_finished=SPECULATIVE_MIN_FINISHED.read(config),
        min_runtime=SPECULATIVE_MIN_RUNTIME.read(config),
    )


@dataclass(frozen=True)
class SourceReads:
    """How a file source sizes its Spark calls (FileSource's docstring, "Batch sizing")."""

    batch_duration: float = SOURCE_BATCH_DURATION.default  # seconds one call should take
    max_files: int = SOURCE_MAX_FILES_PER_READ.default  # files one call may read
    malformed_columns: str = SOURCE_MALFORMED_COLUMNS.default  # "all" or "read": the JSON columns checked


def source_reads(config: Mapping[str, Any]) -> SourceReads:
    """The file-source read options of a job's configuration."""
    return SourceReads(
        SOURCE_BATCH_DURATION.read(config),
        SOURCE_MAX_FILES_PER_READ.read(config),
        SOURCE_MALFORMED_COLUMNS.read(config),
    )


# -- documentation --------------------------------------------------------------------------
def default_text(option: JobOption[Any]) -> str:
    if option.default_text is not None:
        return option.default_text
    if isinstance(option.default, float) and option.accepts.startswith("duration"):
        return units.format_duration(option.default)
    if isinstance(option.default, float):
        return f"{option.default:g}"
    return str(option.default)


def reference() -> str:
    """The Markdown table of every job option (README.md and docs/configuration.md embed it)."""
    rows = ["| key | value | default | meaning |", "|---|---|---|---|"]
    for o in JOB_OPTIONS:
        cells = (f"`{o.key}`", o.accepts, default_text(o), o.help)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)
