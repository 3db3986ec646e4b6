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
from sluice.graph import OperatorKind

if TYPE_CHECKING:
    from sluice.api.datastream import DataStream, KeyedStream


class IntervalJoinBuilder:
    def __init__(self, left: KeyedStream, right: KeyedStream):
        from sluice.api.datastream import KeyedStream

        if not isinstance(right, KeyedStream):
            raise TypeError(f"interval_join() takes another keyed stream: b.key_by(col); got {type(right).__name__}")
        if tuple(left.keys) != tuple(right.keys):
            raise ValueError(
                f"interval_join(): both sides must be keyed by the same column names, got {list(left.keys)} and "
                f"{list(right.keys)}; select() the right side's key under the left side's name first"
            )
        if left._stream._op_id == right._stream._op_id:
            raise ValueError("interval_join() of a stream with itself: map() one side first")
        env = left._stream._env
        timestamps = [env._timestamp_column(s._stream._op_id) for s in (left, right)]
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
        from sluice.api.datastream import DataStream

        for what, bound in (("lower_ms", lower_ms), ("upper_ms", upper_ms)):
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise TypeError(f"between(): {what} must be a whole number of ms, got {bound!r}")
        if lower_ms > upper_ms:
            raise ValueError(f"between(): lower_ms ({lower_ms}) is above upper_ms ({upper_ms}); no pair could join")
        if not isinstance(right_suffix, str) or not right_suffix:
            raise ValueError(f"between(): right_suffix must be a non-empty string, got {right_suffix!r}")
        left, right = self._left._stream, self._right._stream
        env = left._env
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
        op_id = env._add(OperatorKind.INTERVAL_JOIN, payload, name or f"interval join by {', '.join(keys)}")
        env._connect(left._op_id, op_id, keys=keys, output_tag=left._output_tag)
        env._connect(right._op_id, op_id, keys=keys, output_tag=right._output_tag)
        return DataStream(env, op_id)


def join_schema(
    inputs: list[schemas.Schema | None],
    keys: list[str],
    suffix: str,
    right_keys: list[str] | None = None,
    windowed: bool = False,
) -> schemas.Schema | None:
    """A join's output columns, when both inputs' are known."""
    left, right = (inputs + [None, None])[:2] if len(inputs) <= 2 else (None, None)
    if left is None or right is None:
        return None
    fields = [f for f in left.fields if f.name in keys]
    if windowed:
        fields += list(schemas.of(("window_start", "bigint"), ("window_end", "bigint")).fields)
    fields += [f for f in left.fields if f.name not in keys]
    names = set(left.names)
    for f in right.fields:
        if f.name not in (right_keys or keys):
            fields.append(schemas.Field(f.name + suffix if f.name in names else f.name, f.type))
    return schemas.Schema(tuple(fields))


class JoinBuilder:
    """`a.join(b).where("k").equal_to("k").window(TumblingEventTimeWindows.of(ms))`: pairs of
    rows with equal keys in the same event-time window (tumbling or sliding), each pair once
    per window they share. Output: the left key columns, `window_start`, `window_end`, the
    left stream's other columns, then the right stream's (names the left has too get
    `right_suffix`). The `where` and `equal_to` columns must have the same types."""

    def __init__(self, left: DataStream, right: DataStream):
        from sluice.api.datastream import DataStream

        if not isinstance(right, DataStream):
            raise TypeError(f"join() takes another stream, got {type(right).__name__}")
        if left._op_id == right._op_id and left._output_tag == right._output_tag:
            raise ValueError("join() of a stream with itself: map() one side first")
        self._left, self._right = left, right
        self._where: tuple[str, ...] | None = None
        self._equal_to: tuple[str, ...] | None = None

    def where(self, *columns: str) -> JoinBuilder:
        from sluice.api.datastream import key_columns

        self._where = key_columns(columns)
        return self

    def equal_to(self, *columns: str) -> JoinBuilder:
        from sluice.api.datastream import key_columns

        if self._where is None:
            raise ValueError("join(...): call where(left columns) before equal_to(right columns)")
        self._equal_to = key_columns(columns)
        if len(self._equal_to) != len(self._where):
            raise ValueError(
                f"join(...): where{self._where} and equal_to{self._equal_to} name different numbers of columns"
            )
        return self

    def window(self, assigner: Any, right_suffix: str = "_right", name: str | None = None) -> DataStream:
        from sluice.api.datastream import DataStream
        from sluice.eventtime.windows import PaneWindows

        if self._where is None or self._equal_to is None:
            raise ValueError('join(...): say the keys first: .where("k").equal_to("k")')
        if not isinstance(assigner, PaneWindows) or assigner.processing_time:
            raise TypeError(
                "join(...).window() takes TumblingEventTimeWindows.of(ms) or SlidingEventTimeWindows.of(size, slide)"
            )
        left, right = self._left, self._right
        env = left._env
        timestamps = [env._timestamp_column(s._op_id) for s in (left, right)]
        for side, column in zip(("left", "right"), timestamps, strict=True):
            if column is None:
                raise ValueError(
                    f"join(...).window(): the {side} stream has no event time; call "
                    "assign_timestamps_and_watermarks(...) on it first"
                )
        schemas_ = env._schemas()
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
        op_id = env._add(OperatorKind.WINDOW_JOIN, payload, name or f"window join by {', '.join(keys)}")
        env._connect(left._op_id, op_id, keys=keys, output_tag=left._output_tag)
        env._connect(right._op_id, op_id, keys=right_keys, output_tag=right._output_tag)
        return DataStream(env, op_id)
