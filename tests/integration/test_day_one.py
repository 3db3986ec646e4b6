"""The user-API issue's acceptance run, end to end on a real cluster: headerless CSV files
with a malformed line each, keyed by two columns, summed into SqliteSink, with a kill -9 of
the TaskManager in the middle — the table holds the exact per-key totals (no row lost to a
forced header, none counted twice), and the job's exception history says why it restarted."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import uuid
from collections import Counter

import pytest
from harness import JOBS, running_cluster, sluice
from test_sinks import kill_the_taskmanager, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with running_cluster(
        tmp_path_factory.mktemp("cluster"),
        taskmanagers=1,
        slots=2,
        zookeeper=zookeeper.connect_string,
        cluster_id=f"day-one-{uuid.uuid4().hex[:8]}",
    ) as c:
        yield c


def write_input(directory, files: int, rows: int, seed: int) -> dict[tuple[str, str], int]:
    """Headerless `country,device,v` files, one malformed line in each; the expected totals."""
    rng = random.Random(seed)
    os.makedirs(directory)
    totals: Counter[tuple[str, str]] = Counter()
    for i in range(files):
        lines = []
        for _ in range(rows):
            key = (rng.choice(["de", "fr", "us", "jp"]), rng.choice(["mobile", "desktop", "tv"]))
            v = rng.randint(-50, 100)  # negative values too: the largest value is not the total
            totals[key] += v
            lines.append(f"{key[0]},{key[1]},{v}")
        lines.insert(rng.randrange(len(lines)), "de,mobile,not-a-number")  # malformed: v is not a long
        with open(os.path.join(directory, f"part-{i:04d}.csv"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return dict(totals)


def table(db) -> dict[tuple[str, str], int]:
    conn = sqlite3.connect(db)
    try:
        return {(c, d): v for c, d, v in conn.execute("SELECT country, device, v FROM totals")}
    finally:
        conn.close()


def test_headerless_csv_two_keys_sqlite_exact_after_a_kill(cluster, tmp_path):
    expected = write_input(tmp_path / "in", files=60, rows=3_000, seed=22)
    db = tmp_path / "totals.db"
    job_id = cluster.run(os.path.join(JOBS, "csv_totals_sqlite.py"), str(tmp_path / "in"), str(db), parallelism=2)
    wait_for(
        cluster,
        job_id,
        lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"] and db.exists() and table(db),
        "totals committed to the SQLite table",
        timeout=180,
    )
    kill_the_taskmanager(cluster)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1, status

    assert table(db) == expected  # every key's exact total: no first line lost, no malformed row, nothing twice

    status = json.loads(sluice("status", job_id, "--json", "--cluster-dir", cluster.dir).stdout)
    assert status["failure"] is None  # it finished...
    restarts = [e for e in status["exceptions"] if e["restarted"]]
    assert any("lost" in e["cause"] for e in restarts), status["exceptions"]  # ...and says why it restarted
