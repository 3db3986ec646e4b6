"""The contract matrix: every stateful operator kind, on both state backends, through every
change of shape Sluice offers, checked exactly against a computation in plain Python.

One job (tests/integration/jobs/contract_matrix.py) holds every stateful operator kind as a
parallel branch of one file source: a keyed aggregate, tumbling, sliding and session windows, a
window `apply`, a process function with event-time timers, an interval join, a window join and
a broadcast process function. Each branch writes through two un-chained keyed sinks, a FileSink
and a SqliteSink. Each run changes the shape of that one job several times and then checks
every branch: no missing, extra or duplicated row, the aggregate's update stream strictly rising
per url, each SQLite table equal to the final values.

Runs (backend x input): `memory` and `rocksdb` (`state.backend`) x

- **watched** directory: one round of files -> start at p=1 -> a round -> `sluice stop` with a
  savepoint (mid-round: the round was just written) -> resume at p=2 -> a round -> operator-level
  `sluice rescale --operator` of one keyed operator to 1 -> a round -> live `sluice reconfigure
  --operator` of another to 1 -> a round -> kill -9 of a TaskManager running a task (the
  cluster's supervisor starts it again; the job restarts from its latest checkpoint) -> a round
  -> closing files -> check. Which operators are rescaled and reconfigured differs by backend:
  the process function with timers and the broadcast process function on memory, the session
  and tumbling windows on rocksdb;
- **bounded** input (a fixed listing read to its end): every file written first, start at p=2,
  `sluice stop` with a savepoint as soon as a checkpoint completed (the test checks the stop was
  mid-way: the savepoint's aggregate is short of the input) -> resume at p=1 from it ->
  kill -9 of a TaskManager running a task once the resumed job completed a checkpoint -> the job
  ends FINISHED by itself -> check. (Operator-level rescale and live reconfiguration are not in
  the bounded runs: a fixed listing ends on its own, and a change racing with the end of the
  input would make the test's sequence depend on the machine's speed.)

The job runs 30 chains (about 60 tasks at p=2) on one module-scoped cluster of 2 TaskManagers
x 3 slots; about 6 minutes for the four runs on a loaded 2-core machine.

Event time and lateness. Round r's records have timestamps in [BASE + r*SLICE, BASE +
(r+1)*SLICE), shuffled, and the out-of-orderness bound is SLICE: a source subtask's watermark
(its max timestamp - bound - 1) after round r is below every timestamp of round r, so no record
can be late whichever subtask reads what when, idle or not, as long as round r+1 is written only
after round r was read — which the test waits for (the aggregate's SQLite table equals the input
so far) before writing the next. `records_late_dropped` must stay 0.

Which windows must be out (the exclusion rule, from the watermark semantics, never a
tolerance): a window [start, end) fires when the operator's watermark reaches end - 1, a timer
at T when it reaches T. Bounded input ends with the final watermark (2^63 - 1): everything fires.
A watched directory never ends: the test writes closing files, one per source subtask, each one
record at CLOSE = 60 s of event time after the last round, so every source subtask's watermark,
and the minimum of them at every operator, becomes exactly CLOSE - bound - 1 = W; the expected
output is that of the windows, sessions and timer buckets with end - 1 <= W (all but those of
the closing records themselves). The joins emit a pair when its later row arrives: all pairs.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import sqlite3
import time
import zlib

import psutil
import pytest
from harness import (
    JOBS,
    SMALL_READS,
    committed_rows,
    kill_process_tree,
    last_line,
    option_args,
    sluice,
    wait_for,
)
from helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

JOB = os.path.join(JOBS, "contract_matrix.py")
BASE = 1_700_000_000_000
SLICE = 1_000  # ms of event time per round
BOUND = SLICE  # the job's out-of-orderness bound (see the module docstring)
BUCKET, SLIDE_SIZE, SLIDE, GAP, BETWEEN = 1_000, 2_000, 1_000, 250, (0, 500)  # as in the job file
CLOSE_AHEAD = 60_000
MAX_WATERMARK = 2**63 - 1
URLS, USERS = 12, 9
EVENTS_PER_FILE, PAIRS_PER_FILE = 120, 8
TIMEOUT = 300  # s, for one round to be read and committed on a loaded machine

BRANCHES = {  # branch: (key columns, value columns, types of key + value columns)
    "agg": (("url",), ("n", "total")),
    "tumbling": (("url", "window_start"), ("window_end", "n", "total")),
    "sliding": (("url", "window_start"), ("window_end", "n", "top")),
    "session": (("user", "window_start"), ("window_end", "n", "first")),
    "apply": (("user", "window_start"), ("window_end", "urls", "vsum")),
    "timers": (("url", "bucket"), ("n", "total")),
    "interval": (("k",), ("ts", "ts_right")),
    "wjoin": (("k", "window_start"), ("ts", "ts_right")),
    "bcast": (("url", "bucket"), ("n", "scaled")),
}


class Feed:
    """The input, written a round at a time into a directory (atomically: renamed into place),
    and every row written, for the independent computation."""

    def __init__(self, directory, seed: int) -> None:
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)
        self.rng = random.Random(seed)
        self.rows: list[dict] = []
        self.rounds = 0
        self.pairs = 0
        self.closed_at: int | None = None

    @staticmethod
    def name(stem: str, subtask: int, parallelism: int) -> str:
        """A file name that a watching source at `parallelism` gives to `subtask` (crc32 % p)."""
        n = 0
        while zlib.crc32(f"{stem}-{n}.jsonl".encode()) % parallelism != subtask:
            n += 1
        return f"{stem}-{n}.jsonl"

    def _write(self, name: str, rows: list[dict]) -> None:
        hidden = os.path.join(self.dir, f".{name}")
        with open(hidden, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        os.rename(hidden, os.path.join(self.dir, name))
        self.rows += rows

    def add_round(self, parallelism: int) -> None:
        """One file per source subtask of a watching source at `parallelism`: events, join pairs
        (the b side of a pair in the next subtask's file, some out of the interval), rules."""
        start = BASE + self.rounds * SLICE
        rng = self.rng

        def ts() -> int:
            return start + rng.randrange(SLICE)

        files: list[list[dict]] = [[] for _ in range(parallelism)]
        for s in range(parallelism):
            for _ in range(EVENTS_PER_FILE):
                url, user = f"/u{rng.randrange(URLS)}", rng.randrange(USERS)
                files[s].append(
                    dict(kind="e", url=url, user=user, v=rng.randrange(100), k=None, kb=None, factor=None, ts=ts())
                )
            for _ in range(PAIRS_PER_FILE):
                self.pairs += 1
                a = ts()
                b = min(max(a + rng.randrange(-200, 800), start), start + SLICE - 1)
                for kind, t, f in (("a", a, s), ("b", b, (s + 1) % parallelism)):
                    row = dict(kind=kind, url=f"/u{rng.randrange(URLS)}", user=rng.randrange(USERS), v=1)
                    ids = {"k": self.pairs, "kb": None} if kind == "a" else {"k": None, "kb": self.pairs}
                    files[f].append({**row, **ids, "factor": None, "ts": t})
            for _ in range(2):
                url = f"/u{rng.randrange(URLS)}"
                files[s].append(
                    dict(
                        kind="r",
                        url=url,
                        user=rng.randrange(USERS),
                        v=0,
                        k=None,
                        kb=None,
                        factor=2 + rng.randrange(4),
                        ts=ts(),
                    )
                )
        for s, rows in enumerate(files):
            rng.shuffle(rows)
            self._write(self.name(f"r{self.rounds:04d}", s, parallelism), rows)
        self.rounds += 1

    def close(self, parallelism: int) -> None:
        """One record CLOSE_AHEAD after the last round for each source subtask (see the docstring)."""
        self.closed_at = BASE + self.rounds * SLICE + CLOSE_AHEAD
        for s in range(parallelism):
            row = dict(kind="x", url="/end", user=USERS, v=0, k=None, kb=None, factor=None, ts=self.closed_at)
            self._write(self.name("z-close", s, parallelism), [row])


def expected(rows: list[dict], watermark: int) -> dict[str, dict[tuple, tuple]]:
    """Every branch's final output, from the rows written, for an operator watermark `watermark`."""

    def fired(end: int) -> bool:
        return end - 1 <= watermark

    agg: dict = collections.defaultdict(lambda: [0, 0])
    tumbling: dict = collections.defaultdict(lambda: [0, 0])
    sliding: dict = collections.defaultdict(lambda: [0, -1])
    applied: dict = collections.defaultdict(lambda: [set(), 0])
    buckets: dict = collections.Counter()
    times_of_user: dict = collections.defaultdict(list)
    for r in rows:
        url, ts, v = r["url"], r["ts"], r["v"]
        agg[(url,)][0] += 1
        agg[(url,)][1] += v
        ws = ts - ts % BUCKET
        tumbling[(url, ws)][0] += 1
        tumbling[(url, ws)][1] += v
        start = ts - ts % SLIDE
        while start + SLIDE_SIZE > ts:
            sliding[(url, start)][0] += 1
            sliding[(url, start)][1] = max(sliding[(url, start)][1], v)
            start -= SLIDE
        applied[(r["user"], ws)][0].add(url)
        applied[(r["user"], ws)][1] += v
        buckets[(url, ws)] += 1
        times_of_user[r["user"]].append(ts)
    out: dict[str, dict[tuple, tuple]] = {"agg": {k: tuple(v) for k, v in agg.items()}}
    out["tumbling"] = {k: (k[1] + BUCKET, *v) for k, v in tumbling.items() if fired(k[1] + BUCKET)}
    out["sliding"] = {k: (k[1] + SLIDE_SIZE, *v) for k, v in sliding.items() if fired(k[1] + SLIDE_SIZE)}
    out["apply"] = {k: (k[1] + BUCKET, len(u), s) for k, (u, s) in applied.items() if fired(k[1] + BUCKET)}
    sessions: dict = {}
    for user, times in times_of_user.items():
        times.sort()
        first = last = times[0]
        n = 0
        for t in [*times, None]:
            if t is not None and t <= last + GAP:  # [t, t + gap) overlaps or touches the session
                last, n = t, n + 1
                continue
            if fired(last + GAP):
                sessions[(user, first)] = (last + GAP, n, first)
            if t is not None:
                first = last = t
                n = 1
    out["session"] = sessions
    rules = sorted((r["url"], r["ts"], r["factor"]) for r in rows if r["kind"] == "r")
    timers: dict[tuple[str, int], tuple[int, int]] = {}
    bcast: dict[tuple[str, int], tuple[int, int]] = {}
    totals: collections.Counter[str] = collections.Counter()
    for (url, b), n in sorted(buckets.items()):
        if not fired(b + BUCKET):
            continue
        totals[url] += n
        timers[(url, b)] = (n, totals[url])
        ruled = [(t, f) for u, t, f in rules if u == url and t <= b + BUCKET - 1]
        bcast[(url, b)] = (n, n * (max(ruled)[1] if ruled else 1))
    out["timers"], out["bcast"] = timers, bcast
    sides: dict = collections.defaultdict(dict)
    for r in rows:
        if r["kind"] in ("a", "b"):
            sides[r["k"] if r["kind"] == "a" else r["kb"]][r["kind"]] = r["ts"]
    out["interval"] = {(k,): (s["a"], s["b"]) for k, s in sides.items() if BETWEEN[0] <= s["b"] - s["a"] <= BETWEEN[1]}
    out["wjoin"] = {
        (k, s["a"] - s["a"] % BUCKET): (s["a"], s["b"])
        for k, s in sides.items()
        if s["a"] // BUCKET == s["b"] // BUCKET
    }
    return out


def typed(value: str):
    return value if value.startswith("/") else int(value)


def file_rows(root, branch: str) -> list[tuple]:
    return [tuple(typed(x) for x in row) for row in committed_rows(os.path.join(root, branch))]


def sqlite_rows(root, branch: str) -> dict[tuple, tuple]:
    """The SqliteSink's committed table t: {key: values} (empty before its first commit)."""
    keys, values = BRANCHES[branch]
    db = os.path.join(root, f"{branch}.db")
    if not os.path.exists(db):
        return {}
    conn = sqlite3.connect(db)
    try:
        cols = ", ".join(f'"{c}"' for c in (*keys, *values))
        got = conn.execute(f"SELECT {cols} FROM t").fetchall()
    except sqlite3.OperationalError:  # the table is created with the first commit
        return {}
    finally:
        conn.close()
    return {tuple(r[: len(keys)]): tuple(r[len(keys) :]) for r in got}


def problems(root, want: dict[str, dict[tuple, tuple]]) -> list[str]:
    """What differs between each branch's committed output and `want`: [] when exact."""
    found = []
    for branch, (keys, _values) in BRANCHES.items():
        rows = file_rows(root, branch)
        nk = len(keys)
        exp = want[branch]
        if branch == "agg":  # an update stream: per url strictly rising counts, the last = the total
            lines = [(r[0], r[1]) for r in rows]
            down: list[tuple[str, int, int]] = []
            last: dict[str, int] = {}
            for url, n in lines:
                if n <= last.get(url, 0):
                    down.append((url, last[url], n))
                last[url] = n
            if down:
                found.append(f"agg file: {len(down)} updates not above the url's previous one, e.g. {down[:3]}")
            final = {}
            for r in rows:
                final[(r[0],)] = tuple(r[1:])
            got = final
        else:  # one row per key (an append stream)
            twice = [k for k, n in collections.Counter(r[:nk] for r in rows).items() if n > 1]
            if twice:
                found.append(f"{branch} file: {len(twice)} keys committed more than once, e.g. {twice[:3]}")
            got = {r[:nk]: r[nk:] for r in rows}
        for where, table in ((f"{branch} file", got), (f"{branch} sqlite", sqlite_rows(root, branch))):
            missing = sorted(k for k in exp if k not in table)
            extra = sorted(k for k in table if k not in exp)
            wrong = sorted((k, table[k], exp[k]) for k in exp if k in table and table[k] != exp[k])
            if missing or extra or wrong:
                found.append(
                    f"{where}: {len(missing)} missing e.g. {missing[:3]}, {len(extra)} extra e.g. {extra[:3]}, "
                    f"{len(wrong)} wrong (key, got, want) e.g. {wrong[:3]} (of {len(exp)})"
                )
    return found


def wait_exact(root, want, timeout: float = TIMEOUT) -> None:
    """Wait until every branch is exact; on the deadline fail with what still differs."""
    last: list[str] = []

    def exact() -> bool:
        nonlocal last
        last = problems(root, want)
        return not last

    try:
        wait_until(
            exact, timeout=timeout, message="every branch's output to equal the independent computation", interval=1
        )
    except AssertionError:
        raise AssertionError("the committed output differs from the input's:\n" + "\n".join(last)) from None


def wait_read(root, feed: Feed, timeout: float = TIMEOUT) -> None:
    """The input so far was read and committed: the aggregate's SQLite table equals its counts
    (the condition for writing the next round, see the docstring)."""
    want = expected(feed.rows, MAX_WATERMARK)["agg"]
    wait_until(
        lambda: sqlite_rows(root, "agg") == want,
        timeout=timeout,
        message="the aggregate of the input so far",
        interval=0.5,
    )


def run(cluster, feed: Feed, root, backend: str, parallelism: int, *extra: str, watch: bool = True) -> str:
    os.makedirs(root, exist_ok=True)  # the SQLite databases' directory must exist at submit
    args = ["run", JOB, "--detach", "--cluster-dir", cluster.dir, "--parallelism", str(parallelism), *extra]
    job_args = ["--input", feed.dir, "--output", str(root), "--backend", backend]
    if watch:
        job_args += ["--monitor-interval", "200"]
    return last_line(sluice(*args, "--", *job_args))


def kill_a_taskmanager(cluster, job: str) -> str:
    """kill -9 a TaskManager running a task of the job; the cluster's supervisor starts it again
    (waited for, so the next run has two TaskManagers as well)."""
    cluster.refresh()
    status = cluster.status(job)
    address = next(t["taskmanager"] for t in status["tasks"] if t["state"] == "RUNNING")
    [entry] = [p for p in cluster.info["processes"] if p.get("address") == address]
    kill_process_tree(entry["pid"])

    def restarted() -> bool:
        cluster.refresh()
        again = [p for p in cluster.info["processes"] if p.get("log") == entry.get("log") and p["pid"] != entry["pid"]]
        # its new address is recorded once it listens (a fresh free port)
        return bool(again) and psutil.pid_exists(again[0]["pid"]) and again[0]["address"] != address

    wait_until(restarted, timeout=TIMEOUT, message="the supervisor to restart the killed TaskManager", interval=0.5)
    return address


def step_log(steps: list, what: str, t0: float) -> None:
    steps.append(f"{time.monotonic() - t0:6.1f}s {what}")


def failure_report(cluster, jobs: list[str]) -> str:
    out = []
    for job in jobs:
        with contextlib.suppress(Exception):
            s = cluster.status(job)
            out.append(
                f"{job}: {s['state']} restarts={s.get('restarts')} late={s.get('records_late_dropped')} "
                f"failure={s.get('failure')} causes={[e.get('cause', '')[:500] for e in s.get('exceptions', [])][-3:]}"
            )
    return "\n".join(out)


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_watched_directory_through_every_change_of_shape(cluster, tmp_path, backend):
    feed, root = Feed(tmp_path / "in", seed={"memory": 1, "rocksdb": 2}[backend]), tmp_path / "out"
    # which operator each run rescales and reconfigures (both keyed, both with un-chained sinks)
    rescaled, reconfigured = ("timers", "bcast") if backend == "memory" else ("session", "tumbling")
    steps: list[str] = []
    t0 = time.monotonic()
    jobs: list[str] = []
    try:
        feed.add_round(1)
        jobs.append(job := run(cluster, feed, root, backend, 1))
        wait_read(root, feed)
        step_log(steps, "p=1 read round 0", t0)

        feed.add_round(1)  # the stop comes while this round is being read
        path = last_line(sluice("stop", job, "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
        assert cluster.status(job)["state"] == "FINISHED"
        jobs.append(job := run(cluster, feed, root, backend, 2, "--from-savepoint", path))
        wait_read(root, feed)
        step_log(steps, "stop-with-savepoint, resumed at p=2", t0)

        feed.add_round(2)
        wait_read(root, feed)
        proc = sluice(
            "rescale", job, "--operator", rescaled, "--parallelism", "1",
            "--savepoint-dir", str(tmp_path / "sp2"), "--cluster-dir", cluster.dir,
        )  # fmt: skip
        jobs.append(job := last_line(proc))
        feed.add_round(2)
        wait_read(root, feed)
        step_log(steps, f"rescale --operator {rescaled} to 1", t0)

        done = sluice(
            "reconfigure", job, "--operator", reconfigured, "--parallelism", "1", "--cluster-dir", cluster.dir
        )
        assert done.stdout.strip().endswith("COMPLETED"), done.stderr
        feed.add_round(2)
        wait_read(root, feed)
        step_log(steps, f"reconfigure --operator {reconfigured} to 1", t0)

        wait_for(cluster, job, lambda s: s["last_completed_checkpoint"], "a checkpoint")
        kill_a_taskmanager(cluster, job)
        feed.add_round(2)
        wait_for(cluster, job, lambda s: s["restarts"] >= 1 and s["state"] == "RUNNING", "the restart", TIMEOUT)
        wait_read(root, feed)
        step_log(steps, "kill -9 of a TaskManager, restarted", t0)

        feed.close(2)
        assert feed.closed_at is not None
        wait_exact(root, expected(feed.rows, feed.closed_at - BOUND - 1))
        step_log(steps, "closed: every branch exact", t0)
        status = cluster.status(job)
        assert status["state"] == "RUNNING" and status["records_late_dropped"] == 0, status
    except AssertionError as e:
        raise AssertionError(f"{e}\nsteps:\n" + "\n".join(steps) + "\n" + failure_report(cluster, jobs)) from None
    finally:
        print("\n".join(steps))


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_bounded_input_stopped_resumed_at_lower_parallelism_and_killed(cluster, tmp_path, backend):
    feed, root = Feed(tmp_path / "in", seed={"memory": 3, "rocksdb": 4}[backend]), tmp_path / "out"
    for _ in range(24):  # enough that the stop and the kill come before the end of the input
        feed.add_round(2)
    feed.close(2)
    steps: list[str] = []
    t0 = time.monotonic()
    jobs: list[str] = []
    small = option_args(SMALL_READS)  # two files per read: the stop and the kill land mid-input
    try:
        jobs.append(job := run(cluster, feed, root, backend, 2, *small, watch=False))
        wait_for(cluster, job, lambda s: s["last_completed_checkpoint"], "a checkpoint", TIMEOUT)
        path = last_line(sluice("stop", job, "--savepoint-dir", str(tmp_path / "sp"), "--cluster-dir", cluster.dir))
        assert cluster.status(job)["state"] == "FINISHED"
        at_stop = sum(n for n, _ in sqlite_rows(root, "agg").values())
        assert at_stop < len(feed.rows), "the stop came after the whole input was read: not mid-way"
        step_log(steps, f"stop-with-savepoint at p=2 after {at_stop} of {len(feed.rows)} rows", t0)

        jobs.append(job := run(cluster, feed, root, backend, 1, "--from-savepoint", path, *small, watch=False))
        wait_for(
            cluster, job, lambda s: s["state"] == "RUNNING" and s["last_completed_checkpoint"], "a checkpoint", TIMEOUT
        )
        kill_a_taskmanager(cluster, job)
        step_log(steps, "resumed at p=1, kill -9 of a TaskManager", t0)
        status = wait_for(cluster, job, lambda s: s["state"] in ("FINISHED", "FAILED", "CANCELED"), "the end", TIMEOUT)
        assert status["state"] == "FINISHED", status
        assert status["restarts"] >= 1, "the job ended before the kill took effect"
        wait_exact(root, expected(feed.rows, MAX_WATERMARK), timeout=30)
        step_log(steps, "finished: every branch exact", t0)
        assert status["records_late_dropped"] == 0, status
    except AssertionError as e:
        raise AssertionError(f"{e}\nsteps:\n" + "\n".join(steps) + "\n" + failure_report(cluster, jobs)) from None
    finally:
        print("\n".join(steps))
