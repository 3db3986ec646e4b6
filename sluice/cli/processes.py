"""`sluice jobmanager`, `sluice taskmanager` and `sluice health`: the commands a
container runs.

    sluice jobmanager  [--config FILE] [flags...] [-D key=value ...] [--check]
    sluice taskmanager [--config FILE] [flags...] [-D key=value ...] [--check]
    sluice health ADDRESS [--service NAME] [--timeout SECONDS]

The process commands merge defaults < configuration file < SLUICE_* environment
< flags (see sluice/config.py). `--check` validates the merged configuration,
prints it as JSON and exits 0 without starting anything; a bad configuration
exits 2 with an error naming the key. Without `--check` they start the
process with the merged settings: `<role>.server.run(settings)`
(jobmanager/server.py, taskmanager/server.py).

`health` asks a server's grpc.health.v1 service: exit 0 when SERVING, 1 otherwise
(NOT_SERVING, SERVICE_UNKNOWN, unreachable), printing the status.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from sluice import config

# Health service names (grpc.health.v1) that probes use.
JOBMANAGER_SERVICE = "sluice.v1.JobManager"  # SERVING on the leader only
TASKMANAGER_SERVICE = "sluice.v1.TaskExecutor"  # SERVING once the TaskManager is up and connected to ZooKeeper
LIVENESS_SERVICE = "sluice.v1.Liveness"  # SERVING while the process's gRPC server runs (standbys too)

_EPILOG = """\
precedence: built-in defaults < configuration file (--config, else $SLUICE_CONFIG)
< environment (SLUICE_<KEY>, e.g. SLUICE_ZOOKEEPER_QUORUM) < flags (and -D KEY=VALUE).
Keys: {keys}"""


def add_process_commands(subparsers: Any) -> None:
    """Add `jobmanager`, `taskmanager` and `health` to a `sluice` argparse subparsers object.

    Each sets `handler` (a function of the parsed args returning an exit code)."""
    for role, summary in (
        ("jobmanager", "run a JobManager (HA: several elect a leader through ZooKeeper)"),
        ("taskmanager", "run a TaskManager (task slots, one SparkSession)"),
    ):
        p = subparsers.add_parser(
            role,
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}.",
            epilog=_EPILOG.format(keys=", ".join(o.key for o in config.options_for(role))),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "--config",
            metavar="FILE",
            default=None,
            help=f"YAML configuration file (default: ${config.CONFIG_ENV}, else none)",
        )
        config.add_flags(p, role)
        p.add_argument(
            "-D",
            dest="assignments",
            metavar="KEY=VALUE",
            action="append",
            default=[],
            help="set any configuration key (after the file and environment; named flags win over -D)",
        )
        p.add_argument(
            "--check",
            action="store_true",
            help="validate the merged configuration, print it as JSON and exit (0 = valid, 2 = invalid)",
        )
        p.set_defaults(handler=lambda args, role=role: run_process(role, args))

    h = subparsers.add_parser(
        "health",
        help="check a server's gRPC health (exit 0 when SERVING)",
        description="Ask the grpc.health.v1 service of ADDRESS for the status of a service. "
        "Exit 0 when SERVING, 1 otherwise. Services: '' (the server), "
        f"{JOBMANAGER_SERVICE} (SERVING on the leading JobManager only), "
        f"{TASKMANAGER_SERVICE}, {LIVENESS_SERVICE} (SERVING on standbys too).",
    )
    h.add_argument("address", metavar="ADDRESS", help="host:port, e.g. 127.0.0.1:6123")
    h.add_argument("--service", default="", help="health service name (default: '', the whole server)")
    h.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    tls = h.add_argument_group(
        "TLS (for a server's main port; the health-only port rpc.health-port is plaintext and needs none)"
    )
    tls.add_argument("--tls-ca", metavar="FILE", help="the cluster's CA certificate")
    tls.add_argument("--tls-cert", metavar="FILE", help="a certificate of the cluster (any role)")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key")
    h.set_defaults(handler=run_health)


def _flags(role: str, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """(key -> raw value, key -> how it was spelled) from -D and the named flags."""
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    for assignment in args.assignments:
        key, value = config.parse_assignment(assignment)
        values[key], names[key] = value, f"-D {assignment}"
    for key, value in config.flag_values(role, args).items():
        values[key], names[key] = value, config.BY_KEY[key].flag
    return values, names


def settings_for(role: str, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> config.Settings:
    values, names = _flags(role, args)
    return config.load(
        role,
        config_path=args.config,
        environ=os.environ if environ is None else environ,
        flags=values,
        flag_names=names,
    )


def run_process(role: str, args: argparse.Namespace) -> int:
    try:
        settings = settings_for(role, args)
        if args.check:
            try:
                config.check_security(settings)
            except config.ConfigError as exc:  # the process would refuse to start: say so
                settings.notes.append(f"{exc}: a process started with these settings would not start")
            print(json.dumps(settings.as_dict(), indent=2))
            return 0
        settings.advertised_host()  # resolves rpc.advertised-host 'auto' on this machine: fails here, not later
    except config.ConfigError as exc:
        print(f"sluice {role}: configuration error: {exc}", file=sys.stderr)
        return 2
    for note in settings.notes:
        print(f"sluice {role}: {note}", file=sys.stderr)
    server = importlib.import_module(f"{role}.server")  # jobmanager/server.py or taskmanager/server.py
    try:
        server.run(settings)
    except config.ConfigError as exc:  # e.g. neither TLS files nor --insecure (config.check_security)
        print(f"sluice {role}: configuration error: {exc}", file=sys.stderr)
        return 2
    return 0


def health_status(address: str, service: str = "", timeout: float = 3.0, tls: Any = None) -> str:
    """SERVING, NOT_SERVING, SERVICE_UNKNOWN, UNKNOWN, or `UNREACHABLE (...)`. `tls`: the
    sluice.security.tls.TlsFiles to ask a server's TLS port with (None: plaintext, e.g. the
    health-only port, rpc.health-port)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from sluice import rpc

    try:
        with rpc.channel(address, tls) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND:
            return "SERVICE_UNKNOWN"
        return f"UNREACHABLE ({err.code().name}: {err.details()})"


def run_health(args: argparse.Namespace) -> int:
    host, sep, port = args.address.rpartition(":")
    if not sep or not host or not port.isdigit():
        print(f"sluice health: expected ADDRESS as host:port, got {args.address!r}", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print(f"sluice health: --timeout must be positive, got {args.timeout}", file=sys.stderr)
        return 2
    tls = None
    if args.tls_ca or args.tls_cert or args.tls_key:
        from sluice.security.tls import TlsError, TlsFiles

        try:
            if not (args.tls_ca and args.tls_cert and args.tls_key):
                raise TlsError("--tls-ca, --tls-cert and --tls-key go together")
            tls = TlsFiles(args.tls_ca, args.tls_cert, args.tls_key)
            tls.read()
        except TlsError as exc:
            print(f"sluice health: {exc}", file=sys.stderr)
            return 2
    status = health_status(args.address, args.service, args.timeout, tls)
    print(f"{args.address} {args.service or '(server)'}: {status}")
    return 0 if status == "SERVING" else 1


def main(argv: list[str] | None = None) -> None:
    """The three commands alone (`python -m sluice.cli.processes ...`)."""
    ap = argparse.ArgumentParser(prog="sluice")
    add_process_commands(ap.add_subparsers(dest="command", required=True))
    args = ap.parse_args(argv)
    sys.exit(args.handler(args))


if __name__ == "__main__":
    main()
