"""`make demo`: a local HA cluster runs the reference job on sample data.

Starts ZooKeeper, 2 JobManagers and 2 TaskManagers in the background,
runs examples/page_views.py (parallelism 2) on generated page-view events,
prints the top URLs and the job's checkpoint summary, checks the counts
against an independent computation, and stops the cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from generate_page_views import generate

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
        final: dict[str, int] = {}
        for name in sorted(os.listdir(out)):
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(out, name)) as f:
                for line in f:
                    url, count = line.rstrip("\n").rsplit(",", 1)
                    final[url] = max(final.get(url, 0), int(count))
        print(f"\nprocessed {events} events in {elapsed:.1f}s (submission to FINISHED); top URLs:")
        for url, count in sorted(final.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {count:>8}  {url}")
        last = status["last_completed_checkpoint"]
        print(
            f"\ncheckpoints: last completed {last if last is not None else 'none'}, "
            f"restored from {status['restored_checkpoint']}, restarts {status['restarts']}"
        )
        if final != expected:
            wrong = sum(1 for u in expected if final.get(u) != expected[u])
            raise SystemExit(f"counts differ from the independent computation for {wrong} urls")
        print(f"counts match the independent computation for all {len(expected)} urls")
    finally:
        sluice("cluster", "stop", "--dir", cluster_dir)


if __name__ == "__main__":
    main()
