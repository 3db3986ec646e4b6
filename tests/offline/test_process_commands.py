"""The process commands of the deployment files' containers, offline (no Docker engine, no
cluster): `sluice health`'s exit codes, the `sluice` CLI's process commands, the argv every
compose and k8s container gets parsed by the real JobManager and TaskManager mains, and the
liveness service a standby JobManager serves."""

from __future__ import annotations

import sys

import pytest
from deployment_files import (
    clean_env,
    cli_is_wired,
    compose,
    compose_command,
    compose_env,
    compose_processes,
    find,
    k8s_ids,
    prepare,
    process_parser,
    raw_k8s_docs,
    run,
)

from sluice import config
from sluice.cli import processes


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
