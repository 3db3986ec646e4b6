"""The local Sluice cluster the benchmarks drive and one page_views job run on it: the `sluice` CLI
wrapper (a failure a BenchError), `Cluster` (sluice.testing.LocalCluster, logged, with `submit` for
examples/page_views.py), `follow` (a job polled in-process until it ends) and `throughput_run` (one
bounded job, its figures and its output checked).

Importing this module puts the repository and examples/ on sys.path (the bench scripts import
`generate_page_views` and `sluice` through it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
PAGE_VIEWS = os.path.join(EXAMPLES, "page_views.py")
SLUICE = [sys.executable, "-m", "sluice.cli"]
TERMINAL = ("FINISHED", "FAILED", "CANCELED")
POLL = 0.1  # seconds between status polls

sys.path.insert(0, EXAMPLES)
sys.path.insert(0, REPO)
from output_check import check_sluice_output
from stats import load1

from sluice.cli.status import job_dict as _job_dict
from sluice.testing import CliError, LocalCluster, run_cli


class BenchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sluice(
    *args: str, timeout: float = 300, check: bool = True, cwd: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the CLI capturing its output, from the checkout `cwd` (this one by default; sluice.testing.run_cli:
    the CLI and the processes it starts run that checkout's code; interrupted, the CLI gets SIGINT first so
    that it cleans up after itself). A failure is a BenchError."""
    try:
        return run_cli(*args, timeout=timeout, check=check, cwd=cwd or REPO, env=env)
    except CliError as exc:
        raise BenchError(str(exc)) from None


# -- clusters -------------------------------------------------------------------------------------
class Cluster(LocalCluster):
    """sluice.testing.LocalCluster for the benchmarks: its start and stop logged, a CLI failure a
    BenchError, `repo` the checkout it runs, and `submit` for examples/page_views.py."""

    cli = staticmethod(sluice)

    def __init__(
        self, directory: str, taskmanagers: int, slots: int, extra_args: tuple[str, ...] = (), repo: str = REPO
    ):
        super().__init__(directory, taskmanagers, slots, extra_args=extra_args, checkout=repo)

    def start(self, timeout: float = 400) -> Cluster:
        """`sluice cluster start` in the directory (which resumes a crashed cluster there)."""
        log(f"starting a cluster: {self.taskmanagers} TaskManagers x {self.slots} slots in {self.dir}")
        t0 = time.monotonic()
        super().start(timeout)
        log(f"cluster ready in {time.monotonic() - t0:.1f}s")
        return self

    def raw(self, job_id: str):
        return self.job(job_id)

    def submit(self, *job_args: str, parallelism: int = 2, options: dict[str, str] | None = None) -> str:
        """examples/page_views.py with these arguments, detached (`options`: job options); the job id."""
        return self.run(PAGE_VIEWS, *job_args, parallelism=parallelism, options=options)

    def stop(self) -> list[int]:
        """`sluice cluster stop`, then SIGKILL whatever of ours survived; returns the pids that had to be killed."""
        leftovers = super().stop()
        if leftovers:
            log(f"warning: killed processes left behind after `cluster stop`: {leftovers}")
        return leftovers


# -- one job run -------------------------------------------------------------------------------
def follow(cluster: Cluster, job_id: str, timeout: float, t_launch: float) -> dict:
    """Poll the job every POLL s until it ends; state changes (wall time), all checkpoints seen."""
    deadline = time.monotonic() + timeout
    transitions: list[tuple[float, str]] = []
    checkpoints: dict[int, dict] = {}
    last = None
    while True:
        info = cluster.raw(job_id)
        now = time.time()
        d = _job_dict(info)
        if d["state"] != last:
            transitions.append((now, d["state"]))
            last = d["state"]
        for c in d["checkpoints"]:
            checkpoints[c["id"]] = c
        if d["state"] in TERMINAL:
            return {
                "job_id": job_id,
                "state": d["state"],
                "status": d,
                "transitions": transitions,
                "checkpoints": checkpoints,
                "submitted_ms": info.submitted_ms,
                "ended_ms": info.ended_ms,
                "t_launch": t_launch,
                "t_end_seen": now,
            }
        if time.monotonic() > deadline:
            cluster.cancel(job_id)
            raise BenchError(f"job {job_id} still {d['state']} after {timeout:.0f}s: {d['message']}")
        time.sleep(POLL)


def throughput_run(
    cluster: Cluster, data: str, out: str, interval: int, events: int, expected: dict, timeout: float
) -> dict:
    load_start, t_launch = load1(), time.time()
    job_id = cluster.submit("--input", data, "--output", out, "--checkpoint-interval", str(interval))
    r = follow(cluster, job_id, timeout, t_launch)
    load_end = load1()
    if r["state"] != "FINISHED":
        raise BenchError(f"job {job_id} ended {r['state']}: {r['status']['failure'] or r['status']['message']}")
    submit_to_end = (r["ended_ms"] - r["submitted_ms"]) / 1000
    running_seen = next((t for t, s in r["transitions"] if s == "RUNNING"), None)
    running_to_end = (r["ended_ms"] / 1000 - running_seen) if running_seen is not None else None
    check = check_sluice_output(out, expected)
    completed = [c for c in r["checkpoints"].values() if c["status"] == "COMPLETED"]
    if check.ok:  # an output that broke the check stays, for a look at it
        shutil.rmtree(out, ignore_errors=True)
    return {
        "mode": "on" if interval > 0 else "off",
        "job_id": job_id,
        "submit_to_end": submit_to_end,
        "wall": r["t_end_seen"] - t_launch,
        "running_to_end": running_to_end,
        "throughput": events / submit_to_end,
        "counts_ok": check.ok,
        "output_check": check,
        "load_start": load_start,
        "load_end": load_end,
        "restarts": r["status"]["restarts"],
        "checkpoints": completed,
        "checkpoints_all": list(r["checkpoints"].values()),
        "transitions": [(round(t - t_launch, 2), s) for t, s in r["transitions"]],
    }
