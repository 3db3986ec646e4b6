"""Restart strategies: whether, and after how long, a failed job is restarted.
Pure objects (no threads, no clock, no sleep): time arrives as ``now``
(monotonic seconds) and randomness from an injected ``random.Random``.

Theory of operation
-------------------
The scheduler calls ``on_failure(now)`` once per failure of the job (or of a
pipelined region) and gets a ``RestartDecision``: restart after ``delay``
seconds, or give up — then ``reason`` says why and becomes part of the job's
failure cause. ``on_success(now)`` reports that the running attempt proved
healthy (completed a checkpoint, or ran long enough); strategies whose
backoff is about recent trouble reset it.

* ``NoRestart``: never restarts.
* ``FixedDelayRestart(attempts, delay)``: at most ``attempts`` restarts in
  the job's life, each after ``delay``; success does not give attempts back.
* ``ExponentialDelayRestart``: the first failure waits ``initial``; each
  further failure multiplies the delay by ``multiplier`` up to ``max_delay``.
  If the job ran more than ``reset_after`` seconds since it was restarted
  (i.e. since previous failure + its delay — the backoff itself is not
  running time), the delay and the attempt count go back to the start, as
  does ``on_success``. ``attempts`` (None = unlimited) bounds the restarts
  between two resets. ``jitter`` in [0, 1] spreads each delay uniformly over
  delay * (1 ± jitter), capped at ``max_delay``, so that many jobs failing
  together do not restart in lockstep.

``from_config`` builds one from the job's string configuration (Flink's
``restart-strategy`` keys, declared in sluice/job_options.py); a bad value
raises ``ValueError`` naming the key and what it accepts.

Deterministic failures
----------------------
Some failures cannot succeed on a retry; restarting only burns attempts (and
the restart delays) before the job fails anyway. The JobMaster asks before
the strategy, so such a failure fails the job at once and uses no attempt:

* a task reported ``FailureCause.NON_RECOVERABLE`` (the TaskManager's
  conservative classification, ``Failure.of`` in
  taskmanager/task_messages.py: an import error, a body that cannot be
  unpickled, a Spark analysis error on a column, a missing Arrow field);
* ``RepeatedFailureDetector``: the same error — the same exception type and
  message (``exception_line``) from the same operator (chain) — failed
  ``repeats`` (2) consecutive attempts, and no checkpoint completed between
  them. Both attempts restored the same state and replayed the same input, so
  the error is deterministic. Only task errors count: a lost TaskManager, an
  unreachable peer, a failed deployment, a failed checkpoint, an unexpected
  cancel and the errors of ``TRANSIENT_ERRORS`` (connection and timeout
  errors a flaky service raises) end a streak, as does a completed
  checkpoint (``on_success``).
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import SupportsFloat

from sluice import job_options as jo


@dataclasses.dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay: float
    reason: str


class RestartStrategy(ABC):
    @abstractmethod
    def on_failure(self, now: float) -> RestartDecision:
        """One failure happened at ``now``: restart, and after how long?"""

    def on_success(self, now: float) -> None:  # noqa: B027 — a hook with a do-nothing default, not abstract
        """The running attempt proved healthy at ``now`` (default: nothing to reset)."""


class NoRestart(RestartStrategy):
    def on_failure(self, now: float) -> RestartDecision:  # noqa: ARG002 — never restarts, whenever it fails
        return RestartDecision(False, 0.0, "restart strategy is 'none': jobs are not restarted")

    def __repr__(self) -> str:
        return "NoRestart()"


class FixedDelayRestart(RestartStrategy):
    def __init__(self, attempts: int, delay: float):
        self.attempts = _check_int("attempts", attempts, minimum=0)
        self.delay = _check_float("delay", delay, minimum=0.0)
        self.restarts = 0

    def on_failure(self, now: float) -> RestartDecision:  # noqa: ARG002 — a fixed delay does not depend on time
        if self.restarts >= self.attempts:
            return RestartDecision(False, 0.0, f"restart attempts exhausted ({self.restarts} of {self.attempts})")
        self.restarts += 1
        return RestartDecision(
            True, self.delay, f"restart attempt {self.restarts} of {self.attempts} after {self.delay:g}s (fixed delay)"
        )

    def __repr__(self) -> str:
        return f"FixedDelayRestart(attempts={self.attempts}, delay={self.delay:g})"


class ExponentialDelayRestart(RestartStrategy):
    def __init__(
        self,
        initial: float = jo.EXPONENTIAL_INITIAL_BACKOFF.default,
        max_delay: float = jo.EXPONENTIAL_MAX_BACKOFF.default,
        multiplier: float = jo.EXPONENTIAL_MULTIPLIER.default,
        reset_after: float = jo.EXPONENTIAL_RESET_THRESHOLD.default,
        jitter: float = jo.EXPONENTIAL_JITTER.default,
        attempts: int | None = jo.EXPONENTIAL_ATTEMPTS.default,
        rng: random.Random | None = None,
    ):
        self.initial = _check_float("initial", initial, minimum=0.0, strict=True)
        self.max_delay = _check_float("max_delay", max_delay, minimum=self.initial)
        self.multiplier = _check_float("multiplier", multiplier, minimum=1.0)
        self.reset_after = _check_float("reset_after", reset_after, minimum=0.0, strict=True)
        self.jitter = _check_float("jitter", jitter, minimum=0.0, maximum=1.0)
        self.attempts = None if attempts is None else _check_int("attempts", attempts, minimum=0)
        self.rng = rng if rng is not None else random.Random()
        self.backoff: float | None = None  # base delay of the last restart (None: fresh)
        self.restarts = 0  # restarts since the last reset
        self._restarted_at: float | None = None  # when the last restart was due

    def on_failure(self, now: float) -> RestartDecision:
        if self._restarted_at is not None and now - self._restarted_at > self.reset_after:
            self._reset()
        if self.attempts is not None and self.restarts >= self.attempts:
            return RestartDecision(
                False,
                0.0,
                f"restart attempts exhausted ({self.restarts} of {self.attempts}) "
                f"within the backoff reset threshold of {self.reset_after:g}s",
            )
        if self.backoff is None:
            self.backoff = self.initial
        else:
            self.backoff = min(self.backoff * self.multiplier, self.max_delay)
        delay = self._jittered(self.backoff)
        self.restarts += 1
        self._restarted_at = now + delay
        limit = "" if self.attempts is None else f" of {self.attempts}"
        return RestartDecision(
            True,
            delay,
            f"restart attempt {self.restarts}{limit} after {delay:g}s (exponential delay, backoff {self.backoff:g}s)",
        )

    def on_success(self, now: float) -> None:  # noqa: ARG002 — any success resets, whenever it happens
        self._reset()

    def _reset(self) -> None:
        self.backoff = None
        self.restarts = 0
        self._restarted_at = None

    def _jittered(self, base: float) -> float:
        if self.jitter == 0.0:
            return base
        spread = base * self.jitter
        return min(max(base + self.rng.uniform(-spread, spread), 0.0), self.max_delay)

    def __repr__(self) -> str:
        return (
            f"ExponentialDelayRestart(initial={self.initial:g}, max_delay={self.max_delay:g}, "
            f"multiplier={self.multiplier:g}, reset_after={self.reset_after:g}, "
            f"jitter={self.jitter:g}, attempts={self.attempts})"
        )


# -- deterministic failures -----------------------------------------------------------
# Exception types (the last dotted part of the name) that a retry may well get past:
# a repeated one is never taken for a deterministic error.
TRANSIENT_ERRORS = frozenset(
    {
        "OSError",
        "IOError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "TimeoutError",
        "timeout",
        "MemoryError",
        "Py4JNetworkError",
    }
)
_MAX_LINE = 500
_EXC_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def exception_line(text: str) -> str:
    """The one line that says what went wrong: for a Python traceback (``traceback.format_exc``),
    the first line of the last exception (``ValueError: bad record``: the first line after the
    last ``  File`` frame that is not indented, else the last line); otherwise the first
    non-empty line. At most 500 characters."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    if frames:
        after = (line for line in lines[frames[-1] + 1 :] if not line[0].isspace())
        line = next(after, lines[-1].strip())
    else:
        line = lines[0].strip() if lines else ""
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 3] + "..."


def exception_type(line: str) -> str:
    """The exception's type name in an ``exception_line`` (``pkg.mod.Err: msg`` -> ``Err``), or ""."""
    match = _EXC_TYPE.match(line)
    return match.group(1).rsplit(".", 1)[-1] if match else ""


@dataclasses.dataclass(frozen=True)
class FailureSignature:
    """What makes two failures the same: the operator chain and the exception line."""

    chain_id: str
    error: str


class RepeatedFailureDetector:
    """Flags the same task error on ``repeats`` consecutive attempts with no checkpoint
    completed in between (see the module docstring)."""

    def __init__(self, repeats: int = 2):
        self.repeats = _check_int("repeats", repeats, minimum=2)
        self._last: FailureSignature | None = None
        self._streak = 0

    def on_failure(self, signature: FailureSignature | None) -> bool:
        """An attempt failed with `signature` (None: not a task error, or a transient one).
        True when this makes the failure deterministic."""
        if signature is None or exception_type(signature.error) in TRANSIENT_ERRORS:
            self._last, self._streak = None, 0
            return False
        self._streak = self._streak + 1 if signature == self._last else 1
        self._last = signature
        return self._streak >= self.repeats

    def on_success(self) -> None:
        """A checkpoint completed: the job made progress, the next attempt replays other input."""
        self._last, self._streak = None, 0

    def __repr__(self) -> str:
        return f"RepeatedFailureDetector(repeats={self.repeats}, streak={self._streak})"


# -- configuration ------------------------------------------------------------------
def from_config(config: Mapping[str, str]) -> RestartStrategy:
    """Build the strategy named by ``restart-strategy`` (default fixed-delay) from a job's
    configuration. Every key is read through the job-options table (sluice/job_options.py:
    defaults, units, accepted values); a bad value or an unknown ``restart-strategy.*`` key
    raises ``JobConfigError`` (a ``ValueError``) whose message starts with the key."""
    jo.check_keys(config, jo.RESTART_FAMILIES)
    for option in jo.RESTART_OPTIONS:  # every given value is checked, also of a strategy not chosen
        option.read(config)
    name = jo.RESTART_STRATEGY.read(config)
    if name == "none":
        return NoRestart()
    if name == "fixed-delay":
        return FixedDelayRestart(attempts=jo.FIXED_DELAY_ATTEMPTS.read(config), delay=jo.FIXED_DELAY_DELAY.read(config))
    initial = jo.EXPONENTIAL_INITIAL_BACKOFF.read(config)
    max_delay = jo.EXPONENTIAL_MAX_BACKOFF.read(config)
    if max_delay < initial:
        raise jo.JobConfigError(
            f"{jo.EXPONENTIAL_MAX_BACKOFF.key}: expected a duration >= "
            f"{jo.EXPONENTIAL_INITIAL_BACKOFF.key} ({initial:g}s), got {max_delay:g}s",
            jo.EXPONENTIAL_MAX_BACKOFF.key,
        )
    return ExponentialDelayRestart(
        initial=initial,
        max_delay=max_delay,
        multiplier=jo.EXPONENTIAL_MULTIPLIER.read(config),
        reset_after=jo.EXPONENTIAL_RESET_THRESHOLD.read(config),
        jitter=jo.EXPONENTIAL_JITTER.read(config),
        attempts=jo.EXPONENTIAL_ATTEMPTS.read(config),
    )


# -- argument checks ----------------------------------------------------------------
def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def _check_float(
    name: str, value: SupportsFloat | str, minimum: float, maximum: float = math.inf, strict: bool = False
) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    low_ok = v > minimum if strict else v >= minimum
    if not math.isfinite(v) or not low_ok or v > maximum:
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        if maximum != math.inf:
            bound += f" and <= {maximum:g}"
        raise ValueError(f"{name}: expected a finite number {bound}, got {value!r}")
    return v
