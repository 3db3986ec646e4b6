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
Then the job is canceled and its committed output checked (bench/output_check.py):
no (key, count) line twice, each key's counts increasing, and each key's last
count equal to the generator's at the checkpoint that committed it (the
source offsets of that checkpoint, from the TaskManager logs, give the ids
each source subtask emitted; `expected_counts` counts their keys as
endless_counts.py does). A violation fails the run. Each run records the
1-minute load average at its start and end.
Medians over the runs, appended to RESULTS.md. Goal: job running again
within the ZooKeeper session timeout + 2 s. The section is written by
bench/failover_report.py.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime

import numpy as np
import psutil
from kazoo.exceptions import NoNodeError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from bench_common import SOURCE_SNAPSHOT
from failover_report import describe, report  # describe: also bench/compare.py's, through this module
from output_check import (
    OutputCheck,
    Violation,
    check_final,
    check_sluice_output,
    part_checkpoint,
    part_subtask,
)
from stats import load1

from sluice.states import ExecutionState, JobStatus, from_proto
from sluice.testing import LocalCluster
from sluice.zk.auth import cluster_client
from sluice.zk.paths import ZkPaths

JOB = os.path.join(REPO, "tests", "integration", "jobs", "endless_counts.py")
PARALLELISM = 2  # the job's, as submitted below
KEYS = 50  # endless_counts.py's key: CAST(id % 50 AS STRING)


def expected_counts(offsets: dict[int, int]) -> dict[str, int]:
    """endless_counts.py's count per key once source subtask s emitted offsets[s] ids: subtask s of
    PARALLELISM emits ids s, s + PARALLELISM, s + 2 * PARALLELISM, ... (a generator source's offset is
    the number of ids it emitted), and the key of id i is i % KEYS."""
    counts = np.zeros(KEYS, dtype=np.int64)
    for s, n in offsets.items():
        counts += np.bincount((s + PARALLELISM * np.arange(n)) % KEYS, minlength=KEYS)
    return {str(k): int(c) for k, c in enumerate(counts) if c}


def source_offsets(log_paths: list[str], job_id: str) -> tuple[dict[int, dict[int, int]], str | None]:
    """Per checkpoint id, each source subtask's offset in it, from the TaskManager logs' snapshot lines;
    and a conflict (two offsets for one checkpoint and subtask), if any."""
    offsets: dict[int, dict[int, int]] = {}
    for path in log_paths:
        with open(path, errors="replace") as f:
            for line in f:
                m = SOURCE_SNAPSHOT.match(line)
                if not m or m.group(2) != job_id:
                    continue
                cid, sub, offset = int(m.group(6)), int(m.group(5)), int(m.group(7))
                known = offsets.setdefault(cid, {}).setdefault(sub, offset)
                if known != offset:
                    return offsets, f"checkpoint {cid}: source subtask {sub} snapshot at {known} and at {offset}"
    return offsets, None


def check_output(out: str, log_paths: list[str], job_id: str) -> OutputCheck:
    """bench/output_check.py's rules over the job's committed output. A key's expected last count is
    the generator's at the latest checkpoint committed by the sink subtask that holds the key: every
    batch a source subtask emits updates all the keys of its parity (batches of 500 ids step
    PARALLELISM, KEYS = 50), so a key whose count that checkpoint did not carry lost an update. Keys
    never committed are expected as of the latest committed checkpoint."""
    result = check_sluice_output(out, None)
    if not result.ok:
        return result
    offsets, conflict = source_offsets(log_paths, job_id)
    latest: dict[int | None, int] = {}  # sink subtask -> its latest committed checkpoint
    for path in result.paths:
        cid = part_checkpoint(path)
        if cid is not None:
            latest[part_subtask(path)] = max(cid, latest.get(part_subtask(path), cid))
    if conflict or not latest:
        detail = conflict or "no committed output, though a checkpoint completed before the kill"
        result.violation = Violation("source snapshots" if conflict else "no output", out, None, None, detail)
        return result
    at: dict[int, dict[str, int]] = {}
    for cid in sorted(set(latest.values())):
        if len(offsets.get(cid, {})) != PARALLELISM:
            result.violation = Violation(
                "source snapshots", out, None, None, f"checkpoint {cid}: no snapshot line of every source subtask"
            )
            return result
        at[cid] = expected_counts(offsets[cid])
    expected = dict(at[max(at)])
    for key, (_count, path, _line) in result.final.items():
        sub = part_subtask(path)
        expected[key] = at[latest[sub]].get(key, 0) if sub in latest else 0
    result.checked_final = True
    result.violation = check_final(result.final, {k: v for k, v in expected.items() if v})
    return result


def one_run(workdir: str, session_timeout: float) -> dict:
    cluster_dir = os.path.join(workdir, "cluster")
    load_start = load1()
    cluster = LocalCluster(cluster_dir, 2, 2, jobmanagers=2, zk_session_timeout=session_timeout, checkout=REPO)
    try:
        info = cluster.start().info
        job_id = cluster.run(JOB, os.path.join(workdir, "out"), "500", parallelism=PARALLELISM)
        client = cluster.client()  # TLS and credentials of cluster.json
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
        load_end = load1()
    finally:
        cluster.stop()
    # checked once the cluster is stopped: the output and the logs no longer change
    logs = sorted(glob.glob(os.path.join(cluster_dir, "log", "taskmanager-*.log")))
    return {
        **result,
        "output_check": check_output(os.path.join(workdir, "out"), logs, job_id),
        "load_start": load_start,
        "load_end": load_end,
    }


def main() -> int:
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
        print(f"run {i + 1}: {describe(r)}", flush=True)
        runs.append(r)
    text = report(runs, args.runs, args.zk_session_timeout, machine(), datetime.now(UTC))
    print(text)
    with open(args.out, "a") as f:
        f.write(text + "\n")
    return 0 if all(r["output_check"].ok for r in runs) else 1


def machine() -> str:
    """This machine in a sentence, for the report."""
    return (
        f"Machine: {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
        f"Python {platform.python_version()}."
    )


def read_leader_info(zk, path) -> bytes | None:
    """The published leader info, or None between two leaders."""
    try:
        return zk.get(path)[0]
    except NoNodeError:
        return None


if __name__ == "__main__":
    sys.exit(main())
