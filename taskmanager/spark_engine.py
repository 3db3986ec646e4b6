"""The TaskManager's one long-lived SparkSession, and the Batch that moves
between a chain's operators either as a Spark DataFrame or an Arrow table,
converted only when an operator needs the other form.

Python UDFs in task bodies (`udf`, `pandas_udf`, `mapInPandas`,
`applyInPandas`) run in Spark's Python workers, which must be this
TaskManager's interpreter (its venv has pyarrow, pandas and the job's
libraries), not whatever `python3` is first on PATH: with a local master the
workers are started from `PYSPARK_PYTHON`, set to `sys.executable`; with
another master (spark://...) the executors are told the same path through
`spark.pyspark.python`, which holds when they run the TaskManager's image
(compose, k8s); set `spark.pyspark.python` (or PYSPARK_PYTHON) to the
executors' interpreter otherwise. With Spark Connect the server's Python
runs them.

Network: Spark's driver and its block manager listen on `host` only — the
TaskManager's advertised host (its rpc.host when that is not a wildcard,
else 127.0.0.1): `spark.driver.bindAddress` and `spark.driver.host`, which
the block manager's transfer service binds too. Nothing of Spark listens on
another interface (the UI is off; pyspark's gateway and Python-worker
sockets are on the loopback).

Standalone (spark://...): each TaskManager is one Spark application, capped
at `spark.cores.max` = its slots and 1g executors, so that several
TaskManagers share the workers; their executors connect back to this
driver on `host`. Spark Connect (sc://...): the session sets only `spark.sql.*`
options (driver settings belong to the server); job tags are the session's
`addTag`/`interruptTag`, per thread as in a classic session; there is no
`sparkContext` (docs/external-spark.md)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

import pyarrow as pa

from sluice import key_groups
from taskmanager import spark_cds

log = logging.getLogger("sluice.taskmanager.spark")

# paths one read lists on the driver before Spark lists them with a job (local masters; a file
# source call reads at most execution.source.max-files-per-read files, 256 by default)
LOCAL_LISTING_THRESHOLD = 4096

_WARM_UP_ROWS = "".join(f'{{"k": "k{i % 7}", "v": {i}}}\n' for i in range(200))


def warm_up_input(directory: str | None = None) -> str:
    """The warm-up's input file: one fixed file per user and content, written once by
    rename, so that a TaskManager killed during its warm-up leaves nothing behind and
    TaskManagers on one machine share the file."""
    import hashlib
    import tempfile

    digest = hashlib.sha256(_WARM_UP_ROWS.encode()).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(directory or tempfile.gettempdir(), f"sluice-warm-up-{uid}-{digest}.jsonl")
    try:
        with open(path) as f:
            if f.read() == _WARM_UP_ROWS:
                return path
    except OSError:
        pass
    staging = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(staging, "w") as f:
            f.write(_WARM_UP_ROWS)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return path


def _java_option_value(value: str) -> str:
    """`value` as one argument of a Java options string (Spark splits it at blanks unless quoted)."""
    if not any(c.isspace() or c in "\"'\\" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SparkEngine:
    def __init__(
        self,
        slots: int,
        master: str | None = None,
        remote: str | None = None,
        conf: dict[str, str] | None = None,
        app_name: str = "sluice-taskmanager",
        host: str = "127.0.0.1",
        cds_archive: str | None = None,
    ) -> None:
        self.slots = slots
        self.host = host
        self.master = master or f"local[{slots}]"
        self.remote = remote
        self.conf = conf or {}
        self.app_name = app_name
        self.cds_archive = None if remote else cds_archive  # a Connect session starts no JVM here
        self.spark: Any = None  # the pyspark SparkSession once started

    def start(self, warm_up: str = "now", local_dir: str | None = None) -> None:
        """Start the SparkSession; then warm it up `now` (before returning), in the
        `background` (a TaskManager offers its slots meanwhile: a task that arrives first
        pays the same one-time costs itself, sharing the CPU with the warm-up) or not at all
        (`off`, the process option spark.warm-up: each kind of call pays them when first made).
        `local_dir`: the driver's scratch space, in the TaskManager's working directory
        (taskmanager/local_dir.py): `spark.local.dir` (the block manager's `blockmgr-*`, the
        driver's and pyspark's `spark-*`) and the JVM's `java.io.tmpdir` (the `artifacts-*`,
        unpacked native libraries). A TaskManager killed with its JVM then leaves them inside the
        directory that the next TaskManager on the host removes, not loose in the system temp
        dir. A `spark.local.dir` in the engine's own conf wins, and then neither is set."""
        if warm_up not in ("now", "background", "off"):
            raise ValueError(f"warm_up must be now, background or off, not {warm_up!r}")
        os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
        local = self.master.startswith("local")
        if local:  # Spark's Python workers (udf, pandas_udf, mapInPandas): this interpreter (module docstring)
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        t0 = time.monotonic()
        builder = SparkSession.builder.appName(self.app_name)
        builder = builder.remote(self.remote) if self.remote else builder.master(self.master)
        defaults = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",  # no progress bars in the log
            "spark.sql.shuffle.partitions": str(self.slots),
            "spark.default.parallelism": str(self.slots),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
            "spark.driver.bindAddress": self.host,  # the driver's RPC and block manager: this host only
            "spark.driver.host": self.host,
        }
        if local:
            # A read of more than 32 paths (Spark's default threshold) lists them with a Spark job of
            # its own; on a local master that job runs in this JVM anyway and only adds a job's fixed
            # cost: 0.2-0.7 s per 40-file source call here (bench/README.md, "Where a page-views
            # job's time goes"). Listed on the driver instead.
            defaults["spark.sql.sources.parallelPartitionDiscovery.threshold"] = str(LOCAL_LISTING_THRESHOLD)
        if not local and not self.remote and "PYSPARK_PYTHON" not in os.environ:
            defaults["spark.pyspark.python"] = sys.executable  # the executors' Python workers (module docstring)
        if self.master.startswith("spark://") and not self.remote:
            # a standalone master gives an application every free core unless capped: this
            # TaskManager takes as many as it has slots, so several share the workers
            defaults["spark.cores.max"] = str(self.slots)
            defaults["spark.executor.memory"] = "1g"
        if self.remote:
            # a Connect session can only set SQL options; the server owns its driver and executors
            defaults = {k: v for k, v in defaults.items() if k.startswith("spark.sql.")}
        conf = {**defaults, **self.conf}
        if local_dir is not None and not self.remote and "spark.local.dir" not in self.conf:
            os.makedirs(local_dir, exist_ok=True)  # java.io.tmpdir must exist; Spark makes its own dirs
            conf["spark.local.dir"] = local_dir
            conf = spark_cds.with_java_options(conf, f"-Djava.io.tmpdir={_java_option_value(local_dir)}")
        if self.cds_archive:
            conf = spark_cds.with_java_options(conf, spark_cds.java_options(self.cds_archive))
        for k, v in conf.items():
            builder = builder.config(k, v)
        self.spark = builder.getOrCreate()
        if not self.remote:
            self.spark.sparkContext.setLogLevel("WARN")
        log.info("SparkSession ready (%s) in %.1fs", self.remote or self.master, time.monotonic() - t0)
        if self.cds_archive:
            problem = spark_cds.check(self.spark, self.cds_archive)
            if problem:
                log.warning(
                    "class-data sharing archive %s not used: %s; rebuild it with `make install` "
                    "(python -m taskmanager.spark_cds build --force)",
                    self.cds_archive,
                    problem,
                )
            else:
                log.info("Spark JVM maps the class-data sharing archive %s", self.cds_archive)
        if warm_up == "background":
            threading.Thread(target=self._warm_up_quietly, name="spark-warm-up", daemon=True).start()
        elif warm_up == "now":
            self.warm_up()

    def _warm_up_quietly(self) -> None:
        try:
            self.warm_up()
        except Exception as exc:  # noqa: BLE001 — the warm-up only saves time; a task would meet the same failure
            if self.spark is not None:
                log.warning("Spark warm-up failed: %s", str(exc)[:500])

    def warm_up(self) -> None:
        """Run each kind of Spark call a task makes once: the first file read, projection
        and Arrow transfer of a fresh JVM cost seconds (code generation, JIT; class loading
        too without the class-data sharing archive, taskmanager/spark_cds.py). A TaskManager
        runs it in the background while it offers its slots."""
        from pyspark.sql import functions as F

        t0 = time.monotonic()
        df = self.spark.read.schema("k string, v long").json([warm_up_input()])
        df.select("k", key_groups.spark_key_group("k", 128), "v").toArrow()
        df.groupBy("k").agg(F.count(F.lit(1)), F.sum("v")).toArrow()
        self.spark.createDataFrame(pa.table({"k": ["a"], "v": [1]})).selectExpr("k", "v + 1 AS w").toArrow()
        self.spark.range(0, 1000, 2).selectExpr("CAST(id % 5 AS STRING) AS k").toArrow()
        log.info("Spark warmed up in %.1fs", time.monotonic() - t0)

    # -- the JVM's life ------------------------------------------------------------------------
    def _jvm_process(self) -> Any:
        if self.remote or self.spark is None:
            return None  # Spark Connect: no JVM of ours
        from pyspark import SparkContext

        return getattr(SparkContext._gateway, "proc", None)

    def jvm_exit_status(self) -> int | None:
        """The local Spark JVM's exit status once it ended; None while it runs (and with Spark
        Connect, which starts no JVM here)."""
        proc = self._jvm_process()
        return None if proc is None else proc.poll()

    def jvm_pid(self) -> int | None:
        proc = self._jvm_process()
        return None if proc is None else proc.pid

    # -- cancelling a task's Spark jobs ------------------------------------------------------
    def tag_current_thread(self, tag: str) -> None:
        """Spark jobs started by this thread carry `tag`, so that cancel_tag can stop them."""
        if self.remote:
            self.spark.addTag(tag)
        else:
            self.spark.sparkContext.addJobTag(tag)

    def cancel_tag(self, tag: str) -> None:
        try:
            if self.remote:
                self.spark.interruptTag(tag)
            else:
                self.spark.sparkContext.cancelJobsWithTag(tag)
        except Exception as exc:  # noqa: BLE001 — cancellation is best effort
            log.debug("cancelling Spark jobs tagged %s failed: %s", tag, exc)

    def stop(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception:  # noqa: BLE001 — stopping: a failure changes nothing
                pass
            self.spark = None


_actions = threading.local()  # this thread's seconds in Spark actions (to_arrow)


def to_arrow(df: Any) -> pa.Table:
    """`df.toArrow()`: the Spark action a chain runs (plan, scan, projection, Arrow transfer),
    its seconds added to the calling thread's `spark_seconds`, which a source batch's log line
    reports (bench/job_breakdown.py reads them)."""
    started = time.perf_counter()
    try:
        return df.toArrow()
    finally:
        _actions.seconds = spark_seconds() + time.perf_counter() - started


def spark_seconds() -> float:
    """Seconds the calling thread has spent in `to_arrow` in all."""
    return float(getattr(_actions, "seconds", 0.0))


class Batch:
    """Rows of one step of a chain, as a DataFrame (lazy) or Arrow table."""

    def __init__(self, engine: SparkEngine | None, df: Any = None, table: pa.Table | None = None) -> None:
        self.engine = engine  # None: Arrow rows only (an operator context without Spark, as in unit tests)
        self._df = df  # a pyspark DataFrame
        self._table = table

    def dataframe(self) -> Any:
        if self._df is None:
            assert self.engine is not None, "an Arrow batch without a SparkEngine has no DataFrame"
            self._df = self.engine.spark.createDataFrame(self._table)
            self._table = None
        return self._df

    def table(self) -> pa.Table:
        if self._table is None:
            self._table = to_arrow(self._df)
            self._df = None
        return self._table

    @property
    def is_table(self) -> bool:
        return self._table is not None
