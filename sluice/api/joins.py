"""Joins of keyed streams (docs/user-state.md).

    joined = (impressions.key_by("imp_id")
              .interval_join(clicks.key_by("imp_id"))
              .between(0, 600_000))          # click ts in [impression ts + 0, + 10 min]

Both streams need event time (`assign_timestamps_and_watermarks` before `key_by`) and the
same key column names. Output: the key columns, the left stream's other columns, then the
right stream's (a name the left side has too gets `right_suffix`, default `_right`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice import schema as schemas
from sluice.api.arguments import key_columns
from sluice.graph import OperatorKind

if TYPE_CHECKING:  # for annotations only: sluice/api/datastream.py builds on this module
    from sluice.api.datastream import DataStream, KeyedStream


class IntervalJoinBuilder:
    """`a.key_by(k).interval_join(b.key_by(k))` (KeyedStream.interval_join checks that `right` is keyed)."""

    def __init__(self, left: KeyedStream, right: KeyedStream):
        if tuple(left.keys) != tuple(right.keys):
            raise ValueError(
                f"interval_join(): both sides must be keyed by the same column names, got {list(left.keys)} and "
                f"{list(right.keys)}; select() the right side's key under the left side's name first"
            )
        if left._stream._op_id == right._stream._op_id:
            raise ValueError("interval_join() of a stream with itself: map() one side first")
        graph = left._stream._graph
        timestamps = [graph.timestamp_column(s._stream._op_id) for s in (left, right)]
        for side, column in zip(("left", "right"), timestamps, strict=True):
            if column is None:
                raise ValueError(
                    f"interval_join(): the {side} stream has no event time; call assign_timestamps_and_watermarks(...) "
                    "on it before key_by"
                )
        self._left, self._right, self._timestamps = left, right, timestamps

    def between(
        self, lower_ms: int, upper_ms: int, right_suffix: str = "_right", name: str | None = None
    ) -> DataStream:
        """Pairs whose right timestamp lies in [left ts + lower_ms, left ts + upper_ms] (ms,
        bounds included; negative bounds look back)."""
        for what, bound in (("lower_ms", lower_ms), ("upper_ms", upper_ms)):
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise TypeError(f"between(): {what} must be a whole number of ms, got {bound!r}")
        if lower_ms > upper_ms:
            raise ValueError(f"between(): lower_ms ({lower_ms}) is above upper_ms ({upper_ms}); no pair could join")
        if not isinstance(right_suffix, str) or not right_suffix:
            raise ValueError(f"between(): right_suffix must be a non-empty string, got {right_suffix!r}")
        left, right = self._left._stream, self._right._stream
        graph = left._graph
        keys = list(self._left.keys)
        payload: dict[str, Any] = {
            "keys": keys,
            "lower_ms": lower_ms,
            "upper_ms": upper_ms,
            "left_timestamp": self._timestamps[0],
            "right_timestamp": self._timestamps[1],
            "left": left._op_id,
            "right_suffix": right_suffix,
        }
        op_id = graph.add(OperatorKind.INTERVAL_JOIN, payload, name or f"interval join by {', '.join(keys)}")
        graph.connect(left._op_id, op_id, keys=keys, output_tag=left._output_tag)
        graph.connect(right._op_id, op_id, keys=keys, output_tag=right._output_tag)
        return left._output(op_id)


class JoinBuilder:
    """`a.join(b).where("k").equal_to("k").window(TumblingEventTimeWindows.of(ms))`: pairs of
    rows with equal keys in the same event-time window (tumbling or sliding), each pair once
    per window they share. Output: the left key columns, `window_start`, `window_end`, the
    left stream's other columns, then the right stream's (names the left has too get
    `right_suffix`). The `where` and `equal_to` columns must have the same types."""

    def __init__(self, left: DataStream, right: DataStream):
        if left._op_id == right._op_id and left._output_tag == right._output_tag:
            raise ValueError("join() of a stream with itself: map() one side first")
        self._left, self._right = left, right
        self._where: tuple[str, ...] | None = None
        self._equal_to: tuple[str, ...] | None = None

    def where(self, *columns: str) -> JoinBuilder:
        self._where = key_columns(columns)
        return self

    def equal_to(self, *columns: str) -> JoinBuilder:
        if self._where is None:
            raise ValueError("join(...): call where(left columns) before equal_to(right columns)")
        self._equal_to = key_columns(columns)
        if len(self._equal_to) != len(self._where):
            raise ValueError(
                f"join(...): where{self._where} and equal_to{self._equal_to} name different numbers of columns"
            )
        return self

    def window(self, assigner: Any, right_suffix: str = "_right", name: str | None = None) -> DataStream:
        from sluice.eventtime.windows import PaneWindows

        if self._where is None or self._equal_to is None:
            raise ValueError('join(...): say the keys first: .where("k").equal_to("k")')
        if not isinstance(assigner, PaneWindows) or assigner.processing_time:
            raise TypeError(
                "join(...).window() takes TumblingEventTimeWindows.of(ms) or SlidingEventTimeWindows.of(size, slide)"
            )
        left, right = self._left, self._right
        graph = left._graph
        timestamps = [graph.timestamp_column(s._op_id) for s in (left, right)]
        for side, column in zip(("left", "right"), timestamps, strict=True):
            if column is None:
                raise ValueError(
                    f"join(...).window(): the {side} stream has no event time; call "
                    "assign_timestamps_and_watermarks(...) on it first"
                )
        schemas_ = graph.output_schemas()
        ls, rs = schemas_[left._op_id], schemas_[right._op_id]
        for lk, rk in zip(self._where, self._equal_to, strict=True):
            lt = ls.type_of(lk) if ls is not None else None
            rt = rs.type_of(rk) if rs is not None else None
            if lt and rt and schemas.UNKNOWN not in (lt, rt) and lt != rt:
                raise ValueError(
                    f"join(...): where({lk!r}) is {lt} but equal_to({rk!r}) is {rt}; keys hash by type: cast one side"
                )
        keys, right_keys = list(self._where), list(self._equal_to)
        payload: dict[str, Any] = {
            "keys": keys,
            "right_keys": right_keys,
            "window": assigner.to_config(),
            "left_timestamp": timestamps[0],
            "right_timestamp": timestamps[1],
            "left": left._op_id,
            "right_suffix": right_suffix,
        }
        op_id = graph.add(OperatorKind.WINDOW_JOIN, payload, name or f"window join by {', '.join(keys)}")
        graph.connect(left._op_id, op_id, keys=keys, output_tag=left._output_tag)
        graph.connect(right._op_id, op_id, keys=right_keys, output_tag=right._output_tag)
        return left._output(op_id)
