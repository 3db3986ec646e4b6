"""One run of bench/throughput_suite.py (and of bench/key_sweep.py), and the two systems it runs on.

- `SluiceSide`: one local cluster (TaskManagers x slots, page_views_bench.Cluster), page_views
  submitted with the CLI at the configuration's parallelism;
- `PeerSide`: one SparkSession (local[n]) in structured_streaming_bench's child, each run a query
  handed to it through a go file;
- `Suite`: the clusters and SparkSessions of an invocation (one per (TaskManagers, slots) and one
  per master, each warmed up by one uncounted run when it starts) and `Suite.run`: one run watched
  and metered from the outside (bench/paired_runs.py's timed_launch), its window (bench/window.py),
  its CPU and the load rule, its output checked (bench/output_check.py). Its runs and notes are
  what bench/throughput_report.py reports.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from typing import Any

import spark_peer
from bench_common import fmt, write_atomically
from output_check import OutputCheck, check_peer_output, check_sluice_output
from paired_runs import MEASURED, OTHERS, RunError, close_run, log, timed_launch, usage_figures
from throughput_plan import WARM_UP, Config, PeerConfig, SluiceConfig
from throughput_report import process_role
from throughput_workload import Dataset
from window import Window, measure


def relabel(peaks: dict[str, int]) -> dict[str, int]:
    """procstat's `"<label> <pid>"` keys named by process_role while the processes are alive (its own
    labels take a JobManager's or TaskManager's `--zookeeper` flag for ZooKeeper)."""
    import psutil

    out = {}
    for key, rss in peaks.items():
        label, _, pid = key.rpartition(" ")
        try:
            role = process_role(psutil.Process(int(pid)).cmdline())
        except (ValueError, psutil.Error):
            role = None
        if rss > 0 or role:  # a helper gone before its first sample (jspawnhelper) has nothing to show
            out[f"{role or label} {pid}"] = rss
    return out


# ================================================================================================
# the two systems
# ================================================================================================
class SluiceSide:
    """One local cluster (TaskManagers x slots) through page_views_bench.Cluster."""

    started = itertools.count(1)

    def __init__(self, work: str, taskmanagers: int, slots: int, timeout: float):
        from page_views_runs import Cluster

        self.key = (taskmanagers, slots)
        # a new directory per start: the client caches TLS files by path (sluice/security/tls.py), and a
        # cluster started again in the same directory has a new CA
        name = f"cluster-{taskmanagers}x{slots}-{next(SluiceSide.started)}"
        self.cluster = Cluster(os.path.join(work, name), taskmanagers, slots)
        self.timeout = timeout

    def start(self) -> SluiceSide:
        self.cluster.start()
        return self

    def roots(self) -> list[int]:
        return sorted(self.cluster.pids)

    def launch(self, cfg: SluiceConfig, data: Dataset, out: str) -> Callable[[], dict]:
        """Submit page_views (the CLI, detached); returns the function that waits for its end."""
        job_id = self.cluster.submit(
            "--input", data.path, "--output", out, parallelism=cfg.parallelism, options=dict(cfg.options) or None
        )
        submitted = time.monotonic()

        def wait() -> dict:
            from page_views_runs import follow

            r = follow(self.cluster, job_id, self.timeout, time.time())
            if r["state"] != "FINISHED":
                raise RunError(f"job {job_id} ended {r['state']}: {r['status']['failure'] or r['status']['message']}")
            return {"job_id": job_id, "submitted": submitted, "restarts": r["status"]["restarts"]}

        return wait

    def check(self, out: str, data: Dataset) -> OutputCheck:
        return check_sluice_output(out, data.expected)

    def stop(self) -> None:
        self.cluster.stop()


class PeerSide(spark_peer.PeerSide):
    """One SparkSession (local[n]) in structured_streaming_bench's child; each run is a query handed to
    it through a go file (its JSON: input, output, checkpoint, maxFilesPerTrigger, shuffle partitions),
    declared in the child's spec up front (MAX_QUERIES of them)."""

    MAX_QUERIES = 1000

    def __init__(self, work: str, master: int, timeout: float):
        super().__init__(work, master, timeout, name=f"peer-local{master}")
        self.warm = False  # its warm-up run done

    def spec(self) -> dict:
        queries = [
            {"go_file": self.go_file(i), "input": "", "out": "", "checkpoint": ""} for i in range(self.MAX_QUERIES)
        ]
        return {"master": f"local[{self.master}]", "queries": queries}

    def launch(self, cfg: PeerConfig, data: Dataset, out: str) -> Callable[[], dict]:
        i = self.next
        if i >= self.MAX_QUERIES:
            raise RunError("too many queries for one SparkSession")
        self.next += 1
        q = {
            "input": data.path,
            "out": out,
            "checkpoint": out + "-ckpt",
            "max_files_per_trigger": cfg.mfpt,
            "shuffle_partitions": cfg.shuffle,
            "available_now": True,
        }
        write_atomically(self.go_file(i), json.dumps(q))

        def wait() -> dict:
            assert self.child is not None
            done = self.child.wait_for("done", self.timeout, query=i)
            batches = [p for p in done["progress"] if p.get("numInputRows", 0) > 0]
            rows = sum(p.get("numInputRows", 0) for p in done["progress"])
            shutil.rmtree(out + "-ckpt", ignore_errors=True)
            return {"query": i, "batches": len(batches), "rows": rows, "progress": done["progress"]}

        return wait

    def check(self, out: str, data: Dataset) -> OutputCheck:
        return check_peer_output(out, data.expected)


# ================================================================================================
# a run's figures
# ================================================================================================
def add_figures(
    r: dict, w: Window, check: OutputCheck | None, usage: Any, events: int, max_foreign_cores: float | None
) -> None:
    """A run's output check, window, CPU and load rule into its dict `r`; `ok`: it counts."""
    r["check"] = check.describe() if check is not None else None
    r["check_ok"] = check is not None and check.ok
    r.update(
        window=w.seconds,
        startup=w.startup,
        end_part=w.end_part,
        commits=w.commits,
        window_error=w.error,
        rate=w.rate(events),
        tail=(r["end_seen"] - w.end) if w.end is not None and "end_seen" in r else None,
    )
    if usage is not None:
        r["cpu_s"] = usage.cpu_s.get(MEASURED, 0.0)
        r.update(usage_figures(usage, events, max_foreign_cores))
        r["rss"] = relabel(dict(usage.peak_rss.get(MEASURED, {})))
        r["meter_s"] = usage.wall_s
        r["steal_s"] = usage.steal_s
    r["ok"] = "error" not in r and r["check_ok"] and w.ok


def run_line(r: dict) -> str:
    """A run's log line."""
    return (
        f"{r['phase']} run {r['n']}: {r['system']} {r['config'].label}, {r['events']:,} events: window "
        f"{fmt(r['window'])} s = {fmt(r['rate'], ',.0f')} events/s, startup {fmt(r['startup'])} s, CPU "
        f"{fmt(r.get('cpu_per_m'))} s/M events, foreign {fmt(r.get('foreign_cores'))} cores"
    )


def run_note(r: dict, check: OutputCheck | None, w: Window) -> str | None:
    """What the notes say of a run that broke its output check, failed or has no window."""
    what = f"run {r['n']} ({r['system']}, {r['config'].label}, {r['phase']})"
    if "error" not in r and check is not None and not check.ok:
        return f"{what}: OUTPUT CHECK FAILED: {check.describe()}"
    if "error" in r:
        return f"{what} failed: {r['error']}"
    if w.error:
        return f"{what}: no window: {w.error}"
    return None


# ================================================================================================
# the suite's clusters, SparkSessions and runs
# ================================================================================================
class Suite:
    def __init__(self, args: Any, work: str):
        self.args, self.work = args, work  # args: job_timeout, max_foreign_cores
        self.sluice: dict[tuple[int, int], SluiceSide] = {}
        self.peer: dict[int, PeerSide] = {}
        self.runs: list[dict] = []
        self.notes: list[str] = []
        self.n = 0
        self.failed = False

    # -- sides ------------------------------------------------------------------------------------
    def sluice_side(self, cfg: SluiceConfig, data: Dataset) -> SluiceSide:
        side = self.sluice.get(cfg.cluster_key)
        if side is None:
            side = SluiceSide(self.work, cfg.taskmanagers, cfg.slots, self.args.job_timeout)
            self.sluice[cfg.cluster_key] = side
            side.start()
            self.run(cfg, data, WARM_UP)
        return side

    def peer_side(self, cfg: PeerConfig, data: Dataset) -> PeerSide:
        side = self.peer.get(cfg.master)
        if side is None or side.child is None or not side.warm:
            if side is None:
                side = PeerSide(self.work, cfg.master, self.args.job_timeout)
                self.peer[cfg.master] = side
            side.start()
            side.warm = True
            self.run(cfg, data, WARM_UP)
        return side

    def prestart(self, configs: Iterable[Config], data: Dataset) -> None:
        """Start the SparkSessions and clusters these configurations need at once (a session starts
        while a cluster does), then warm each up."""
        for c in configs:
            if isinstance(c, PeerConfig) and c.master not in self.peer:
                self.peer[c.master] = PeerSide(self.work, c.master, self.args.job_timeout).spawn()
        for c in configs:
            if isinstance(c, SluiceConfig):
                self.sluice_side(c, data)
        for c in configs:
            if isinstance(c, PeerConfig):
                self.peer_side(c, data)

    def stop_sluice(self, key: tuple[int, int]) -> None:
        side = self.sluice.pop(key, None)
        if side is not None:
            side.stop()

    def stop_all(self) -> None:
        for key in list(self.sluice):
            try:
                self.stop_sluice(key)
            except BaseException as exc:  # noqa: BLE001 — keep stopping the others
                log(f"warning: stopping cluster {key}: {exc}")
        for m, side in list(self.peer.items()):
            try:
                side.stop()
            except BaseException as exc:  # noqa: BLE001 — teardown goes on to the other sessions
                log(f"warning: stopping the peer local[{m}]: {exc}")
        self.peer.clear()
        from structured_streaming_child import Child

        Child.kill_all()

    def meter_systems(self, measured: SluiceSide | PeerSide) -> dict[str, Callable[[], Iterable[int]]]:
        """The measured cluster or SparkSession, and every other one (idle meanwhile, either system)."""

        def others() -> list[int]:
            sides: list[SluiceSide | PeerSide] = [*self.sluice.values(), *self.peer.values()]
            return [p for s in sides if s is not measured for p in s.roots()]

        return {MEASURED: measured.roots, OTHERS: others}

    # -- a run ------------------------------------------------------------------------------------
    def side(self, cfg: Config, data: Dataset, phase: str) -> tuple[SluiceSide | PeerSide, Callable[[str], Any]]:
        """The cluster or SparkSession of `cfg` (started and warmed up first, unless this is its
        warm-up), and its launch of `cfg` over `data` into a given output directory."""
        if isinstance(cfg, SluiceConfig):
            ours = self.sluice_side(cfg, data) if phase != WARM_UP else self.sluice[cfg.cluster_key]
            return ours, functools.partial(ours.launch, cfg, data)
        peer = self.peer_side(cfg, data) if phase != WARM_UP else self.peer[cfg.master]
        return peer, functools.partial(peer.launch, cfg, data)

    def run(self, cfg: Config, data: Dataset, phase: str) -> dict:
        """One run of `cfg` over `data`: watched, metered, checked, noted, kept in `runs`."""
        side, launch = self.side(cfg, data, phase)
        self.n += 1
        out = os.path.join(self.work, f"out-{self.n:04d}")
        os.makedirs(out)
        r: dict = {"n": self.n, "phase": phase, "system": cfg.system, "config": cfg, "events": data.events}
        t = timed_launch(r, self.meter_systems(side), [(data.path, out)], lambda: launch(out), 300)
        check = side.check(out, data) if "error" not in r else None
        w = measure(t.launch, t.events, check, t.overflowed)
        add_figures(r, w, check, t.usage, data.events, self.args.max_foreign_cores)
        note = run_note(r, check, w)
        if note is not None:
            self.notes.append(note)
        if "error" not in r and check is not None and not check.ok:
            self.failed = True
        close_run(self.runs, r, out, run_line(r))
        return r
