"""Redis Streams connectors (sluice/connectors/redis_streams.py) against a real redis-server
on a free loopback port and the shared cluster (1 JobManager, 2 TaskManagers x 3
slots, real Spark): a keyed count from Redis streams into a Redis stream counts every
input entry exactly once and writes no output entry twice across a kill -9 of a
TaskManager."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import uuid

import pytest
import redis
from harness import JOBS, kill_taskmanager_running, wait_for
from helpers import wait_until

from sluice.zk.server import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed: run `make system-deps`")
    port, workdir = free_port(), tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        wait_until(lambda: _pings(client), 20, "redis-server to answer PING")
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def output(client, stream: str) -> list[tuple[str, int]]:
    return [(f["user"], int(f["count"])) for _id, f in client.xrange(stream)]


def length(client, stream: str) -> int:
    return client.xlen(stream)


def fields(client, stream: str) -> list[dict[str, str]]:
    return [f for _id, f in client.xrange(stream)]


@pytest.mark.chaos
def test_a_keyed_count_from_redis_to_redis_is_exact_across_a_taskmanager_kill(cluster, redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    prefix = uuid.uuid4().hex[:8]
    streams = [f"{prefix}:in:{i}" for i in range(4)]
    expected: collections.Counter[str] = collections.Counter()
    for i in range(16_000):
        user = f"u{(i * 7919) % 150}"
        expected[user] += 1
        client.xadd(streams[i % 4], {"user": user, "n": str(i)})
    out = f"{prefix}:counts"
    job_id = cluster.run(os.path.join(JOBS, "redis_counts.py"), redis_url, out, "500", *streams, parallelism=2)
    wait_for(
        cluster,
        job_id,
        lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"] and length(client, out) > 0,
        "counts committed to the output stream",
    )
    before = length(client, out)
    kill_taskmanager_running(cluster, job_id)  # the supervisor starts it again
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None, status

    lines = output(client, out)
    assert len(lines) > before
    dups = [k for k, n in collections.Counter(lines).items() if n > 1]
    assert not dups, f"{len(dups)} output entries written twice, e.g. {dups[:5]}"
    final: dict[str, int] = {}
    for user, count in lines:
        final[user] = max(final.get(user, 0), count)
    assert final == dict(expected)  # every input entry counted exactly once
    # each user's counts only grow along the stream: nothing from a replay went out of order
    last: dict[str, int] = {}
    for user, count in lines:
        assert count > last.get(user, 0), (user, count, last.get(user))
        last[user] = count
    assert not list(client.scan_iter(match=f"sluice:sink:{job_id}:*:stage:*"))  # no staging stream left
    client.close()


def test_an_unbounded_source_reads_entries_and_streams_added_while_the_job_runs_once_each(cluster, redis_url):
    """XREAD from the checkpointed ids over the streams the JobManager finds by pattern:
    entries written before and while the job runs, and a stream created while it runs,
    reach the output stream once each, with their ids (`id_column`) and typed fields."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    prefix = uuid.uuid4().hex[:8]
    streams, out = [f"{prefix}:in:{i}" for i in range(3)], f"{prefix}:copy"
    ids = {i: client.xadd(streams[i % 2], {"n": str(i)}) for i in range(300)}  # ids repeat across streams
    job_id = cluster.run(os.path.join(JOBS, "redis_copy.py"), redis_url, out, "300", f"{prefix}:in:*", parallelism=2)
    try:
        wait_until(lambda: length(client, out) >= 300, 180, "the first entries copied")
        ids.update({i: client.xadd(streams[i % 3], {"n": str(i)}) for i in range(300, 500)})  # in:2 is new
        wait_until(lambda: length(client, out) >= 500, 120, "the entries added later copied, the new stream's too")
        copied = fields(client, out)
        assert sorted(int(f["n"]) for f in copied) == list(range(500))  # each input entry once
        assert all(f["entry"] == ids[int(f["n"])] and int(f["twice"]) == 2 * int(f["n"]) for f in copied)
    finally:
        client.close()
        cluster.client().cancel(job_id)
        wait_for(cluster, job_id, lambda s: s["state"] == "CANCELED", "the job to be cancelled")
