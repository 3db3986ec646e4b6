"""Fine-grained recovery on a real cluster (docs/batch.md): region failover of a streaming
job after kill -9 of a TaskManager, and BATCH jobs — lazy scheduling on fewer slots than
their parallelism, region re-runs after a kill, speculative attempts for a straggler."""

from __future__ import annotations

import collections
import glob
import json
import os
import sys

import pytest
from harness import EXAMPLES, JOBS, SMALL_READS, kill_process_tree, pid_at, sluice, wait_for

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def kill_taskmanager(cluster, address: str) -> None:
    """kill -9 the TaskManager at `address`, and its Spark JVM after it."""
    kill_process_tree(pid_at(cluster, address))  # pid_at reads the supervisor's restarts in cluster.json


def input_rows(directory) -> collections.Counter:
    rows: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        with open(path) as f:
            for line in f:
                e = json.loads(line)
                rows[f"{e['url']},{e['user']},{e['ts']}"] += 1
    return rows


def output_rows(directory) -> collections.Counter:
    rows: collections.Counter = collections.Counter()
    for path in glob.glob(os.path.join(directory, "part-*")):
        with open(path) as f:
            rows.update(line.rstrip("\n") for line in f if line.strip())
    return rows


def test_kill_of_a_taskmanager_restarts_only_the_lost_subtasks_region(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=40_000, files=160, urls=500, seed=11)
    job_id = cluster.run(
        os.path.join(JOBS, "parallel_copy.py"),
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        "300",
        "0.15",
        parallelism=2,
        options=SMALL_READS,  # many slow batches: the kill lands mid-job
    )
    status = wait_for(
        cluster,
        job_id,
        lambda s: (
            s["state"] == "RUNNING"
            and (s.get("last_completed_checkpoint") or 0) >= 1
            and all(t["state"] == "RUNNING" for t in s["tasks"])
        ),
        "a completed checkpoint with both subtasks running",
    )
    tasks = {t["subtask"]: t for t in status["tasks"]}
    assert tasks[0]["region"] != tasks[1]["region"]
    assert tasks[0]["taskmanager"] != tasks[1]["taskmanager"]  # the slot pool spreads them
    kill_taskmanager(cluster, tasks[1]["taskmanager"])
    final = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert final["state"] == "FINISHED", final.get("failure")
    after = {t["subtask"]: t for t in final["tasks"]}
    # only the lost subtask's region ran again; the job attempt is the same
    assert (after[0]["execution_attempt"], after[1]["execution_attempt"]) == (0, 1)
    assert {t["attempt"] for t in final["tasks"]} == {0}
    assert final["restarts"] == 1
    assert output_rows(tmp_path / "out") == input_rows(tmp_path / "in")  # every row exactly once
    assert not glob.glob(str(tmp_path / "out" / ".*")), "staging files left behind"
    history = sluice("status", job_id, "--cluster-dir", cluster.dir).stdout
    assert "was lost while running task" in history


def exact_counts(input_dir, output_dir) -> None:
    """One line per url (BATCH: final results once) with the count the input has."""
    expected: collections.Counter = collections.Counter()
    for row in input_rows(input_dir).elements():
        expected[row.split(",")[0]] += 1
    seen: dict[str, int] = {}
    for line in output_rows(output_dir).elements():
        url, count = line.rsplit(",", 1)
        assert url not in seen, f"{url} written twice"
        seen[url] = int(count)
    assert seen == dict(expected)


def test_kill_during_a_batch_job_reruns_only_the_lost_subtasks(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=40_000, files=40, urls=500, seed=12)
    job_id = cluster.run(
        os.path.join(JOBS, "batch_counts.py"), str(tmp_path / "in"), str(tmp_path / "out"), "0.5", parallelism=4
    )
    status = wait_for(
        cluster,
        job_id,
        lambda s: sum(t["state"] == "RUNNING" and t["operator"].startswith("events") for t in s["tasks"]) == 4,
        "the four source subtasks running",
    )
    sources = {t["subtask"]: t for t in status["tasks"] if t["operator"].startswith("events")}
    assert all(t["state"] == "CREATED" for t in status["tasks"] if not t["operator"].startswith("events"))
    victim = sources[1]["taskmanager"]
    kill_taskmanager(cluster, victim)
    final = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert final["state"] == "FINISHED", final.get("failure")
    attempts = {t["subtask"]: t["execution_attempt"] for t in final["tasks"] if t["operator"].startswith("events")}
    lost = {i for i, t in sources.items() if t["taskmanager"] == victim}
    assert lost and lost != set(sources)
    assert {i for i, a in attempts.items() if a > 0} == lost  # the others were not run again
    assert {t["attempt"] for t in final["tasks"]} == {0}  # no restart of the job as a whole
    exact_counts(tmp_path / "in", tmp_path / "out")
    assert len(glob.glob(str(tmp_path / "out" / "part-*"))) == 4  # one part per sink subtask


def test_page_views_batch_at_parallelism_8_on_4_slots_gives_exact_counts_and_top_urls(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=60_000, files=16, urls=2_000, seed=14)
    job_id = cluster.run(
        os.path.join(EXAMPLES, "page_views_batch.py"),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--top",
        "100",
        "--top-output",
        str(tmp_path / "top"),
        parallelism=8,
    )
    final = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert final["state"] == "FINISHED", final.get("failure")
    assert final["slots_required"] == 8  # a streaming job would wait for 8 slots; this one ran in 4
    exact_counts(tmp_path / "in", tmp_path / "out")
    counts: collections.Counter = collections.Counter()
    for row in input_rows(tmp_path / "in").elements():
        counts[row.split(",")[0]] += 1
    expected = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:100]
    ranked = sorted(line.split(",") for line in output_rows(tmp_path / "top").elements())
    assert sorted((int(r), u, int(c)) for r, u, c in ranked) == [(i + 1, url, n) for i, (url, n) in enumerate(expected)]


def test_batch_mode_on_an_unbounded_source_is_refused_at_submit(cluster, tmp_path):
    job = tmp_path / "unbounded_batch.py"
    job.write_text(
        "from sluice.api import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.set_runtime_mode('BATCH')\n"
        "env.from_generator(lambda ids: ids, name='ticks').print()\n"
        "env.execute('unbounded_batch')\n"
    )
    result = sluice("run", str(job), "--detach", "--cluster-dir", cluster.dir, check=False)
    assert result.returncode != 0
    assert "source 'ticks' is unbounded" in result.stderr and "BATCH" in result.stderr


def test_a_straggler_is_overtaken_by_a_speculative_attempt(cluster, tmp_path):
    generate(str(tmp_path / "in"), events=8_000, files=16, urls=200, seed=13)
    marker = tmp_path / "straggler"
    job_id = cluster.run(
        os.path.join(JOBS, "batch_counts.py"),
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        "0.2",
        str(marker),
        "60",
        "--speculative",
        parallelism=4,
    )
    final = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=55)
    assert final["state"] == "FINISHED", final.get("failure")
    assert marker.exists()  # a straggler there was
    backups = [t for t in final["tasks"] if t["speculative"]]
    assert len(backups) == 1 and backups[0]["operator"].startswith("events")
    assert backups[0]["execution_attempt"] == 1 and backups[0]["state"] == "FINISHED"
    exact_counts(tmp_path / "in", tmp_path / "out")
    assert len(glob.glob(str(tmp_path / "out" / "part-*"))) == 4  # no duplicate part files
