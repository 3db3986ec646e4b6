"""The process options: the ``OPTIONS`` table and the value types of its options.

Every setting of a JobManager or TaskManager is an :class:`Option` of the
``OPTIONS`` table below (Flink's ConfigOption shape: key, parser, default,
roles, flag, meaning), the only place a process default is written.
sluice/config.py reads, merges and checks the values (and exports these names
too); ``config.reference`` renders the table into the docs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sluice import option_types as types

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
    types.quorum,
    None,
    BOTH,
    "--zookeeper",
    "ZooKeeper connect string host:port[,host:port...][/chroot] (required)",
    "HOSTS",
    required=True,
)
CLUSTER_ID: Option[str] = Option(
    "cluster.id",
    types.string,
    "default",
    BOTH,
    "--cluster-id",
    "cluster id: the ZooKeeper root /sluice/<id> shared by the cluster's processes",
    "ID",
)
RPC_HOST: Option[str] = Option(
    "rpc.host", types.host, "127.0.0.1", BOTH, "--host", "address the gRPC server binds (0.0.0.0 in containers)", "HOST"
)
RPC_PORT: Option[int] = Option("rpc.port", types.port, 0, BOTH, "--port", "gRPC port (0 picks a free one)", "PORT")
RPC_ADVERTISED_HOST: Option[str | None] = Option(
    "rpc.advertised-host",
    types.advertised_host,
    None,
    BOTH,
    "--advertised-host",
    "host others use to reach this process (published to ZooKeeper / registered with the leader); "
    "required when rpc.host is a wildcard; 'auto' = the address this machine's host name resolves to",
    "HOST",
)
TASKMANAGER_SLOTS: Option[int] = Option(
    "taskmanager.slots", types.positive_int, 2, TM, "--slots", "task slots of this TaskManager", "N"
)
MAX_SLOTS_LIMIT = 4096  # the highest slotmanager.max-slots-per-taskmanager accepts


def _slot_limit(value: Any) -> int:
    n = types.integer(value)
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
    types.string,
    None,
    TM,
    "--resource-id",
    "resource id (default: random per start; must be unique per TaskManager incarnation)",
    "ID",
)
HEARTBEAT_TIMEOUT: Option[float] = Option(
    "heartbeat.timeout",
    types.seconds,
    6.0,
    JM,
    "--heartbeat-timeout",
    "time without heartbeats before a TaskManager is declared lost (a bare number is seconds)",
    "DURATION",
)
HEARTBEAT_INTERVAL: Option[float] = Option(
    "heartbeat.interval",
    types.seconds,
    1.0,
    BOTH,
    "--heartbeat-interval",
    "time between a TaskManager's heartbeats: the leader tells each TaskManager its own value when it "
    "registers; a TaskManager's applies until then (a bare number is seconds)",
    "DURATION",
)
ZOOKEEPER_SESSION_TIMEOUT: Option[float] = Option(
    "zookeeper.session-timeout",
    types.seconds,
    6.0,
    BOTH,
    "--zk-session-timeout",
    "ZooKeeper session timeout (sets JobManager failover time; a bare number is seconds)",
    "DURATION",
)
ZOOKEEPER_AUTH_FILE: Option[str | None] = Option(
    "high-availability.zookeeper.auth-file",
    types.string,
    None,
    BOTH,
    "--zk-auth-file",
    "file holding the cluster's ZooKeeper digest credentials user:password (mode 0600); every "
    "ZooKeeper client of the cluster authenticates with them (`sluice cluster start` writes one)",
    "PATH",
)
ZOOKEEPER_CLIENT_ACL: Option[str | None] = Option(
    "high-availability.zookeeper.client.acl",
    types.zk_acl,
    None,
    BOTH,
    "--zk-acl",
    "ACL of the nodes under /sluice/<cluster-id>: creator (all permissions to the credentials of "
    "high-availability.zookeeper.auth-file only) or open (anyone); default creator with an auth file, else open",
    "creator|open",
)
CHECKPOINTS_DIR: Option[str | None] = Option(
    "state.checkpoints.dir",
    types.string,
    None,
    JM,
    "--checkpoint-dir",
    "checkpoint and HA storage: a path every process sees, or a pyarrow.fs URI (s3://bucket/path)",
    "DIR",
)
SPARK_MASTER: Option[str | None] = Option(
    "spark.master",
    types.string,
    None,
    TM,
    "--spark-master",
    "Spark master URL, e.g. spark://host:7077 (default local[<slots>])",
    "URL",
)
SPARK_REMOTE: Option[str | None] = Option(
    "spark.remote", types.string, None, TM, "--spark-remote", "Spark Connect URL, e.g. sc://host:15002", "URL"
)
SPARK_CDS_ARCHIVE: Option[str] = Option(
    "spark.cds-archive",
    types.string,
    "auto",
    TM,
    "--spark-cds-archive",
    "class-data sharing archive the Spark JVM maps at start (halves its class loading): auto (the one "
    "`make install` or the image built for this interpreter, if present), off, or a path "
    "(python -m taskmanager.spark_cds build --path PATH)",
    "auto|off|PATH",
)
SPARK_WARM_UP: Option[bool] = Option(
    "spark.warm-up",
    types.boolean,
    True,
    TM,
    "--spark-warm-up",
    "after the Spark JVM starts, run each kind of Spark call a task makes once, in the background while the "
    "slots are offered; false leaves those one-time costs to the first task (less CPU where TaskManagers come and go)",
    "BOOL",
)
LOG_FILE: Option[str | None] = Option(
    "log.file", types.string, None, BOTH, "--log-file", "log to this file instead of stderr", "PATH"
)
TASK_CANCELLATION_INTERVAL: Option[float] = Option(
    "task.cancellation.interval",
    types.seconds,
    3.0,
    TM,
    "--task-cancellation-interval",
    "time between attempts to stop a cancelled task that is still running: its Spark jobs are cancelled "
    "again and its thread interrupted (a bare number is seconds)",
    "DURATION",
)
TASK_CANCELLATION_TIMEOUT: Option[float] = Option(
    "task.cancellation.timeout",
    types.duration,
    30.0,
    TM,
    "--task-cancellation-timeout",
    "time after which a cancelled task that is still running is reported FAILED and its TaskManager exits, "
    "for its supervisor to restart it with free slots; 0 never gives up (a bare number is seconds)",
    "DURATION",
)
TASKMANAGER_LOSS_MAX_PER_JOB: Option[int] = Option(
    "jobmanager.taskmanager-loss.max-per-job",
    types.positive_int,
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
    types.port,
    None,
    BOTH,
    "--health-port",
    "plaintext port serving only grpc.health.v1 (for Kubernetes gRPC probes, which cannot do TLS); "
    "unset = none, 0 = a free one",
    "PORT",
)
SECURITY_SSL_CA: Option[str | None] = Option(
    "security.ssl.ca",
    types.string,
    None,
    BOTH,
    "--tls-ca",
    "PEM file of the cluster's CA certificate: peers' certificates must be signed by it (docs/security.md)",
    "FILE",
)
SECURITY_SSL_CERT: Option[str | None] = Option(
    "security.ssl.cert",
    types.string,
    None,
    BOTH,
    "--tls-cert",
    "PEM file of this process's certificate, whose common name is <role>/<name> (`sluice certs create` makes them)",
    "FILE",
)
SECURITY_SSL_KEY: Option[str | None] = Option(
    "security.ssl.key", types.string, None, BOTH, "--tls-key", "PEM file of this process's private key", "FILE"
)
PROCESS_UMASK: Option[str] = Option(
    "process.umask",
    types.umask,
    "077",
    BOTH,
    "--umask",
    "file mode mask of what the process and its Spark JVM write: logs, state, checkpoints, savepoints, "
    "outputs; 077 keeps them to the user the process runs as, 022 lets everyone read them",
    "MASK",
)
SECURITY_INSECURE: Option[bool] = Option(
    "security.insecure",
    types.boolean,
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
    types.string,
    None,
    JM,
    "--token-file",
    "file holding a bearer token clients may send instead of a client certificate, on security.token.port",
    "FILE",
)
SECURITY_TOKEN_PORT: Option[int | None] = Option(
    "security.token.port",
    types.port,
    None,
    JM,
    "--token-port",
    "TLS port (without client certificates) for bearer-token clients, with security.token.file "
    "(unset or 0 = a free one)",
    "PORT",
)

REST_ADDRESS: Option[str] = Option(
    "rest.address",
    types.host,
    "127.0.0.1",
    JM,
    "--rest-host",
    "address the REST API and web dashboard bind (0.0.0.0 in containers)",
    "HOST",
)
REST_PORT: Option[int | None] = Option(
    "rest.port",
    types.port,
    None,
    JM,
    "--rest-port",
    "port of the REST API and web dashboard (docs/monitoring.md); unset = none, 0 = a free one",
    "PORT",
)
CLIENT_CALLS_MAX_CONCURRENT: Option[int] = Option(
    "jobmanager.client-calls.max-concurrent",
    types.positive_int,
    16,
    JM,
    "--client-calls-max-concurrent",
    "client API calls (submit, status, list, cancel, ...) the JobManager runs at once; more get "
    "RESOURCE_EXHAUSTED with a retry hint, so heartbeats and task reports always find a thread (at most 32)",
    "N",
)
CLIENT_CALLS_MAX_CONCURRENT_PER_CLIENT: Option[int] = Option(
    "jobmanager.client-calls.max-concurrent-per-client",
    types.positive_int,
    8,
    JM,
    "--client-calls-max-concurrent-per-client",
    "client API calls one client address may have running at once; more get RESOURCE_EXHAUSTED",
    "N",
)
CLIENT_CALLS_RATE_PER_CLIENT: Option[float] = Option(
    "jobmanager.client-calls.rate-per-client",
    types.positive_float,
    200.0,
    JM,
    "--client-calls-rate-per-client",
    "client API calls per second one client address may make (bursts of twice as many); more get RESOURCE_EXHAUSTED",
    "N",
)
REST_MAX_CONNECTIONS: Option[int] = Option(
    "rest.max-connections",
    types.positive_int,
    64,
    JM,
    "--rest-max-connections",
    "connections the REST API and dashboard serve at once; requests beyond get 503",
    "N",
)
REST_MAX_CONNECTIONS_PER_CLIENT: Option[int] = Option(
    "rest.max-connections-per-client",
    types.positive_int,
    16,
    JM,
    "--rest-max-connections-per-client",
    "connections one client address may hold open to the REST API at once; more are closed at once",
    "N",
)
REST_REQUEST_TIMEOUT: Option[float] = Option(
    "rest.request-timeout",
    types.seconds,
    10.0,
    JM,
    "--rest-request-timeout",
    "time a REST connection has to send a request's head, from its opening or its last response; "
    "then it is closed (a bare number is seconds)",
    "DURATION",
)
REST_ALLOWED_HOSTS: Option[str | None] = Option(
    "rest.allowed-hosts",
    types.host_names,
    None,
    JM,
    "--rest-allowed-hosts",
    "host names the REST API answers to (its requests' Host header), separated by commas, or *; unset: "
    "only localhost and loopback addresses while rest.address is a loopback one (a DNS-rebinding page "
    "cannot reach it), any host otherwise",
    "HOSTS",
)
REST_LOGS_PUBLIC: Option[bool] = Option(
    "rest.logs.public",
    types.boolean,
    False,
    JM,
    "--rest-logs-public",
    "serve TaskManager logs through REST without the bearer token on a secured cluster (they hold what "
    "jobs print); on a plaintext --insecure cluster they are served to anyone anyway",
    "BOOL",
    switch=True,
)
METRICS_PORT: Option[int | None] = Option(
    "metrics.port",
    types.port,
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
    SPARK_CDS_ARCHIVE,
    SPARK_WARM_UP,
    LOG_FILE,
    TASK_CANCELLATION_INTERVAL,
    TASK_CANCELLATION_TIMEOUT,
    TASKMANAGER_LOSS_MAX_PER_JOB,
    RPC_HEALTH_PORT,
    SECURITY_SSL_CA,
    SECURITY_SSL_CERT,
    SECURITY_SSL_KEY,
    PROCESS_UMASK,
    SECURITY_INSECURE,
    SECURITY_TOKEN_FILE,
    SECURITY_TOKEN_PORT,
    REST_ADDRESS,
    REST_PORT,
    CLIENT_CALLS_MAX_CONCURRENT,
    CLIENT_CALLS_MAX_CONCURRENT_PER_CLIENT,
    CLIENT_CALLS_RATE_PER_CLIENT,
    REST_MAX_CONNECTIONS,
    REST_MAX_CONNECTIONS_PER_CLIENT,
    REST_REQUEST_TIMEOUT,
    REST_ALLOWED_HOSTS,
    REST_LOGS_PUBLIC,
    METRICS_PORT,
)
BY_KEY: dict[str, Option[Any]] = {o.key: o for o in OPTIONS}


def env_name(key: str) -> str:
    return ENV_PREFIX + re.sub(r"[.-]", "_", key).upper()


BY_ENV: dict[str, Option[Any]] = {o.env: o for o in OPTIONS}
assert len(BY_ENV) == len(OPTIONS), "two keys map to the same environment variable"


def options_for(role: str) -> list[Option[Any]]:
    check_role(role)
    return [o for o in OPTIONS if role in o.roles]


def check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
