"""Event time: timestamps, watermarks and windows (docs/event-time.md).

Pure cores only — no threads, no I/O, no clock (time is an argument):

- `watermarks`: `WatermarkStrategy` (what a job asks for, as plain data), the per-source
  `WatermarkGenerator`, and the `WatermarkValve` that turns the watermarks and idleness of a
  task's input channels into the task's own input watermark.
- `windows`: the window assigners (tumbling, sliding, session; event and processing time) as
  plain data, the vectorized assignment of timestamps to panes, the windows a pane belongs to,
  and session merging.
"""

import enum

MIN_WATERMARK = -(2**63)  # nothing seen yet: every timestamp is ahead of it
MAX_WATERMARK = 2**63 - 1  # end of input: every window fires


class TimeDomain(enum.StrEnum):
    """The time an operator goes by: a timer's (taskmanager/state/timer_service.py) or
    deduplicate's `time=`."""

    EVENT_TIME = "event"
    PROCESSING_TIME = "processing"
