"""Stream–table enrichment: `stream.join_table(table_fn, on=..., how=..., refresh_ms=...)`
(docs/user-state.md).

`table_fn(spark) -> DataFrame` loads a static or slowly changing table inside Spark (a
Parquet or CSV directory, a JDBC read, ...). The table is loaded once per TaskManager and
job operator and shared by its subtasks there (`_TableCache`, reference-counted: unpersisted
when the last subtask using it ends), cached in Spark, and loaded again once it is older than
`refresh_ms`. Each batch is joined with it in Spark (`df.join(broadcast(table), on, how)`),
lazily: the join runs with the rest of the chain's Spark call, and nothing but the batch's
result leaves the JVM.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Self

from sluice.graph import OperatorKind
from taskmanager.operators.base import Operator, OperatorContext, Payload
from taskmanager.spark_engine import Batch


class _TableCache:
    """Loaded tables of this TaskManager: (job, operator) -> [DataFrame, loaded at, users]."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], list[Any]] = {}

    def acquire(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._tables.setdefault(key, [None, 0.0, 0])[2] += 1

    def get(self, key: tuple[str, str], load: Any, spark: Any, refresh_s: float | None) -> Any:
        with self._lock:
            entry = self._tables.setdefault(key, [None, 0.0, 0])
            now = time.monotonic()
            if entry[0] is None or (refresh_s is not None and now - entry[1] >= refresh_s):
                table = load(spark)
                if not hasattr(table, "join"):
                    raise TypeError(f"the table function returned {type(table).__name__}; it must return a DataFrame")
                old, entry[0], entry[1] = entry[0], table.cache(), now
                if old is not None:
                    old.unpersist()
            return entry[0]

    def release(self, key: tuple[str, str]) -> None:
        with self._lock:
            entry = self._tables.get(key)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] <= 0:
                del self._tables[key]
                if entry[0] is not None:
                    try:
                        entry[0].unpersist()
                    except Exception:  # noqa: BLE001 — Spark may be stopping: the cache goes with it
                        pass


TABLES = _TableCache()


class TableJoin(Operator):
    def __init__(self, payload: Payload, ctx: OperatorContext) -> None:
        self.name = ctx.name
        self.load: Any = payload["table_fn"]
        self.on: list[str] = list(payload["on"])
        self.how: str = payload.get("how") or "inner"
        refresh = payload.get("refresh_ms")
        self.refresh_s = refresh / 1000 if refresh else None
        self.key = (ctx.job_id, ctx.operator_id or ctx.name)
        self.engine = ctx.engine
        self._released = False
        TABLES.acquire(self.key)

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:  # noqa: ARG003 — one kind
        return cls(payload, ctx)

    def process(self, batch: Batch) -> Batch | None:
        from pyspark.sql import functions as F

        df = batch.dataframe()
        assert batch.engine is not None, "a task's batches carry its SparkEngine"
        table = TABLES.get(self.key, self.load, batch.engine.spark, self.refresh_s)
        missing = [c for c in self.on if c not in df.columns or c not in table.columns]
        if missing:
            raise KeyError(
                f"{self.name}: join column {', '.join(missing)} is not in both the stream ({', '.join(df.columns)}) "
                f"and the table ({', '.join(table.columns)})"
            )
        return Batch(batch.engine, df=df.join(F.broadcast(table), on=self.on, how=self.how))

    def _release(self) -> None:
        if not self._released:
            self._released = True
            TABLES.release(self.key)

    def end_input(self) -> Batch | None:
        self._release()
        return None

    def abort(self) -> None:
        self._release()
