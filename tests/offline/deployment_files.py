"""What the offline tests of the deployment files (tests/offline/test_*.py) share: the tools that
validate them, `sluice <role> ... --check` of a container's args and environment, docker-compose.yml's
services, k8s/'s manifests (the `rendered` fixture: `kubectl kustomize k8s/`) with each Sluice
container as the kubelet would start it, and the Dockerfile's instructions."""

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


def kustomize(directory: Path) -> list[dict]:
    """The documents `kubectl kustomize DIRECTORY` renders (the test is skipped without kubectl)."""
    kubectl = tool("kubectl")
    if kubectl is None:
        pytest.skip(f"kubectl is not installed (it renders {directory.name}/ with `kubectl kustomize`)")
    proc = run([kubectl, "kustomize", str(directory)])
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return kustomize(K8S)


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


# -- the image -------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out
