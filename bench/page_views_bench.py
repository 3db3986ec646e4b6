"""page_views benchmark: checkpoint overhead, checkpoint durations, and
recovery time after kill -9 of a TaskManager, in one invocation.

    python bench/page_views_bench.py [--events 1000000] [--files 8] [--runs 3] [--warmup-runs 2]
                                     [--recovery-runs 3] [--recovery-events 2000000] [--recovery-files 400]
                                     [--spare cold|warm|both] [--skip-recovery] [--skip-throughput]
                                     [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Input is generated once per part with examples/generate_page_views.py's
generate() (Zipf urls, 10,000 urls).

1. Throughput: on one local cluster (`sluice cluster start --taskmanagers 2
   --slots 2`), examples/page_views.py at parallelism 2 runs with checkpoints
   every 1000 ms ("on") and with `--checkpoint-interval 0` ("off"), `--runs`
   times each, interleaved on, off | off, on | on, off ... (so that a drift,
   JIT warm-up or other load, favours neither mode) after `--warmup-runs`
   uncounted runs. Per run: events / (JobManager's submitted -> ended time),
   the client's wall time (CLI launch -> FINISHED seen) and RUNNING ->
   FINISHED (RUNNING as first seen polling every 0.1 s, the end from the
   JobManager). The committed output is checked against generate()'s counts
   (bench/output_check.py: no line twice, counts increasing, final counts
   exact); the load average at each run's start and end is recorded.
   Overhead = median_off / median_on - 1 (throughput; goal <= 5 %).
2. Checkpoint durations: every COMPLETED checkpoint of the "on" runs
   (duration_ms, size_bytes as in `sluice status JOB --json`): p50, p99, median size.
3. Recovery: per run a fresh cluster of 3 TaskManagers x 2 slots (one
   spare); page_views with checkpoints every 500 ms; once a checkpoint
   completed (and a file was committed), the TaskManager hosting subtask 0 of
   the first task is killed with SIGKILL (pid from cluster.json). Measured
   from the kill: (a) the job RUNNING again with restarts >= 1 and all tasks
   RUNNING, (b) the first committed output file written after the kill
   (visible name not there before, mtime after the kill), plus the first
   completed checkpoint after the restored one and the first new visible
   file of any age. Then `sluice cancel` and the cluster is stopped; the
   committed output is checked for lines twice and counts not increasing
   (a canceled job has no final counts to compare). With
   --spare warm, a short job at parallelism 3 runs on every TaskManager
   first, so the spare's Spark is warm; cold measures a spare that never ran
   a job; both (default) interleaves the two.

Job status is polled in-process through sluice.client (the same fields as
`sluice status JOB --json`, built by the CLI's own _job_dict) so that polling
every 0.1 s does not start a Python process each time; jobs are submitted,
canceled and clusters started/stopped through the `sluice` CLI.

Results are printed and appended to --out as a dated Markdown section.
Every cluster started is stopped (and every process of it gone) on exit,
error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
PAGE_VIEWS = os.path.join(EXAMPLES, "page_views.py")
SLUICE = [sys.executable, "-m", "sluice.cli"]
TERMINAL = ("FINISHED", "FAILED", "CANCELED")
POLL = 0.1  # seconds between status polls
DIR_POLL = 0.02  # seconds between output directory listings (recovery)

sys.path.insert(0, EXAMPLES)
sys.path.insert(0, REPO)
from bench_common import begin_run, finish_workdir, fmt, median, pct, publish, run_main, size
from generate_page_views import generate
from markdown import notes_lines
from output_check import check_sluice_output
from stats import fmt_load, load1

from sluice.cli.status import job_dict as _job_dict
from sluice.client import SluiceError
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


# -- recovery --------------------------------------------------------------------------------
class DirWatch(threading.Thread):
    """Lists the output directory every DIR_POLL s; remembers when each visible file was first seen."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.first_seen: dict[str, float] = {}  # name -> monotonic time first seen
        self.mtime: dict[str, float] = {}  # name -> mtime (wall clock) when first seen
        self.stop_event = threading.Event()

    def visible(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.path) if not n.startswith((".", "_"))]
        except FileNotFoundError:
            return []

    def scan(self) -> None:
        now = time.monotonic()
        for n in self.visible():
            if n not in self.first_seen:
                self.first_seen[n] = now
                try:
                    self.mtime[n] = os.stat(os.path.join(self.path, n)).st_mtime
                except FileNotFoundError:
                    self.mtime[n] = float("inf")

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.scan()
            time.sleep(DIR_POLL)


def warm_all_taskmanagers(cluster: Cluster, data: str, out: str, timeout: float) -> str:
    """A short page_views run at parallelism = number of TaskManagers, so every TaskManager's Spark
    (the spare's too) has run the job's code once; returns which TaskManagers it used."""
    n = cluster.taskmanagers
    t_launch = time.time()
    job_id = cluster.submit("--input", data, "--output", out, "--checkpoint-interval", "500", parallelism=n)
    used: set[str] = set()
    deadline = time.monotonic() + timeout
    while True:
        s = cluster.status(job_id)
        used |= {t["taskmanager"] for t in s["tasks"] if t["taskmanager"]}
        if s["state"] in TERMINAL:
            break
        if time.monotonic() > deadline:
            cluster.cancel(job_id)
            raise BenchError(f"warm-up job {job_id} still {s['state']} after {timeout:.0f}s")
        time.sleep(POLL)
    shutil.rmtree(out, ignore_errors=True)
    if s["state"] != "FINISHED":
        raise BenchError(f"warm-up job {job_id} ended {s['state']}: {s['failure'] or s['message']}")
    log(f"  warm-up at parallelism {n} took {time.time() - t_launch:.1f}s on {len(used)}/{n} TaskManagers")
    return f"{len(used)}/{n}"


def _new_files(watch: DirWatch, before: set[str], t_kill_wall: float) -> tuple[dict, dict]:
    """Visible files that appeared after the kill, and those of them written after it (mtime; a
    pending part of the restored checkpoint, committed on restore, was written before)."""
    new = {n: t for n, t in list(watch.first_seen.items()) if n not in before}
    written = {n: t for n, t in new.items() if watch.mtime.get(n, 0) >= t_kill_wall}
    return new, written


def recovery_run(
    cluster: Cluster, data: str, out: str, timeout: float, interval: int = 500, run_to_end: bool = False
) -> dict:
    """Kill the TaskManager of subtask 0 once output was committed; measure the recovery. Then the
    job is canceled, or with run_to_end followed until it ends (its output left in `out`)."""
    load_start, t_launch = load1(), time.monotonic()
    job_id = cluster.submit("--input", data, "--output", out, "--checkpoint-interval", str(interval))
    t_first_checkpoint = None
    watch = DirWatch(out)
    watch.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            s = cluster.status(job_id)
            if t_first_checkpoint is None and s["last_completed_checkpoint"] is not None:
                t_first_checkpoint = time.monotonic() - t_launch
            if s["state"] in TERMINAL:
                raise BenchError(
                    f"job {job_id} ended {s['state']} before the kill (make --recovery-events larger): "
                    f"{s['failure'] or s['message']}"
                )
            if (
                s["state"] == "RUNNING"
                and s["last_completed_checkpoint"] is not None
                and watch.visible()
                and s["tasks"]
                and all(t["state"] == "RUNNING" for t in s["tasks"])
            ):
                break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"job {job_id}: no completed checkpoint and committed file within {timeout:.0f}s "
                    f"(state {s['state']}, {s['message']})"
                )
            time.sleep(POLL)
        first_op = s["tasks"][0]["operator"]
        target = next(t for t in s["tasks"] if t["operator"] == first_op and t["subtask"] == 0)
        address = target["taskmanager"]
        pid = cluster.taskmanager_pid(address)
        proc = psutil.Process(pid)
        children = proc.children(recursive=True)
        watch.scan()
        before = set(watch.first_seen)
        restarts_before = s["restarts"]
        checkpoint_before = s["last_completed_checkpoint"]
        t_kill, t_kill_wall = time.monotonic(), time.time()
        os.kill(pid, signal.SIGKILL)
        log(
            f"  killed TaskManager {address} (pid {pid}, hosting {first_op} #0) after checkpoint "
            f"{checkpoint_before}; {len(before)} files committed"
        )

        t_detected = t_running = t_checkpoint = None
        restored = None
        end_state = None
        states: list[tuple[float, str]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = cluster.status(job_id)
            now = time.monotonic()
            if not states or states[-1][1] != s["state"]:
                states.append((round(now - t_kill, 2), s["state"]))
            if t_detected is None and (
                s["restarts"] > restarts_before
                or s["state"] != "RUNNING"
                or any(t["state"] != "RUNNING" for t in s["tasks"])
            ):
                t_detected = now
            if (
                t_running is None
                and s["state"] == "RUNNING"
                and s["restarts"] >= restarts_before + 1
                and s["tasks"]
                and all(t["state"] == "RUNNING" for t in s["tasks"])
            ):
                t_running = now
                restored = s["restored_checkpoint"]
            if t_checkpoint is None and any(
                c["status"] == "COMPLETED" and c["id"] > checkpoint_before for c in s["checkpoints"]
            ):
                t_checkpoint = now
            if s["state"] in TERMINAL:
                end_state = s["state"]
                break
            if t_running is not None and t_checkpoint is not None and _new_files(watch, before, t_kill_wall)[1]:
                break
            time.sleep(POLL)
        watch.scan()
        new, new_written = _new_files(watch, before, t_kill_wall)
        first_new = min(new.values()) if new else None
        first_written = min(new_written.values()) if new_written else None
        result = {
            "job_id": job_id,
            "killed": address,
            "first_checkpoint": t_first_checkpoint,
            "t_kill_wall": t_kill_wall,
            "checkpoint_after": None if t_checkpoint is None else t_checkpoint - t_kill,
            "pid": pid,
            "checkpoint_before": checkpoint_before,
            "restored": restored,
            "end_state": end_state,
            "states": states,
            "detected": None if t_detected is None else t_detected - t_kill,
            "running": None if t_running is None else t_running - t_kill,
            "first_file": None if first_new is None else first_new - t_kill,
            "first_file_name": min(new, key=new.__getitem__) if new else None,
            "first_written_file": None if first_written is None else first_written - t_kill,
            "first_written_file_name": min(new_written, key=new_written.__getitem__) if new_written else None,
        }
    finally:
        watch.stop_event.set()
        watch.join(5)
    s = cluster.status(job_id)
    if run_to_end and s["state"] not in TERMINAL:
        s = follow(cluster, job_id, timeout, time.time())["status"]
    if s["state"] not in TERMINAL:
        cluster.cancel(job_id)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and cluster.status(job_id)["state"] not in TERMINAL:
            time.sleep(0.2)
    result["final_state"] = cluster.status(job_id)["state"]
    result["load_start"], result["load_end"] = load_start, load1()
    for child in children:  # the killed TaskManager's Spark JVM follows it; make sure
        try:
            child.wait(30)
        except psutil.TimeoutExpired:
            log(f"  warning: child {child.pid} of the killed TaskManager still alive after 30s; killing it")
            child.kill()
        except psutil.NoSuchProcess:
            pass
    return result


# -- reporting -----------------------------------------------------------------------------------
def report(
    args, facts: dict, command: str, tput: list[dict], warmup: list[dict], recovery: list[dict], notes: list[str]
) -> str:
    L = []
    L.append(f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} — page_views: checkpoint overhead and recovery")
    L.append("")
    L.append(f"Command: `{command}`")
    L.append("")
    L.append("| machine | |")
    L.append("|---|---|")
    for k in ("date", "cores", "cpu", "ram", "python", "java", "os", "load"):
        label = {"date": "date -u", "load": "load average at start"}.get(k, k)
        L.append(f"| {label} | {facts[k]} |")
    L.append("")
    if tput:
        warm_text = ", ".join(f"{w['mode']} {w['submit_to_end']:.1f} s" for w in warmup) or "none"
        L.append(
            f"### Throughput: {args.events:,} events in {args.files} files, parallelism 2, 2 TaskManagers x 2 slots"
        )
        L.append("")
        L.append(
            "Per run: events / (JobManager submitted → FINISHED); wall = CLI launch → FINISHED seen; "
            f"RUNNING → FINISHED with RUNNING as first seen polling every {POLL} s. "
            f"Runs alternate on, off | off, on | on, off ... so that a drift favours neither mode. "
            f"Warm-up runs (not counted): {warm_text}."
        )
        L.append("")
        L.append(
            "| run | checkpoints | events/s | submit→FINISHED s | wall s | RUNNING→FINISHED s | "
            "completed checkpoints | output exactly once | load, 1 min, start→end |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|")
        for i, r in enumerate(tput, 1):
            L.append(
                f"| {i} | {'1000 ms' if r['mode'] == 'on' else 'off'} | {r['throughput']:,.0f} | "
                f"{r['submit_to_end']:.2f} | {r['wall']:.2f} | {fmt(r['running_to_end'])} | "
                f"{len(r['checkpoints']) if r['mode'] == 'on' else '—'} | {'yes' if r['counts_ok'] else '**NO**'} | "
                f"{fmt_load(r)} |"
            )
        L.append("")
        L.append(
            "Output exactly once: every committed line read in commit order, no (url, count) line twice, each "
            "url's counts increasing, final counts equal to the generator's (bench/output_check.py)."
        )
        L.append("")
        on = [r for r in tput if r["mode"] == "on"]
        off = [r for r in tput if r["mode"] == "off"]
        m = {}
        L.append("| median | checkpoints 1000 ms | checkpoints off | overhead (off/on − 1) |")
        L.append("|---|---|---|---|")
        for key, label, better_high in (
            ("throughput", "events/s", True),
            ("submit_to_end", "submit→FINISHED s", False),
            ("running_to_end", "RUNNING→FINISHED s", False),
            ("wall", "wall s", False),
        ):
            a, b = median(r[key] for r in on), median(r[key] for r in off)
            if a and b:
                ov = (b / a - 1) if better_high else (a / b - 1)
            else:
                ov = None
            m[key] = ov
            spec = ",.0f" if key == "throughput" else ".2f"
            L.append(
                f"| {label} | {fmt(a, spec)} | {fmt(b, spec)} | {fmt(None if ov is None else ov * 100, '+.1f')} % |"
            )
        L.append("")
        ov = m.get("throughput")
        verdict = "—" if ov is None else ("meets" if ov <= 0.05 else "misses")
        L.append(
            f"**Checkpoint overhead (throughput): {fmt(None if ov is None else ov * 100, '+.1f')} %** "
            f"({verdict} the goal of ≤ 5 %). For times the overhead is on/off − 1."
        )
        L.append("")
        ck = [c for r in on for c in r["checkpoints"]]
        L.append("### Checkpoint durations (COMPLETED checkpoints of the 1000 ms runs)")
        L.append("")
        L.append("| checkpoints | p50 duration ms | p99 duration ms | max duration ms | median size |")
        L.append("|---|---|---|---|---|")
        durs = [c["duration_ms"] for c in ck]
        L.append(
            f"| {len(ck)} | {fmt(pct(durs, 50), '.0f')} | {fmt(pct(durs, 99), '.0f')} | "
            f"{fmt(max(durs) if durs else None, '.0f')} | {size(median(c['size_bytes'] for c in ck))} |"
        )
        failed = [
            c
            for r in on
            for c in r["checkpoints_all"]
            if c["status"] not in ("COMPLETED", "IN_PROGRESS")
            and "superseded by the final checkpoint" not in c.get("failure", "")
        ]
        if failed:
            L.append("")
            L.append(
                f"{len(failed)} checkpoints did not complete: "
                + "; ".join(f"{c['id']} {c['status']} {c.get('failure', '')}".strip() for c in failed[:5])
            )
        L.append("")
    if recovery:
        L.append(
            f"### Recovery after kill -9 of a TaskManager: {args.recovery_events:,} events in "
            f"{args.recovery_files} files, checkpoints every 500 ms, 3 TaskManagers x 2 slots"
        )
        L.append("")
        L.append(
            "Seconds from the kill of the TaskManager hosting subtask 0 of the first task (its Spark JVM "
            "dies with it). Spare: *cold* = a fresh cluster whose spare TaskManager has never run a job; "
            "*warm* = every TaskManager ran a short page_views job (parallelism 3) first. "
            "1st checkpoint = submission → first completed checkpoint (before the kill). "
            f"Detected = first poll (every {POLL} s) showing the job or a task not RUNNING, or a restart; "
            "(a) = state RUNNING, restarts ≥ 1 and every task RUNNING; checkpoint = first checkpoint after "
            "the restored one completed; (b) = first committed (visible) output file written after the kill "
            "(not there before it, mtime after it); any new file = first visible file not there before the "
            "kill, whenever written (may be a commit of the last checkpoint before the kill, finishing late on "
            "a surviving TaskManager, or a pending part committed on restore). Output: the committed lines "
            "when the job was canceled, no (url, count) line twice and each url's counts increasing "
            "(bench/output_check.py; a canceled job has no final counts to compare)."
        )
        L.append("")
        L.append(
            "| run | spare | 1st checkpoint s | detected s | (a) RUNNING again s | checkpoint s | "
            "(b) first file written after the kill s | any new file s | restored / last before kill | "
            "states after the kill | output exactly once | load, 1 min, start→end |"
        )
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for i, r in enumerate(recovery, 1):
            states = " → ".join(f"{s}@{t}" for t, s in r["states"])
            L.append(
                f"| {i} | {r['spare']} | {fmt(r['first_checkpoint'], '.1f')} | {fmt(r['detected'])} | "
                f"{fmt(r['running'])} | {fmt(r['checkpoint_after'])} | {fmt(r['first_written_file'])} | "
                f"{fmt(r['first_file'])} | {r['restored']} / {r['checkpoint_before']} | {states} | "
                f"{'yes' if r['output_check'].ok else '**NO**'} | {fmt_load(r)} |"
            )
        spares = [sp for sp in ("cold", "warm") if any(r["spare"] == sp for r in recovery)]
        for sp in spares:
            rs = [r for r in recovery if r["spare"] == sp]
            L.append(
                f"| **median** | {sp} | {fmt(median(r['first_checkpoint'] for r in rs), '.1f')} | "
                f"{fmt(median(r['detected'] for r in rs))} | **{fmt(median(r['running'] for r in rs))}** | "
                f"{fmt(median(r['checkpoint_after'] for r in rs))} | "
                f"**{fmt(median(r['first_written_file'] for r in rs))}** | "
                f"{fmt(median(r['first_file'] for r in rs))} | | | | |"
            )
        L.append("")
        for sp in spares:
            rs = [r for r in recovery if r["spare"] == sp]
            ma, mb = median(r["running"] for r in rs), median(r["first_written_file"] for r in rs)
            verdict = "—" if mb is None else ("meets" if mb < 3 else "misses")
            L.append(
                f"**Recovery, {sp} spare (median of {len(rs)}): (a) RUNNING again after {fmt(ma)} s, "
                f"(b) first committed file written after the kill after {fmt(mb)} s** ({verdict} the goal "
                "of < 3 s)."
            )
            L.append("")
    L += notes_lines(notes)
    return "\n".join(L) + "\n"


# -- main ----------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="events for the throughput runs")
    ap.add_argument("--files", type=int, default=8, help="input files (splits) for the throughput runs")
    ap.add_argument("--runs", type=int, default=3, help="runs per mode (checkpoints on / off), interleaved")
    ap.add_argument("--warmup-runs", type=int, default=2, help="uncounted runs first (checkpoints on, off, ...)")
    ap.add_argument("--recovery-runs", type=int, default=3)
    ap.add_argument("--recovery-events", type=int, default=2_000_000, help="enough for the job to run >= 15 s")
    ap.add_argument("--recovery-files", type=int, default=400)
    ap.add_argument(
        "--spare",
        choices=("cold", "warm", "both"),
        default="both",
        help="recovery onto a spare TaskManager whose Spark never ran a job (cold), after a short job "
        "on every TaskManager (warm), or both, interleaved (default)",
    )
    ap.add_argument("--skip-recovery", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to")
    ap.add_argument("--workdir", default=None, help="data, clusters and outputs (default: a temp dir, removed)")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the working directory (logs) at the end")
    ap.add_argument("--job-timeout", type=float, default=900, help="seconds a job may take")
    args = ap.parse_args()
    if args.runs < 1 and not args.skip_throughput:
        ap.error("--runs must be at least 1")

    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-bench-", log)
    clusters: list[Cluster] = []
    tput: list[dict] = []
    warmup: list[dict] = []
    recovery: list[dict] = []
    notes: list[str] = []
    failed = interrupted = False
    try:
        if not args.skip_throughput:
            data = os.path.join(work, "events")
            t0 = time.monotonic()
            expected = generate(data, events=args.events, files=args.files, urls=10_000, seed=7)
            log(
                f"generated {args.events} events in {args.files} files ({len(expected)} urls) "
                f"in {time.monotonic() - t0:.1f}s"
            )
            c = Cluster(os.path.join(work, "cluster-throughput"), taskmanagers=2, slots=2)
            clusters.append(c)
            c.start()
            warmup = []
            for w in range(args.warmup_runs):
                r = throughput_run(
                    c,
                    data,
                    os.path.join(work, f"out-warmup-{w}"),
                    1000 if w % 2 == 0 else 0,
                    args.events,
                    expected,
                    args.job_timeout,
                )
                warmup.append(r)
                log(
                    f"warm-up {w + 1}/{args.warmup_runs} (checkpoints {r['mode']}): {r['submit_to_end']:.2f}s "
                    f"submit→FINISHED, counts {'correct' if r['counts_ok'] else 'WRONG'}"
                )
            for i in range(args.runs):
                # on, off | off, on | on, off ...: a drift (JIT warm-up, other load) favours neither mode
                for interval in (1000, 0) if i % 2 == 0 else (0, 1000):
                    r = throughput_run(
                        c,
                        data,
                        os.path.join(work, f"out-{i}-{interval}"),
                        interval,
                        args.events,
                        expected,
                        args.job_timeout,
                    )
                    tput.append(r)
                    log(
                        f"run {i + 1}/{args.runs} checkpoints {r['mode']:>3}: {r['throughput']:,.0f} events/s, "
                        f"{r['submit_to_end']:.2f}s submit→FINISHED, RUNNING→FINISHED {fmt(r['running_to_end'])}s, "
                        f"{len(r['checkpoints'])} checkpoints, counts {'correct' if r['counts_ok'] else 'WRONG'}"
                    )
                    if not r["counts_ok"]:
                        failed = True
                        notes.append(
                            f"job {r['job_id']} ({r['mode']}): OUTPUT CHECK FAILED: {r['output_check'].describe()}"
                        )
                    if r["restarts"]:
                        notes.append(f"job {r['job_id']} ({r['mode']}) restarted {r['restarts']} times")
            leftovers = c.stop()
            if leftovers:
                notes.append(f"`cluster stop` left processes behind (killed): {leftovers}")
            shutil.rmtree(data, ignore_errors=True)
        if not args.skip_recovery and args.recovery_runs > 0:
            data = os.path.join(work, "events-recovery")
            t0 = time.monotonic()
            generate(data, events=args.recovery_events, files=args.recovery_files, urls=10_000, seed=11)
            log(
                f"generated {args.recovery_events} events in {args.recovery_files} files for recovery "
                f"in {time.monotonic() - t0:.1f}s"
            )
            warm_data = os.path.join(work, "events-warmup")
            if args.spare in ("warm", "both"):
                generate(warm_data, events=30_000, files=6, urls=10_000, seed=13)
            spares = ["cold", "warm"] if args.spare == "both" else [args.spare]
            n = 0
            for i in range(args.recovery_runs):
                for spare in spares:
                    n += 1
                    label = f"recovery {i + 1}/{args.recovery_runs} ({spare} spare)"
                    c = Cluster(os.path.join(work, f"cluster-recovery-{n}"), taskmanagers=3, slots=2)
                    clusters.append(c)
                    rec: dict | None = None
                    out = os.path.join(work, f"out-recovery-{n}")
                    try:
                        c.start()
                        used = None
                        if spare == "warm":
                            used = warm_all_taskmanagers(c, warm_data, out + "-warmup", args.job_timeout)
                            if used != "3/3":
                                notes.append(f"{label}: the warm-up job ran on {used} TaskManagers only")
                        rec = recovery_run(c, data, out, args.job_timeout)
                        rec["spare"] = spare
                    except (BenchError, SluiceError) as exc:
                        notes.append(f"{label} failed: {exc}")
                        log(f"{label} failed: {exc}")
                        failed = True
                    finally:
                        leftovers = c.stop()
                        if leftovers:
                            notes.append(f"{label}: `cluster stop` left processes behind (killed): {leftovers}")
                    if rec:
                        recovery.append(rec)
                        # canceled once recovery is measured: no final counts to expect, rules (a) and (b) only
                        rec["output_check"] = check_sluice_output(out, None)
                        if not rec["output_check"].ok:
                            failed = True
                            notes.append(f"{label}: OUTPUT CHECK FAILED: {rec['output_check'].describe()}")
                        log(
                            f"{label}: first checkpoint {fmt(rec['first_checkpoint'], '.1f')}s after submission; "
                            f"after the kill: detected {fmt(rec['detected'])}s, RUNNING again {fmt(rec['running'])}s, "
                            f"checkpoint {fmt(rec['checkpoint_after'])}s, first file written after the kill "
                            f"{fmt(rec['first_written_file'])}s ({rec['first_written_file_name']}), any new file "
                            f"{fmt(rec['first_file'])}s ({rec['first_file_name']}); states {rec['states']}; output "
                            f"{rec['output_check'].describe()}"
                        )
                        if rec["end_state"]:
                            notes.append(
                                f"{label}: job {rec['job_id']} ended {rec['end_state']} before recovery was "
                                "measured (make --recovery-events larger)"
                            )
                    shutil.rmtree(out, ignore_errors=True)
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping the clusters")
        raise
    except BaseException as exc:
        failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        raise
    finally:
        for c in clusters:
            try:
                c.stop()
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping {c.dir}: {exc}")
        if tput or recovery:
            section = report(args, facts, command, tput, warmup, recovery, notes)
            publish(section, args.out, log)
        finish_workdir(
            work, temp and (interrupted or not failed) and not args.keep_workdir, log, "cluster logs under */log/"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
