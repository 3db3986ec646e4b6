"""The JobManager process: a gRPC server, a ZooKeeper client, the leader
election, and the dispatcher. Standbys serve health (NOT_SERVING) and
answer client calls with UNAVAILABLE naming the leader.

    python -m jobmanager --zookeeper 127.0.0.1:2181 --cluster-id default
"""

from __future__ import annotations

import argparse
import logging
import threading

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from jobmanager.dispatcher import Dispatcher
from jobmanager.ha.zookeeper import ZooKeeperHaServices
from jobmanager.leader.election import ZooKeeperLeaderElectionDriver
from jobmanager.servicers import JobManagerServicer, ResourceManagerServicer
from sluice import logs, rpc
from sluice.v1 import jobmanager_pb2_grpc
from sluice.zk.leader_retrieval import LeaderRetriever
from sluice.zk.paths import ZkPaths

log = logging.getLogger("sluice.jobmanager")


class JobManagerProcess:
    def __init__(self, zookeeper: str, cluster_id: str, host: str = "127.0.0.1", port: int = 0,
                 heartbeat_timeout: float = 6.0, zk_session_timeout: float = 6.0, checkpoint_dir: str | None = None,
                 advertised_host: str | None = None):
        self.server = rpc.Server(host, port, ["sluice.v1.JobManager", "sluice.v1.ResourceManager"])
        # the address published to ZooKeeper: the bind host may be a wildcard (0.0.0.0 in containers)
        self.address = f"{advertised_host}:{self.server.port}" if advertised_host else self.server.address
        self.checkpoint_dir = checkpoint_dir
        self.dispatcher = Dispatcher(self.address, heartbeat_timeout=heartbeat_timeout, checkpoint_dir=checkpoint_dir)
        self._leader_address: str | None = None
        hint = lambda: self._leader_address  # noqa: E731
        jobmanager_pb2_grpc.add_JobManagerServicer_to_server(JobManagerServicer(self.dispatcher, hint), self.server.server)
        jobmanager_pb2_grpc.add_ResourceManagerServicer_to_server(ResourceManagerServicer(self.dispatcher, hint),
                                                                  self.server.server)
        self.server.set_serving(False)
        self.paths = ZkPaths(cluster_id)
        self.zk = KazooClient(hosts=zookeeper, timeout=zk_session_timeout,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2),
                              command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1))
        self.election = ZooKeeperLeaderElectionDriver(self.zk, self.paths)
        self._stopped = threading.Event()

    # LeaderContender
    def grant_leadership(self, session_id: str) -> None:
        self.dispatcher.grant_leadership(session_id)
        if self.election.publish_leader_info(session_id, self.address):
            self.server.set_serving(True)
            log.info("leading at %s (session %s)", self.address, session_id)

    def revoke_leadership(self) -> None:
        self.server.set_serving(False)
        self.dispatcher.revoke_leadership()

    def _on_leader(self, address, session_id) -> None:  # noqa: ARG002
        self._leader_address = address

    def start(self) -> None:
        self.server.start()
        log.info("JobManager listening at %s; connecting to ZooKeeper", self.address)
        self.zk.start(timeout=60)
        self.dispatcher.ha = ZooKeeperHaServices(self.zk, self.paths, self.checkpoint_dir)
        self.dispatcher._guard_factory = self.election.guarded_transaction
        self.retriever = LeaderRetriever(self.zk, self.paths, self._on_leader)
        self.election.start(self)
        threading.Thread(target=self._tick_loop, name="jm-tick", daemon=True).start()

    def _tick_loop(self) -> None:
        while not self._stopped.wait(0.2):
            try:
                self.dispatcher.tick()
            except Exception:  # noqa: BLE001
                log.exception("tick failed")

    def stop(self) -> None:
        """Graceful: NOT_SERVING, release leadership (a standby takes over at once), drain RPCs."""
        self._stopped.set()
        self.server.set_serving(False)
        try:
            self.election.stop()
        except Exception:  # noqa: BLE001
            log.exception("releasing leadership failed")
        self.dispatcher.revoke_leadership()
        self.server.stop(grace=3)
        self.dispatcher.close()
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # noqa: BLE001
            pass


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="jobmanager", description="Run a Sluice JobManager")
    ap.add_argument("--zookeeper", required=True, help="ZooKeeper connect string host:port[,host:port]")
    ap.add_argument("--cluster-id", default="default")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--advertised-host", help="host published in ZooKeeper for others to reach this JobManager "
                                               "(default: --host)")
    ap.add_argument("--heartbeat-timeout", type=float, default=6.0, help="seconds without heartbeat before a TaskManager is lost")
    ap.add_argument("--zk-session-timeout", type=float, default=6.0)
    ap.add_argument("--checkpoint-dir", help="default state.checkpoints.dir (local path or pyarrow.fs URI)")
    ap.add_argument("--log-file")
    ap.add_argument("--address-file", help="write host:port here once listening")
    args = ap.parse_args(argv)
    logs.setup("jobmanager", log_file=args.log_file)
    proc = JobManagerProcess(args.zookeeper, args.cluster_id, args.host, args.port, args.heartbeat_timeout,
                             args.zk_session_timeout, args.checkpoint_dir, advertised_host=args.advertised_host)
    rpc.run_until_signalled(proc, "JobManager", args.address_file)

