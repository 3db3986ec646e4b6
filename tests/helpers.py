"""Small helpers shared by the tests (import as ``from helpers import ...``;
``tests/`` is on ``sys.path`` because ``tests/conftest.py`` lives there)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | Literal[False] | None],
    timeout: float = 10.0,
    message: str = "condition",
    interval: float = 0.02,
) -> T:
    """Poll ``predicate`` until it returns something truthy; return that value (so never the
    None or False a predicate such as ``lambda: ready and result`` gives while it waits).

    Fails the test with ``message`` (and the last value seen) after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {message} (last value: {value!r})")
        time.sleep(interval)
