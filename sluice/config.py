"""Process configuration for JobManagers and TaskManagers.

Every setting is an :class:`Option` of the ``OPTIONS`` table below (Flink's
ConfigOption shape: key, parser, default, roles, flag, meaning), the only
place a process default is written. It has a flat key (``rpc.port``) and is
read from, lowest to highest precedence:

1. the default in ``OPTIONS``;
2. the configuration file, a YAML mapping of keys to values (``sluice.yaml``),
   named by ``--config PATH`` or, failing that, ``SLUICE_CONFIG``. Nested
   mappings are flattened (``rpc: {port: 6123}`` is ``rpc.port: 6123``);
3. environment variables ``SLUICE_<KEY>``: the key upper-cased with ``.`` and
   ``-`` turned into ``_`` (``rpc.advertised-host`` -> ``SLUICE_RPC_ADVERTISED_HOST``).
   An empty variable counts as unset;
4. command-line flags (``--port``), and ``-D key=value`` for any key.

Durations take a unit (``500ms``, ``6s``, ``2min``, ``1h``); a bare number is
seconds (sluice/units.py, the parser job options use too).

One file may serve both roles: a key that does not apply to a role (say
``taskmanager.slots`` for a JobManager) is accepted and ignored. A key that no
role knows, a ``SLUICE_*`` variable that names no key, and a value of the wrong
type are errors (:class:`ConfigError`) that name the key and where the value
came from.

    settings = load("jobmanager", config_path="sluice.yaml", environ=os.environ, flags={"rpc.port": "6123"})
    settings.get(HEARTBEAT_TIMEOUT)   # 6.0, typed float
    jobmanager.server.run(settings)   # what `sluice jobmanager` does

``python -m jobmanager`` parses the same named flags (:func:`add_flags`,
:func:`flag_values`) into the same Settings, from its flags alone.
:meth:`Settings.argv` gives those flags back, for a process main that still
has its own argparse and for ``--check``.
"""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sluice import units

T = TypeVar("T")

ROLES = ("jobmanager", "taskmanager")
ROLE_NAMES = {"jobmanager": "JobManager", "taskmanager": "TaskManager"}
BOTH = ROLES
JM = ("jobmanager",)
TM = ("taskmanager",)

CONFIG_ENV = "SLUICE_CONFIG"
ENV_PREFIX = "SLUICE_"
# SLUICE_* variables that are not configuration keys (read elsewhere).
NON_CONFIG_ENV = frozenset(
    {
        CONFIG_ENV,
        "SLUICE_CLUSTER_DIR",  # client commands: default --cluster-dir
        "SLUICE_ZOOKEEPER_CLASSPATH",  # embedded ZooKeeper of `sluice cluster start`
    }
)
# Value of rpc.advertised-host meaning "the IP address this host name resolves to"
# (a container's own address in docker-compose, where replicas have no stable name).
AUTO_HOST = "auto"
WILDCARD_HOSTS = frozenset({"0.0.0.0", "[::]", ""})


def reachable_host(advertised: str | None, bind_host: str) -> str:
    """The host others reach a port of this process at: the advertised host, else the bind
    host unless it is a wildcard (then loopback)."""
    return advertised or (bind_host if bind_host not in WILDCARD_HOSTS else "127.0.0.1")


class ConfigError(ValueError):
    """Bad configuration; the message names the key (or variable, or file) at fault."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


# -- value types ----------------------------------------------------------------------------
def _text(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise ValueError(f"expected a string, got {value!r}")
    text = str(value).strip()
    if not text:
        raise ValueError("expected a non-empty string")
    return text


def _string(value: Any) -> str:
    return _text(value)


def _host(value: Any) -> str:
    host = _text(value)
    if any(c.isspace() for c in host) or "/" in host:
        raise ValueError(f"expected a host name or IP address, got {host!r}")
    if host.startswith("["):
        if not host.endswith("]") or "]" in host[:-1]:
            raise ValueError(f"expected a bracketed IPv6 address such as [::], got {host!r}")
    elif host.count(":") == 1:
        raise ValueError(f"expected a host without a port, got {host!r} (the port is rpc.port)")
    elif ":" in host:
        try:
            return f"[{ipaddress.IPv6Address(host)}]"  # e.g. a pod IP from the downward API
        except ValueError:
            raise ValueError(f"expected a host name or IP address, got {host!r}") from None
    return host


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    raise ValueError(f"expected an integer, got {value!r}")


def _port(value: Any) -> int:
    try:
        port = _integer(value)
    except ValueError:
        raise ValueError(f"expected an integer port 0-65535, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"expected an integer port 0-65535, got {port}")
    return port


def _positive_int(value: Any) -> int:
    n = _integer(value)
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def _seconds(value: Any) -> float:
    """A positive duration: 6, 6s, 500ms, 2min (a bare number is seconds)."""
    return units.parse_duration(value, "s", positive=True)


def _duration(value: Any) -> float:
    """A non-negative duration (0 allowed): 0, 30s, 500ms (a bare number is seconds)."""
    return units.parse_duration(value, "s")


def _quorum(value: Any) -> str:
    """host[:port][,host[:port]...][/chroot], as kazoo takes it."""
    text = _text(value)
    hosts, _, chroot = text.partition("/")
    if chroot and not re.fullmatch(r"[^\s/]+(/[^\s/]+)*", chroot):
        raise ValueError(f"bad chroot /{chroot} in {text!r}")
    for entry in hosts.split(","):
        entry = entry.strip()
        host, sep, port = entry.rpartition(":") if ":" in entry and not entry.endswith("]") else (entry, "", "")
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"expected host:port[,host:port...], got {text!r}")
        if sep and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"bad port {port!r} in {text!r}")
    return text


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _advertised_host(value: Any) -> str:
    text = _text(value)
    return AUTO_HOST if text.lower() == AUTO_HOST else _host(text)


def _zk_acl(value: Any) -> str:
    """high-availability.zookeeper.client.acl: creator | open (Flink's values)."""
    text = _text(value).lower()
    if text not in ("creator", "open"):
        raise ValueError(f"expected creator or open, got {value!r}")
    return text


@dataclass(frozen=True)
class Option(Generic[T]):
    """One process setting. ``T`` is what :meth:`Settings.get` returns; an option
    without a default is ``Option[X | None]``."""

    key: str
    parse: Callable[[Any], T]
    default: T
    roles: tuple[str, ...]
    flag: str  # named flag of `sluice <role>` and `python -m <role>`
    help: str
    metavar: str = "VALUE"
    required: bool = False  # no default: resolve() fails without a value
    switch: bool = False  # a boolean flag: `--flag` alone means true; argv() passes it only when true

    @property
    def env(self) -> str:
        return env_name(self.key)


ZOOKEEPER_QUORUM: Option[str | None] = Option(
    "zookeeper.quorum",
    _quorum,
    None,
    BOTH,
    "--zookeeper",
    "ZooKeeper connect string host:port[,host:port...][/chroot] (required)",
    "HOSTS",
    required=True,
)
CLUSTER_ID: Option[str] = Option(
    "cluster.id",
    _string,
    "default",
    BOTH,
    "--cluster-id",
    "cluster id: the ZooKeeper root /sluice/<id> shared by the cluster's processes",
    "ID",
)
RPC_HOST: Option[str] = Option(
    "rpc.host", _host, "127.0.0.1", BOTH, "--host", "address the gRPC server binds (0.0.0.0 in containers)", "HOST"
)
RPC_PORT: Option[int] = Option("rpc.port", _port, 0, BOTH, "--port", "gRPC port (0 picks a free one)", "PORT")
RPC_ADVERTISED_HOST: Option[str | None] = Option(
    "rpc.advertised-host",
    _advertised_host,
    None,
    BOTH,
    "--advertised-host",
    "host others use to reach this process (published to ZooKeeper / registered with the leader); "
    "required when rpc.host is a wildcard; 'auto' = the address this machine's host name resolves to",
    "HOST",
)
TASKMANAGER_SLOTS: Option[int] = Option(
    "taskmanager.slots", _positive_int, 2, TM, "--slots", "task slots of this TaskManager", "N"
)
MAX_SLOTS_LIMIT = 4096  # the highest slotmanager.max-slots-per-taskmanager accepts


def _slot_limit(value: Any) -> int:
    n = _integer(value)
    if not 1 <= n <= MAX_SLOTS_LIMIT:
        raise ValueError(f"must be between 1 and {MAX_SLOTS_LIMIT}, got {n}")
    return n


MAX_SLOTS_PER_TASKMANAGER: Option[int] = Option(
    "slotmanager.max-slots-per-taskmanager",
    _slot_limit,
    256,
    JM,
    "--max-slots-per-taskmanager",
    "most slots one TaskManager may register with; a registration offering more is refused "
    f"(INVALID_ARGUMENT), so no request makes the leader allocate without bound (1-{MAX_SLOTS_LIMIT})",
    "N",
)
TASKMANAGER_RESOURCE_ID: Option[str | None] = Option(
    "taskmanager.resource-id",
    _string,
    None,
    TM,
    "--resource-id",
    "resource id (default: random per start; must be unique per TaskManager incarnation)",
    "ID",
)
HEARTBEAT_TIMEOUT: Option[float] = Option(
    "heartbeat.timeout",
    _seconds,
    6.0,
    JM,
    "--heartbeat-timeout",
    "time without heartbeats before a TaskManager is declared lost (a bare number is seconds)",
    "DURATION",
)
HEARTBEAT_INTERVAL: Option[float] = Option(
    "heartbeat.interval",
    _seconds,
    1.0,
    BOTH,
    "--heartbeat-interval",
    "time between a TaskManager's heartbeats: the leader tells each TaskManager its own value when it "
    "registers; a TaskManager's applies until then (a bare number is seconds)",
    "DURATION",
)
ZOOKEEPER_SESSION_TIMEOUT: Option[float] = Option(
    "zookeeper.session-timeout",
    _seconds,
    6.0,
    BOTH,
    "--zk-session-timeout",
    "ZooKeeper session timeout (sets JobManager failover time; a bare number is seconds)",
    "DURATION",
)
ZOOKEEPER_AUTH_FILE: Option[str | None] = Option(
    "high-availability.zookeeper.auth-file",
    _string,
    None,
    BOTH,
    "--zk-auth-file",
    "file holding the cluster's ZooKeeper digest credentials user:password (mode 0600); every "
    "ZooKeeper client of the cluster authenticates with them (`sluice cluster start` writes one)",
    "PATH",
)
ZOOKEEPER_CLIENT_ACL: Option[str | None] = Option(
    "high-availability.zookeeper.client.acl",
    _zk_acl,
    None,
    BOTH,
    "--zk-acl",
    "ACL of the nodes under /sluice/<cluster-id>: creator (all permissions to the credentials of "
    "high-availability.zookeeper.auth-file only) or open (anyone); default creator with an auth file, else open",
    "creator|open",
)
CHECKPOINTS_DIR: Option[str | None] = Option(
    "state.checkpoints.dir",
    _string,
    None,
    JM,
    "--checkpoint-dir",
    "checkpoint and HA storage: a path every process sees, or a pyarrow.fs URI (s3://bucket/path)",
    "DIR",
)
SPARK_MASTER: Option[str | None] = Option(
    "spark.master",
    _string,
    None,
    TM,
    "--spark-master",
    "Spark master URL, e.g. spark://host:7077 (default local[<slots>])",
    "URL",
)
SPARK_REMOTE: Option[str | None] = Option(
    "spark.remote", _string, None, TM, "--spark-remote", "Spark Connect URL, e.g. sc://host:15002", "URL"
)
LOG_FILE: Option[str | None] = Option(
    "log.file", _string, None, BOTH, "--log-file", "log to this file instead of stderr", "PATH"
)
TASK_CANCELLATION_INTERVAL: Option[float] = Option(
    "task.cancellation.interval",
    _seconds,
    3.0,
    TM,
    "--task-cancellation-interval",
    "time between attempts to stop a cancelled task that is still running: its Spark jobs are cancelled "
    "again and its thread interrupted (a bare number is seconds)",
    "DURATION",
)
TASK_CANCELLATION_TIMEOUT: Option[float] = Option(
    "task.cancellation.timeout",
    _duration,
    30.0,
    TM,
    "--task-cancellation-timeout",
    "time after which a cancelled task that is still running is reported FAILED and its TaskManager exits, "
    "for its supervisor to restart it with free slots; 0 never gives up (a bare number is seconds)",
    "DURATION",
)
TASKMANAGER_LOSS_MAX_PER_JOB: Option[int] = Option(
    "jobmanager.taskmanager-loss.max-per-job",
    _positive_int,
    2,
    JM,
    "--max-taskmanager-losses-per-job",
    "TaskManager losses one task (a subtask of one chain) of a job may be under, while it starts, restores "
    "or runs, with no checkpoint completed in between, before the job fails instead of restarting (a body "
    "that kills its TaskManager fails its job, not the cluster); losses under different tasks, or while "
    "the job is already failing, restart it under its restart strategy",
    "N",
)

RPC_HEALTH_PORT: Option[int | None] = Option(
    "rpc.health-port",
    _port,
    None,
    BOTH,
    "--health-port",
    "plaintext port serving only grpc.health.v1 (for Kubernetes gRPC probes, which cannot do TLS); "
    "unset = none, 0 = a free one",
    "PORT",
)
SECURITY_SSL_CA: Option[str | None] = Option(
    "security.ssl.ca",
    _string,
    None,
    BOTH,
    "--tls-ca",
    "PEM file of the cluster's CA certificate: peers' certificates must be signed by it (docs/security.md)",
    "FILE",
)
SECURITY_SSL_CERT: Option[str | None] = Option(
    "security.ssl.cert",
    _string,
    None,
    BOTH,
    "--tls-cert",
    "PEM file of this process's certificate, whose common name is <role>/<name> (`sluice certs create` makes them)",
    "FILE",
)
SECURITY_SSL_KEY: Option[str | None] = Option(
    "security.ssl.key", _string, None, BOTH, "--tls-key", "PEM file of this process's private key", "FILE"
)
SECURITY_INSECURE: Option[bool] = Option(
    "security.insecure",
    _boolean,
    False,
    BOTH,
    "--insecure",
    "plaintext gRPC without authentication: anyone who reaches a port can run code on the cluster; "
    "only for a trusted network (required when no security.ssl.* files are set)",
    "BOOL",
    switch=True,
)
SECURITY_TOKEN_FILE: Option[str | None] = Option(
    "security.token.file",
    _string,
    None,
    JM,
    "--token-file",
    "file holding a bearer token clients may send instead of a client certificate, on security.token.port",
    "FILE",
)
SECURITY_TOKEN_PORT: Option[int | None] = Option(
    "security.token.port",
    _port,
    None,
    JM,
    "--token-port",
    "TLS port (without client certificates) for bearer-token clients, with security.token.file "
    "(unset or 0 = a free one)",
    "PORT",
)

REST_ADDRESS: Option[str] = Option(
    "rest.address",
    _host,
    "127.0.0.1",
    JM,
    "--rest-host",
    "address the REST API and web dashboard bind (0.0.0.0 in containers)",
    "HOST",
)
REST_PORT: Option[int | None] = Option(
    "rest.port",
    _port,
    None,
    JM,
    "--rest-port",
    "port of the REST API and web dashboard (docs/monitoring.md); unset = none, 0 = a free one",
    "PORT",
)
METRICS_PORT: Option[int | None] = Option(
    "metrics.port",
    _port,
    None,
    BOTH,
    "--metrics-port",
    "port of the Prometheus metrics endpoint (docs/monitoring.md); unset = none, 0 = a free one",
    "PORT",
)

OPTIONS: tuple[Option[Any], ...] = (
    ZOOKEEPER_QUORUM,
    CLUSTER_ID,
    RPC_HOST,
    RPC_PORT,
    RPC_ADVERTISED_HOST,
    TASKMANAGER_SLOTS,
    MAX_SLOTS_PER_TASKMANAGER,
    TASKMANAGER_RESOURCE_ID,
    HEARTBEAT_TIMEOUT,
    HEARTBEAT_INTERVAL,
    ZOOKEEPER_SESSION_TIMEOUT,
    ZOOKEEPER_AUTH_FILE,
    ZOOKEEPER_CLIENT_ACL,
    CHECKPOINTS_DIR,
    SPARK_MASTER,
    SPARK_REMOTE,
    LOG_FILE,
    TASK_CANCELLATION_INTERVAL,
    TASK_CANCELLATION_TIMEOUT,
    TASKMANAGER_LOSS_MAX_PER_JOB,
    RPC_HEALTH_PORT,
    SECURITY_SSL_CA,
    SECURITY_SSL_CERT,
    SECURITY_SSL_KEY,
    SECURITY_INSECURE,
    SECURITY_TOKEN_FILE,
    SECURITY_TOKEN_PORT,
    REST_ADDRESS,
    REST_PORT,
    METRICS_PORT,
)
BY_KEY: dict[str, Option[Any]] = {o.key: o for o in OPTIONS}


def env_name(key: str) -> str:
    return ENV_PREFIX + re.sub(r"[.-]", "_", key).upper()


BY_ENV: dict[str, Option[Any]] = {o.env: o for o in OPTIONS}
assert len(BY_ENV) == len(OPTIONS), "two keys map to the same environment variable"


def options_for(role: str) -> list[Option[Any]]:
    _check_role(role)
    return [o for o in OPTIONS if role in o.roles]


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")


def _unknown(what: str, name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} {name!r}{hint}"


# -- the three sources ------------------------------------------------------------------------
def read_file(path: str) -> dict[str, Any]:
    """The flat key -> value mapping of a YAML configuration file."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} not found") from None
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"configuration file {path} must be a mapping of keys to values, not a {type(data).__name__}")
    flat: dict[str, Any] = {}
    _flatten(data, "", flat, path)
    for key in flat:
        if key not in BY_KEY:
            raise ConfigError(f"{path}: {_unknown('configuration key', key, BY_KEY)}", key)
    return flat


def _flatten(data: dict[Any, Any], prefix: str, out: dict[str, Any], path: str) -> None:
    for k, v in data.items():
        if not isinstance(k, str) or not k:
            raise ConfigError(f"{path}: configuration keys must be strings, got {k!r}")
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            _flatten(v, key + ".", out, path)
        elif key in out:
            raise ConfigError(f"{path}: key {key!r} is given twice", key)
        else:
            out[key] = v


def read_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Configuration keys set by SLUICE_* variables (empty ones count as unset)."""
    out: dict[str, str] = {}
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in NON_CONFIG_ENV:
            continue
        opt = BY_ENV.get(name)
        if opt is None:
            known = list(BY_ENV) + sorted(NON_CONFIG_ENV)
            raise ConfigError(
                f"{_unknown('environment variable', name, known)} "
                f"(SLUICE_* variables name configuration keys: SLUICE_<KEY>, "
                f"e.g. SLUICE_ZOOKEEPER_QUORUM)",
                name,
            )
        if environ[name].strip() != "":
            out[opt.key] = environ[name]
    return out


# -- merging --------------------------------------------------------------------------------
@dataclass
class Settings:
    """The merged configuration of one process."""

    role: str
    values: dict[str, Any]  # every key of the role; None = unset
    sources: dict[str, str]  # key -> "default" | "file PATH" | "env VAR" | "flag --x"
    config_file: str | None = None
    notes: list[str] = field(default_factory=list)
    resolve_host: Callable[[], str] | None = field(default=None, repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, option: Option[T]) -> T:
        """The typed value of `option` (Flink's ``Configuration.get(ConfigOption)``)."""
        try:
            value: T = self.values[option.key]
        except KeyError:
            raise KeyError(f"{option.key} is not a {self.role} setting") from None
        return value

    def advertised_host(self) -> str | None:
        """rpc.advertised-host, with 'auto' resolved on this machine (ConfigError if it cannot be)."""
        host = self.values.get("rpc.advertised-host")
        if host != AUTO_HOST:
            return host
        try:
            return _host((self.resolve_host or _own_address)())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"rpc.advertised-host: cannot resolve 'auto' to this machine's address ({exc}) "
                f"(from {self.sources['rpc.advertised-host']}); set a host name or IP instead",
                "rpc.advertised-host",
            ) from None

    def argv(self, resolve_auto: bool = True) -> list[str]:
        """The named flags that give these settings to ``python -m <role>``.

        Unset optional keys are left out (a flag the process lacks is only
        passed when it is used). rpc.advertised-host 'auto' is resolved here,
        on the machine that runs the process, unless `resolve_auto` is false."""
        args: list[str] = []
        for opt in options_for(self.role):
            value = self.values.get(opt.key)
            if value is None or (opt.switch and not value):
                continue
            if opt.switch:
                args.append(opt.flag)
                continue
            if opt.key == "rpc.advertised-host" and resolve_auto:
                value = self.advertised_host()
            args += [opt.flag, _format(value)]
        return args

    def as_dict(self) -> dict[str, Any]:
        try:
            argv = self.argv()
        except ConfigError:  # 'auto' does not resolve here; the notes say so
            argv = self.argv(resolve_auto=False)
        return {
            "role": self.role,
            "config_file": self.config_file,
            "settings": dict(self.values),
            "sources": dict(self.sources),
            "argv": argv,
            **({"notes": self.notes} if self.notes else {}),
        }


def _format(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def resolve(
    role: str,
    file_values: Mapping[str, Any] | None = None,
    env_values: Mapping[str, Any] | None = None,
    flag_values: Mapping[str, Any] | None = None,
    *,
    config_file: str | None = None,
    env_names: Mapping[str, str] | None = None,
    flag_names: Mapping[str, str] | None = None,
    resolve_host: Callable[[], str] | None = None,
) -> Settings:
    """Merge defaults < file < environment < flags into the settings of `role`.

    Every given value is checked, including ones a higher layer overrides; keys
    of other roles are accepted (and dropped) from the file and the environment
    but not from flags. ``env_names``/``flag_names`` say how a key was spelled
    there, for error messages."""
    _check_role(role)
    layers = [
        ("file", file_values or {}, lambda _key: f"file {config_file}" if config_file else "file"),
        ("env", env_values or {}, lambda k: f"env {(env_names or {}).get(k, env_name(k))}"),
        (
            "flag",
            flag_values or {},
            lambda k: f"flag {(flag_names or {}).get(k, BY_KEY[k].flag if k in BY_KEY else k)}",
        ),
    ]
    merged: dict[str, Any] = {o.key: o.default for o in OPTIONS}
    sources: dict[str, str] = {o.key: "default" for o in OPTIONS}
    for layer, values, where in layers:
        for key, raw in values.items():
            opt = BY_KEY.get(key)
            if opt is None:
                raise ConfigError(f"{_unknown('configuration key', key, BY_KEY)} (from {where(key)})", key)
            if layer == "flag" and role not in opt.roles:
                raise ConfigError(f"{key} does not apply to a {role} (from {where(key)})", key)
            if raw is None:  # `key:` with no value in YAML = unset
                continue
            try:
                merged[key] = opt.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{key}: {exc} (from {where(key)})", key) from None
            sources[key] = where(key)
    notes: list[str] = []
    _cross_check(role, merged, sources)
    keys = [o.key for o in options_for(role)]
    settings = Settings(
        role, {k: merged[k] for k in keys}, {k: sources[k] for k in keys}, config_file, notes, resolve_host
    )
    if settings["rpc.advertised-host"] == AUTO_HOST:
        # Resolved when the process starts (argv()); --check may run on another machine than the process.
        try:
            resolved = settings.advertised_host() or ""
            loopback = resolved.startswith("127.") or resolved == "[::1]"
            notes.append(
                f"rpc.advertised-host 'auto' resolves to {resolved} here"
                + (" (a loopback address: only processes on this machine could reach it)" if loopback else "")
            )
        except ConfigError as exc:
            notes.append(f"{exc}: a process started here would fail")
    return settings


def _cross_check(role: str, v: dict[str, Any], sources: dict[str, str]) -> None:
    def src(key: str) -> str:
        return f" (from {sources[key]})" if sources[key] != "default" else ""

    for opt in OPTIONS:
        if opt.required and v[opt.key] is None:
            raise ConfigError(
                f"{opt.key} is required: set it in the configuration file, with {opt.env}, or with {opt.flag}", opt.key
            )
    advertised = v["rpc.advertised-host"]
    if advertised is None and v["rpc.host"] in WILDCARD_HOSTS:
        raise ConfigError(
            f"rpc.advertised-host is required when rpc.host is the wildcard address "
            f"{v['rpc.host']}{src('rpc.host')}: other processes need an address that reaches this "
            f"one (a DNS name, an IP, or 'auto')",
            "rpc.advertised-host",
        )
    if advertised is not None and advertised in WILDCARD_HOSTS:
        raise ConfigError(
            f"rpc.advertised-host must be an address others can connect to, not {advertised}"
            f"{src('rpc.advertised-host')}",
            "rpc.advertised-host",
        )
    if role == "taskmanager" and v["spark.master"] and v["spark.remote"]:
        raise ConfigError(
            f"spark.master{src('spark.master')} and spark.remote{src('spark.remote')} exclude each other: set one",
            "spark.remote",
        )
    if role == "taskmanager" and v["spark.remote"] and not str(v["spark.remote"]).startswith("sc://"):
        raise ConfigError(
            f"spark.remote: expected a Spark Connect URL sc://host:port, got "
            f"{v['spark.remote']!r}{src('spark.remote')}",
            "spark.remote",
        )
    if v["heartbeat.interval"] >= v["heartbeat.timeout"]:
        raise ConfigError(
            f"heartbeat.interval ({v['heartbeat.interval']} s{src('heartbeat.interval')}) must be "
            f"shorter than heartbeat.timeout ({v['heartbeat.timeout']} s{src('heartbeat.timeout')})",
            "heartbeat.interval",
        )


def check_security(settings: Settings) -> None:
    """A server process runs either with TLS (all three security.ssl.* files) or, said
    explicitly, plaintext (security.insecure); ConfigError saying what to pass otherwise."""
    v, sources = settings.values, settings.sources
    ssl = {k: v.get(k) for k in ("security.ssl.ca", "security.ssl.cert", "security.ssl.key")}
    given = [k for k, value in ssl.items() if value is not None]
    if v.get("security.insecure"):
        if given:
            raise ConfigError(
                f"security.insecure (from {sources['security.insecure']}) and "
                f"{', '.join(f'{k} (from {sources[k]})' for k in given)} exclude each other: "
                "drop --insecure to run with TLS, or the TLS files to run plaintext",
                "security.insecure",
            )
        if v.get("security.token.file") is not None:
            raise ConfigError(
                "security.token.file needs TLS (a token sent in plaintext can be read on the way): "
                "set security.ssl.ca, security.ssl.cert and security.ssl.key",
                "security.token.file",
            )
        return
    if not given:
        raise ConfigError(
            f"the {ROLE_NAMES[settings.role]} needs TLS: pass --tls-ca, --tls-cert and --tls-key "
            "(security.ssl.ca, security.ssl.cert, security.ssl.key; `sluice certs create DIR` makes them), "
            "or --insecure (security.insecure: true) to run plaintext gRPC without authentication "
            "on a trusted network only",
            "security.ssl.ca",
        )
    missing = [k for k in ssl if ssl[k] is None]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} missing: TLS needs all of security.ssl.ca, security.ssl.cert and "
            f"security.ssl.key (given: {', '.join(f'{k} from {sources[k]}' for k in given)})",
            missing[0],
        )


def _own_address() -> str:
    return socket.gethostbyname(socket.gethostname())


def load(
    role: str,
    *,
    config_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Settings:
    """Settings of `role` from the file (`config_path`, else $SLUICE_CONFIG), the
    environment (`environ`, default os.environ) and already-parsed flags (key -> raw value)."""
    environ = os.environ if environ is None else environ
    if config_path is None:
        config_path = environ.get(CONFIG_ENV) or None
    elif not config_path.strip():
        raise ConfigError("--config needs a file name")
    file_values = read_file(config_path) if config_path else {}
    env_values = read_env(environ)
    return resolve(role, file_values, env_values, flags or {}, config_file=config_path, flag_names=flag_names)


def parse_assignment(text: str) -> tuple[str, str]:
    """`key=value` of a -D flag."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"-D expects KEY=VALUE, got {text!r}")
    if key not in BY_KEY:
        raise ConfigError(f"{_unknown('configuration key', key, BY_KEY)} (from flag -D {text})", key)
    return key, value


# -- flags ------------------------------------------------------------------------------------
def flag_dest(key: str) -> str:
    """The argparse destination of a key's named flag."""
    return "cfg_" + key.replace(".", "_").replace("-", "_")


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, role: str, *, flags_only: bool = False
) -> None:
    """The named flag of every option of `role`, its help naming the key (and the variable).
    Values stay raw (None when absent): :func:`resolve` parses them, so a bad one is a
    ConfigError naming the key and the flag. `flags_only`: the command line is the only
    source (``python -m <role>``), so a required option is a required flag."""
    for opt in options_for(role):
        names = opt.key if flags_only else f"{opt.key}, {opt.env}"
        switch: dict[str, Any] = {"nargs": "?", "const": "true"} if opt.switch else {}
        parser.add_argument(
            opt.flag,
            dest=flag_dest(opt.key),
            metavar=opt.metavar,
            default=None,
            required=flags_only and opt.required,
            help=f"{opt.help} [{names}]",
            **switch,
        )


def flag_values(role: str, args: argparse.Namespace) -> dict[str, Any]:
    """key -> raw value of the named flags given on a command line parsed with :func:`add_flags`."""
    return {
        opt.key: value for opt in options_for(role) if (value := getattr(args, flag_dest(opt.key), None)) is not None
    }


def parse_process_argv(role: str, argv: Sequence[str] | None) -> tuple[Settings, str | None]:
    """The command line of `python -m <role>`: the named flags of OPTIONS (the same as
    `sluice <role>`; flags alone, no configuration file or SLUICE_* environment) and
    --address-file. A bad value exits 2 naming the key and the flag. Returns the settings
    and the address file."""
    ap = argparse.ArgumentParser(prog=role, description=f"Run a Sluice {ROLE_NAMES[role]}")
    add_flags(ap, role, flags_only=True)
    ap.add_argument("--address-file", metavar="PATH", help="write host:port here once listening")
    args = ap.parse_args(argv)
    try:
        settings = resolve(role, flag_values=flag_values(role, args))
        settings.advertised_host()  # 'auto' that does not resolve is a configuration error too
    except ConfigError as exc:
        ap.error(str(exc))
    return settings, args.address_file


def arg_type(option: Option[T]) -> Callable[[str], T]:
    """An argparse ``type=`` parsing a flag the way `option` parses a value (e.g. ``--heartbeat-timeout 6s``)."""

    def parse(text: str) -> T:
        try:
            return option.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = option.key
    return parse


def default_text(option: Option[Any]) -> str:
    """How documentation shows a default."""
    if option.required:
        return "(required)"
    if option.default is None:
        return "-"
    if option.parse is _seconds:
        return units.format_duration(option.default)
    if isinstance(option.default, bool):
        return str(option.default).lower()
    return _format(option.default)


def reference() -> str:
    """The Markdown table of every key, its variable, flag, roles, default and meaning
    (README.md and docs/configuration.md embed it; sluice/reference_docs.py writes it there)."""
    rows = ["| key | environment variable | flag | roles | default | meaning |", "|---|---|---|---|---|---|"]
    for o in OPTIONS:
        meaning = o.help.replace(" (required)", "").replace("|", "\\|")
        rows.append(f"| `{o.key}` | `{o.env}` | `{o.flag}` | {', '.join(o.roles)} | {default_text(o)} | {meaning} |")
    return "\n".join(rows)
