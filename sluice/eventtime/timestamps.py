"""Event-time columns as epoch milliseconds (docs/event-time.md): what the timestamp
assigner, the event-time operators and a chain's record writers read."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def timestamps_ms(column: Any) -> Any:
    """An Arrow column of event times as int64 epoch milliseconds (nulls stay null)."""
    t = column.type
    if pa.types.is_timestamp(t):
        return column.cast(pa.timestamp("ms", tz=t.tz)).cast(pa.int64())
    if pa.types.is_date(t):
        return column.cast(pa.date64()).cast(pa.int64())
    if pa.types.is_integer(t):
        return column.cast(pa.int64())
    raise TypeError(f"the event-time column has type {t}; it must hold epoch milliseconds (an integer) or a timestamp")
