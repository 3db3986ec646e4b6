"""Checks of the event-time operators' plain settings in a job graph (sluice/graph.py calls
`check` at submit, on the JobManager; the job API builds the same settings).

A `timestamps` operator carries `{"strategy": WatermarkStrategy.to_config()}`; a `window`
operator `{"keys", "window": assigner.to_config(), "timestamp_column", "aggs" | code "apply",
"allowed_lateness_ms", "late_output"}`. Errors are ValueError/TypeError saying what to fix.
"""

from __future__ import annotations

from typing import Any

from sluice.eventtime.watermarks import WatermarkStrategy
from sluice.eventtime.windows import window_from_config
from sluice.graph import OperatorKind  # sluice.graph imports this module inside a function only

AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")


def check(kind: str, config: dict[str, Any], has_apply: bool) -> None:
    if kind == OperatorKind.TIMESTAMPS:
        strategy = config.get("strategy")
        if not isinstance(strategy, dict):
            raise ValueError("a timestamps operator needs its watermark strategy ('strategy')")
        WatermarkStrategy.from_config(strategy).check()
        return
    window = config.get("window")
    if not isinstance(window, dict):
        raise ValueError("a window operator needs its window assigner ('window')")
    assigner = window_from_config(window)
    keys = config.get("keys")
    if not (isinstance(keys, list) and keys and all(isinstance(k, str) and k for k in keys)):
        raise ValueError(f"a window needs the key columns of its key_by, got {keys!r}")
    if not assigner.processing_time:
        column = config.get("timestamp_column")
        if not isinstance(column, str) or not column:
            raise ValueError(
                "an event-time window needs timestamps: call assign_timestamps_and_watermarks(...) "
                "on the stream before key_by(...).window(...)"
            )
    lateness = config.get("allowed_lateness_ms", 0)
    if isinstance(lateness, bool) or not isinstance(lateness, int) or lateness < 0:
        raise ValueError(f"allowed_lateness_ms must be a whole number of ms >= 0, got {lateness!r}")
    aggs = config.get("aggs")
    if has_apply == bool(aggs):
        raise ValueError("a window needs either aggregates (count, sum, ...) or apply(fn), not both or neither")
    for out, spec in (aggs or {}).items():
        if not (isinstance(spec, (list, tuple)) and len(spec) == 2 and spec[0] in AGGREGATE_FUNCTIONS):
            raise ValueError(f"aggregate {out!r}: expected (function, column) with a function of {AGGREGATE_FUNCTIONS}")
        if out in keys or out in ("window_start", "window_end") or out.startswith("__"):
            raise ValueError(f"aggregate {out!r}: the name is taken by a key or window column, or reserved")
