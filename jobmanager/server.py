"""The JobManager process: a gRPC server, a ZooKeeper client, the leader
election, and the dispatcher. Standbys serve health (NOT_SERVING) and
answer client calls with UNAVAILABLE naming the leader.

    python -m jobmanager --zookeeper 127.0.0.1:2181 --cluster-id default [--address-file F]
    sluice jobmanager --config sluice.yaml     # file < SLUICE_* environment < flags

Both build a sluice.config.Settings (the OPTIONS table holds every default)
and call run(settings).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Sequence

from kazoo.retry import KazooRetry

from jobmanager.dispatcher import Dispatcher
from jobmanager.ha.zookeeper import ZooKeeperHaServices
from jobmanager.leader.zookeeper_driver import ZooKeeperLeaderElectionDriver
from jobmanager.metrics import JobManagerMetrics
from jobmanager.rest.app import create_app
from jobmanager.servicers import JobManagerServicer, ResourceManagerServicer
from sluice import config, logs, rpc
from sluice.http_server import HttpServer
from sluice.metrics import prometheus
from sluice.rpc_admission import ClientCallLimiter, Limits
from sluice.v1 import jobmanager_pb2_grpc
from sluice.zk import auth as zk_auth
from sluice.zk.leader_retrieval import LeaderRetriever, read_leader_endpoint
from sluice.zk.paths import ZkPaths

log = logging.getLogger("sluice.jobmanager")

SERVER_WORKERS = 48  # gRPC threads; client calls take at most jobmanager.client-calls.max-concurrent of them
CONTROL_PLANE_WORKERS = 16  # threads always left to heartbeats, task states, acks and splits


def client_call_limits(settings: config.Settings) -> Limits:
    """The admission limits of client calls (sluice/rpc_admission.py); ConfigError when they
    would leave the control plane fewer than CONTROL_PLANE_WORKERS threads."""
    concurrent = settings.get(config.CLIENT_CALLS_MAX_CONCURRENT)
    if concurrent > SERVER_WORKERS - CONTROL_PLANE_WORKERS:
        raise config.ConfigError(
            f"{config.CLIENT_CALLS_MAX_CONCURRENT.key}: at most {SERVER_WORKERS - CONTROL_PLANE_WORKERS} "
            f"(the server's {SERVER_WORKERS} threads keep {CONTROL_PLANE_WORKERS} for heartbeats and task "
            f"reports), got {concurrent}",
            config.CLIENT_CALLS_MAX_CONCURRENT.key,
        )
    rate = settings.get(config.CLIENT_CALLS_RATE_PER_CLIENT)
    return Limits(
        max_concurrent=concurrent,
        per_client=settings.get(config.CLIENT_CALLS_MAX_CONCURRENT_PER_CLIENT),
        rate=rate,
        burst=max(1, int(2 * rate)),
    )


class JobManagerProcess:
    def __init__(self, settings: config.Settings):
        """A JobManager configured by `settings` (role jobmanager; build them with
        sluice.config.resolve or load). rpc.advertised-host 'auto' is resolved here."""
        if settings.role != "jobmanager":
            raise ValueError(f"JobManagerProcess needs jobmanager settings, got {settings.role} settings")
        advertised_host = settings.advertised_host()
        # TLS files or an explicit --insecure (ConfigError otherwise); calls to TaskManagers use them too
        security = rpc.Security.from_settings(settings)
        rpc.use_tls(security.tls)
        self.server = rpc.Server(
            settings.get(config.RPC_HOST),
            settings.get(config.RPC_PORT),
            ["sluice.v1.JobManager", "sluice.v1.ResourceManager"],
            # client calls take at most `max_concurrent` of the threads: the rest are the control
            # plane's (heartbeats, task states, acks, splits), whatever clients do
            max_workers=SERVER_WORKERS,
            security=security,
            health_port=settings.get(config.RPC_HEALTH_PORT),
            interceptors=[ClientCallLimiter(client_call_limits(settings), time.monotonic)],
        )
        # the address published to ZooKeeper: the bind host may be a wildcard (0.0.0.0 in containers)
        self.address = f"{advertised_host}:{self.server.port}" if advertised_host else self.server.address
        self.checkpoint_dir = settings.get(config.CHECKPOINTS_DIR)
        # heartbeat_interval: what RegisterTaskManagerResponse tells TaskManagers, so the process that
        # judges heartbeats (heartbeat.timeout) also sets their pace
        self.dispatcher = Dispatcher(
            self.address,
            heartbeat_timeout=settings.get(config.HEARTBEAT_TIMEOUT),
            heartbeat_interval=settings.get(config.HEARTBEAT_INTERVAL),
            checkpoint_dir=self.checkpoint_dir,
            max_taskmanager_losses=settings.get(config.TASKMANAGER_LOSS_MAX_PER_JOB),
            max_slots_per_taskmanager=settings.get(config.MAX_SLOTS_PER_TASKMANAGER),
        )
        self._leader_address: str | None = None
        hint = lambda: self._leader_address  # noqa: E731 — a one-line closure the servicers call for the leader
        jobmanager_pb2_grpc.add_JobManagerServicer_to_server(
            JobManagerServicer(self.dispatcher, hint), self.server.server
        )
        jobmanager_pb2_grpc.add_ResourceManagerServicer_to_server(
            ResourceManagerServicer(self.dispatcher, hint), self.server.server
        )
        self.server.set_serving(False)
        self.paths = ZkPaths(settings.get(config.CLUSTER_ID))
        # authenticated with the cluster's credentials, creating nodes with its ACL (sluice/zk/auth.py)
        self.zk_auth = zk_auth.ZkAuth.resolve(
            settings.get(config.ZOOKEEPER_AUTH_FILE), settings.get(config.ZOOKEEPER_CLIENT_ACL)
        )
        self.zk = zk_auth.make_client(
            settings.get(config.ZOOKEEPER_QUORUM),
            self.zk_auth,
            timeout=settings.get(config.ZOOKEEPER_SESSION_TIMEOUT),
            connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1),
        )
        self.election = ZooKeeperLeaderElectionDriver(self.zk, self.paths)
        self._stopped = threading.Event()
        self._leading = False
        # The REST API and dashboard, and the Prometheus endpoint (docs/monitoring.md): `endpoints` goes
        # to the address file after the gRPC address, and from there to cluster.json.
        self.endpoints: dict[str, str] = {}
        self.rest: HttpServer | None = None
        self.metrics_server: HttpServer | None = None
        rest_port = settings.get(config.REST_PORT)
        if rest_port is not None:
            tls = security.tls
            app = create_app(
                self.dispatcher,
                is_leader=lambda: self._leading,
                leader_rest=self._leader_rest,
                token=security.token,
                scheme="https" if tls is not None else "http",
                bind_address=settings.get(config.REST_ADDRESS),
                allowed_hosts=settings.get(config.REST_ALLOWED_HOSTS),
                logs_public=settings.get(config.REST_LOGS_PUBLIC),
            )
            self.rest = HttpServer(
                app,
                settings.get(config.REST_ADDRESS),
                rest_port,
                name="rest",
                ssl_certfile=str(tls.cert) if tls is not None else None,
                ssl_keyfile=str(tls.key) if tls is not None else None,
                max_connections=settings.get(config.REST_MAX_CONNECTIONS),
                per_client=settings.get(config.REST_MAX_CONNECTIONS_PER_CLIENT),
                request_timeout=settings.get(config.REST_REQUEST_TIMEOUT),
            )
            self.endpoints["rest"] = (
                f"{config.reachable_host(advertised_host, settings.get(config.REST_ADDRESS))}:{self.rest.port}"
            )
        self._metrics_port = settings.get(config.METRICS_PORT)
        self._metrics_host = settings.get(config.RPC_HOST)
        self._advertised_host = advertised_host

    def _leader_rest(self) -> str | None:
        """The leader's REST address, as it published it with its gRPC address."""
        return read_leader_endpoint(self.zk, self.paths, "rest")

    # LeaderContender
    def grant_leadership(self, session_id: str) -> None:
        self.dispatcher.grant_leadership(session_id)
        if self.election.publish_leader_info(session_id, self.address, self.endpoints):
            self._leading = True
            self.server.set_serving(True)
            log.info("leading at %s (session %s)", self.address, session_id)

    def revoke_leadership(self) -> None:
        self._leading = False
        self.server.set_serving(False)
        self.dispatcher.revoke_leadership()

    def _on_leader(self, address: str | None, _session_id: str | None) -> None:
        self._leader_address = address

    def start(self) -> None:
        self.server.start()
        if self.rest is not None:
            self.rest.start()
            log.info(
                "REST API and dashboard at %s://%s/", "https" if self.rest.secure else "http", self.endpoints["rest"]
            )
        if self._metrics_port is not None:
            collector = JobManagerMetrics(self.dispatcher, lambda: self._leading)
            self.metrics_server = prometheus.serve(collector.collect, self._metrics_host, self._metrics_port)
            host = config.reachable_host(self._advertised_host, self._metrics_host)
            self.endpoints["metrics"] = f"{host}:{self.metrics_server.port}"
            log.info("Prometheus metrics at http://%s/metrics", self.endpoints["metrics"])
        log.info(
            "JobManager listening at %s (%s)%s%s; connecting to ZooKeeper",
            self.address,
            "mutual TLS" if self.server.secure else "PLAINTEXT, no authentication",
            f", bearer-token clients on port {self.server.token_port}" if self.server.token_port else "",
            f", health only on plaintext port {self.server.health_port}" if self.server.health_port else "",
        )
        self.zk.start(timeout=60)
        zk_auth.prepare_cluster_root(self.zk, self.paths, self.zk_auth)
        self.dispatcher.ha = ZooKeeperHaServices(self.zk, self.paths, self.checkpoint_dir)
        self.dispatcher._guard_factory = self.election.guarded_transaction
        self.retriever = LeaderRetriever(self.zk, self.paths, self._on_leader)
        self.election.start(self)
        threading.Thread(target=self._tick_loop, name="jm-tick", daemon=True).start()

    def _tick_loop(self) -> None:
        while not self._stopped.wait(0.2):
            try:
                self.dispatcher.tick()
            except Exception:
                log.exception("tick failed")

    def stop(self) -> None:
        """Graceful: NOT_SERVING, release leadership (a standby takes over at once), drain RPCs."""
        self._stopped.set()
        self.server.set_serving(False)
        try:
            self.election.stop()
        except Exception:
            log.exception("releasing leadership failed")
        self.dispatcher.revoke_leadership()
        self.server.stop(grace=3)
        for http in (self.rest, self.metrics_server):
            if http is not None:
                http.stop()
        self.dispatcher.close()
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001 — shutting down: nothing left to tell
            pass


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m jobmanager`: flags from sluice/process_options.py's OPTIONS and --address-file."""
    settings, address_file = config.parse_process_argv("jobmanager", argv)
    try:
        run(settings, address_file)
    except config.ConfigError as exc:
        sys.exit(f"jobmanager: configuration error: {exc}")


def run(settings: config.Settings, address_file: str | None = None) -> None:
    """Run a JobManager with `settings` until SIGTERM or SIGINT has stopped it gracefully;
    write its host:port to `address_file` once it listens."""
    os.umask(int(settings.get(config.PROCESS_UMASK), 8))  # before any file: its log, state, checkpoints
    logs.setup("jobmanager", log_file=settings.get(config.LOG_FILE))
    proc = JobManagerProcess(settings)
    rpc.run_until_signalled(proc, "JobManager", address_file)
