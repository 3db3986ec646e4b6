"""The one shape of a retry with backoff in Sluice (docs/architecture.md, "Retries").

Every retry has a deadline, waits exponentially with jitter, ends early when
its owner stops (the event also cuts a wait short), re-raises the last error
when it gives up, and logs what it waits for through `before_sleep` (with the
caller's correlation ids). ZooKeeper operations use kazoo's KazooRetry instead;
event loops that are not retries stay loops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    stop_when_event_set,
    wait_exponential_jitter,
)

__all__ = ["RetryCallState", "retrying"]


def retrying(
    *,
    deadline: float,
    stopped: threading.Event,
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    first_wait: float,
    max_wait: float,
    before_sleep: Callable[[RetryCallState], None],
) -> Retrying:
    """A tenacity Retrying: tries until `deadline` seconds passed or `stopped` is set, on the
    exceptions `retry_on`; waits `first_wait` doubling up to `max_wait` (± `first_wait` jitter)."""

    def sleep(seconds: float) -> None:
        stopped.wait(seconds)  # stopping ends the wait

    return Retrying(
        stop=stop_after_delay(deadline) | stop_when_event_set(stopped),
        wait=wait_exponential_jitter(multiplier=first_wait, max=max_wait, jitter=first_wait),
        retry=retry_if_exception_type(retry_on),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
