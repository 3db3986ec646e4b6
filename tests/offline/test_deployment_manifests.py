"""The deployment files, validated offline (no Docker engine, no cluster).

(a) docker-compose.yml against the Compose specification (check-jsonschema's
    vendored schema);
(b) every manifest under k8s/ with kubernetes-validate --strict (its schemas
    ship inside the package: no network);
(c) `kubectl kustomize k8s/` renders every resource;
(d) every Sluice container, in the compose file and in the rendered k8s output,
    passes `python -m sluice.cli <its args> --check` with its environment
    ($(VAR) references resolved with dummy pod values) and the ConfigMap files
    it mounts; the ports of its probes, healthchecks and Services are the port
    the process is configured to listen on; it reaches the shipped ZooKeeper and
    the shared checkpoint volume;
(e) unknown flags, variables and keys and bad values make --check fail, naming them.

The `sluice health` and process commands are tested in test_process_commands.py, the
external-Spark overlays in test_external_spark_overlays.py; what they share with this module (the
files read, the `rendered` fixture, a container's `--check`) is in deployment_files.py.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest
import yaml
from deployment_files import (
    COMPOSE,
    DUMMY_NAMESPACE,
    DUMMY_POD_IP,
    K8S,
    ROOT,
    WILDCARD,
    assert_secured,
    check,
    checked_settings,
    compose,
    compose_command,
    compose_env,
    compose_processes,
    dockerfile_instructions,
    find,
    k8s_ids,
    k8s_manifest_files,
    kustomization,
    pod_templates,
    prepare,
    process_parser,
    raw_k8s_docs,
    rendered,
    required,
    run,
    selects,
    sluice_containers,
    tool,
)

from sluice import config
from sluice.cli import processes

__all__ = ["rendered"]  # the fixture, rendered once for this module


# == (a) (b) (c) =================================================================================
def test_a_compose_file_matches_the_compose_spec():
    exe = tool("check-jsonschema")
    assert exe, "check-jsonschema is missing: pip install -e '.[test]'"
    proc = run([exe, "--builtin-schema", "vendor.compose-spec", str(COMPOSE)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_the_compose_validator_is_not_vacuous(tmp_path):
    broken = compose()
    broken["services"]["taskmanager"]["restart_policy"] = "always"  # not a Compose key
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    proc = run([required("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)])
    assert proc.returncode != 0 and "restart_policy" in proc.stdout + proc.stderr


@pytest.mark.parametrize("path", k8s_manifest_files(), ids=lambda p: p.name)
def test_b_k8s_manifest_is_valid_strict(path):
    exe = tool("kubernetes-validate")
    assert exe, "kubernetes-validate is missing: pip install -e '.[test]'"
    proc = run([exe, "--strict", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed" in proc.stdout


def test_b_the_k8s_validator_is_not_vacuous(tmp_path):
    docs = [d for d in yaml.safe_load_all((K8S / "jobmanager.yaml").read_text()) if d]
    docs[0]["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}  # misspelt field
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    proc = run([required("kubernetes-validate"), "--strict", str(path)])
    assert proc.returncode != 0 and "livenesProbe" in proc.stdout + proc.stderr


def test_b_every_manifest_is_in_the_kustomization():
    assert sorted(kustomization()["resources"]) == sorted(p.name for p in k8s_manifest_files())


def test_c_kustomize_renders_every_resource(rendered):
    expected = {(d["kind"], d["metadata"]["name"]) for d in raw_k8s_docs()}
    got = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    assert got == expected
    kinds = {k for k, _ in got}
    assert {
        "Namespace",
        "ConfigMap",
        "Service",
        "StatefulSet",
        "Deployment",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
    } <= kinds
    namespace = kustomization()["namespace"]
    for d in rendered:
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == namespace, d["metadata"]["name"]


# == (d) compose ===================================================================================
@pytest.mark.parametrize("name", compose_processes())
def test_d_compose_container_configuration(name):
    services = compose()["services"]
    svc = services[name]
    args, env = compose_command(svc), compose_env(svc)
    role = args[0]
    out = checked_settings(args, env, f"compose service {name}")
    s = out["settings"]
    port = s["rpc.port"]
    assert port > 0, f"{name}: a container needs a fixed rpc.port"
    assert s["rpc.host"] in WILDCARD, f"{name}: bind 0.0.0.0 so other containers reach it"
    if role == "jobmanager":
        assert s["rpc.advertised-host"] in (name, svc.get("hostname")), "a JobManager advertises its service name"
    else:
        assert env.get("SLUICE_RPC_ADVERTISED_HOST") == "auto", "scaled TaskManagers advertise their own IP"
        assert "container_name" not in svc and not svc.get("ports"), "taskmanager must scale (--scale taskmanager=N)"

    # secured: mutual TLS with mounted certificates; probes on the plaintext health-only port
    assert_secured(s, name)
    health_port = s["rpc.health-port"]
    # the healthcheck is a valid `sluice health` call on the health port
    test = svc["healthcheck"]["test"]
    argv = test[1:] if test[0] == "CMD" else shlex.split(test[1])
    assert argv[0] == "sluice", test
    hc = process_parser().parse_args(argv[1:])
    assert hc.command == "health"
    assert hc.address == f"127.0.0.1:{health_port}"
    expected = processes.LIVENESS_SERVICE if role == "jobmanager" else processes.TASKMANAGER_SERVICE
    assert hc.service == expected
    # exposed container ports are the listening ports (gRPC, health, metrics, REST), published ones
    # the gRPC port and the REST API (bound to every interface to be reachable)
    listening = [port, health_port, s["metrics.port"], *([s["rest.port"]] if role == "jobmanager" else [])]
    assert s["metrics.port"], f"{name}: every process serves Prometheus metrics"
    assert sorted(int(str(e).split("/")[0]) for e in svc.get("expose", [])) == sorted(listening)
    if role == "jobmanager":
        assert s["rest.port"] and s["rest.address"] in WILDCARD, f"{name}: the REST API reachable from the host"
    for p in svc.get("ports", []):
        assert int(str(p).split("/")[0].split(":")[-1]) in (port, s.get("rest.port"))
    assert svc["labels"]["prometheus.io/port"] == str(s["metrics.port"])

    # ZooKeeper: the compose service, on its client port
    for entry in s["zookeeper.quorum"].split("/")[0].split(","):
        host, _, zk_port = entry.partition(":")
        assert host in services and services[host]["image"].startswith("zookeeper:"), entry
        assert (zk_port or "2181") == "2181"
    assert svc.get("restart") in ("always", "unless-stopped", "on-failure")
    assert svc["depends_on"]["zookeeper"]["condition"] == "service_healthy"


def test_d_compose_shared_checkpoint_volume():
    data = compose()
    mounts = {}
    dirs = set()
    for name in compose_processes():
        svc = data["services"][name]
        env = compose_env(svc)
        dirs.add(env.get("SLUICE_STATE_CHECKPOINTS_DIR"))
        mounts[name] = {tuple(v.split(":")[:2]) for v in svc["volumes"]}
    assert len(dirs) == 1 and None not in dirs, f"one checkpoint dir for every process, got {dirs}"
    ckpt = dirs.pop()
    assert ckpt is not None
    shared = set.intersection(*mounts.values())
    assert any(src in data["volumes"] and (ckpt + "/").startswith(dst.rstrip("/") + "/") for src, dst in shared), (
        f"{ckpt} must be on one named volume mounted at the same path in every Sluice container: {mounts}"
    )


def test_d_compose_zookeeper_and_jobmanagers():
    services = compose()["services"]
    assert services["zookeeper"]["image"] == "zookeeper:3.8"
    jms = [n for n in compose_processes() if compose_command(services[n])[0] == "jobmanager"]
    tms = [n for n in compose_processes() if compose_command(services[n])[0] == "taskmanager"]
    assert len(jms) == 2 and len(tms) == 1
    ids = {compose_env(services[n]).get("SLUICE_CLUSTER_ID") for n in jms + tms}
    assert len(ids) == 1, f"every process in one cluster id, got {ids}"


# == (d) k8s =======================================================================================
@pytest.mark.parametrize("which", k8s_ids())
def test_d_k8s_container_configuration(which, rendered, tmp_path):
    kind, name, cname = which.split("/")
    workload = find(rendered, kind, name)
    template = workload["spec"]["template"]
    container = next(c for c in template["spec"]["containers"] if c["name"] == cname)
    pc = prepare(rendered, workload, template, container, tmp_path)
    role = pc.args[0]
    out = checked_settings(pc.args, pc.env, which)
    s = out["settings"]
    port = s["rpc.port"]
    assert port > 0 and s["rpc.host"] in WILDCARD
    assert out["config_file"], f"{which}: expected the mounted sluice.yaml to be used"

    # container ports and native gRPC probes (on the plaintext health-only port: kubelet cannot do mTLS)
    assert_secured(s, which)
    health_port = s["rpc.health-port"]
    rest = [s["rest.port"]] if role == "jobmanager" else []
    assert [p["containerPort"] for p in container["ports"]] == [port, health_port, s["metrics.port"], *rest]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(s["metrics.port"])
    if role == "jobmanager":
        assert s["rest.address"] in WILDCARD, f"{which}: the REST API must be reachable through the Service"
    by_name = {p["name"]: p["containerPort"] for p in container["ports"] if "name" in p}
    expected = {
        "readinessProbe": processes.JOBMANAGER_SERVICE if role == "jobmanager" else processes.TASKMANAGER_SERVICE,
        "livenessProbe": processes.LIVENESS_SERVICE,
        "startupProbe": processes.LIVENESS_SERVICE,
    }
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe not in container:
            assert probe == "startupProbe", f"{which} has no {probe}"
            continue
        grpc = container[probe].get("grpc")
        assert grpc, f"{which}: {probe} should be a native grpc probe"
        assert grpc["port"] == health_port, f"{which}: {probe} port {grpc['port']} != rpc.health-port {health_port}"
        assert grpc.get("service", "") == expected[probe], f"{which}: {probe} service"

    # every Service in front of these pods targets the listening port
    labels = template["metadata"]["labels"]
    fronting = [d for d in rendered if d["kind"] == "Service" and selects(d["spec"].get("selector", {}), labels)]
    assert fronting, f"{which}: no Service selects it"
    for svc in fronting:
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            target = by_name.get(target) if isinstance(target, str) else target
            assert target in (port, *rest), f"Service {svc['metadata']['name']} targets {p.get('targetPort')} != {port}"

    # advertised address: a name or IP that reaches this pod
    if role == "taskmanager":
        assert kind == "StatefulSet"
        headless = find(rendered, "Service", workload["spec"]["serviceName"])
        assert headless["spec"].get("clusterIP") == "None" and headless["spec"].get("publishNotReadyAddresses")
        assert selects(headless["spec"]["selector"], labels)
        assert s["rpc.advertised-host"] == f"{pc.pod_name}.{headless['metadata']['name']}.{DUMMY_NAMESPACE}.svc"
    else:
        assert s["rpc.advertised-host"] == DUMMY_POD_IP
        assert workload["spec"]["replicas"] >= 2
        assert workload["spec"]["strategy"]["type"] == "Recreate", "standbys are never ready: no rolling update"

    # ZooKeeper: pods of the shipped ensemble, through its headless Service, on its client port
    for entry in s["zookeeper.quorum"].split("/")[0].split(","):
        host, _, zk_port = entry.partition(":")
        pod, _, service = host.partition(".")
        zk_set = next(d for d in rendered if d["kind"] == "StatefulSet" and d["spec"]["serviceName"] == service)
        assert pod.rsplit("-", 1)[0] == zk_set["metadata"]["name"]
        assert int(pod.rsplit("-", 1)[1]) < zk_set["spec"]["replicas"]
        zk_ports = [
            p["containerPort"]
            for c in zk_set["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
            if p.get("name") == "client"
        ]
        assert zk_ports == [int(zk_port or 2181)]


def test_d_k8s_shared_checkpoint_volume(rendered, tmp_path):
    cm = find(rendered, "ConfigMap", "sluice-config")
    path = tmp_path / "sluice.yaml"
    path.write_text(cm["data"]["sluice.yaml"])
    ckpt = config.read_file(str(path))["state.checkpoints.dir"]
    claims = set()
    for workload, template, container in sluice_containers(rendered):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        hits = [
            volumes[m["name"]]
            for m in container["volumeMounts"]
            if (ckpt + "/").startswith(m["mountPath"].rstrip("/") + "/")
        ]
        assert hits and "persistentVolumeClaim" in hits[0], f"{workload['metadata']['name']}: {ckpt} not on a PVC"
        claims.add(hits[0]["persistentVolumeClaim"]["claimName"])
    assert len(claims) == 1
    pvc = find(rendered, "PersistentVolumeClaim", claims.pop())
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_d_k8s_zookeeper_ensemble(rendered):
    zk = find(rendered, "StatefulSet", "zookeeper")
    assert zk["spec"]["replicas"] == 3 and zk["spec"]["podManagementPolicy"] == "Parallel"
    headless = find(rendered, "Service", zk["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
    c = zk["spec"]["template"]["spec"]["containers"][0]
    assert c["image"].startswith("zookeeper:3.8")
    env = {e["name"]: e.get("value") for e in c["env"]}
    servers = env["ZOO_SERVERS"].split()
    assert servers == [f"server.{i + 1}=zookeeper-{i}.{headless['metadata']['name']}:2888:3888;2181" for i in range(3)]
    # ZOO_MY_ID = ordinal + 1, computed without "$(" (Kubernetes would try to expand it)
    script = c["args"][0]
    assert "$(" not in script and "ZOO_MY_ID" in script and "/docker-entrypoint.sh" in script
    for hostname, my_id in (("zookeeper-0", "1"), ("zookeeper-2", "3")):
        probe = script.replace("exec /docker-entrypoint.sh zkServer.sh start-foreground", 'echo "ID=$ZOO_MY_ID"')
        proc = run(["bash", "-c", probe], env={"HOSTNAME": hostname, "PATH": os.environ["PATH"]})
        assert f"ID={my_id}" in proc.stdout, proc.stdout + proc.stderr


def test_d_k8s_security_and_resources(rendered):
    for workload, template in pod_templates(rendered):
        spec = template["spec"]
        name = workload["metadata"]["name"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec.get("automountServiceAccountToken") is False, name
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], c["name"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{c['name']} {kind}"
        for c in spec["containers"]:
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp and "emptyDir" in volumes[tmp[0]["name"]], f"{c['name']}: /tmp must be an emptyDir"


def test_d_k8s_disruption_budgets(rendered):
    pdbs = [d for d in rendered if d["kind"] == "PodDisruptionBudget"]
    covered = set()
    for pdb in pdbs:
        selector = pdb["spec"]["selector"]["matchLabels"]
        hits = [w["metadata"]["name"] for w, t in pod_templates(rendered) if selects(selector, t["metadata"]["labels"])]
        assert len(hits) == 1, f"PDB {pdb['metadata']['name']} selects {hits}"
        covered.add(hits[0])
    # JobManagers have none on purpose (see k8s/jobmanager.yaml): a standby is never ready.
    assert covered == {"zookeeper", "taskmanager"}


# == the image ========================================================================================
def test_dockerfile_runs_sluice_as_non_root_with_java(rendered):
    ins = dockerfile_instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms and all(f.startswith("python:3.11-slim") for f in froms)
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert "openjdk-17-jre-headless" in runs and "pip install" in runs
    assert [json.loads(rest) for word, rest in ins if word == "ENTRYPOINT"] == [["sluice"]]
    user = [rest for word, rest in ins if word == "USER"][-1]
    uid = int(user.split(":")[0])  # numeric, so runAsNonRoot can verify it
    assert uid != 0
    exposed = {int(p.split("/")[0]) for word, rest in ins if word == "EXPOSE" for p in rest.split()}
    for _, template, c in sluice_containers(rendered):
        assert template["spec"]["securityContext"]["runAsUser"] == uid
        assert {p["containerPort"] for p in c["ports"]} <= exposed
    for name in compose_processes():
        assert {int(str(e)) for e in compose()["services"][name]["expose"]} <= exposed


def test_dockerignore_keeps_what_the_image_copies():
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*", "allow-list style: everything else stays out of the build context"
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {
        src.rstrip("/")
        for word, rest in dockerfile_instructions()
        if word == "COPY" and "--from" not in rest
        for src in rest.split()[:-1]
    }
    assert copied <= kept, copied - kept
    for src in copied:
        assert (ROOT / src).exists(), src


# == (e) negative ====================================================================================
def test_e_unknown_flag_fails_check_naming_it():
    proc = check(["jobmanager", "--zookeeper", "zk:2181", "--advertized-host", "x"], {})
    assert proc.returncode == 2 and "--advertized-host" in proc.stderr


def test_e_unknown_environment_variable_fails_check_naming_it():
    proc = check(["taskmanager"], {"SLUICE_ZOOKEEPER_QUORUM": "zk:2181", "SLUICE_TASKMANAGER_SLOT": "2"})
    assert proc.returncode == 2 and "SLUICE_TASKMANAGER_SLOT" in proc.stderr and "configuration error" in proc.stderr


def test_e_unknown_key_in_the_configmap_fails_check_naming_it(rendered, tmp_path):
    cm = find(rendered, "ConfigMap", "sluice-config")
    path = tmp_path / "sluice.yaml"
    path.write_text(cm["data"]["sluice.yaml"] + "state.checkpoint.dir: /x\n")
    proc = check(["jobmanager", "--config", str(path)], {"SLUICE_RPC_ADVERTISED_HOST": "jm"})
    assert proc.returncode == 2 and "state.checkpoint.dir" in proc.stderr


def test_e_bad_port_fails_check_naming_the_key():
    proc = check(["taskmanager", "--zookeeper", "zk:2181"], {"SLUICE_RPC_PORT": "61.22"})
    assert proc.returncode == 2 and "rpc.port" in proc.stderr and "SLUICE_RPC_PORT" in proc.stderr


def test_e_a_compose_typo_would_be_caught():
    svc = compose()["services"]["jobmanager-1"]
    env = {**compose_env(svc), "SLUICE_RPC_PORT": "sixty-one"}
    proc = check(compose_command(svc), env)
    assert proc.returncode == 2 and "rpc.port" in proc.stderr
