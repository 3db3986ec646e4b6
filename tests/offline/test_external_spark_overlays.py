"""The external-Spark overlays (docs/external-spark.md), validated offline (no Docker engine, no
cluster): docker-compose.spark.yml and k8s-spark/ against their schemas, rendered over the base,
their Spark master and workers run from the Sluice image's pyspark, and the TaskManagers pointed
at that master (accepted by `--check`) with the job's files where the executors read them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from deployment_files import (
    DUMMY_NAMESPACE,
    DUMMY_POD_IP,
    ROOT,
    PodContainer,
    checked_settings,
    compose,
    compose_command,
    compose_env,
    dockerfile_instructions,
    find,
    is_sluice_image,
    kustomize,
    prepare,
    rendered,
    required,
    run,
    selects,
    tool,
)

__all__ = ["rendered"]  # the fixture, rendered once for this module


COMPOSE_SPARK = ROOT / "docker-compose.spark.yml"
K8S_SPARK = ROOT / "k8s-spark"


def image_python() -> tuple[str, str]:
    """The image's interpreter and its pyspark directory, from the Dockerfile's base image."""
    base = next(arg for op, arg in dockerfile_instructions() if op == "FROM")
    version = re.match(r"python:(\d+\.\d+)", base.split("/")[-1])
    assert version, f"the Dockerfile's base image {base} is not python:X.Y"
    return "/usr/local/bin/python", f"/usr/local/lib/python{version.group(1)}/site-packages/pyspark"


def spark_url_parts(url: str) -> tuple[str, int]:
    assert url.startswith("spark://"), url
    host, _, port = url[len("spark://") :].rpartition(":")
    return host, int(port)


def test_spark_compose_overlay_matches_the_compose_spec():
    exe = tool("check-jsonschema")
    assert exe, "check-jsonschema is missing: pip install -e '.[test]'"
    proc = run([exe, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_SPARK)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_spark_compose_overlay_points_taskmanagers_at_its_master():
    from sluice.cli import spark_plan

    base, overlay = compose()["services"], yaml.safe_load(COMPOSE_SPARK.read_text())["services"]
    python, pyspark = image_python()
    master, worker = overlay["spark-master"], overlay["spark-worker"]
    for name, svc, cls in (
        ("spark-master", master, spark_plan.MASTER_CLASS),
        ("spark-worker", worker, spark_plan.WORKER_CLASS),
    ):
        assert is_sluice_image(svc["image"]), f"{name} runs the Sluice image's pyspark"
        assert svc["entrypoint"] == [f"{pyspark}/bin/spark-class"], name
        assert compose_command(svc)[0] == cls
        env = compose_env(svc)
        assert env["SPARK_HOME"] == pyspark and env["SPARK_NO_DAEMONIZE"] == "1"
    master_args = compose_command(master)
    host, port = master_args[master_args.index("--host") + 1], int(master_args[master_args.index("--port") + 1])
    assert host == master["hostname"] and str(port) in master["expose"]
    assert "spark.master.rest.enabled=false" in compose_env(master)["SPARK_MASTER_OPTS"]
    assert all(p.startswith("127.0.0.1:") for p in master.get("ports", [])), "the master UI on the host's loopback"
    # the worker registers with that master; its executors' Python is the image's
    assert spark_url_parts(compose_command(worker)[-1]) == (host, port)
    assert compose_env(worker)["PYSPARK_PYTHON"] == python
    assert worker["depends_on"]["spark-master"]["condition"] == "service_healthy"
    # TaskManagers: the base service's settings plus the overlay's, accepted by --check
    tm = base["taskmanager"]
    env = {**compose_env(tm), **compose_env(overlay["taskmanager"])}
    s = checked_settings(compose_command(tm), env, "taskmanager with docker-compose.spark.yml")["settings"]
    assert spark_url_parts(s["spark.master"]) == (host, port)
    assert s["spark.remote"] is None
    # executors read the job's files where the TaskManagers do: the data volume at the same path
    tm_data = [v for v in tm["volumes"] if v.startswith("sluice-data:")]
    assert tm_data and set(tm_data) <= set(worker["volumes"])


def spark_container(docs: list[dict], workload: dict, pyspark: str, tmp_path: Path) -> PodContainer:
    """A Spark container of the overlay as the kubelet runs it: the image's pyspark launcher,
    then its args (the class and its flags) with $(VAR)s expanded."""
    [container] = workload["spec"]["template"]["spec"]["containers"]
    assert is_sluice_image(container["image"]), "Spark runs from the Sluice image's pyspark"
    assert container["command"] == [f"{pyspark}/bin/spark-class"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SPARK_HOME"] == pyspark and env["SPARK_NO_DAEMONIZE"] == "1"
    args_only = {k: v for k, v in container.items() if k != "command"}
    return prepare(docs, workload, workload["spec"]["template"], args_only, tmp_path)


@pytest.fixture(scope="module")
def rendered_spark() -> list[dict]:
    return kustomize(K8S_SPARK)


@pytest.mark.parametrize("path", sorted(K8S_SPARK.glob("spark-*.yaml")), ids=lambda p: p.name)
def test_spark_k8s_manifest_is_valid_strict(path):
    proc = run([required("kubernetes-validate"), "--strict", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_spark_k8s_overlay_renders_the_base_and_points_taskmanagers_at_its_master(rendered, rendered_spark, tmp_path):
    from sluice.cli import spark_plan

    # everything of the base, plus the Spark master (with its headless Service) and workers
    base = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    got = {(d["kind"], d["metadata"]["name"]) for d in rendered_spark}
    assert got - base == {("Service", "spark-master"), ("StatefulSet", "spark-master"), ("Deployment", "spark-worker")}
    assert base <= got
    python, pyspark = image_python()
    master = find(rendered_spark, "StatefulSet", "spark-master")
    service = find(rendered_spark, "Service", "spark-master")
    assert master["spec"]["serviceName"] == "spark-master" and service["spec"]["clusterIP"] == "None"
    assert selects(service["spec"]["selector"], master["spec"]["template"]["metadata"]["labels"])
    mc = spark_container(rendered_spark, master, pyspark, tmp_path)
    assert mc.args[0] == spark_plan.MASTER_CLASS
    host, port = mc.args[mc.args.index("--host") + 1], int(mc.args[mc.args.index("--port") + 1])
    assert host == f"{mc.pod_name}.spark-master.{DUMMY_NAMESPACE}.svc"
    assert port in [p["containerPort"] for p in mc.container["ports"]]
    worker = find(rendered_spark, "Deployment", "spark-worker")
    wc = spark_container(rendered_spark, worker, pyspark, tmp_path)
    assert wc.args[0] == spark_plan.WORKER_CLASS and spark_url_parts(wc.args[-1]) == (host, port)
    assert wc.args[wc.args.index("--host") + 1] == DUMMY_POD_IP, "executors advertise an address drivers can dial"
    assert wc.env["PYSPARK_PYTHON"] == python
    # the TaskManager: accepted by --check with the overlay's variable, pointing at the master
    tm = find(rendered_spark, "StatefulSet", "taskmanager")
    container = next(c for c in tm["spec"]["template"]["spec"]["containers"] if c["name"] == "taskmanager")
    pc = prepare(rendered_spark, tm, tm["spec"]["template"], container, tmp_path)
    s = checked_settings(pc.args, pc.env, "StatefulSet/taskmanager with k8s-spark/")["settings"]
    assert spark_url_parts(s["spark.master"]) == (host, port)

    # executors read the job's files where the TaskManagers do: the same claim at the same path
    def claim_mounts(p: PodContainer) -> set[tuple[str, str]]:
        volumes = {v["name"]: v for v in p.template["spec"]["volumes"]}
        return {
            (path, volumes[name]["persistentVolumeClaim"]["claimName"])
            for path, name in p.mounts.items()
            if "persistentVolumeClaim" in volumes[name]
        }

    assert claim_mounts(pc) and claim_mounts(pc) <= claim_mounts(wc)
