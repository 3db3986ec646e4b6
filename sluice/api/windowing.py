"""WindowedStream: `key_by(...).window(assigner)` and what can follow it (docs/event-time.md).

    counts = (events.assign_timestamps_and_watermarks(
                  WatermarkStrategy.for_bounded_out_of_orderness(2000).with_timestamp_column("ts"))
              .key_by("url")
              .window(SlidingEventTimeWindows.of(60_000, 10_000))
              .count())

Output rows: the key columns, `window_start`, `window_end` (epoch ms, end exclusive), then the
aggregates (named as on KeyedStream) or whatever `apply` returns. With allowed lateness 0 each
(key, window) is emitted once, when the watermark passes the window's end: an append stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice import schema as schemas
from sluice.api.arguments import check_aggs
from sluice.eventtime.windows import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from sluice.graph import LATE_OUTPUT, OperatorKind

if TYPE_CHECKING:  # for annotations only: sluice/api/datastream.py builds on this module
    from sluice.api.datastream import DataStream, KeyedStream

ASSIGNER_TYPES = (
    TumblingEventTimeWindows,
    SlidingEventTimeWindows,
    EventTimeSessionWindows,
    TumblingProcessingTimeWindows,
)


class WindowedStream:
    """A keyed stream cut into windows. The window operator exists from `window(...)` on; an
    aggregate or `apply` says what it computes and returns its output stream."""

    def __init__(self, keyed: KeyedStream, assigner: Any):
        if not isinstance(assigner, ASSIGNER_TYPES):
            raise TypeError(
                f"window() takes a window assigner such as TumblingEventTimeWindows.of(60_000), "
                f"SlidingEventTimeWindows.of(size_ms, slide_ms) or EventTimeSessionWindows.with_gap(ms); "
                f"got {type(assigner).__name__}"
            )
        stream = keyed._stream
        column = stream._graph.timestamp_column(stream._op_id)
        if column is None and not assigner.processing_time:
            raise ValueError(
                "an event-time window needs timestamps and watermarks: call "
                "assign_timestamps_and_watermarks(WatermarkStrategy...with_timestamp_column(col)) on the stream "
                "before key_by(...).window(...) (or use TumblingProcessingTimeWindows)"
            )
        payload: dict[str, Any] = {
            "keys": list(keyed.keys),
            "window": assigner.to_config(),
            "timestamp_column": column,
            "allowed_lateness_ms": 0,
            "late_output": False,
        }
        name = f"window {assigner.kind} by {', '.join(keyed.keys)}"
        self._out: DataStream = stream._then(OperatorKind.WINDOW, payload, name, keys=keyed.keys)
        self.keys = keyed.keys
        self._defined = False

    @property
    def _payload(self) -> dict[str, Any]:
        return self._out._graph.node(self._out._op_id).payload

    def allowed_lateness(self, lateness_ms: int) -> WindowedStream:
        """Keep each window `lateness_ms` after it fired: a late record within that updates the
        window, whose row is emitted again (an update of the earlier row)."""
        if isinstance(lateness_ms, bool) or not isinstance(lateness_ms, int) or lateness_ms < 0:
            raise ValueError(f"allowed_lateness() takes a whole number of ms >= 0, got {lateness_ms!r}")
        self._payload["allowed_lateness_ms"] = lateness_ms
        return self

    def side_output_late_data(self) -> DataStream:
        """The records that came after their windows' allowed lateness, as they were (instead
        of dropping and counting them): a stream to sink or process like any other."""
        self._payload["late_output"] = True
        return self._out._output(self._out._op_id, output_tag=LATE_OUTPUT)

    # -- what the window computes ------------------------------------------------------------
    def count(self, name: str = "count") -> DataStream:
        return self.aggregate(**{name: ("count", "*")})

    def sum(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("sum", column)})

    def min(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("min", column)})

    def max(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("max", column)})

    def avg(self, column: str, name: str | None = None) -> DataStream:
        return self.aggregate(**{name or column: ("avg", column)})

    def aggregate(self, **aggs: tuple[str, str]) -> DataStream:
        """Aggregates per key and window, as KeyedStream.aggregate: folded incrementally (per
        pane, pre-aggregated before the shuffle), emitted when the window fires."""
        checked = check_aggs(aggs, self.keys)
        for out in checked:
            if out in ("window_start", "window_end"):
                raise ValueError(f"aggregate({out}=...): {out!r} is the window's own column; name it otherwise")
        self._define()
        self._payload["aggs"] = checked
        return self._out

    def apply(self, fn: Callable[[Any, int, int, Any], Any], output_schema: Any = None) -> DataStream:
        """`fn(key, window_start, window_end, rows: pandas.DataFrame) -> pandas.DataFrame | None`
        once per key and window when it fires (a composite key is a tuple). The key columns,
        window_start and window_end are put in front of what it returns unless it has them.
        `output_schema` declares the full output columns, as for map()."""
        if not callable(fn):
            raise TypeError(f"apply() takes a function (key, window_start, window_end, rows), got {fn!r}")
        self._define()
        self._payload["apply"] = fn
        if output_schema is not None:
            declared = schemas.to_schema(output_schema, "apply(output_schema=...)")
            self._out._graph.node(self._out._op_id).schema = declared
        return self._out

    def _define(self) -> None:
        if self._defined:
            raise ValueError("this window already has its aggregates or apply(); call window(...) again for another")
        self._defined = True
