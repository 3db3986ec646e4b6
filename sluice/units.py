"""Durations and sizes in configuration values: the one parser of process
options (sluice/process_options.py) and job options (sluice/job_options.py).

    parse_duration("500ms", bare="s") == 0.5   # always seconds
    parse_duration("2min", bare="s") == 120.0
    parse_duration("250", bare="ms") == 0.25   # a bare number is in the option's own unit
    parse_size("64mb") == 64 * 1024 * 1024     # always bytes

A duration is a number and an optional unit: ``ms``, ``s``, ``min``, ``h``
(case-insensitive, a space allowed between them). A bare number is in the
unit the option declares, so configurations written before units existed
keep their meaning: checkpoint keys counted milliseconds, restart-strategy
keys and process timeouts seconds. A size is a number of bytes and an
optional unit ``b``, ``kb``, ``mb``, ``gb``, ``tb`` (powers of 1024, as
Flink's MemorySize). Errors are ``ValueError`` saying what is accepted; the
option tables put the key and where the value came from in front.

This module imports nothing outside the standard library: the pure cores
(jobmanager/scheduler/restart_strategy.py) read job options through it.
"""

from __future__ import annotations

import math
import re
from typing import Any

# unit -> (numerator, denominator) of seconds: dividing by 1000 (not multiplying
# by 0.001) gives exactly what `float(ms) / 1000` gave before units existed.
DURATION_UNITS: dict[str, tuple[int, int]] = {"ms": (1, 1000), "s": (1, 1), "min": (60, 1), "h": (3600, 1)}
UNIT_NAMES: dict[str, str] = {"ms": "milliseconds", "s": "seconds", "min": "minutes", "h": "hours"}
SIZE_UNITS: dict[str, int] = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}

_NUMBER = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_VALUE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*)\s*$")


def duration_forms(bare: str) -> str:
    """What a duration option accepts, for error messages and the reference tables."""
    return f"in {UNIT_NAMES[bare]}, or with a unit ms, s, min or h (e.g. 500ms, 60s, 2min, 1h)"


def parse_duration(value: Any, bare: str = "s", *, positive: bool = False) -> float:
    """Seconds from `value`: a number (in the unit `bare`) or a string such as ``500ms``.

    Negative, infinite and NaN durations are refused, and so is zero when `positive`."""
    if bare not in DURATION_UNITS:
        raise ValueError(f"unknown duration unit {bare!r}; expected one of {', '.join(DURATION_UNITS)}")
    kind = "a positive" if positive else "a non-negative"
    error = ValueError(f"expected {kind} duration {duration_forms(bare)}, got {value!r}")
    number, unit = _split(value, error)
    unit = unit.lower() or bare
    if unit not in DURATION_UNITS:
        raise error
    numerator, denominator = DURATION_UNITS[unit]
    seconds = number * numerator / denominator
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        raise error
    return seconds


def parse_size(value: Any, bare: str = "b") -> int:
    """Bytes from `value`: a whole number (in the unit `bare`) or a string such as ``64mb``."""
    if bare not in SIZE_UNITS:
        raise ValueError(f"unknown size unit {bare!r}; expected one of {', '.join(SIZE_UNITS)}")
    error = ValueError(f"expected a size in bytes, or with a unit b, kb, mb, gb or tb (e.g. 64mb, 1gb), got {value!r}")
    number, unit = _split(value, error)
    unit = unit.lower() or bare
    if unit not in SIZE_UNITS:
        raise error
    size = number * SIZE_UNITS[unit]
    if not math.isfinite(size) or size < 0 or not size.is_integer():
        raise error
    return int(size)


def _split(value: Any, error: ValueError) -> tuple[float, str]:
    """(number, unit as written) of a configuration value; `error` when it is neither."""
    if isinstance(value, bool) or value is None:
        raise error
    if isinstance(value, (int, float)):
        return float(value), ""
    match = _VALUE.match(str(value))
    if match is None:
        raise error
    return float(match.group(1)), match.group(2)


def format_duration(seconds: float) -> str:
    """The shortest exact spelling: ``500ms``, ``6s``, ``2min``, ``1h``; ``0`` for zero."""
    if seconds == 0:
        return "0"
    for unit in ("h", "min", "s", "ms"):
        numerator, denominator = DURATION_UNITS[unit]
        count = seconds * denominator / numerator
        if abs(count - round(count)) < 1e-9 * max(1.0, abs(count)):
            return f"{round(count)}{unit}"
    return f"{seconds:g}s"


def format_size(size: int) -> str:
    """The largest unit that divides `size`: ``64mb``, ``1gb``, ``100b``; ``0`` for zero."""
    if size == 0:
        return "0"
    for unit in ("tb", "gb", "mb", "kb"):
        if size % SIZE_UNITS[unit] == 0:
            return f"{size // SIZE_UNITS[unit]}{unit}"
    return f"{size}b"


def format_bytes(n: float) -> str:
    """Bytes for people to read: `512 B`, `3 KiB`, `12 MiB`, `1.5 GiB` (the CLI's checkpoint
    tables, benchmark reports)."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
