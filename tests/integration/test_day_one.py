"""The user-API issue's acceptance run, end to end on a real cluster: headerless CSV files
with a malformed line each, keyed by two columns, summed into SqliteSink, with a kill -9 of
a TaskManager in the middle — the table holds the exact per-key totals (no row lost to a
forced header, none counted twice), and the job's exception history says why it restarted."""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter

import pytest
from harness import JOBS, SMALL_READS, kill_taskmanager_running, sluice, sqlite_table, wait_for

pytestmark = pytest.mark.integration


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
    """The committed totals; none yet while the sink's first commit (which creates the table) is pending."""
    return sqlite_table(db, "SELECT country, device, v FROM totals")


@pytest.mark.chaos
def test_headerless_csv_two_keys_sqlite_exact_after_a_kill(cluster, tmp_path):
    expected = write_input(tmp_path / "in", files=60, rows=3_000, seed=22)
    db = tmp_path / "totals.db"
    job_id = cluster.run(
        os.path.join(JOBS, "csv_totals_sqlite.py"), str(tmp_path / "in"), str(db), parallelism=2, options=SMALL_READS
    )
    wait_for(
        cluster,
        job_id,
        lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"] and db.exists() and table(db),
        "totals committed to the SQLite table",
        timeout=180,
    )
    killed = kill_taskmanager_running(cluster, job_id)
    status = wait_for(cluster, job_id, lambda s: s["state"] in ("FINISHED", "FAILED"), "the job to end", timeout=300)
    assert status["state"] == "FINISHED", status
    assert status["restarts"] >= 1, status

    assert table(db) == expected  # every key's exact total: no first line lost, no malformed row, nothing twice

    status = json.loads(sluice("status", job_id, "--json", "--cluster-dir", cluster.dir).stdout)
    assert status["failure"] is None  # it finished...
    restarts = [e for e in status["exceptions"] if e["restarted"]]
    # ...and says why it restarted: the TaskManager lost, or (its tasks' consumers on the other
    # TaskManager reporting first) their input from the killed TaskManager's address broken
    assert any("lost" in e["cause"] or killed in e["cause"] for e in restarts), status["exceptions"]


def test_an_attached_run_shows_progress_and_its_job_in_logs_and_status(cluster, tmp_path):
    """`sluice run` without --detach, its output captured (no terminal): one plain line per state
    change and checkpoint, ending as it always did; then `sluice logs` and `sluice status`."""
    from sluice.cli import progress

    expected = write_input(tmp_path / "in", files=40, rows=3_000, seed=5)
    db = tmp_path / "totals.db"
    jobfile = os.path.join(JOBS, "csv_totals_sqlite.py")
    proc = sluice("run", jobfile, "-p", "2", "--cluster-dir", cluster.dir, "--", str(tmp_path / "in"), str(db), "100")
    assert proc.returncode == 0, proc.stderr
    submitted = re.search(r"Submitted job csv_totals_sqlite \(([0-9a-f]{32})\)", proc.stderr)
    assert submitted is not None, proc.stderr
    job_id = submitted.group(1)
    mine = [line for line in proc.stderr.splitlines() if line.startswith(f"  {job_id}: ")]
    assert mine[0] == f"  {job_id}: RUNNING" and mine[-1] == f"  {job_id}: FINISHED", proc.stderr  # as before
    completed = [m for line in mine if (m := re.match(rf"  {job_id}: checkpoint (\d+) completed in \d+ ms, ", line))]
    assert completed, proc.stderr
    assert all("records/s in" in m.string and "; backpressure " in m.string for m in completed)
    assert table(db) == expected

    status = cluster.status(job_id)
    ids = [c["id"] for c in status["checkpoints"]]
    assert ids and len(ids) == len(set(ids)), ids  # each checkpoint once
    assert {int(m.group(1)) for m in completed} <= set(ids)
    assert all("io" in t and t["backpressure"] in ("OK", "LOW", "HIGH") for t in status["tasks"])
    assert "metrics" in status
    with cluster.client() as client:
        info, graph = client.get(job_id), client.job_graph(job_id)
    sources = progress.source_chains(graph)
    read = [progress.records_in_shown(t, sources) for t in info.tasks if t.operator.split(" -> ")[0] in sources[1]]
    assert read and all(n > 0 for n in read), info.tasks  # a source's records in: the rows it read
    human = sluice("status", job_id, "--cluster-dir", cluster.dir).stdout
    assert "backpressure" in human and "in/s" in human and "None" not in human

    out = sluice("logs", job_id[:8], "--dir", cluster.dir, "--lines", "100000").stdout.splitlines()
    processes = {line.split(" | ", 1)[0].strip() for line in out}
    assert {"jobmanager-0", "taskmanager-0"} <= processes, out[:20]
    assert any(job_id in line and "submitted 'csv_totals_sqlite'" in line for line in out)
    assert any(line.startswith("taskmanager-0") and job_id in line for line in out)
    with cluster.client() as client:
        others = [j.job_id for j in client.list() if j.job_id != job_id]
    assert not any(other in line for line in out for other in others)
