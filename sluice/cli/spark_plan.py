"""What `sluice cluster start --spark standalone|connect` runs, without running it:
the argv and environment of a Spark standalone master and worker or of a Spark
Connect server, all launched through pyspark's own `bin/spark-class`, and the
log lines that say each one is ready. sluice/cli/spark_cluster.py starts the
processes; this module only builds and parses (no processes, sockets or files).

Every process binds the loopback (`SPARK_LOCAL_IP`, `--host`, the Connect
binding address) on ports the kernel picks (port 0); the log line that says a
process is ready also names the port it got. Their web UIs are on the loopback
too (the master's and worker's) or off (the Connect server's application UI),
and the master's REST submission server, which would take a fixed port, is off.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

MODES = ("local", "standalone", "connect")
HOST = "127.0.0.1"

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

# "Starting Spark master at spark://127.0.0.1:42343"
_MASTER_READY = re.compile(r"Starting Spark master at (spark://[^\s:]+:\d+)")
# "I have been elected leader! New state: ALIVE" (after the UI started)
_MASTER_ALIVE = re.compile(r"elected leader! New state: ALIVE")
# "Starting Spark worker 127.0.0.1:34819 with 2 cores, 1536.0 MiB RAM"
_WORKER_ADDRESS = re.compile(r"Starting Spark worker (\S+:\d+) with")
# "Successfully registered with master spark://127.0.0.1:42343"
_WORKER_READY = re.compile(r"Successfully registered with master (spark://\S+)")
# "Spark Connect server started at: 127.0.0.1:44869"
_CONNECT_READY = re.compile(r"Spark Connect server started at: \[?([^\s\]]+?)\]?:(\d+)\s*$", re.MULTILINE)
# "Successfully started service 'MasterUI' on port 37699." (also WorkerUI)
_UI_PORT = re.compile(r"Successfully started service '(?:Master|Worker)UI' on port (\d+)")


class SparkPlanError(ValueError):
    pass


@dataclass(frozen=True)
class Launch:
    """One Spark process: its role in cluster.json, argv and the environment it adds."""

    role: str  # spark-master | spark-worker | spark-connect
    argv: list[str]
    env: dict[str, str]
    log_name: str  # its log file's name in the cluster's log directory


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise SparkPlanError(f"--spark {mode!r}: expected one of {', '.join(MODES)}")
    return mode


def spark_class(spark_home: str) -> str:
    return os.path.join(spark_home, "bin", "spark-class")


def base_env(spark_home: str, log_dir: str, python: str, scratch_dir: str | None = None) -> dict[str, str]:
    """What every Spark process of the cluster gets on top of the caller's environment: pyspark's
    own installation as SPARK_HOME, the loopback only, logs in the cluster's log directory, the
    foreground (spark-class, not the daemon scripts, so the pid is the JVM's), and `python` for
    the Python workers that executors and the Connect server start. `scratch_dir`: where they
    and the executors a worker starts (which inherit its environment) keep scratch files —
    SPARK_LOCAL_DIRS, and the JVMs' java.io.tmpdir through JAVA_TOOL_OPTIONS (native libraries
    unpacked there) — so that a killed one leaves them in the cluster's directory, not /tmp."""
    env = {
        "SPARK_HOME": spark_home,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": log_dir,
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "PYARROW_IGNORE_TIMEZONE": "1",
    }
    if scratch_dir is not None:
        env["SPARK_LOCAL_DIRS"] = scratch_dir
        if not any(c.isspace() for c in scratch_dir):  # the JVM splits JAVA_TOOL_OPTIONS at blanks
            env["JAVA_TOOL_OPTIONS"] = f"-Djava.io.tmpdir={scratch_dir}"
    return env


def master(spark_home: str, log_dir: str, python: str, scratch_dir: str | None = None) -> Launch:
    env = base_env(spark_home, log_dir, python, scratch_dir)
    # the REST submission server would take its fixed port 6066; nothing here submits through it
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
    argv = [spark_class(spark_home), MASTER_CLASS, "--host", HOST, "--port", "0", "--webui-port", "0"]
    return Launch("spark-master", argv, env, "spark-master.log")


def worker(
    spark_home: str,
    log_dir: str,
    python: str,
    master_url: str,
    index: int,
    cores: int,
    memory_mb: int,
    work_dir: str,
    scratch_dir: str | None = None,
) -> Launch:
    """A worker offering `cores` and `memory_mb` to the applications (one per TaskManager) that the
    master places on it; executors run in `work_dir` (their stdout/stderr land there too)."""
    if cores < 1 or memory_mb < 512:
        raise SparkPlanError(f"a Spark worker needs at least 1 core and 512 MB, got {cores} and {memory_mb} MB")
    if not master_url.startswith("spark://"):
        raise SparkPlanError(f"a Spark worker needs the master's spark:// URL, got {master_url!r}")
    env = base_env(spark_home, log_dir, python, scratch_dir)
    argv = [
        spark_class(spark_home),
        WORKER_CLASS,
        "--host",
        HOST,
        "--port",
        "0",
        "--webui-port",
        "0",
        "--cores",
        str(cores),
        "--memory",
        f"{memory_mb}m",
        "--work-dir",
        work_dir,
        master_url,
    ]
    return Launch("spark-worker", argv, env, f"spark-worker-{index}.log")


def connect_server(
    spark_home: str, log_dir: str, python: str, cores: int, driver_memory: str = "2g", scratch_dir: str | None = None
) -> Launch:
    """A Spark Connect server (the connect jar ships in pyspark's jars/) whose own Spark is
    local[cores]; its gRPC port is picked by the kernel and read back from its log."""
    if cores < 1:
        raise SparkPlanError(f"a Spark Connect server needs at least 1 core, got {cores}")
    env = base_env(spark_home, log_dir, python, scratch_dir)
    argv = [
        spark_class(spark_home),
        SUBMIT_CLASS,
        "--class",
        CONNECT_CLASS,
        "--name",
        "sluice-spark-connect",
        "--master",
        f"local[{cores}]",
        "--driver-memory",
        driver_memory,
        "--conf",
        f"spark.connect.grpc.binding.address={HOST}",
        "--conf",
        "spark.connect.grpc.binding.port=0",
        "--conf",
        f"spark.driver.bindAddress={HOST}",
        "--conf",
        f"spark.driver.host={HOST}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.sql.shuffle.partitions={cores}",
        "--conf",
        "spark.sql.session.timeZone=UTC",
    ]
    return Launch("spark-connect", argv, env, "spark-connect.log")


def master_url(log_text: str) -> str | None:
    """The spark:// URL a master's log says it serves, once it is the (only) leader and accepts
    workers and applications."""
    m = _MASTER_READY.search(log_text)
    return m.group(1) if m and _MASTER_ALIVE.search(log_text) else None


def worker_address(log_text: str) -> str | None:
    m = _WORKER_ADDRESS.search(log_text)
    return m.group(1) if m else None


def worker_registered(log_text: str, master: str) -> bool:
    return any(m.group(1) == master for m in _WORKER_READY.finditer(log_text))


def connect_url(log_text: str) -> str | None:
    """The sc:// URL of a Connect server once its log says it listens."""
    m = _CONNECT_READY.search(log_text)
    return f"sc://{m.group(1)}:{m.group(2)}" if m else None


def ui_port(log_text: str) -> int | None:
    m = _UI_PORT.search(log_text)
    return int(m.group(1)) if m else None


def host_port(url: str) -> str:
    """spark://h:p or sc://h:p -> h:p (cluster.json's `address`)."""
    return url.split("://", 1)[-1].rstrip("/")


def merged_env(base: Mapping[str, str], launch: Launch) -> dict[str, str]:
    """The caller's environment with the launch's on top; JAVA_TOOL_OPTIONS of both are kept."""
    env = {**base, **launch.env}
    if base.get("JAVA_TOOL_OPTIONS") and "JAVA_TOOL_OPTIONS" in launch.env:
        env["JAVA_TOOL_OPTIONS"] = f"{base['JAVA_TOOL_OPTIONS']} {launch.env['JAVA_TOOL_OPTIONS']}"
    return env
