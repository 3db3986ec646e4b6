"""JobManager failover time after kill -9 of the leader.

    python bench/failover_bench.py [--runs 5] [--zk-session-timeout 6] [--out bench/RESULTS.md]

Per run: a fresh local cluster (`sluice cluster start --jobmanagers 2
--taskmanagers 2`), an unbounded keyed count over the deterministic
generator (tests/integration/jobs/endless_counts.py, checkpoints every
500 ms); once a checkpoint completed, the leader is killed with SIGKILL and
we measure from the kill:
  leader   a new leader published in ZooKeeper (polled every 10 ms)
  running  the job RUNNING again under the new leader, every task RUNNING
  ckpt     the first checkpoint completed after the restored one
Medians over the runs, appended to RESULTS.md. Goal: job running again
within the ZooKeeper session timeout + 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

import psutil
from kazoo.exceptions import NoNodeError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from sluice.client import JobManagerClient
from sluice.states import ExecutionState, JobStatus, from_proto
from sluice.zk.auth import cluster_client
from sluice.zk.paths import ZkPaths

JOB = os.path.join(REPO, "tests", "integration", "jobs", "endless_counts.py")


def sluice(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.cli", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sluice {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def one_run(workdir: str, session_timeout: float) -> dict:
    cluster_dir = os.path.join(workdir, "cluster")
    sluice(
        "cluster",
        "start",
        "--dir",
        cluster_dir,
        "--jobmanagers",
        "2",
        "--taskmanagers",
        "2",
        "--zk-session-timeout",
        str(session_timeout),
    )
    try:
        with open(os.path.join(cluster_dir, "cluster.json")) as f:
            info = json.load(f)
        job_id = (
            sluice(
                "run",
                JOB,
                "--detach",
                "--parallelism",
                "2",
                "--cluster-dir",
                cluster_dir,
                "--",
                os.path.join(workdir, "out"),
                "500",
            )
            .strip()
            .splitlines()[-1]
        )
        client = JobManagerClient.from_context({"cluster_dir": cluster_dir})  # TLS and credentials of cluster.json
        client.timeout = 60  # seconds to follow the failover
        deadline = time.monotonic() + 120
        while True:
            job = client.get(job_id)
            if from_proto(JobStatus, job.state) == JobStatus.RUNNING and job.HasField("last_completed_checkpoint"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no checkpoint: {from_proto(JobStatus, job.state)} {job.message}")
            time.sleep(0.1)
        old = job.leader
        pid = next(p["pid"] for p in info["processes"] if p["address"] == old)
        zk = cluster_client(info["zookeeper"], info.get("zookeeper_auth_file"))
        zk.start(timeout=15)
        path = ZkPaths(info["cluster_id"]).leader_connection_info
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        result: dict[str, float] = {}
        while time.monotonic() - killed < 120 and len(result) < 3:
            now = time.monotonic() - killed
            if "leader" not in result:
                data = read_leader_info(zk, path)
                if data and old.encode() not in data:
                    result["leader"] = now
                time.sleep(0.01)
                continue
            job = client.get(job_id)
            if (
                "running" not in result
                and job.leader != old
                and from_proto(JobStatus, job.state) == JobStatus.RUNNING
                and all(from_proto(ExecutionState, t.state) == ExecutionState.RUNNING for t in job.tasks)
            ):
                result["running"] = time.monotonic() - killed
                restored = job.restored_checkpoint
            if (
                "running" in result
                and job.HasField("last_completed_checkpoint")
                and job.last_completed_checkpoint > restored
            ):
                result["ckpt"] = time.monotonic() - killed
            time.sleep(0.05)
        zk.stop()
        zk.close()
        client.cancel(job_id)
        client.close()
        return result
    finally:
        sluice("cluster", "stop", "--dir", cluster_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--zk-session-timeout", type=float, default=6.0)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "RESULTS.md"))
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        workdir = tempfile.mkdtemp(prefix="sluice-failover-")
        try:
            r = one_run(workdir, args.zk_session_timeout)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in r.items()), flush=True)
        runs.append(r)
    med = {k: statistics.median(r[k] for r in runs if k in r) for k in ("leader", "running", "ckpt")}
    lines = [
        f"\n## JobManager failover after kill -9 of the leader — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n",
        f"Machine: {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
        f"Python {platform.python_version()}. Command: `python bench/failover_bench.py --runs {args.runs} "
        f"--zk-session-timeout {args.zk_session_timeout}`. 2 JobManagers, 2 TaskManagers x 2 slots, "
        "unbounded keyed count at parallelism 2, checkpoints every 500 ms.\n",
        "| run | new leader in ZooKeeper (s) | job RUNNING again (s) | first checkpoint after restore (s) |",
        "|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"| {i} | " + " | ".join(f"{r[k]:.2f}" if k in r else "–" for k in ("leader", "running", "ckpt")) + " |"
        )
    lines.append("| **median** | " + " | ".join(f"**{med[k]:.2f}**" for k in ("leader", "running", "ckpt")) + " |")
    goal = args.zk_session_timeout + 2
    lines.append(
        f"\nGoal: job RUNNING again within session timeout + 2 s = {goal:.1f} s: "
        f"{'met' if med['running'] <= goal else 'missed'} (median {med['running']:.2f} s).\n"
    )
    text = "\n".join(lines)
    print(text)
    with open(args.out, "a") as f:
        f.write(text + "\n")


def read_leader_info(zk, path) -> bytes | None:
    """The published leader info, or None between two leaders."""
    try:
        return zk.get(path)[0]
    except NoNodeError:
        return None


if __name__ == "__main__":
    main()
