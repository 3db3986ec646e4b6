"""ZooKeeper against a hostile client (docs/security.md, "ZooKeeper"): a local
cluster from `sluice cluster start`, whose nodes only its own credentials may
read or write; a leader that repairs its published address; and writes too
large for a ZooKeeper node that fail one job and never cost the leadership."""

from __future__ import annotations

import os

import pytest
from harness import JOBS, sluice
from helpers import wait_until
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from sluice.client import JobManagerClient
from sluice.states import JobStatus, from_proto
from sluice.zk.auth import read_auth_file
from sluice.zk.leader_retrieval import read_leader
from sluice.zk.limits import MAX_WRITE_BYTES
from sluice.zk.paths import ZkPaths

pytestmark = pytest.mark.integration

SECURITY_JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")


@pytest.fixture
def zk(cluster):
    client = cluster.zk_client()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def stranger(cluster):
    """A client without the cluster's credentials."""
    client = KazooClient(hosts=cluster.info["zookeeper"])
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _paths(cluster) -> ZkPaths:
    return ZkPaths(cluster.info["cluster_id"])


def _walk(client: KazooClient, root: str) -> list[str]:
    out, pending = [], [root]
    while pending:
        path = pending.pop()
        out.append(path)
        pending.extend(f"{path}/{c}" for c in client.get_children(path))
    return out


def test_the_credentials_file_is_private_and_recorded_for_clients(cluster):
    path = cluster.info["zookeeper_auth_file"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    user, password = read_auth_file(path)
    assert len(password) >= 32


def test_without_credentials_every_cluster_node_answers_no_auth(cluster, zk, stranger):
    paths = _paths(cluster)
    nodes = _walk(zk, paths.root)
    assert paths.leader_connection_info in nodes and f"{paths.root}/jobresults" in nodes
    user, password = read_auth_file(cluster.info["zookeeper_auth_file"])
    ours = [make_digest_acl(user, password, all=True)]
    for node in nodes:
        acl, _ = zk.get_acls(node)
        assert acl == ours, f"{node} has ACL {acl}"
    for node in (paths.root, paths.leader_connection_info, paths.jobgraphs):
        with pytest.raises(NoAuthError):
            stranger.get(node)
        with pytest.raises(NoAuthError):
            stranger.get_children(node)
    with pytest.raises(NoAuthError):
        stranger.set(paths.leader_connection_info, b'{"address": "evil:1", "session_id": "x"}')
    with pytest.raises(NoAuthError):
        stranger.delete(paths.leader_connection_info)
    with pytest.raises(NoAuthError):
        stranger.create(f"{paths.jobgraphs}/forged", b"inline:")
    with pytest.raises(NoAuthError):
        stranger.get_children("/sluice")  # the parent only lets other clusters create their root
    # a client without the credentials is told what is missing, not "no leader"
    proc = sluice("list", "--zookeeper", cluster.info["zookeeper"], "--cluster-id", paths.cluster_id, check=False)
    assert proc.returncode != 0 and "credentials" in proc.stderr, proc.stderr
    # with them, a client finds the leader through ZooKeeper
    client = JobManagerClient(
        zookeeper=cluster.info["zookeeper"],
        cluster_id=paths.cluster_id,
        zookeeper_auth_file=cluster.info["zookeeper_auth_file"],
        tls=cluster.tls(),  # the cluster's client certificate (docs/security.md)
    )
    with client:
        leader = read_leader(zk, paths)
        assert leader is not None and client.cluster().leader == leader[0]


def test_the_leader_repairs_its_connection_info(cluster, zk):
    paths = _paths(cluster)
    leader = read_leader(zk, paths)
    assert leader is not None
    zk.set(paths.leader_connection_info, b"garbage")
    wait_until(lambda: read_leader(zk, paths) == leader, timeout=10, message="the leader re-publishing its address")
    zk.delete(paths.leader_connection_info)
    wait_until(lambda: read_leader(zk, paths) == leader, timeout=10, message="the leader re-creating its address")
    _data, stat = zk.get(paths.leader_connection_info)
    assert stat.ephemeralOwner != 0, "connection_info is the leader's ephemeral node again"
    jobmanager_log = next(p["log"] for p in cluster.info["processes"] if p["role"] == "jobmanager")
    with open(jobmanager_log, errors="replace") as f:
        assert f"[cluster {paths.cluster_id} session {leader[1]}]" in f.read()
    # the cluster still works: a job runs to its end
    out = cluster.dir + "/word-lengths-out"
    job_id = cluster.run(os.path.join(JOBS, "word_lengths.py"), out)
    status = wait_until(
        lambda: (s := cluster.status(job_id))["state"] in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=180,
        message="the job to end",
        interval=0.5,
    )
    assert status["state"] == "FINISHED", status
    assert read_leader(zk, paths) == leader


def test_oversized_results_fail_one_job_and_never_the_leader(cluster, zk):
    paths = _paths(cluster)
    leader = read_leader(zk, paths)
    # another job, running all along
    other = cluster.run(os.path.join(JOBS, "endless_counts.py"), cluster.dir + "/endless-out", "500")
    wait_until(lambda: cluster.status(other)["state"] == "RUNNING", timeout=120, message="the other job running")

    failed = cluster.run(os.path.join(SECURITY_JOBS, "huge_failure.py"))
    status = wait_until(
        lambda: (s := cluster.status(failed))["state"] in ("FAILED", "FINISHED", "CANCELED") and s,
        timeout=180,
        message="the failing job to end",
        interval=0.5,
    )
    assert status["state"] == "FAILED", status
    failure = status["failure"]
    assert "bad record in explode()" in failure and len(failure) < 16 * 1024, len(failure)
    full_path = failure.rsplit("full text in ", 1)[1].rstrip(")").strip()
    with open(full_path, encoding="utf-8") as f:
        full = f.read()
    head = failure.split("\n... (", 1)[0]
    assert len(full) > len(head) and full.startswith(head), (len(full), len(head))

    wide_job = os.path.join(SECURITY_JOBS, "wide.py")
    wide = sluice("run", wide_job, "--detach", "--parallelism", "32768", "--cluster-dir", cluster.dir)
    wide_id = wide.stdout.strip().splitlines()[-1].strip()
    sluice("cancel", wide_id, "--cluster-dir", cluster.dir)
    canceled = lambda: cluster.status(wide_id)["state"] == "CANCELED"  # noqa: E731 — a one-line condition
    wait_until(canceled, timeout=60, message="the wide job canceled", interval=0.5)

    # the leader never changed, the other job never restarted, and the clients still work
    assert read_leader(zk, paths) == leader
    other_status = cluster.status(other)
    assert other_status["state"] == "RUNNING" and other_status["restarts"] == 0, other_status
    with cluster.client() as client:
        states = {j.job_id: from_proto(JobStatus, j.state) for j in client.list()}
    assert states[failed] == JobStatus.FAILED and states[wide_id] == JobStatus.CANCELED, states
    assert states[other] == JobStatus.RUNNING, states
    for job_id in (failed, wide_id):
        data, _ = zk.get(f"{paths.root}/jobresults/{job_id}")
        print(f"job result of {job_id} in ZooKeeper: {len(data)} bytes")
        assert len(data) < MAX_WRITE_BYTES, len(data)
    sluice("cancel", other, "--cluster-dir", cluster.dir)


# -- against a bare ZooKeeper (the session's server, a chroot per test) -------------------------------
def test_a_write_above_the_limit_fails_alone_and_keeps_the_session(zk_client_factory):
    from kazoo.protocol.states import KazooState

    from jobmanager.leader.guarded_transaction import guarded_transaction
    from sluice.zk.limits import ZNodeTooLargeError

    client = zk_client_factory()
    latch = client.create("/latch-", b"session", ephemeral=True, sequence=True)
    session = client.client_id
    with pytest.raises(ZNodeTooLargeError, match="jobresults/j1 is 1048576 bytes"):
        guarded_transaction(client, latch).create("/jobresults/j1", b"x" * 1024 * 1024)
    txn = guarded_transaction(client, latch).create("/a", b"x" * (MAX_WRITE_BYTES // 2))
    with pytest.raises(ZNodeTooLargeError, match="transaction"):
        txn.create("/b", b"x" * (MAX_WRITE_BYTES // 2 + 1))
    guarded_transaction(client, latch).create("/small", b"x" * 1024).commit()
    assert client.state == KazooState.CONNECTED and client.client_id == session
    assert client.get("/small")[0] == b"x" * 1024 and client.exists(latch)


def test_nodes_created_open_are_restricted_on_start(zk_client_factory, tmp_path):
    from sluice.zk.auth import ZkAuth, make_client, prepare_cluster_root, write_auth_file

    paths = ZkPaths("upgraded")
    old = zk_client_factory()  # a cluster from before credentials: everything open
    old.ensure_path(paths.jobgraphs)
    old.create(f"{paths.jobgraphs}/job-1", b"file:/x")
    auth = ZkAuth.resolve(write_auth_file(str(tmp_path / "auth")), None)
    client = make_client(zk_client_factory.hosts, auth)
    zk_client_factory.clients.append(client)
    client.start(timeout=15)
    prepare_cluster_root(client, paths, auth)
    for node in (paths.root, paths.jobgraphs, f"{paths.jobgraphs}/job-1"):
        with pytest.raises(NoAuthError):
            old.get(node)
        assert client.get_acls(node)[0] == auth.acl
    client.ensure_path(paths.jobs)  # a new node gets the cluster's ACL too
    assert client.get_acls(paths.jobs)[0] == auth.acl
    # another cluster, with other credentials, still creates its root next to it
    other = ZkAuth.resolve(write_auth_file(str(tmp_path / "other")), None)
    other_client = make_client(zk_client_factory.hosts, other)
    zk_client_factory.clients.append(other_client)
    other_client.start(timeout=15)
    prepare_cluster_root(other_client, ZkPaths("neighbour"), other)
    with pytest.raises(NoAuthError):
        other_client.get(paths.root)
