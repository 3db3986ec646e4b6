"""Live reconfiguration end to end, through the CLI on a real cluster (docs/reconfiguration.md).

The reference job (watched directory: it runs until cancelled) is rescaled in place, down
and up, while input keeps arriving: the source tasks are never redeployed (they only switch
their outputs at the barrier and keep reading), and the committed output stays exact with no
line twice. A function swap changes what the output says at one checkpoint barrier while the
counts go on from their state. A TaskManager killed in the middle leaves one configuration or
the other, never a mix, and exact counts.
"""

from __future__ import annotations

import collections
import csv
import glob
import json
import os
import re
import subprocess

import pytest
from harness import (
    EXAMPLES,
    JOBS,
    REPO,
    SLUICE,
    assert_monotone_updates,
    assert_update_stream,
    kill_taskmanager_running,
    read_counts,
    sluice,
    sqlite_table,
    wait_for,
)
from helpers import wait_until
from page_view_jobs import Input, run_page_views, wait_counts

from sluice.key_groups import key_group_of
from sluice.v1 import common_pb2
from sluice.zk.paths import ZkPaths

pytestmark = pytest.mark.integration

LABELLED = os.path.join(JOBS, "labelled_counts.py")


def reconfigure(cluster, job, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cut = args.index("--") if "--" in args else len(args)  # client options before the job file's
    return sluice("reconfigure", job, *args[:cut], "--cluster-dir", cluster.dir, *args[cut:], check=check)


def tasks_of(status, part: str) -> list[dict]:
    """The tasks whose (chain) name holds `part`."""
    return [t for t in status["tasks"] if part in t["operator"]]


def test_rescale_in_place_down_and_up_while_input_arrives(cluster, tmp_path):
    inp, out = Input(tmp_path), tmp_path / "out"
    inp.add(events=60_000, files=20)
    job = run_page_views(cluster, inp, out, parallelism=3)
    wait_counts(out, inp.expected)
    before = tasks_of(cluster.status(job), "page views")
    assert len(before) == 3

    inp.add(events=60_000, files=30)  # read while the change happens
    done = reconfigure(cluster, job, "--operator", "counts", "--parallelism", "2")
    assert done.stdout.strip().endswith("COMPLETED"), done.stderr
    status = cluster.status(job)
    [r] = status["reconfigurations"]
    assert r["status"] == "COMPLETED" and r["parallelism"] == 2 and r["checkpoint_id"]
    assert r["affected"]["switched"] == ["page views"]
    assert len(r["affected"]["redeployed"]) == 1 and "counts sink" in r["affected"]["redeployed"][0]
    assert status["restarts"] == 0 and status["state"] == "RUNNING"
    assert len(tasks_of(status, "counts sink")) == 2
    source = tasks_of(status, "page views")  # the same source tasks, never redeployed, kept reading
    assert [(t["subtask"], t["taskmanager"]) for t in source] == [(t["subtask"], t["taskmanager"]) for t in before]
    assert all(t["state"] == "RUNNING" for t in source)
    assert sum(t["records_out"] for t in source) >= sum(t["records_out"] for t in before)

    inp.add(events=30_000, files=10)
    assert_update_stream(wait_counts(out, inp.expected))  # exactly once across the switch
    assert ha_parallelism(cluster, job, "counts") == 2  # a JobManager taking over runs the new configuration

    done = reconfigure(cluster, job, "--operator", "counts", "--parallelism", "3")
    assert done.stdout.strip().endswith("COMPLETED"), done.stderr
    inp.add(events=30_000, files=10)
    assert_update_stream(wait_counts(out, inp.expected))
    status = cluster.status(job)
    assert len(tasks_of(status, "counts sink")) == 3 and status["restarts"] == 0
    assert [r["status"] for r in status["reconfigurations"]] == ["COMPLETED", "COMPLETED"]

    # refused with a clear error, the job untouched
    for args, message in (
        (("--operator", "counts", "--parallelism", "4"), "needs 4 slots and the job holds 3"),
        (("--operator", "nope", "--parallelism", "2"), "no operator with uid 'nope'"),
        (("--operator", "page-views", "--parallelism", "2"), "runs in a source task"),
        (("--operator", "counts", "--parallelism", "0"), "--parallelism must be at least 1"),
    ):
        proc = reconfigure(cluster, job, *args, check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert cluster.status(job)["state"] == "RUNNING"
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")


def ha_parallelism(cluster, job_id: str, operator: str) -> int:
    """The operator's parallelism in the job graph the HA store keeps (what a new leader recovers)."""
    zk = cluster.zk_client()
    try:
        pointer, _ = zk.get(ZkPaths(cluster.info["cluster_id"]).jobgraph(job_id))
    finally:
        zk.stop()
        zk.close()
    kind, _, rest = pointer.partition(b":")
    data = open(rest.decode(), "rb").read() if kind == b"file" else rest
    return next(op.parallelism for op in common_pb2.JobGraph.FromString(data).operators if op.id == operator)


def labelled_lines(out) -> list[tuple[str, str, int, str]]:
    """(part file, url, count, label) of every committed line, in commit order."""
    rows = []
    for path in sorted(glob.glob(os.path.join(str(out), "part-*"))):
        with open(path, newline="") as f:
            rows += [(os.path.basename(path), u, int(c), lab) for u, c, lab in csv.reader(f)]
    return rows


def test_a_function_swap_switches_the_output_at_one_barrier_and_keeps_the_state(cluster, tmp_path):
    inp, out = Input(tmp_path), tmp_path / "out"
    inp.add(events=40_000, files=20)
    args = [str(inp.dir), str(out)]
    job = sluice("run", LABELLED, "--detach", "--cluster-dir", cluster.dir, "-p", "2", "--", *args).stdout.split()[-1]
    wait_until(lambda: {u: c for _, u, c, _ in labelled_lines(out)} == dict(inp.expected), 180, "v1 counts")

    inp.add(events=40_000, files=20)
    proc = reconfigure(cluster, job, "--operator", "label", "--jobfile", LABELLED, "--", *args, "--label", "v2")
    assert proc.stdout.strip().endswith("COMPLETED"), proc.stderr
    [r] = cluster.status(job)["reconfigurations"]
    assert r["kind"] == "function" and r["operator"] == "label" and len(r["affected"]["switched"]) == 1
    inp.add(events=20_000, files=10)

    def final():
        rows = labelled_lines(out)
        return rows if {u: c for _, u, c, _ in rows} == dict(inp.expected) else None

    rows = wait_until(final, 180, "the counts after the swap")
    barrier = r["checkpoint_id"]

    def checkpoint_of(part: str) -> int:
        m = re.match(r"part-(\d+)-", part)
        assert m is not None, part
        return int(m.group(1))

    assert {lab for p, _, _, lab in rows if checkpoint_of(p) <= barrier} == {"v1"}
    assert {lab for p, _, _, lab in rows if checkpoint_of(p) > barrier} == {"v2"}
    per_url: dict[str, list[int]] = collections.defaultdict(list)
    for _, u, c, _ in rows:
        per_url[u].append(c)
    assert all(cs == sorted(set(cs)) for cs in per_url.values())  # the state went on: no count twice, none back
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")


def rebalance_keys(cluster, job: str, read: int | None = None) -> subprocess.CompletedProcess:
    """`reconfigure --operator counts --rebalance-keys` once the key groups' loads reached the
    JobManager (with the TaskManagers' heartbeats) and show a move. `read` (a job whose counts
    are chained with their sink, "counts sink"): first wait until the heartbeats say the sources
    read that many rows and counts took in every (pre-aggregated) row they sent, so that no row is
    still on its way when the JobManager takes the loads (it takes them from heartbeats that
    arrive after the request)."""

    def reported():
        s = cluster.status(job)
        sources, counts = tasks_of(s, "page views"), tasks_of(s, "counts sink")
        sent, took = sum(t["records_sent"] for t in sources), sum(t["records_in"] for t in counts)
        return sum(t["records_out"] for t in sources) >= (read or 0) and took == sent

    if read is not None:
        wait_until(reported, 60, f"{read} rows read and counted, as the heartbeats report")

    def rebalanced():
        proc = reconfigure(cluster, job, "--operator", "counts", "--rebalance-keys", check=False)
        if proc.returncode == 0:
            return proc
        accepted = ("no key group of subtask", "has not reached the JobManager yet", "were last reported before")
        assert any(reason in proc.stderr for reason in accepted), proc.stderr
        return None

    return wait_until(rebalanced, 60, "a rebalance")


def skewed(directory, batch: int, events: int, files: int) -> collections.Counter[str]:
    """Events whose urls fall 90 % in key groups of subtask 0 of 2 (key groups 0..63 of 128),
    spread over many urls and key groups; written atomically into `directory`."""
    hot = [u for u in (f"/hot/{i}" for i in range(4000)) if key_group_of((u,), 128) < 64][:300]
    cold = [u for u in (f"/cold/{i}" for i in range(4000)) if key_group_of((u,), 128) >= 64][:30]
    counts: collections.Counter[str] = collections.Counter()
    staging = directory.parent / f"skew-staging-{batch}"
    staging.mkdir()
    n = 0
    for f in range(files):
        lines = []
        for _i in range(events // files):
            url = cold[n % len(cold)] if n % 10 == 0 else hot[(n * 7) % len(hot)]
            lines.append(json.dumps({"url": url, "user": n % 97, "ts": 1_700_000_000_000 + n}))
            counts[url] += 1
            n += 1
        (staging / f"s{batch}-{f:03d}.jsonl").write_text("\n".join(lines) + "\n")
        os.rename(staging / f"s{batch}-{f:03d}.jsonl", directory / f"s{batch}-{f:03d}.jsonl")
    return counts


def test_rebalance_keys_moves_key_groups_from_the_busiest_subtask_to_the_idlest(cluster, tmp_path):
    inp, out = Input(tmp_path), tmp_path / "out"
    inp.expected.update(skewed(inp.dir, 0, 40_000, 10))
    job = run_page_views(cluster, inp, out, parallelism=2)
    wait_counts(out, inp.expected)

    proc = rebalance_keys(cluster, job, read=40_000)
    assert proc.stdout.strip().endswith("COMPLETED") and "moved" in proc.stderr, proc.stderr
    status = cluster.status(job)
    [r] = status["reconfigurations"]
    assert r["kind"] == "rebalance-keys" and (r["from_subtask"], r["to_subtask"]) == (0, 1), r
    assert r["moved_key_groups"] and all(kg < 64 for kg in r["moved_key_groups"])
    assert status["restarts"] == 0

    inp.expected.update(skewed(inp.dir, 1, 40_000, 10))
    assert_update_stream(wait_counts(out, inp.expected))  # exact, no line twice, across the move

    def moved_share():  # the new subtasks' counts arrive with their TaskManagers' heartbeats
        counts = sorted(tasks_of(cluster.status(job), "counts sink"), key=lambda t: t["subtask"])
        total = sum(t["records_in"] for t in counts)
        share = counts[1]["records_in"] / total if total else 0.0
        return share if share > 0.3 else None  # subtask 1 had 10 % of the input before the move

    wait_until(moved_share, 30, "subtask 1 of counts to take more than 30 % of the input")
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")


@pytest.mark.chaos
def test_a_taskmanager_killed_during_a_reconfiguration_leaves_one_configuration(cluster, tmp_path):
    inp, out = Input(tmp_path), tmp_path / "out"
    inp.add(events=40_000, files=20)
    job = run_page_views(cluster, inp, out, parallelism=3)
    wait_counts(out, inp.expected)
    inp.add(events=80_000, files=40)
    proc = subprocess.Popen(
        [*SLUICE, "reconfigure", job, "--operator", "counts", "--parallelism", "2", "--cluster-dir", cluster.dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    try:
        wait_for(cluster, job, lambda s: s["reconfigurations"], "the reconfiguration to start", timeout=60)
        address = kill_taskmanager_running(cluster, job)
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    cluster.start_taskmanager(2, f"taskmanager-replacement-{address.replace(':', '-')}.log")  # stopped with the cluster
    status = wait_for(cluster, job, lambda s: s["state"] == "RUNNING" and s["restarts"] >= 1, "the restart", 240)
    [r] = status["reconfigurations"]
    # the kill may land while the tasks still prepare (ABORTED), after (FAILED) or after Commit
    assert r["status"] in ("COMPLETED", "FAILED", "ABORTED"), r
    counts_tasks = len(tasks_of(status, "counts sink"))
    assert counts_tasks == (2 if r["status"] == "COMPLETED" else 3), (r, counts_tasks)  # one configuration
    inp.add(events=20_000, files=10)
    wait_counts(out, inp.expected, timeout=240)
    sluice("cancel", job, "--cluster-dir", cluster.dir)
    wait_for(cluster, job, lambda s: s["state"] == "CANCELED", "the cancel")


def test_page_views_sqlite_stays_exact_through_operator_level_changes(cluster, tmp_path):
    """The README's `page_views --sqlite` (a keyed count feeding two un-chained keyed sinks)
    through `reconfigure --operator counts`, `rescale --operator counts` and
    `--rebalance-keys`, input arriving all along: the count's output stays keyed into both
    sinks, so the SQLite table equals the input's counts and each url's update stream rises."""
    inp, out, db = Input(tmp_path), tmp_path / "out", tmp_path / "t.db"
    inp.expected.update(skewed(inp.dir, 0, 30_000, 10))
    args = ["run", os.path.join(EXAMPLES, "page_views.py"), "--detach", "--cluster-dir", cluster.dir]
    job_args = ["--input", str(inp.dir), "--output", str(out), "--monitor-interval", "200"]
    job_args += ["--checkpoint-interval", "300", "--sqlite", str(db)]
    job = sluice(*args, "--parallelism", "3", "--", *job_args).stdout.strip().splitlines()[-1]

    def exact():
        lines = wait_counts(out, inp.expected)
        wait_until(lambda: sqlite_table(db) == dict(inp.expected), 120, "the SQLite table to equal the input's counts")
        assert_monotone_updates(lines)

    exact()
    inp.expected.update(skewed(inp.dir, 1, 30_000, 10))  # read while the change happens
    done = reconfigure(cluster, job, "--operator", "counts", "--parallelism", "2")
    assert done.stdout.strip().endswith("COMPLETED"), done.stderr
    exact()

    proc = sluice(
        "rescale",
        job,
        "--operator",
        "counts",
        "--parallelism",
        "3",
        "--savepoint-dir",
        str(tmp_path / "sp"),
        "--cluster-dir",
        cluster.dir,
    )
    job = proc.stdout.strip().splitlines()[-1]
    inp.expected.update(skewed(inp.dir, 2, 30_000, 10))
    exact()

    proc = rebalance_keys(cluster, job)
    assert proc.stdout.strip().endswith("COMPLETED"), proc.stderr
    inp.expected.update(skewed(inp.dir, 3, 30_000, 10))
    exact()
    status = cluster.status(job)
    assert status["state"] == "RUNNING" and status["restarts"] == 0
    _, lines = read_counts(str(out))
    assert len(lines) >= len(inp.expected)
