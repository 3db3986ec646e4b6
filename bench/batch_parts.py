"""The three parts of bench/batch_bench.py, each a function of the invocation (batch_runs.Bench) that
makes its runs in the order of batch_runs' order functions:

- `page_views`: Sluice BATCH against plain Spark batch (bench/batch_peer.py), each tuned first;
- `failover`: region against full failover after kill -9 of a TaskManager hosting one subtask;
- `speculation`: speculative execution with one straggler, on, off and without a straggler.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from batch_data import cached_page_views, copy_check, input_rows, peer_counts, sluice_counts
from batch_peer import BatchPeer
from batch_runs import (
    BATCH_COUNTS,
    FAILOVER_JOB,
    FAST_POLL,
    PAGE_VIEWS_BATCH,
    Bench,
    batch_job,
    failover_order,
    metered,
    page_views_order,
    parse_config,
    peer_tuning_order,
    speculation_order,
    submit,
)
from bench_common import fmt
from paired_runs import MEASURED, OTHERS, RunError, log
from run_matrix import by
from stats import kept, median_ci


# ================================================================================================
# 1. page views
# ================================================================================================
class PageViews:
    """The page-view part: the peer's child and Sluice's cluster (one at a time: a configuration's
    cluster is stopped before the next one starts), their runs on the same cached input."""

    def __init__(self, b: Bench):
        self.b, self.a = b, b.args
        self.data, self.expected = cached_page_views(self.a.data_dir, self.a.events, self.a.files)
        self.peer = BatchPeer(b.work, 2, self.a.job_timeout)
        self.cluster: Any = None
        self.current = ""  # the configuration of the running cluster

    def others(self, system: str) -> Callable[[], list[int]]:
        """The other system's processes (the load rule counts them as neither foreign nor measured)."""
        if system == "Sluice":
            return self.peer.roots
        return lambda: sorted(self.cluster.pids) if self.cluster is not None else []

    def sluice_run(self, phase: str) -> dict:
        a, b = self.a, self.b
        tms, slots, _extra, label = parse_config(self.current)
        r = b.new_run("page-views", "Sluice", phase, config=label, events=a.events)
        out = b.out_dir(r)

        def body() -> dict:
            job_args = ("--input", self.data, "--output", out)
            x = batch_job(self.cluster, PAGE_VIEWS_BATCH, tms * slots, job_args, a.job_timeout)
            x.pop("status")
            return x | sluice_counts(out, self.expected, tms * slots)

        systems = {MEASURED: lambda: sorted(self.cluster.pids), OTHERS: self.others("Sluice")}
        metered(r, systems, a.events, a.max_foreign_cores, body)
        return b.record(
            r,
            f"{label}: {fmt(r.get('time'))} s (JobManager {fmt(r.get('jm_time'))} s, "
            f"CPU {fmt(r.get('cpu_per_m'))} s/M)",
        )

    def peer_run(self, phase: str, shuffle: int) -> dict:
        a, b = self.a, self.b
        r = b.new_run("page-views", "peer", phase, config=f"local[2], shuffle {shuffle}", events=a.events)
        out = b.out_dir(r)
        r["shuffle"] = shuffle

        def body() -> dict:
            return self.peer.run_query(self.data, out, shuffle) | peer_counts(out, self.expected)

        systems = {MEASURED: self.peer.roots, OTHERS: self.others("peer")}
        metered(r, systems, a.events, a.max_foreign_cores, body)
        return b.record(
            r,
            f"shuffle {shuffle}: {fmt(r.get('time'))} s (go -> done {fmt(r.get('parent_time'))} s, "
            f"CPU {fmt(r.get('cpu_per_m'))} s/M)",
        )

    def use(self, config: str) -> None:
        """Sluice's cluster in `config` (the running one stopped), and its warm-up run."""
        b = self.b
        if self.cluster is not None:
            b.stop_cluster(self.cluster)
        tms, slots, extra, _ = parse_config(config)
        # a new directory per start: the client caches TLS files by path (sluice/security/tls.py), and a
        # cluster started again in the same directory has a new CA
        name = f"cluster-pv-{config.replace('/', '-')}-{sum(1 for r in b.runs if r['phase'] == 'warm-up')}"
        self.cluster = b.start_cluster(name, tms, slots, extra)
        self.current = config
        self.sluice_run("warm-up")

    def tune_peer(self, shuffles: Sequence[int]) -> int:
        """The peer's warm-up, then (several candidates) --tune-runs rounds of them: the fastest."""
        self.peer_run("warm-up", shuffles[0])
        tuned = []
        if len(shuffles) > 1:
            tuned = [self.peer_run("tuning", s) for s in peer_tuning_order(shuffles, self.a.tune_runs)]
        return fastest(tuned, "shuffle") or shuffles[0]

    def tune_sluice(self, configs: Sequence[str]) -> str:
        """Each configuration's cluster, warm-up and (several candidates) --tune-runs runs, one cluster
        after the other (a start each); the fastest, whose cluster is left running."""
        tried: dict[str, list[dict]] = {}
        for config in configs:
            self.use(config)
            if len(configs) > 1:
                tried[config] = [self.sluice_run("tuning") for _ in range(self.a.tune_runs)]
        best = configs[0]
        if len(configs) > 1:
            medians = {c: median_ci(r["time"] for r in kept(rs)).median for c, rs in tried.items()}
            ranked = [c for c in configs if medians[c] is not None]
            best = min(ranked, key=lambda c: medians[c] or 0.0) if ranked else configs[0]
            log(f"Sluice's fastest configuration: {parse_config(best)[3]} (tuning medians {medians})")
            if best != self.current:
                self.use(best)
        return best

    def run(self) -> None:
        a, b = self.a, self.b
        b.peer = self.peer
        self.peer.spawn()  # its JVM starts while the cluster does
        configs = [c for c in a.sluice_configs.split(",") if c.strip()]
        shuffles = [int(x) for x in a.peer_shuffle.split(",") if x.strip()]
        self.current = configs[0]
        try:
            self.peer.start()
            shuffle = b.chosen["shuffle"] = self.tune_peer(shuffles)
            b.chosen["sluice"] = parse_config(self.tune_sluice(configs))[3]
            for system in page_views_order(a.runs):
                self.sluice_run("measured") if system == "Sluice" else self.peer_run("measured", shuffle)
        finally:
            if self.cluster is not None:
                b.stop_cluster(self.cluster)
            b.peer = None
            self.peer.stop()


def fastest(rs: list[dict], key: str) -> Any:
    """The value of `key` whose kept runs have the smallest median time (None: no kept run)."""
    times = by(kept(rs), lambda r: r[key])
    return min(times, key=lambda k: median_ci(r["time"] for r in times[k]).median or 0.0) if times else None


def page_views(b: Bench) -> None:
    PageViews(b).run()


# ================================================================================================
# 2. failover
# ================================================================================================
def failover(b: Bench) -> None:
    from generate_page_views import generate
    from recovery_runs import warm

    a = b.args
    data = os.path.join(b.work, "failover-in")
    generate(data, events=a.failover_events, files=a.failover_files, urls=1000, seed=21)
    rows = input_rows(data)
    cluster = b.start_cluster("cluster-failover", 4, 2)
    try:
        for strategy, subtask in failover_order(a.failover_runs):
            cluster.wait_full(a.job_timeout)
            warm(cluster, data, os.path.join(b.work, f"warm-{b.n + 1:04d}"), a.job_timeout)
            failover_run(b, cluster, strategy, data, rows, victim_subtask=subtask)
    finally:
        b.stop_cluster(cluster)


def failover_run(b: Bench, cluster, strategy: str, data: str, rows: collections.Counter, victim_subtask: int) -> dict:
    a = b.args
    r = b.new_run("failover", strategy, "measured", events=a.failover_events)
    out = b.out_dir(r)

    def body() -> dict:
        t_launch = time.monotonic()
        job_args = ("--input", data, "--output", out, "--strategy", strategy, "--pause", str(a.failover_pause))
        job_id = submit(cluster, FAILOVER_JOB, 4, job_args)
        s = kill_point(cluster, job_id, t_launch, a.kill_after, a.job_timeout)
        target = victim(s["tasks"], victim_subtask)
        cluster.reload()
        pid = cluster.taskmanager_pid(target["taskmanager"])
        t_kill = time.monotonic()
        os.killpg(pid, signal.SIGKILL)  # the TaskManager and its Spark JVM
        x: dict = {
            "job_id": job_id,
            "victim": target["subtask"],
            "kill_at": t_kill - t_launch,
            "tasks": len(s["tasks"]),
        }
        log(f"  killed TaskManager {target['taskmanager']} (subtask {target['subtask']}) {x['kill_at']:.1f}s in")
        x |= recovery(cluster, job_id, s, t_kill, a.job_timeout)
        from page_views_runs import follow

        end = follow(cluster, job_id, a.job_timeout, time.time())
        if end["state"] != "FINISHED":
            raise RunError(f"job {job_id} ended {end['state']}: {end['status']['failure']}")
        x.update(total=time.monotonic() - t_launch, restarts=end["status"]["restarts"] - s["restarts"])
        return x | copy_check(out, rows)

    metered(r, {MEASURED: cluster.all_pids}, a.failover_events, a.max_foreign_cores, body)
    return b.record(
        r,
        f"kill at {fmt(r.get('kill_at'), '.1f')}s; detected {fmt(r.get('detect'))}s, recovered "
        f"{fmt(r.get('recovery'))}s after; {r.get('restarted')}/{r.get('tasks')} tasks restarted",
    )


def kill_point(cluster, job_id: str, t_launch: float, kill_after: float, timeout: float) -> dict:
    """The job's status once every task runs and a checkpoint completed `kill_after` seconds ago."""
    t_ckpt = None
    deadline = t_launch + timeout
    while True:
        s = cluster.status(job_id)
        if s["state"] in ("FINISHED", "FAILED", "CANCELED"):
            raise RunError(f"job {job_id} ended {s['state']} before the kill (make --failover-events larger)")
        ready = s["state"] == "RUNNING" and s["tasks"] and all(t["state"] == "RUNNING" for t in s["tasks"])
        if ready and (s.get("last_completed_checkpoint") or 0) >= 1:
            t_ckpt = t_ckpt or time.monotonic()
            if time.monotonic() - t_ckpt >= kill_after:
                return s
        if time.monotonic() > deadline:
            raise RunError(f"job {job_id}: no completed checkpoint with every task running")
        time.sleep(FAST_POLL)


def victim(tasks: Sequence[dict], subtask: int) -> dict:
    """The task of `subtask` if its TaskManager hosts it alone, else the first task hosted alone."""
    hosts = collections.Counter(t["taskmanager"] for t in tasks)
    target = next(t for t in tasks if t["subtask"] == subtask)
    if hosts[target["taskmanager"]] != 1:
        found = next((t for t in tasks if hosts[t["taskmanager"]] == 1), None)
        if found is None:
            raise RunError(f"no TaskManager hosts exactly one subtask: {dict(hosts)}")
        target = found
    return target


def recovery(cluster, job_id: str, before_kill: dict, t_kill: float, timeout: float) -> dict:
    """Poll the job every FAST_POLL s from the kill until every task runs (or finished) again with the
    restarted ones in a new execution: detection, recovery, the tasks restarted."""
    before = {t["subtask"]: (t["attempt"], t["execution_attempt"]) for t in before_kill["tasks"]}
    restarts_before = before_kill["restarts"]
    t_detect = None
    deadline = t_kill + timeout
    while True:
        s = cluster.status(job_id)
        now = time.monotonic()
        changed = [t for t in s["tasks"] if (t["attempt"], t["execution_attempt"]) != before.get(t["subtask"])]
        if t_detect is None and (
            s["restarts"] > restarts_before or changed or any(t["state"] != "RUNNING" for t in s["tasks"])
        ):
            t_detect = now
        if (
            changed
            and s["state"] in ("RUNNING", "FINISHED")
            and all(t["state"] in ("RUNNING", "FINISHED") for t in s["tasks"])
        ):
            break
        if s["state"] in ("FAILED", "CANCELED"):
            raise RunError(f"job {job_id} ended {s['state']}: {s['failure'] or s['message']}")
        if now > deadline:
            raise RunError(f"job {job_id}: tasks not RUNNING again {timeout:.0f}s after the kill")
        time.sleep(FAST_POLL)
    return {
        "recovery": now - t_kill,
        "detect": (t_detect or now) - t_kill,
        "redeploy": now - (t_detect or now),
        "restarted": len(changed),
        "job_restarted": any(t["attempt"] > before.get(t["subtask"], (0, 0))[0] for t in s["tasks"]),
    }


# ================================================================================================
# 3. speculation
# ================================================================================================
def speculation(b: Bench) -> None:
    from generate_page_views import generate

    a = b.args
    data = os.path.join(b.work, "speculation-in")
    expected = generate(data, events=a.speculation_events, files=a.speculation_files, urls=500, seed=13)
    cluster = b.start_cluster("cluster-speculation", 2, 2)
    try:
        speculation_run(b, cluster, "none", "warm-up", data, expected)
        for arm in speculation_order(a.speculation_runs):
            speculation_run(b, cluster, arm, "measured", data, expected)
    finally:
        b.stop_cluster(cluster)


def speculation_run(b: Bench, cluster, arm: str, phase: str, data: str, expected: dict) -> dict:
    a = b.args
    cluster.wait_full(a.job_timeout)  # a losing attempt asleep holds its slot until it wakes
    r = b.new_run("speculation", arm, phase, events=a.speculation_events)
    out = b.out_dir(r)
    marker = os.path.join(b.work, f"straggler-{r['n']:04d}")
    job_args = [data, out, str(a.speculation_delay)]
    if arm != "none":
        job_args += [marker, str(a.straggle)]
    if arm == "on":
        job_args.append("--speculative")

    def body() -> dict:
        x = batch_job(cluster, BATCH_COUNTS, 4, job_args, a.job_timeout)
        tasks = x.pop("status")["tasks"]
        backups = [t for t in tasks if t["speculative"]]
        x.update(
            backups=len(backups),
            backup_won=any(t["state"] == "FINISHED" for t in backups),
            straggled=os.path.exists(marker),
        )
        return x | sluice_counts(out, expected, 4)

    metered(r, {MEASURED: cluster.all_pids}, a.speculation_events, a.max_foreign_cores, body)
    return b.record(r, f"{fmt(r.get('time'))} s (JobManager {fmt(r.get('jm_time'))} s); backups {r.get('backups')}")


PARTS: dict[str, Callable[[Bench], None]] = {
    "page-views": page_views,
    "failover": failover,
    "speculation": speculation,
}
