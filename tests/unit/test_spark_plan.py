"""The argv, environment and readiness lines of the Spark processes that
`sluice cluster start --spark standalone|connect` runs (sluice/cli/spark_plan.py)."""

from __future__ import annotations

import pytest

from sluice.cli import spark_plan

HOME, LOGS, PY = "/opt/pyspark", "/c/log", "/venv/bin/python"

MASTER_LOG = """\
26/11/26 09:27:47 INFO Master: Starting Spark master at spark://127.0.0.1:42343
26/11/26 09:27:47 INFO JettyUtils: Start Jetty 127.0.0.1:0 for MasterUI
26/11/26 09:27:47 INFO Utils: Successfully started service 'MasterUI' on port 37699.
26/11/26 09:27:48 INFO Master: I have been elected leader! New state: ALIVE
"""
WORKER_LOG = """\
26/11/26 09:29:28 INFO Worker: Starting Spark worker 127.0.0.1:34819 with 2 cores, 1536.0 MiB RAM
26/11/26 09:29:29 INFO Utils: Successfully started service 'WorkerUI' on port 37285.
26/11/26 09:27:56 INFO Worker: Connecting to master 127.0.0.1:42343...
26/11/26 09:27:56 INFO Worker: Successfully registered with master spark://127.0.0.1:42343
"""
CONNECT_LOG = """\
26/11/26 09:28:08 INFO SparkConnectService: start GRPC service at: 127.0.0.1
26/11/26 09:28:08 INFO SparkConnectServer: Spark Connect server started at: 127.0.0.1:44869
"""


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_master_binds_the_loopback_on_kernel_ports_without_the_rest_server():
    launch = spark_plan.master(HOME, LOGS, PY)
    assert launch.role == "spark-master"
    assert launch.argv[:2] == [f"{HOME}/bin/spark-class", "org.apache.spark.deploy.master.Master"]
    assert (flag(launch.argv, "--host"), flag(launch.argv, "--port"), flag(launch.argv, "--webui-port")) == (
        "127.0.0.1",
        "0",
        "0",
    )
    assert launch.env["SPARK_LOCAL_IP"] == "127.0.0.1"  # the web UI binds it too
    assert "-Dspark.master.rest.enabled=false" in launch.env["SPARK_MASTER_OPTS"]
    assert launch.env["SPARK_NO_DAEMONIZE"] == "1" and launch.env["SPARK_LOG_DIR"] == LOGS
    assert launch.env["SPARK_HOME"] == HOME and launch.env["PYSPARK_PYTHON"] == PY


def test_worker_offers_its_cores_and_memory_to_the_master_and_works_in_the_given_dir():
    launch = spark_plan.worker(HOME, LOGS, PY, "spark://127.0.0.1:42343", 1, 4, 2560, "/c/spark-work")
    assert launch.argv[1] == "org.apache.spark.deploy.worker.Worker"
    assert launch.argv[-1] == "spark://127.0.0.1:42343"
    assert flag(launch.argv, "--cores") == "4" and flag(launch.argv, "--memory") == "2560m"
    assert flag(launch.argv, "--work-dir") == "/c/spark-work" and flag(launch.argv, "--host") == "127.0.0.1"
    assert launch.log_name == "spark-worker-1.log"
    assert launch.env["PYSPARK_PYTHON"] == PY  # the executors' Python workers


@pytest.mark.parametrize(
    ("url", "cores", "memory", "message"),
    [
        ("spark://h:1", 0, 1024, "at least 1 core"),
        ("spark://h:1", 1, 100, "512 MB"),
        ("sc://h:1", 1, 1024, "spark:// URL"),
    ],
)
def test_worker_rejects_what_cannot_run(url, cores, memory, message):
    with pytest.raises(spark_plan.SparkPlanError, match=message):
        spark_plan.worker(HOME, LOGS, PY, url, 0, cores, memory, "/w")


def test_connect_server_is_spark_submit_of_the_connect_class_on_the_loopback():
    launch = spark_plan.connect_server(HOME, LOGS, PY, 3)
    argv = launch.argv
    assert argv[1] == "org.apache.spark.deploy.SparkSubmit"
    assert flag(argv, "--class") == "org.apache.spark.sql.connect.service.SparkConnectServer"
    assert flag(argv, "--master") == "local[3]"
    confs = {c.split("=", 1)[0]: c.split("=", 1)[1] for c in (argv[i + 1] for i, a in enumerate(argv) if a == "--conf")}
    assert confs["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert confs["spark.connect.grpc.binding.port"] == "0"
    assert confs["spark.driver.bindAddress"] == "127.0.0.1" and confs["spark.ui.enabled"] == "false"
    with pytest.raises(spark_plan.SparkPlanError, match="at least 1 core"):
        spark_plan.connect_server(HOME, LOGS, PY, 0)


def test_master_is_ready_once_it_leads_and_names_its_url():
    assert spark_plan.master_url(MASTER_LOG) == "spark://127.0.0.1:42343"
    assert spark_plan.master_url(MASTER_LOG.split("I have been")[0]) is None  # not the leader yet
    assert spark_plan.master_url("") is None
    assert spark_plan.ui_port(MASTER_LOG) == 37699


def test_worker_is_ready_once_registered_with_that_master():
    assert spark_plan.worker_registered(WORKER_LOG, "spark://127.0.0.1:42343")
    assert not spark_plan.worker_registered(WORKER_LOG, "spark://127.0.0.1:1")
    assert not spark_plan.worker_registered(WORKER_LOG.split("Successfully registered")[0], "spark://127.0.0.1:42343")
    assert spark_plan.worker_address(WORKER_LOG) == "127.0.0.1:34819"
    assert spark_plan.ui_port(WORKER_LOG) == 37285


def test_connect_server_is_ready_once_it_says_where_it_listens():
    assert spark_plan.connect_url(CONNECT_LOG) == "sc://127.0.0.1:44869"
    assert spark_plan.connect_url(CONNECT_LOG.splitlines()[0]) is None
    assert spark_plan.host_port("sc://127.0.0.1:44869") == "127.0.0.1:44869"
    assert spark_plan.host_port("spark://127.0.0.1:7077") == "127.0.0.1:7077"


def test_mode_is_one_of_local_standalone_connect():
    assert [spark_plan.check_mode(m) for m in spark_plan.MODES] == ["local", "standalone", "connect"]
    with pytest.raises(spark_plan.SparkPlanError, match="expected one of local, standalone, connect"):
        spark_plan.check_mode("yarn")


def test_scratch_files_go_to_the_given_directory_and_the_callers_java_options_stay():
    for launch in (
        spark_plan.master(HOME, LOGS, PY, "/c/spark-scratch"),
        spark_plan.worker(HOME, LOGS, PY, "spark://127.0.0.1:42343", 0, 2, 1024, "/c/spark-work", "/c/spark-scratch"),
        spark_plan.connect_server(HOME, LOGS, PY, 2, scratch_dir="/c/spark-scratch"),
    ):
        assert launch.env["SPARK_LOCAL_DIRS"] == "/c/spark-scratch", launch.role
        assert launch.env["JAVA_TOOL_OPTIONS"] == "-Djava.io.tmpdir=/c/spark-scratch", launch.role
        merged = spark_plan.merged_env({"JAVA_TOOL_OPTIONS": "-Xss2m", "PATH": "/bin"}, launch)
        assert merged["JAVA_TOOL_OPTIONS"] == "-Xss2m -Djava.io.tmpdir=/c/spark-scratch" and merged["PATH"] == "/bin"
    assert "SPARK_LOCAL_DIRS" not in spark_plan.master(HOME, LOGS, PY).env  # none given: Spark's defaults
    spaced = spark_plan.master(HOME, LOGS, PY, "/c/my cluster/spark-scratch").env
    assert spaced["SPARK_LOCAL_DIRS"] == "/c/my cluster/spark-scratch" and "JAVA_TOOL_OPTIONS" not in spaced
