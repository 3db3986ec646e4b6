"""The TaskManager's one long-lived SparkSession, and the Batch that moves
between a chain's operators either as a Spark DataFrame or an Arrow table,
converted only when an operator needs the other form."""

from __future__ import annotations

import logging
import os
import time

import pyarrow as pa

log = logging.getLogger("sluice.taskmanager.spark")


class SparkEngine:
    def __init__(self, slots: int, master: str | None = None, remote: str | None = None,
                 conf: dict[str, str] | None = None, app_name: str = "sluice-taskmanager"):
        self.slots = slots
        self.master = master or f"local[{slots}]"
        self.remote = remote
        self.conf = conf or {}
        self.app_name = app_name
        self.spark = None

    def start(self) -> None:
        os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
        from pyspark.sql import SparkSession
        t0 = time.monotonic()
        builder = SparkSession.builder.appName(self.app_name)
        builder = builder.remote(self.remote) if self.remote else builder.master(self.master)
        defaults = {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(self.slots),
            "spark.default.parallelism": str(self.slots),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
        }
        for k, v in {**defaults, **self.conf}.items():
            builder = builder.config(k, v)
        self.spark = builder.getOrCreate()
        self.spark.sparkContext.setLogLevel("WARN") if not self.remote else None
        log.info("SparkSession ready (%s) in %.1fs", self.remote or self.master, time.monotonic() - t0)

    def stop(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001
                pass
            self.spark = None


class Batch:
    """Rows of one step of a chain, as a DataFrame (lazy) or Arrow table."""

    def __init__(self, engine: SparkEngine, df=None, table: pa.Table | None = None):
        self.engine = engine
        self._df = df
        self._table = table

    def dataframe(self):
        if self._df is None:
            self._df = self.engine.spark.createDataFrame(self._table)
            self._table = None
        return self._df

    def table(self) -> pa.Table:
        if self._table is None:
            self._table = self._df.toArrow()
            self._df = None
        return self._table

    @property
    def is_table(self) -> bool:
        return self._table is not None
