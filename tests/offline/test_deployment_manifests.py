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

"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from sluice import config
from sluice.cli import processes

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S = ROOT / "k8s"
ROLES = config.ROLES
DUMMY_NAMESPACE = "sluice-test"
DUMMY_POD_IP = "10.1.2.3"
WILDCARD = ("0.0.0.0", "[::]")


# -- tools -----------------------------------------------------------------------------------
def tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def required(name: str) -> str:
    """A validator the tests cannot go without."""
    exe = tool(name)
    assert exe, f"{name} is missing: pip install -e '.[test]'"
    return exe


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=kw.pop("cwd", ROOT), **kw)


def cli_is_wired() -> bool:
    from sluice.cli.main import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {"jobmanager", "taskmanager", "health"} <= set(action.choices)
    return False


def sluice_cli() -> list[str]:
    """`python -m sluice.cli`; until sluice/cli/main.py wires the process commands
    (test_sluice_cli_has_the_process_commands), the same commands alone."""
    return [sys.executable, "-m", "sluice.cli" if cli_is_wired() else "sluice.cli.processes"]


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(extra)
    return env


def check(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return run(sluice_cli() + args + ["--check"], env=clean_env(env), cwd=cwd)


def checked_settings(args: list[str], env: dict[str, str], what: str) -> dict:
    proc = check(args, env)
    assert proc.returncode == 0, f"{what}: `sluice {' '.join(args)} --check` exited {proc.returncode}:\n{proc.stderr}"
    return json.loads(proc.stdout)


def process_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sluice", exit_on_error=False)
    processes.add_process_commands(ap.add_subparsers(dest="command", required=True))
    return ap


# -- compose -----------------------------------------------------------------------------------
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _interpolate(value: str) -> str:
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return os.environ.get(m.group(1)) or (m.group(3) or "")

    return re.sub(r"\$\$|\$\{(\w+)(:?-([^}]*))?\}", sub, value)


def compose_env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: _interpolate(str(v)) for k, v in env.items() if v is not None}


def compose_command(svc: dict) -> list[str]:
    cmd = svc.get("command") or []
    return [_interpolate(a) for a in (shlex.split(cmd) if isinstance(cmd, str) else cmd)]


def is_sluice_image(image: str) -> bool:
    return image.split("/")[-1].split(":")[0] == "sluice"


def compose_processes() -> list[str]:
    return [
        name
        for name, svc in compose()["services"].items()
        if is_sluice_image(_interpolate(svc.get("image", "")))
        and compose_command(svc)[:1] in (["jobmanager"], ["taskmanager"])
    ]


# -- k8s ---------------------------------------------------------------------------------------
def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def k8s_manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.y*ml") if p.name != "kustomization.yaml")


def raw_k8s_docs() -> list[dict]:
    docs = []
    for name in kustomization()["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    kubectl = tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders k8s/ with `kubectl kustomize`)")
    proc = run([kubectl, "kustomize", str(K8S)])
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def pod_templates(docs: list[dict]):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield d, d["spec"]["template"]


def sluice_containers(docs: list[dict]) -> list[tuple[dict, dict, dict]]:
    """(workload, pod template, container) of every container that runs a Sluice process."""
    out = []
    for workload, template in pod_templates(docs):
        for c in template["spec"]["containers"]:
            if is_sluice_image(c["image"]) and (c.get("args") or c.get("command") or [])[:1] in (
                ["jobmanager"],
                ["taskmanager"],
            ):
                out.append((workload, template, c))
    return out


def k8s_ids() -> list[str]:
    return [f"{w['kind']}/{w['metadata']['name']}/{c['name']}" for w, _, c in sluice_containers(raw_k8s_docs())]


def find(docs: list[dict], kind: str, name: str) -> dict:
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name} in the rendered manifests")


def k8s_expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined variables are replaced, $$ is a literal $."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


@dataclass
class PodContainer:
    workload: dict
    template: dict
    container: dict
    pod_name: str
    args: list[str]
    env: dict[str, str]
    mounts: dict[str, str] = field(default_factory=dict)  # mountPath -> volume name


def prepare(docs: list[dict], workload: dict, template: dict, container: dict, tmp_path: Path) -> PodContainer:
    """Args and environment as the kubelet would give them, with mounted ConfigMaps
    written under tmp_path and their paths rewritten to there."""
    name = workload["metadata"]["name"]
    pod_name = f"{name}-0" if workload["kind"] == "StatefulSet" else f"{name}-5d8f7c9b4-x2x7q"
    fields = {
        "metadata.name": pod_name,
        "metadata.namespace": DUMMY_NAMESPACE,
        "status.podIP": DUMMY_POD_IP,
        "spec.nodeName": "node-1",
        "status.hostIP": "10.0.0.1",
    }
    assert not container.get("envFrom"), "envFrom is not handled by this test"
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = k8s_expand(str(e["value"]), env)
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["configMapKeyRef"]
            env[e["name"]] = find(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        else:
            env[e["name"]] = "dummy-secret"
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    rewrite: dict[str, str] = {}
    mounts: dict[str, str] = {}
    for m in container.get("volumeMounts", []):
        mounts[m["mountPath"]] = m["name"]
        volume = volumes[m["name"]]
        if "configMap" in volume:
            assert "subPath" not in m, "subPath mounts are not handled by this test"
            data = find(docs, "ConfigMap", volume["configMap"]["name"])["data"]
            target = tmp_path / m["name"]
            target.mkdir(parents=True, exist_ok=True)
            for key, text in data.items():
                (target / key).write_text(text)
            rewrite[m["mountPath"].rstrip("/") + "/"] = str(target) + "/"

    def local(value: str) -> str:
        for prefix, replacement in rewrite.items():
            if value.startswith(prefix):
                return replacement + value[len(prefix) :]
        return value

    args = [local(k8s_expand(a, env)) for a in (container.get("command") or []) + (container.get("args") or [])]
    if container.get("command"):
        assert args[0] == "sluice", "a Sluice container's command must be the image's `sluice` entrypoint"
        args = args[1:]
    env = {k: local(v) for k, v in env.items()}
    return PodContainer(workload, template, container, pod_name, args, env, mounts)


def assert_secured(settings: dict, which: str) -> None:
    """Mutual TLS (docs/security.md): all three security.ssl.* files, not --insecure, and a health
    port of its own for probes."""
    for key in ("security.ssl.ca", "security.ssl.cert", "security.ssl.key"):
        assert settings[key], f"{which}: {key} is not set: the process would refuse to start"
    assert not settings["security.insecure"], f"{which} runs --insecure"
    assert settings["rpc.health-port"] and settings["rpc.health-port"] != settings["rpc.port"], which


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


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
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


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


# == sluice health =====================================================================================
@pytest.fixture
def health_server():
    from sluice import rpc

    server = rpc.Server("127.0.0.1", 0, ["sluice.v1.TaskExecutor"])
    server.start()
    yield server
    server.stop(grace=0)


def health(argv: list[str], capsys) -> tuple[int, str]:
    args = process_parser().parse_args(["health", *argv])
    code = args.handler(args)
    return code, capsys.readouterr().out


def test_health_exit_codes(health_server, capsys):
    address = health_server.address
    health_server.set_serving(True)
    assert health([address], capsys) == (0, f"{address} (server): SERVING\n")
    assert health([address, "--service", "sluice.v1.TaskExecutor"], capsys)[0] == 0
    health_server.set_serving(False)
    code, out = health([address, "--service", "sluice.v1.TaskExecutor"], capsys)
    assert code == 1 and "NOT_SERVING" in out
    code, out = health([address, "--service", "no.such.Service"], capsys)
    assert code == 1 and "SERVICE_UNKNOWN" in out


def test_health_unreachable_and_bad_address(capsys):
    code, out = health(["127.0.0.1:1", "--timeout", "2"], capsys)
    assert code == 1 and "UNREACHABLE" in out
    assert health(["no-port"], capsys)[0] == 2


# == the process commands, flags and liveness service ==============================================================
def test_sluice_cli_has_the_process_commands():
    assert cli_is_wired()
    proc = run([sys.executable, "-m", "sluice.cli", "health", "127.0.0.1:1", "--timeout", "1"], env=clean_env({}))
    assert proc.returncode == 1 and "UNREACHABLE" in proc.stdout


def all_process_containers() -> list[str]:
    return [f"compose:{n}" for n in compose_processes()] + [f"k8s:{i}" for i in k8s_ids()]


@pytest.mark.parametrize("which", all_process_containers())
def test_process_mains_accept_the_generated_argv(which, monkeypatch, tmp_path):
    """The argv `sluice <role>` builds for each container parses in the real main
    (the process itself is replaced by a recorder)."""
    origin, _, rest = which.partition(":")
    if origin == "compose":
        svc = compose()["services"][rest]
        args, env = compose_command(svc), compose_env(svc)
    else:
        kind, name, cname = rest.split("/")
        docs = raw_k8s_docs()
        workload = find(docs, kind, name)
        container = next(c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == cname)
        pc = prepare(docs, workload, workload["spec"]["template"], container, tmp_path)
        args, env = pc.args, pc.env
    role = args[0]
    ns = process_parser().parse_args(args + ["--check"])
    settings = processes.settings_for(role, ns, environ=clean_env(env))

    import importlib

    server = importlib.import_module(f"{role}.server")
    import threading

    built = []

    class Recorder:
        def __init__(self, *a, **kw):
            built.append((a, kw))
            self.address = "recorded:0"

        def start(self):
            pass

        def stop(self):
            pass

    done = threading.Event()
    done.set()
    monkeypatch.setattr(
        server, {"jobmanager": "JobManagerProcess", "taskmanager": "TaskManagerProcess"}[role], Recorder
    )
    monkeypatch.setattr(server.rpc, "on_sigterm", lambda callback: done)
    monkeypatch.setattr(server.logs, "setup", lambda *a, **kw: None)
    server.main(settings.argv())  # argparse exits 2 on a flag the main lacks
    assert len(built) == 1
    a, kw = built[0]
    assert len(a) == 1 and isinstance(a[0], config.Settings) and not kw  # both processes take Settings
    assert a[0].values == {**settings.values, "rpc.advertised-host": a[0]["rpc.advertised-host"]}
    flat = [str(v) for v in a[0].values.values()] + [str(a[0].advertised_host())]
    argv = settings.argv()
    assert str(settings["rpc.port"]) in flat and argv[argv.index("--advertised-host") + 1] in flat


def test_liveness_service_is_serving_on_a_standby_jobmanager():
    from jobmanager.server import JobManagerProcess
    from sluice import rpc

    jm = JobManagerProcess(
        config.resolve(
            "jobmanager",
            flag_values={  # never connects
                "zookeeper.quorum": "127.0.0.1:1",
                "cluster.id": "liveness-test",
                "rpc.host": "127.0.0.1",
                "rpc.port": "0",
                "security.insecure": "true",  # plaintext, so that health_status can ask without certificates
            },
        )
    )
    jm.server.start()
    try:
        assert processes.health_status(jm.address, processes.JOBMANAGER_SERVICE) == "NOT_SERVING"
        assert processes.health_status(jm.address, processes.LIVENESS_SERVICE) == "SERVING"
    finally:
        jm.server.stop(grace=0)
        jm.dispatcher.close()
    tm = rpc.Server("127.0.0.1", 0, ["sluice.v1.TaskExecutor", "sluice.v1.DataExchange"])
    tm.start()
    try:
        tm.set_serving(False)
        assert processes.health_status(tm.address, processes.LIVENESS_SERVICE) == "SERVING"
    finally:
        tm.stop(grace=0)


# == the external-Spark overlays (docs/external-spark.md) ========================================
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
    kubectl = tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders k8s-spark/ with `kubectl kustomize`)")
    proc = run([kubectl, "kustomize", str(K8S_SPARK)])
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


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
