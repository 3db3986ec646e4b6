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
``restart-strategy`` keys); a bad value raises ``ValueError`` naming the key
and what it accepts.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from abc import ABC, abstractmethod
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay: float
    reason: str


class RestartStrategy(ABC):
    @abstractmethod
    def on_failure(self, now: float) -> RestartDecision:
        """One failure happened at ``now``: restart, and after how long?"""

    def on_success(self, now: float) -> None:
        """The running attempt proved healthy at ``now`` (default: nothing to reset)."""


class NoRestart(RestartStrategy):
    def on_failure(self, now: float) -> RestartDecision:
        return RestartDecision(False, 0.0, "restart strategy is 'none': jobs are not restarted")

    def __repr__(self) -> str:
        return "NoRestart()"


class FixedDelayRestart(RestartStrategy):
    def __init__(self, attempts: int, delay: float):
        self.attempts = _check_int("attempts", attempts, minimum=0)
        self.delay = _check_float("delay", delay, minimum=0.0)
        self.restarts = 0

    def on_failure(self, now: float) -> RestartDecision:
        if self.restarts >= self.attempts:
            return RestartDecision(
                False, 0.0, f"restart attempts exhausted ({self.restarts} of {self.attempts})")
        self.restarts += 1
        return RestartDecision(
            True, self.delay, f"restart attempt {self.restarts} of {self.attempts} "
                              f"after {self.delay:g}s (fixed delay)")

    def __repr__(self) -> str:
        return f"FixedDelayRestart(attempts={self.attempts}, delay={self.delay:g})"


class ExponentialDelayRestart(RestartStrategy):
    def __init__(self, initial: float = 0.5, max_delay: float = 30.0, multiplier: float = 2.0,
                 reset_after: float = 60.0, jitter: float = 0.0, attempts: int | None = None,
                 rng: random.Random | None = None):
        self.initial = _check_float("initial", initial, minimum=0.0, strict=True)
        self.max_delay = _check_float("max_delay", max_delay, minimum=self.initial)
        self.multiplier = _check_float("multiplier", multiplier, minimum=1.0)
        self.reset_after = _check_float("reset_after", reset_after, minimum=0.0, strict=True)
        self.jitter = _check_float("jitter", jitter, minimum=0.0, maximum=1.0)
        self.attempts = None if attempts is None else _check_int("attempts", attempts, minimum=0)
        self.rng = rng if rng is not None else random.Random()
        self.backoff: float | None = None       # base delay of the last restart (None: fresh)
        self.restarts = 0                       # restarts since the last reset
        self._restarted_at: float | None = None  # when the last restart was due

    def on_failure(self, now: float) -> RestartDecision:
        if self._restarted_at is not None and now - self._restarted_at > self.reset_after:
            self._reset()
        if self.attempts is not None and self.restarts >= self.attempts:
            return RestartDecision(
                False, 0.0, f"restart attempts exhausted ({self.restarts} of {self.attempts}) "
                            f"within the backoff reset threshold of {self.reset_after:g}s")
        if self.backoff is None:
            self.backoff = self.initial
        else:
            self.backoff = min(self.backoff * self.multiplier, self.max_delay)
        delay = self._jittered(self.backoff)
        self.restarts += 1
        self._restarted_at = now + delay
        limit = "" if self.attempts is None else f" of {self.attempts}"
        return RestartDecision(
            True, delay, f"restart attempt {self.restarts}{limit} after {delay:g}s "
                         f"(exponential delay, backoff {self.backoff:g}s)")

    def on_success(self, now: float) -> None:
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
        return (f"ExponentialDelayRestart(initial={self.initial:g}, max_delay={self.max_delay:g}, "
                f"multiplier={self.multiplier:g}, reset_after={self.reset_after:g}, "
                f"jitter={self.jitter:g}, attempts={self.attempts})")


# -- configuration ------------------------------------------------------------------
STRATEGY_KEY = "restart-strategy"
STRATEGIES = ("none", "fixed-delay", "exponential-delay")
FIXED = "restart-strategy.fixed-delay."
EXPO = "restart-strategy.exponential-delay."
FIXED_KEYS = {"attempts", "delay"}
EXPO_KEYS = {"initial-backoff", "max-backoff", "backoff-multiplier",
             "reset-backoff-threshold", "jitter-factor", "attempts"}

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|min|h)?\s*$")
_UNIT = {None: 1.0, "ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0}
_DURATION_HELP = "a non-negative duration in seconds (e.g. 0.5, 500ms, 2s, 1min)"


def from_config(config: Mapping[str, str]) -> RestartStrategy:
    """Build the strategy named by ``restart-strategy`` (default fixed-delay)."""
    name = config.get(STRATEGY_KEY, "fixed-delay").strip().lower()
    if name not in STRATEGIES:
        raise ValueError(f"{STRATEGY_KEY}: expected one of {', '.join(STRATEGIES)}, "
                         f"got {config[STRATEGY_KEY]!r}")
    for prefix, known in ((FIXED, FIXED_KEYS), (EXPO, EXPO_KEYS)):
        for key in config:
            if key.startswith(prefix) and key[len(prefix):] not in known:
                raise ValueError(f"{key}: unknown key; accepted keys are "
                                 + ", ".join(prefix + k for k in sorted(known)))
    if name == "none":
        return NoRestart()
    if name == "fixed-delay":
        return FixedDelayRestart(
            attempts=_int_key(config, FIXED + "attempts", 3),
            delay=_duration_key(config, FIXED + "delay", 0.5))
    initial = _duration_key(config, EXPO + "initial-backoff", 0.5, positive=True)
    max_delay = _duration_key(config, EXPO + "max-backoff", 30.0)
    if max_delay < initial:
        raise ValueError(f"{EXPO}max-backoff: expected a duration >= "
                         f"{EXPO}initial-backoff ({initial:g}s), got {max_delay:g}s")
    multiplier = _float_key(config, EXPO + "backoff-multiplier", 2.0, "a number >= 1.0",
                            lambda v: v >= 1.0)
    jitter = _float_key(config, EXPO + "jitter-factor", 0.0, "a number between 0.0 and 1.0",
                        lambda v: 0.0 <= v <= 1.0)
    attempts_raw = config.get(EXPO + "attempts")
    return ExponentialDelayRestart(
        initial=initial, max_delay=max_delay, multiplier=multiplier,
        reset_after=_duration_key(config, EXPO + "reset-backoff-threshold", 60.0, positive=True),
        jitter=jitter,
        attempts=None if attempts_raw is None else _int_key(config, EXPO + "attempts", 0))


def _int_key(config: Mapping[str, str], key: str, default: int) -> int:
    raw = config.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{key}: expected a non-negative integer, got {raw!r}")
    return value


def _duration_key(config: Mapping[str, str], key: str, default: float,
                  positive: bool = False) -> float:
    raw = config.get(key)
    if raw is None:
        return default
    m = _DURATION.match(str(raw))
    value = float(m.group(1)) * _UNIT[m.group(2)] if m else -1.0
    if value < 0 or not math.isfinite(value) or (positive and value == 0):
        help_ = _DURATION_HELP.replace("non-negative", "positive") if positive else _DURATION_HELP
        raise ValueError(f"{key}: expected {help_}, got {raw!r}")
    return value


def _float_key(config: Mapping[str, str], key: str, default: float, accepted: str, ok) -> float:
    raw = config.get(key)
    if raw is None:
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not ok(value):
        raise ValueError(f"{key}: expected {accepted}, got {raw!r}")
    return value


# -- argument checks ----------------------------------------------------------------
def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def _check_float(name: str, value, minimum: float, maximum: float = math.inf,
                 strict: bool = False) -> float:
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
