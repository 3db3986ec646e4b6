"""Process configuration for JobManagers and TaskManagers.

Every setting is an :class:`Option` of the ``OPTIONS`` table
(sluice/process_options.py; Flink's ConfigOption shape: key, parser, default,
roles, flag, meaning), the only place a process default is written. It has a flat key (``rpc.port``) and is
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
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluice import units
from sluice.option_types import AUTO_HOST
from sluice.option_types import host as _host
from sluice.option_types import seconds as _seconds
from sluice.process_options import (
    BOTH,
    BY_ENV,
    BY_KEY,
    CHECKPOINTS_DIR,
    CLIENT_CALLS_MAX_CONCURRENT,
    CLIENT_CALLS_MAX_CONCURRENT_PER_CLIENT,
    CLIENT_CALLS_RATE_PER_CLIENT,
    CLUSTER_ID,
    CONFIG_ENV,
    ENV_PREFIX,
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TIMEOUT,
    JM,
    LOG_FILE,
    MAX_SLOTS_LIMIT,
    MAX_SLOTS_PER_TASKMANAGER,
    METRICS_PORT,
    NON_CONFIG_ENV,
    OPTIONS,
    PROCESS_UMASK,
    REST_ADDRESS,
    REST_ALLOWED_HOSTS,
    REST_LOGS_PUBLIC,
    REST_MAX_CONNECTIONS,
    REST_MAX_CONNECTIONS_PER_CLIENT,
    REST_PORT,
    REST_REQUEST_TIMEOUT,
    ROLE_NAMES,
    ROLES,
    RPC_ADVERTISED_HOST,
    RPC_HEALTH_PORT,
    RPC_HOST,
    RPC_PORT,
    SECURITY_INSECURE,
    SECURITY_SSL_CA,
    SECURITY_SSL_CERT,
    SECURITY_SSL_KEY,
    SECURITY_TOKEN_FILE,
    SECURITY_TOKEN_PORT,
    SPARK_CDS_ARCHIVE,
    SPARK_MASTER,
    SPARK_REMOTE,
    SPARK_WARM_UP,
    TASK_CANCELLATION_INTERVAL,
    TASK_CANCELLATION_TIMEOUT,
    TASKMANAGER_LOSS_MAX_PER_JOB,
    TASKMANAGER_RESOURCE_ID,
    TASKMANAGER_SLOTS,
    TM,
    WILDCARD_HOSTS,
    ZOOKEEPER_AUTH_FILE,
    ZOOKEEPER_CLIENT_ACL,
    ZOOKEEPER_QUORUM,
    ZOOKEEPER_SESSION_TIMEOUT,
    ConfigError,
    Option,
    check_role,
    env_name,
    options_for,
    reachable_host,
)

# The table's names are also reached through this module (config.HEARTBEAT_TIMEOUT, ...).
__all__ = [
    "AUTO_HOST",
    "BOTH",
    "BY_ENV",
    "BY_KEY",
    "CHECKPOINTS_DIR",
    "CLIENT_CALLS_MAX_CONCURRENT",
    "CLIENT_CALLS_MAX_CONCURRENT_PER_CLIENT",
    "CLIENT_CALLS_RATE_PER_CLIENT",
    "CLUSTER_ID",
    "CONFIG_ENV",
    "ConfigError",
    "ENV_PREFIX",
    "HEARTBEAT_INTERVAL",
    "HEARTBEAT_TIMEOUT",
    "JM",
    "LOG_FILE",
    "MAX_SLOTS_LIMIT",
    "MAX_SLOTS_PER_TASKMANAGER",
    "METRICS_PORT",
    "NON_CONFIG_ENV",
    "OPTIONS",
    "Option",
    "REST_ADDRESS",
    "REST_MAX_CONNECTIONS",
    "REST_MAX_CONNECTIONS_PER_CLIENT",
    "REST_PORT",
    "REST_REQUEST_TIMEOUT",
    "REST_ALLOWED_HOSTS",
    "REST_LOGS_PUBLIC",
    "PROCESS_UMASK",
    "ROLES",
    "ROLE_NAMES",
    "RPC_ADVERTISED_HOST",
    "RPC_HEALTH_PORT",
    "RPC_HOST",
    "RPC_PORT",
    "SECURITY_INSECURE",
    "SECURITY_SSL_CA",
    "SECURITY_SSL_CERT",
    "SECURITY_SSL_KEY",
    "SECURITY_TOKEN_FILE",
    "SECURITY_TOKEN_PORT",
    "SPARK_CDS_ARCHIVE",
    "SPARK_MASTER",
    "SPARK_REMOTE",
    "SPARK_WARM_UP",
    "TASKMANAGER_LOSS_MAX_PER_JOB",
    "TASKMANAGER_RESOURCE_ID",
    "TASKMANAGER_SLOTS",
    "TASK_CANCELLATION_INTERVAL",
    "TASK_CANCELLATION_TIMEOUT",
    "TM",
    "WILDCARD_HOSTS",
    "ZOOKEEPER_AUTH_FILE",
    "ZOOKEEPER_CLIENT_ACL",
    "ZOOKEEPER_QUORUM",
    "ZOOKEEPER_SESSION_TIMEOUT",
    "check_role",
    "env_name",
    "options_for",
    "reachable_host",
]

T = TypeVar("T")


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
    check_role(role)
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
