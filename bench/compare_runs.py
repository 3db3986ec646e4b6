"""The runs of bench/compare.py: Sluice's phase on its local cluster (the throughput jobs in
bench/compare_plan.py's order, the fixed-rate runs, the recovery runs on fresh clusters), the peer's
phase (bench/structured_streaming_bench.py's throughput and recovery runs, bench/paced_latency.py's
fixed-rate run) and the JobManager failover runs (bench/failover_bench.py). Each returns its runs as
dicts for bench/compare_figures.py; a failed run is a note, the others stand.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from types import SimpleNamespace
from typing import Any

import failover_bench
import paced_latency
import page_views_recovery
import page_views_runs
import structured_streaming_child
import structured_streaming_runs
from bench_common import fmt
from compare_figures import weighted_pct
from compare_joblog import SluiceJobLog, taskmanager_logs
from compare_plan import INTERVAL, PACED_RATE, SHORT_INTERVAL, SluiceJob, sluice_jobs
from output_check import check_sluice_output
from stats import fmt_load

from sluice.client import SluiceError

log = page_views_runs.log


# -- Sluice phase ----------------------------------------------------------------------------------------
def sluice_phase(cfg: Any, work: str, inputs: dict, clusters: list, notes: list[str]) -> dict:
    """Sluice's runs: one cluster for the throughput and fixed-rate runs, a fresh one per recovery run
    after the first (a recovery run's kill takes a TaskManager)."""
    res: dict = {"runs": [], "warmup": [], "recovery": [], "short": [], "overhead": [], "paced": {}, "startup": None}
    c = page_views_runs.Cluster(os.path.join(work, "sluice-cluster"), taskmanagers=2, slots=2)
    clusters.append(c)
    t0 = time.monotonic()
    c.start()
    res["startup"] = time.monotonic() - t0
    for job in sluice_jobs(cfg.warmups, cfg.runs, cfg.short_runs, overhead="overhead" in inputs):
        res[job.group].append(sluice_run(c, cfg, work, inputs, job, notes))
    if "paced" in inputs:  # latency at a fixed input rate, on the warm cluster
        res["paced"] = {
            interval: sluice_paced(c, cfg, work, inputs["paced"], interval, notes)
            for interval in (INTERVAL, SHORT_INTERVAL)
        }
    for n in range(1, cfg.recovery_runs + 1):
        if n > 1:  # the kill took a TaskManager from the last cluster: a fresh one, warmed up by one job
            c.stop()
            c = page_views_runs.Cluster(os.path.join(work, f"sluice-cluster-{n}"), taskmanagers=2, slots=2)
            clusters.append(c)
            c.start()
            page_views_recovery.warm_all_taskmanagers(
                c, inputs["warm-up"][0], os.path.join(work, f"sluice-out-warm-{n}"), cfg.timeout
            )
        r = sluice_recovery(c, cfg, work, inputs["recovery"], n, notes)
        if r is not None:
            res["recovery"].append(r)
    leftovers = c.stop()
    if leftovers:
        notes.append(f"`sluice cluster stop` left processes behind (killed): {leftovers}")
    return res


def sluice_run(c: page_views_runs.Cluster, cfg: Any, work: str, inputs: dict, job: SluiceJob, notes: list[str]) -> dict:
    """One throughput job, its output checked, its batches' latencies read from the logs."""
    data, expected = inputs[job.input]
    label, interval = job.label, job.interval
    out = os.path.join(work, f"sluice-out-{label}")
    r = page_views_runs.throughput_run(c, data, out, interval, sum(expected.values()), expected, cfg.timeout)
    r["label"] = label
    r["to_running"] = next((t for t, s in r["transitions"] if s == "RUNNING"), None)
    jl = SluiceJobLog(taskmanager_logs(c.dir), r["job_id"], data)
    r["spans"] = jl.spans()
    if interval:
        r["latency"], missing = jl.latencies()
        if missing:
            notes.append(f"Sluice {label}: {missing:,} events without a commit line in the logs")
    if r["restarts"]:
        notes.append(f"Sluice {label} (job {r['job_id']}) restarted {r['restarts']} times")
    log(
        f"Sluice {label} checkpoints {r['mode']:>3}: {r['throughput']:,.0f} events/s "
        f"({r['submit_to_end']:.2f}s), submit→RUNNING {fmt(r['to_running'])}s, load {fmt_load(r)}, "
        f"output {r['output_check'].describe()}"
    )
    return r


def sluice_recovery(
    c: page_views_runs.Cluster, cfg: Any, work: str, recovery: tuple, n: int, notes: list[str]
) -> dict | None:
    """Recovery run `n`: a TaskManager killed after the first committed output, the job run to the end
    and its output checked (None: the run failed, a note says how)."""
    rec_data, rec_expected = recovery
    out = os.path.join(work, f"sluice-out-recovery-{n}")
    label = f"recovery {n}"
    try:
        r = page_views_recovery.recovery_run(c, rec_data, out, cfg.timeout, interval=INTERVAL, run_to_end=True)
    except (page_views_runs.BenchError, SluiceError) as exc:
        notes.append(f"Sluice {label} failed: {exc}")
        log(f"Sluice {label} failed: {exc}")
        return None
    r["label"] = label
    r["output_check"] = check_sluice_output(out, rec_expected)
    r["counts_ok"] = r["output_check"].ok
    r["spans"] = SluiceJobLog(taskmanager_logs(c.dir), r["job_id"], rec_data).spans()
    if r["counts_ok"]:  # an output that broke the check stays, for a look at it
        shutil.rmtree(out, ignore_errors=True)
    if r["final_state"] != "FINISHED":
        notes.append(f"Sluice {label} (job {r['job_id']}): ended {r['final_state']}")
    log(
        f"Sluice {label}: after the kill: RUNNING again {fmt(r['running'])}s, first output written "
        f"{fmt(r['first_written_file'])}s; ended {r['final_state']}, load {fmt_load(r)}, output "
        f"{r['output_check'].describe()}"
    )
    return r


def staged_copy(paced: tuple, work: str, label: str) -> str:
    """A fresh copy of the paced input for one run (the feeder moves the files away)."""
    pristine = paced[0]
    staged = os.path.join(work, f"paced-staged-{label}")
    shutil.copytree(pristine, staged)
    return staged


def describe_paced(who: str, r: dict) -> str:
    lat = r["latencies"]
    return (
        f"{who} at a fixed rate: {r['counted']} of {r['files']} files counted, latency p50 "
        f"{fmt(weighted_pct([(x, 1) for x in lat], 50))}s p99 {fmt(weighted_pct([(x, 1) for x in lat], 99))}s, "
        f"output {r['output_check'].describe()}"
    )


def sluice_paced(
    c: page_views_runs.Cluster, cfg: Any, work: str, paced: tuple, interval: int, notes: list[str]
) -> dict | None:
    _pristine, names, expected = paced
    label = f"paced-{interval}"
    try:
        r = paced_latency.run_sluice(
            c,
            staged_copy(paced, work, label),
            names,
            expected,
            os.path.join(work, label),
            PACED_RATE,
            interval,
            cfg.timeout,
        )
    except (page_views_runs.BenchError, SluiceError) as exc:
        notes.append(f"Sluice fixed-rate run ({interval} ms checkpoints) failed: {exc}")
        return None
    if r["missing"]:
        notes.append(
            f"Sluice fixed-rate run ({interval} ms checkpoints, job {r['job_id']}): {r['missing']} files "
            "never seen counted"
        )
    log(describe_paced(f"Sluice, checkpoints {interval} ms,", r))
    return r


# -- Structured Streaming phase --------------------------------------------------------------------------
def peer_phase(cfg: Any, work: str, inputs: dict, notes: list[str]) -> dict:
    """The peer's runs in one warm child: warm-up queries, the throughput runs, the recovery runs and,
    with a paced input, the fixed-rate run (warmed up on the throughput input)."""
    data, expected = inputs["throughput"]
    rec_data, rec_expected = inputs["recovery"]
    ns = SimpleNamespace(
        runs=cfg.runs,
        warmups=cfg.warmups,
        max_files_per_trigger=cfg.mfpt,
        trigger_ms=None,
        session="shared",
        timeout=cfg.timeout,
        recovery_max_files_per_trigger=cfg.recovery_mfpt,
    )
    runs, run_notes = structured_streaming_runs.throughput(ns, work, data, expected, cfg.events)
    notes += [f"Structured Streaming {n}" for n in run_notes]
    recovery = []
    for n in range(1, cfg.recovery_runs + 1):
        try:
            r, rec_notes = structured_streaming_runs.recovery_run(
                ns, work, rec_data, rec_expected, cfg.recovery_events, n
            )
        except structured_streaming_child.BenchError as exc:
            notes.append(f"Structured Streaming recovery {n} failed: {exc}")
            log(f"Structured Streaming recovery {n} failed: {exc}")
            continue
        notes += [f"Structured Streaming {m}" for m in rec_notes if "ran < 15 s" not in m]
        recovery.append(r)
    return {
        "warmup": runs[0],
        "warmups": runs[: cfg.warmups],
        "runs": runs[cfg.warmups :],
        "recovery": recovery,
        "paced": peer_paced(cfg, work, inputs["paced"], data, notes) if "paced" in inputs else None,
    }


def peer_paced(cfg: Any, work: str, paced: tuple, warm_data: str, notes: list[str]) -> dict | None:
    """The peer's fixed-rate run: a fresh child, one warm-up query over `warm_data`, then the files."""
    try:
        os.makedirs(os.path.join(work, "paced"))
        r = paced_latency.run_peer(
            staged_copy(paced, work, "peer"),
            paced[1],
            paced[2],
            os.path.join(work, "paced"),
            PACED_RATE,
            warm_data,
            cfg.timeout,
        )
    except structured_streaming_child.BenchError as exc:
        notes.append(f"Structured Streaming fixed-rate run failed: {exc}")
        return None
    log(describe_paced("Structured Streaming", r))
    if r["missing"]:
        notes.append(f"Structured Streaming fixed-rate run: {r['missing']} files never seen counted")
    return r


# -- JobManager failover ---------------------------------------------------------------------------------
def failover_runs(cfg: Any, work: str, notes: list[str]) -> list[dict]:
    """bench/failover_bench.py's measurement, `cfg.failover_runs` times (a failed run is a note)."""
    failover = []
    for i in range(cfg.failover_runs):
        d = tempfile.mkdtemp(prefix="failover-", dir=work)
        try:
            r = failover_bench.one_run(d, cfg.session_timeout)
            failover.append(r)
            log(f"JobManager failover {i + 1}: {failover_bench.describe(r)}")
        except Exception as exc:  # noqa: BLE001 — reported, the other figures stand
            notes.append(f"JobManager failover run {i + 1} failed: {type(exc).__name__}: {exc}")
    return failover
