"""Final results one can read, on the shared cluster (1 JobManager, 2 TaskManagers x 3
slots, real Spark): page_views with `--sqlite` upserts its counts into a SQLite table, exactly
once across a kill -9 of a TaskManager, and `sluice output --final` reads the same counts
from the file sink's committed parts."""

from __future__ import annotations

import json
import os
import sqlite3
import sys

import pytest
from harness import EXAMPLES, SMALL_READS, kill_taskmanager_running, sluice, wait_for

sys.path.insert(0, EXAMPLES)
from generate_page_views import generate

pytestmark = pytest.mark.integration


def run_page_views(cluster, tmp_path, *extra: str, options=None) -> str:
    return cluster.run(
        os.path.join(EXAMPLES, "page_views.py"),
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--sqlite",
        str(tmp_path / "counts.db"),
        *extra,
        parallelism=2,
        options=options,
    )


def sqlite_counts(db) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT url, count FROM page_views"))
    finally:
        conn.close()


def counts_so_far(db) -> dict[str, int]:
    """sqlite_counts, or {} while the sink has not created its database or table yet."""
    try:
        return sqlite_counts(db) if db.exists() else {}
    except sqlite3.OperationalError:  # the file is there, its table not yet
        return {}


def sqlite_rows(db, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def output_final(out) -> dict[str, int]:
    text = sluice("output", str(out), "--final", "--columns", "url,count", "--format", "json").stdout
    return {r["url"]: r["count"] for r in map(json.loads, text.splitlines())}


def test_without_checkpoints_the_table_is_written_at_the_end_of_the_input(cluster, tmp_path):
    expected = generate(str(tmp_path / "in"), events=20_000, files=4, urls=500, seed=3)
    job_id = run_page_views(cluster, tmp_path, "--checkpoint-interval", "0")
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end")
    assert status["state"] == "FINISHED", status
    db = tmp_path / "counts.db"
    assert sqlite_counts(db) == expected
    assert sqlite_rows(db, "SELECT count(*) FROM _sluice_commits") == [(0,)]  # no checkpoint to record
    assert output_final(tmp_path / "out") == expected


@pytest.mark.chaos
def test_the_sqlite_table_is_exact_after_the_taskmanager_is_killed(cluster, tmp_path):
    expected = generate(str(tmp_path / "in"), events=200_000, files=80, urls=2_000, seed=13)
    db = tmp_path / "counts.db"
    job_id = run_page_views(cluster, tmp_path, "--checkpoint-interval", "300", options=SMALL_READS)  # a kill mid-job
    wait_for(
        cluster,
        job_id,
        lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"] and counts_so_far(db),
        "rows committed to the SQLite table",
        timeout=180,
    )
    before = sqlite_counts(db)
    kill_taskmanager_running(cluster, job_id)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1 and status["restored_checkpoint"] is not None, status

    after = sqlite_counts(db)
    assert after == expected  # one row per url, its exact count: nothing lost, nothing applied twice
    assert all(before[url] <= after[url] for url in before)
    commits = dict(sqlite_rows(db, "SELECT subtask, checkpoint_id FROM _sluice_commits"))
    assert set(commits) == {0, 1} and all(0 < c <= status["last_completed_checkpoint"] for c in commits.values())
    assert sqlite_rows(db, "SELECT count(*) FROM _sluice_staging") == [(0,)]
    assert output_final(tmp_path / "out") == expected  # the file sink's last line per url agrees
