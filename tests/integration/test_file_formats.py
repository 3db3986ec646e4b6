"""File formats end to end on the shared cluster (1 JobManager, 2 TaskManagers,
real Spark): a job reads Parquet files (schema from their footers) and writes its counts as
Parquet and a copy of every event as JSON lines, exactly once across a kill -9 of a
TaskManager; a BATCH job writes Parquet; a monitored directory's later Parquet files are
read as they appear; a file that is not Parquet fails the job at once,
naming it. Output is read back through `sluice.read_output`."""

from __future__ import annotations

import collections
import glob
import os
import sys

import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from harness import EXAMPLES, JOBS, SMALL_READS, kill_taskmanager_running, sluice, wait_for
from helpers import wait_until

from sluice import read_output
from sluice.output import committed_parts

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration
JOB = os.path.join(JOBS, "parquet_counts.py")


def parquet_events(tmp_path, **kwargs) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """generate_page_views' events as Parquet files under tmp_path/in (one per generated JSON
    file); the expected count per url and every event as (url, user, ts)."""
    expected = generate(str(tmp_path / "json"), **kwargs)
    (tmp_path / "in").mkdir()
    for path in sorted(glob.glob(str(tmp_path / "json" / "*.jsonl"))):
        name = os.path.basename(path).replace(".jsonl", ".parquet")
        pq.write_table(pajson.read_json(path), str(tmp_path / "in" / name))
    events: list[tuple[str, int, int]] = []
    for path in sorted(glob.glob(str(tmp_path / "in" / "*.parquet"))):
        t = pq.read_table(path)
        events += zip(t["url"].to_pylist(), t["user"].to_pylist(), t["ts"].to_pylist(), strict=True)
    return expected, events


def ended(cluster, job_id, timeout=300) -> dict:
    return wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED", "CANCELED"), "the job", timeout)


def final_counts(out) -> dict[str, int]:
    frame = read_output(str(out), final=True, key="url")
    return {str(u): int(c) for u, c in zip(frame["url"], frame["count"], strict=True)}


def hidden(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".")]


@pytest.mark.chaos
def test_parquet_in_parquet_and_json_out_exactly_once_across_a_taskmanager_kill(cluster, tmp_path):
    expected, events = parquet_events(tmp_path, events=200_000, files=80, urls=2_000, seed=21)
    out, copy = tmp_path / "out", tmp_path / "copy"
    job_id = cluster.run(
        JOB,
        str(tmp_path / "in"),
        str(out),
        "--copy",
        str(copy),
        "--checkpoint-interval",
        "300",
        parallelism=2,
        options=SMALL_READS,  # the kill lands mid-job
    )
    wait_for(
        cluster,
        job_id,
        lambda s: (
            s["state"] == "RUNNING" and s["last_completed_checkpoint"] and out.exists() and committed_parts(str(out))
        ),
        "a committed Parquet part",
    )
    kill_taskmanager_running(cluster, job_id)  # the supervisor starts it again
    status = ended(cluster, job_id)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None, status

    parts = [os.path.basename(p) for p in committed_parts(str(out))]
    assert parts and all(p.endswith(".parquet") for p in parts)
    assert all(pq.ParquetFile(p).metadata.num_rows > 0 for p in committed_parts(str(out)))
    assert final_counts(out) == expected  # every url's exact count
    stream = read_output(str(out))
    assert not stream.duplicated().any()  # no (url, count) committed twice: nothing replayed into the output
    assert [os.path.basename(p).rsplit(".", 1)[1] for p in committed_parts(str(copy))] == ["jsonl"] * len(
        committed_parts(str(copy))
    )
    copied = read_output(str(copy))
    assert list(copied.columns) == ["url", "user", "ts"]
    rows = sorted(zip(copied["url"], copied["user"].astype(int), copied["ts"].astype(int), strict=True))
    assert len(rows) == len(events) and rows == sorted(events)  # each input row once: none lost, none twice
    assert hidden(out) == [] and hidden(copy) == []  # the killed attempt's parts were aborted


def test_a_batch_job_writes_one_parquet_part_per_subtask(cluster, tmp_path):
    expected, _ = parquet_events(tmp_path, events=20_000, files=4, urls=300, seed=5)
    out = tmp_path / "out"
    job_id = cluster.run(JOB, str(tmp_path / "in"), str(out), "--batch", parallelism=2)
    status = ended(cluster, job_id)
    assert status["state"] == "FINISHED", status
    parts = [os.path.basename(p) for p in committed_parts(str(out))]
    assert parts and all(p.endswith("-batch.parquet") for p in parts) and len(parts) <= 2
    frame = read_output(str(out))
    assert len(frame) == len(expected)  # BATCH: each url's final count once
    assert final_counts(out) == expected


def test_a_file_that_is_not_parquet_fails_the_job_naming_it(cluster, tmp_path):
    parquet_events(tmp_path, events=1_000, files=1, urls=10, seed=2)
    (tmp_path / "in" / "zz-broken.parquet").write_bytes(b"PAR1 but not really a Parquet file")
    job_id = cluster.run(JOB, str(tmp_path / "in"), str(tmp_path / "out"), parallelism=1)
    status = ended(cluster, job_id)
    assert status["state"] == "FAILED", status
    assert "zz-broken.parquet is not a readable Parquet file" in status["failure"]
    assert status["restarts"] == 0  # the same file would fail the same way: not restarted


def test_a_monitored_directory_reads_parquet_files_that_appear_later(cluster, tmp_path):
    expected, _ = parquet_events(tmp_path, events=4_000, files=2, urls=50, seed=8)
    later = tmp_path / "later"
    later.mkdir()
    (name,) = [n for n in sorted(os.listdir(tmp_path / "in"))[1:]]
    os.rename(tmp_path / "in" / name, later / name)  # only the first file is there at the start
    out = tmp_path / "out"
    job_id = cluster.run(
        JOB,
        str(tmp_path / "in"),
        str(out),
        "--sink-format",
        "json",
        "--checkpoint-interval",
        "300",
        "--monitor-interval",
        "200",
        parallelism=2,
    )
    try:
        first = pq.read_table(str(tmp_path / "in" / sorted(os.listdir(tmp_path / "in"))[0]))
        early = collections.Counter(first["url"].to_pylist())
        wait_until(
            lambda: out.exists() and committed_parts(str(out)) and final_counts(out) == early,
            timeout=180,
            message="the first file's counts committed",
        )
        os.rename(later / name, tmp_path / "in" / f".{name}")  # a hidden name, then visible at once
        os.rename(tmp_path / "in" / f".{name}", tmp_path / "in" / name)
        wait_until(lambda: final_counts(out) == expected, timeout=180, message="both files' counts committed")
    finally:
        sluice("cancel", job_id, "--cluster-dir", cluster.dir, check=False)
    assert all(p.endswith(".jsonl") for p in committed_parts(str(out)))
    assert ended(cluster, job_id)["state"] == "CANCELED"
