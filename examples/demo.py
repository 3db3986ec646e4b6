"""`make demo`: a local HA cluster runs the reference job on sample data.

Starts ZooKeeper, 2 JobManagers and 2 TaskManagers in the background,
runs examples/page_views.py (parallelism 2) on generated page-view events
with its counts upserted into a SQLite table too (`--sqlite`), prints the
top URLs from that table and the job's checkpoint summary, checks the
table and the file sink's final lines (`sluice.read_output`) against an
independent computation, and stops the cluster.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from generate_page_views import generate

from sluice import read_output

SLUICE = [sys.executable, "-m", "sluice.cli"]


def sluice(*args: str, capture: bool = False) -> str:
    proc = subprocess.run(
        [*SLUICE, *args], stdin=subprocess.DEVNULL, text=True, stdout=subprocess.PIPE if capture else None
    )
    if proc.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args)} failed with exit code {proc.returncode}")
    return proc.stdout or ""


def main() -> None:
    work = tempfile.mkdtemp(prefix="sluice-demo-")
    cluster_dir, data, out = (os.path.join(work, d) for d in ("cluster", "events", "counts"))
    db = os.path.join(work, "counts.db")
    events = int(os.environ.get("DEMO_EVENTS", "200000"))
    print(f"generating {events} page-view events under {data}")
    expected = generate(data, events=events, files=8, urls=10_000, seed=7)
    print("starting a local cluster: ZooKeeper, 2 JobManagers, 2 TaskManagers x 2 slots")
    sluice("cluster", "start", "--dir", cluster_dir, "--jobmanagers", "2", "--taskmanagers", "2")
    try:
        t0 = time.monotonic()
        job_id = (
            sluice(
                "run",
                os.path.join(HERE, "page_views.py"),
                "--detach",
                "--parallelism",
                "2",
                "--cluster-dir",
                cluster_dir,
                "--",
                "--input",
                data,
                "--output",
                out,
                "--sqlite",
                db,
                capture=True,
            )
            .strip()
            .splitlines()[-1]
        )
        print(f"submitted page_views as job {job_id}")
        while True:
            status = json.loads(sluice("status", job_id, "--json", "--cluster-dir", cluster_dir, capture=True))
            if status["state"] in ("FINISHED", "FAILED", "CANCELED"):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        sluice("status", job_id, "--cluster-dir", cluster_dir)
        if status["state"] != "FINISHED":
            raise SystemExit(f"page_views ended {status['state']}: {status.get('failure')}")
        with sqlite3.connect(db) as conn:  # one row per url: its count as of the last commit
            final: dict[str, int] = dict(conn.execute("SELECT url, count FROM page_views"))
            top = conn.execute("SELECT url, count FROM page_views ORDER BY count DESC, url LIMIT 10").fetchall()
        conn.close()
        print(f"\nprocessed {events} events in {elapsed:.1f}s (submission to FINISHED); top URLs (SQLite {db}):")
        for url, count in top:
            print(f"  {count:>8}  {url}")
        last, restored = status["last_completed_checkpoint"], status["restored_checkpoint"]
        print(
            f"\ncheckpoints: last completed {last if last is not None else 'none'}"
            + (f", restored from checkpoint {restored}" if restored is not None else "")
            + f", restarts {status['restarts']}"
        )
        lines = read_output(out, final=True, columns=["url", "count"])  # the file sink's last line per url
        from_files = {url: int(count) for url, count in zip(lines["url"], lines["count"], strict=True)}
        for what, counts in (("the SQLite table", final), ("the file sink", from_files)):
            if counts != expected:
                wrong = sum(1 for u in expected if counts.get(u) != expected[u])
                raise SystemExit(f"counts in {what} differ from the independent computation for {wrong} urls")
        print(f"counts match the independent computation for all {len(expected)} urls (SQLite table and file sink)")
    finally:
        sluice("cluster", "stop", "--dir", cluster_dir)


if __name__ == "__main__":
    main()
