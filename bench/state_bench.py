"""Keyed state: Sluice and Spark Structured Streaming (the peer) run two stateful jobs over the same
generated data, alternating run by run, each output checked against its system's own semantics, and
timed from the outside in the same way (first input read → last result committed).

    python bench/state_bench.py [--quick] [--jobs dedup,join] [--events 400000] [--users 20000]
        [--dedup-operator process|batch|builtin]
        [--ttl-ms 60000] [--impressions 750000] [--upper-ms 600000] [--disorder-ms 2000] [--runs 5]
        [--peer-shuffle 2,200] [--no-count-calls] [--skip-sluice] [--skip-peer] [--max-foreign-cores 0.3]
        [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Jobs (both systems' out-of-orderness bound is --disorder-ms D unless said otherwise):

- **dedup**. Input: examples/generate_page_views.py's generate() (seed 7, users uniform in [0, U),
  timestamps out of order by up to D, 12,500 events per file). Sluice: `examples/dedup.py --ttl-ms T
  --out-of-orderness-ms D`, a keyed process function that keeps, per user, the first event within T
  ms of event time (list and value state, event-time timers), output `user,ts,url`. Checked exactly
  against an independent computation (`expected_firsts`: per user, events in (ts, url) order, an
  event kept when the user's last kept one is at least T older; vectorized with numpy, tested against
  the plain loop of tests/integration/test_user_state.py): every expected event committed once, none
  missing, none unexpected. Peer: `withWatermark("et", "T milliseconds")` +
  `dropDuplicatesWithinWatermark(["user"])` (Spark 4): the first *arrival* of a user wins, and the
  user's entry expires once the watermark passes its event time + T; Spark's documented guarantee is
  that events whose distance is below the watermark delay are deduplicated. Its sanity check
  (`check_dedup_peer`): every emitted row is an input event, no row twice, every input user emitted
  at least once, and no two emitted events of one user less than T apart. (With the whole input in
  its first batch, nothing expires in between, so it emits one row per user; Sluice emits one per user
  and T: the two jobs do not produce the same rows, by their definitions.)
- **join**. Input: examples/generate_clicks.py's generate() (M impressions, one every 10 ms; about
  0.35 M clicks, each up to 20 min after its impression, some on no impression; timestamps out of
  order by up to D; 12,500 impressions per file and as many files of clicks). Sluice:
  `examples/click_join.py --upper-ms U --out-of-orderness-ms D` (interval join keyed by imp_id,
  output `imp_id,ad,ts,ts_right`). Peer: a stream-stream inner join on imp_id with watermarks of D
  on both sides and `clicks.et BETWEEN imp.et AND imp.et + interval U milliseconds`, append mode.
  Both checked exactly (`check_join`) against generate_clicks.expected_joins (the multiset of
  (imp_id, impression ts, click ts)), and every row's ad against its impression's.

Measured per run: the window (bench/window.py's inotify watch: the first read(2) of any input file
(both input directories for the join) → the commit of the last output file holding a result line;
Sluice renames its parts, the peer commits a batch by writing `_spark_metadata/<batch>`); events/s
= input events / window (dedup N; join impressions + clicks); startup (launch → first read); CPU
seconds per million events of the measured system's processes (bench/procstat.py, also the load
rule); state: Sluice the largest completed checkpoint (`size_bytes` of `sluice status --json`), the
peer the largest `memoryUsedBytes` summed over its state operators (StreamingQueryProgress) and its
checkpoint's `state/` on disk at the end; peak RSS (VmHWM since the process started, so a high-water
mark over every run before too) of Sluice's TaskManager (its Python process and its Spark JVM) and
of the peer's driver (Python and JVM), the largest process of each role (`rss_parts`).

Python calls per event (dedup, Sluice): the keyed-process operator counts its calls into user code
(`python_calls`, taskmanager/operators/keyed_process.py) but does not report them. One uncounted
*instrumented* run per invocation runs a job file this script writes into its working directory:
examples/dedup.py's own build() with its process function subclassed to count its process() and
on_timer() calls (the calls the operator counts) and to write the counts to a file per instance while
the final watermark fires the last timers. The count is exact for that run; the number of batches
(the source doubles its files per Spark call while a batch takes under 0.5 s) and with it the
process calls differ a little from run to run. The peer runs no Python per event.

Configurations: Sluice one local cluster of 1 TaskManager x 2 slots, parallelism 2, checkpoints every
second (its best, bench/README.md); the peer one SparkSession local[2] in a child process, queries
with Trigger.AvailableNow (maxFilesPerTrigger unset: the whole input in one batch, then the no-data
batch that evicts state), shuffle partitions: each of --peer-shuffle tried once per job after the
warm-up, the fastest kept (quick: 2 only). Order: one uncounted warm-up per system and job, the
instrumented run, the peer's tuning runs, then --runs rounds; in each round each job runs Sluice, then
the peer. Medians with bootstrap 95 % intervals (bench/stats.py); runs the load rule excludes are left
out.

Sizes: dedup 400,000 page views of 20,000 users (20 per user), join 750,000 impressions (about 1 M
events with their clicks). Sluice's dedup ran at about 4,300 events/s in the reference run (0.89
Python calls per event, ~280 us of CPU each, everything included), so 1 M events would take about 4
minutes per run and the full run's 7 Sluice dedup runs alone would pass its ~15-minute budget.
Quick (--quick): 200,000 page views of 10,000 users, 150,000 impressions, 2 runs per system and job.
Appends one section to bench/RESULTS.md ("Keyed state").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
DEDUP_JOB = os.path.join(EXAMPLES, "dedup.py")
JOIN_JOB = os.path.join(EXAMPLES, "click_join.py")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import paired_report
import paired_runs
import spark_peer
from bench_common import begin_run, fmt, run_main, size
from markdown import notes_lines, section_head
from paired_report import fmt_bytes_est
from paired_runs import PEER, SLUICE, log, read_rows
from stats import est, fmt_estimate

PAGE_SCHEMA = "url string, user long, ts long"
IMP_SCHEMA = "imp_id long, ad string, user long, ts long"
CLICK_SCHEMA = "imp_id long, user long, ts long"
DEDUP_COLUMNS = ["user", "ts", "url"]
JOIN_COLUMNS = ["imp_id", "ad", "ts", "ts_right"]
EVENTS_PER_FILE = 12_500
PAGE_SEED = 7
CLICK_SEED = 11
CALLS_PREFIX = "calls-"  # the instrumented job's count files


@dataclass(frozen=True)
class Job:
    name: str
    label: str
    columns: tuple[str, ...]


JOBS = {
    "dedup": Job("dedup", "dedup (first event per user within the TTL)", tuple(DEDUP_COLUMNS)),
    "join": Job("join", "interval join (clicks within 10 min of their impression)", tuple(JOIN_COLUMNS)),
}


# ================================================================================================
# the expected answers and the output checks (pure)
# ================================================================================================
def expected_firsts_plain(events: Iterable[tuple[int, int, str]], ttl_ms: int) -> set[tuple[int, int, str]]:
    """tests/integration/test_user_state.py's expected_firsts over (user, ts, url) events: per user,
    events in (ts, url) order; an event is kept when the user's last kept one is at least `ttl_ms`
    older. Plain Python: the reference `expected_firsts` is tested against."""
    by_user: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for user, ts, url in events:
        by_user[int(user)].append((int(ts), str(url)))
    kept = set()
    for user, evs in by_user.items():
        last = None
        for ts, url in sorted(evs):
            if last is None or ts >= last + ttl_ms:
                kept.add((user, ts, url))
                last = ts
    return kept


def expected_firsts(frame: Any, ttl_ms: int) -> Any:
    """`expected_firsts_plain` vectorized: `frame` has columns user, ts, url (one row per event); the
    kept events as a DataFrame (user, ts, url) sorted by (user, ts, url). Each round advances every
    user at once to its next kept event: the first event (in (ts, url) order) at or after its last
    kept one + ttl, found with one searchsorted over (user, ts) keys; as many rounds as the most
    events any user keeps."""
    import numpy as np
    import pandas as pd

    if ttl_ms <= 0:
        raise ValueError(f"ttl_ms must be > 0, got {ttl_ms}")
    f = pd.DataFrame(
        {
            "user": np.asarray(frame["user"], dtype=np.int64),
            "ts": np.asarray(frame["ts"], dtype=np.int64),
            "url": np.asarray(frame["url"]).astype(str),
        }
    )
    f = f.sort_values(["user", "ts", "url"], kind="stable", ignore_index=True)
    n = len(f)
    if n == 0:
        return f
    t = f["ts"].to_numpy() - int(f["ts"].min())
    _, code = np.unique(f["user"].to_numpy(), return_inverse=True)  # 0, 1, ... in user order (sorted)
    span = int(t.max()) + ttl_ms + 1  # a user's keys: code * span + [0, span)
    if int(code.max()) + 1 > (2**62) // span:
        raise ValueError("too many users x too wide a time span for 64-bit keys")
    key = code.astype(np.int64) * span + t
    cur = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])  # each user's first event
    kept = [cur]
    while len(cur):
        nxt = np.searchsorted(key, key[cur] + ttl_ms, side="left")
        inside = nxt < n
        nxt, cur = nxt[inside], cur[inside]
        cur = nxt[code[nxt] == code[cur]]  # beyond the user's last event: the next user's band
        kept.append(cur)
    return f.iloc[np.sort(np.concatenate(kept))].reset_index(drop=True)


@dataclass
class Check:
    """What an output check found. `problems`: (count, what) of every rule (a count above 0 breaks
    it); `summary`: what an output that passed satisfied."""

    rows: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    summary: str = ""
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.rows > 0 and not any(n for n, _what in self.problems)

    def describe(self) -> str:
        if self.error:
            return f"VIOLATION: {self.error}"
        if not self.ok:
            parts = [f"{n:,} {what}" for n, what in self.problems if n] or ["no output"]
            return "VIOLATION: " + ", ".join(parts) + (f"; e.g. {'; '.join(self.samples[:3])}" if self.samples else "")
        return self.summary


def _typed(got: Any, columns: Sequence[str], ints: Sequence[str], check: Check) -> Any:
    """`got` (a DataFrame of strings or tuples in `columns` order) with `ints` as int64; malformed lines
    (a number that does not parse, a missing field) counted in `check` and dropped."""
    import pandas as pd

    frame = got if isinstance(got, pd.DataFrame) else pd.DataFrame(list(got), columns=list(columns))
    frame = frame.copy()
    check.rows = len(frame)
    for c in ints:
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    bad = frame[list(columns)].isna().any(axis=1)
    for c in columns:
        if c not in ints:
            bad |= frame[c].astype(str) == ""  # a missing field (read with keep_default_na=False)
    n_bad = int(bad.sum())
    check.problems.append((n_bad, "malformed lines"))
    if n_bad:
        check.samples.append(f"malformed line {','.join(map(str, frame[bad].iloc[0].tolist()))}")
    frame = frame[~bad].astype({c: "int64" for c in ints})
    for c in columns:
        if c not in ints:
            frame[c] = frame[c].astype(str)
    return frame.reset_index(drop=True)


def _line(row: Any, columns: Sequence[str]) -> str:
    return ",".join(str(row[c]) for c in columns)


def _dedup_rows(got: Any, other: Any) -> tuple[Check, Any, Any, Any]:
    """A dedup check's start: `got` and `other` (user, ts, url) typed, the malformed lines and the lines
    of `got` committed twice counted; (the check, got, other, the twice-committed mask of got)."""
    c = Check()
    got = _typed(got, DEDUP_COLUMNS, ("user", "ts"), c)
    other = _typed(other, DEDUP_COLUMNS, ("user", "ts"), Check())
    dup = got.duplicated(DEDUP_COLUMNS, keep="first")
    c.problems.append((int(dup.sum()), "lines committed twice"))
    if dup.any():
        c.samples.append(f"twice: {_line(got[dup].iloc[0], DEDUP_COLUMNS)}")
    return c, got, other, dup


def check_dedup_exact(got: Any, expected: Any) -> Check:
    """Sluice's dedup output `got` (user, ts, url) against `expected` (`expected_firsts`): every
    expected event once, none missing, none unexpected, no line twice."""
    c, got, exp, _dup = _dedup_rows(got, expected)
    m = got.drop_duplicates(DEDUP_COLUMNS).merge(exp.drop_duplicates(DEDUP_COLUMNS), how="outer", indicator=True)
    unexpected, missing = m[m["_merge"] == "left_only"], m[m["_merge"] == "right_only"]
    c.problems.append((len(unexpected), "events kept that should not be"))
    c.problems.append((len(missing), "expected events missing"))
    if len(unexpected):
        c.samples.append(f"not expected: {_line(unexpected.iloc[0], DEDUP_COLUMNS)}")
    if len(missing):
        c.samples.append(f"missing: {_line(missing.iloc[0], DEDUP_COLUMNS)}")
    users = got["user"].nunique()
    c.stats = {"users": int(users), "expected": len(exp)}
    c.summary = f"exact: all {len(exp):,} expected events once ({users:,} users)"
    return c


def check_dedup_peer(got: Any, events: Any, delay_ms: int) -> Check:
    """The peer's dropDuplicatesWithinWatermark output `got` (user, ts, url) against the input
    `events` (user, ts, url): every row an input event, no row twice, every input user at least
    once, and no two rows of a user less than `delay_ms` apart (Spark's guarantee: events closer than
    the watermark delay are duplicates)."""
    import numpy as np

    c, got, ev, dup = _dedup_rows(got, events)
    got = got[~dup]
    m = got.merge(ev.drop_duplicates(DEDUP_COLUMNS), how="left", indicator=True)
    foreign = m[m["_merge"] == "left_only"]
    c.problems.append((len(foreign), "rows that are no input event"))
    if len(foreign):
        c.samples.append(f"no such input event: {_line(foreign.iloc[0], DEDUP_COLUMNS)}")
    absent = np.setdiff1d(ev["user"].unique(), got["user"].unique())
    c.problems.append((len(absent), "input users never emitted"))
    if len(absent):
        c.samples.append(f"user {int(absent[0])} never emitted")
    s = got.sort_values(["user", "ts"], kind="stable")
    u, t = s["user"].to_numpy(), s["ts"].to_numpy()
    close = (u[1:] == u[:-1]) & (t[1:] - t[:-1] < delay_ms)
    c.problems.append((int(close.sum()), f"pairs of a user's rows less than {delay_ms:,} ms apart"))
    if close.any():
        i = int(np.flatnonzero(close)[0])
        c.samples.append(f"user {int(u[i])}: ts {int(t[i])} and {int(t[i + 1])}")
    per_user = got.groupby("user").size()
    users = int(ev["user"].nunique())
    c.stats = {"users": users, "max_per_user": int(per_user.max()) if len(per_user) else 0}
    c.summary = (
        f"sane: {len(got):,} rows, each an input event, none twice, all {users:,} users, "
        f"no two of a user within {delay_ms:,} ms (at most {c.stats['max_per_user']} per user)"
    )
    return c


def check_join(got: Any, expected: collections.Counter, ads: dict[int, str]) -> Check:
    """Joined rows `got` (imp_id, ad, ts, ts_right) against `expected` (a Counter of (imp_id, impression
    ts, click ts), generate_clicks.expected_joins): the same multiset exactly, and each row's ad its
    impression's (`ads`: imp_id -> ad)."""
    c = Check()
    got = _typed(got, JOIN_COLUMNS, ("imp_id", "ts", "ts_right"), c)
    have = collections.Counter(zip(got["imp_id"].tolist(), got["ts"].tolist(), got["ts_right"].tolist(), strict=True))
    extra, missing = have - expected, expected - have
    c.problems.append((sum(extra.values()), "lines not expected (or more often than expected)"))
    c.problems.append((sum(missing.values()), "expected pairs missing"))
    if extra:
        c.samples.append(f"not expected: {next(iter(extra))}")
    if missing:
        c.samples.append(f"missing: {next(iter(missing))}")
    wrong = [(i, a) for i, a in zip(got["imp_id"].tolist(), got["ad"].tolist(), strict=True) if ads.get(i) != a]
    c.problems.append((len(wrong), "rows with another impression's ad"))
    if wrong:
        c.samples.append(f"imp_id {wrong[0][0]} with ad {wrong[0][1]}, its impression's is {ads.get(wrong[0][0])}")
    total = sum(expected.values())
    c.stats = {"expected": total}
    c.summary = f"exact: all {total:,} expected pairs, each as often as expected, ads right"
    return c


def read_jsonl(directory: str, columns: Sequence[str]) -> Any:
    """The `columns` of every *.jsonl file in `directory` (file-name order) as one DataFrame."""
    import pandas as pd

    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    if not names:
        raise FileNotFoundError(f"no *.jsonl files in {directory}")
    frames = [pd.read_json(os.path.join(directory, n), lines=True, dtype=False)[list(columns)] for n in names]
    return pd.concat(frames, ignore_index=True)


def count_lines(directory: str) -> int:
    """Non-empty lines of the *.jsonl files in `directory`."""
    n = 0
    for name in sorted(os.listdir(directory)):
        if name.endswith(".jsonl"):
            with open(os.path.join(directory, name), "rb") as f:
                n += sum(1 for line in f if line.strip())
    return n


# -- Python calls of the instrumented dedup run -----------------------------------------------------
COUNTED_JOB = '''"""Written by bench/state_bench.py: examples/dedup.py with its process function counting
its calls (process and on_timer: what the keyed-process operator counts as python_calls), written
to {counts}/calls-<pid>-<instance>.json while the final watermark fires the last timers."""

import json
import os
import sys

import cloudpickle

sys.path.insert(0, {examples!r})
import dedup  # noqa: E402 — importable once examples/ is on the path

from sluice.eventtime import MAX_WATERMARK  # noqa: E402 — after dedup, as the job file reads

cloudpickle.register_pickle_by_value(dedup)  # the TaskManagers cannot import examples/
COUNTS = {counts!r}


class Counted(dedup.FirstWithinTtl):
    def __init__(self, ttl_ms):
        super().__init__(ttl_ms)
        self.calls = [0, 0]  # process, on_timer

    def _write(self):
        path = os.path.join(COUNTS, f"calls-{{os.getpid()}}-{{id(self)}}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({{"process": self.calls[0], "on_timer": self.calls[1]}}, f)
        os.replace(tmp, path)

    def process(self, user, rows, ctx):
        self.calls[0] += 1
        if self.calls[0] % 20000 == 0:
            self._write()
        return super().process(user, rows, ctx)

    def on_timer(self, user, timestamp, ctx):
        self.calls[1] += 1
        out = super().on_timer(user, timestamp, ctx)
        if ctx.current_watermark == MAX_WATERMARK:  # the end of the input: this may be the last call
            self._write()
        return out


dedup.FirstWithinTtl = Counted  # dedup.build() as it is, with the counting function
dedup.main()
'''


def counted_job_text(counts_dir: str) -> str:
    return COUNTED_JOB.format(counts=counts_dir, examples=EXAMPLES)


def read_call_counts(counts_dir: str) -> dict[str, int]:
    """The instrumented run's calls, summed over its process-function instances: process, on_timer,
    instances."""
    total = {"process": 0, "on_timer": 0, "instances": 0}
    for name in sorted(os.listdir(counts_dir)) if os.path.isdir(counts_dir) else []:
        if name.startswith(CALLS_PREFIX) and name.endswith(".json"):
            with open(os.path.join(counts_dir, name)) as f:
                got = json.load(f)
            total["process"] += int(got["process"])
            total["on_timer"] += int(got["on_timer"])
            total["instances"] += 1
    return total


def rss_parts(peak_rss: dict[str, int], system: str) -> dict[str, int]:
    """From a ResourceMeter's peak RSS per process ("<label> <pid>" -> bytes) of one system: Sluice's
    TaskManager Python process and its Spark JVM (only TaskManagers start one; the cluster has one
    TaskManager); the peer's driver (its Python process and its JVM). The largest process of each role,
    not the sum: one quick run saw a second "spark-jvm" of ~0.9 GiB in the peer's tree (1.9 GiB for a
    1.0 GiB driver JVM), most likely a JVM child caught between fork and exec, which shows the JVM's
    command line and memory."""
    py = jvm = 0
    for name, rss in peak_rss.items():
        role = name.rsplit(" ", 1)[0]
        if role == "spark-jvm":
            jvm = max(jvm, rss)
        elif (system == SLUICE and role == "taskmanager") or (system == PEER and role.startswith("python")):
            py = max(py, rss)
    return {"py": py, "jvm": jvm, "total": py + jvm}


# ================================================================================================
# peer child: one SparkSession, one query per go file
# ================================================================================================
def peer_query(spark: Any, q: dict) -> Any:
    """The peer's streaming DataFrame for query spec `q` (job dedup or join)."""
    from pyspark.sql import functions as F

    if q["job"] == "dedup":
        return (
            spark.readStream.schema(PAGE_SCHEMA)
            .json(q["input"])
            .withColumn("et", F.timestamp_millis("ts"))
            .withWatermark("et", f"{int(q['ttl_ms'])} milliseconds")
            .dropDuplicatesWithinWatermark(["user"])
            .select(*DEDUP_COLUMNS)
        )
    delay = f"{int(q['delay_ms'])} milliseconds"
    imps = (
        spark.readStream.schema(IMP_SCHEMA)
        .json(q["impressions"])
        .withColumn("imp_et", F.timestamp_millis("ts"))
        .withWatermark("imp_et", delay)
    )
    clicks = (
        spark.readStream.schema(CLICK_SCHEMA)
        .json(q["clicks"])
        .select(
            F.col("imp_id").alias("c_imp_id"), F.col("ts").alias("ts_right"), F.timestamp_millis("ts").alias("c_et")
        )
        .withWatermark("c_et", delay)
    )
    cond = F.expr(
        f"imp_id = c_imp_id AND c_et >= imp_et AND c_et <= imp_et + interval {int(q['upper_ms'])} milliseconds"
    )
    return imps.join(clicks, cond, "inner").select(*JOIN_COLUMNS)


def child_main(spec_path: str) -> int:
    return spark_peer.serve_queries(spec_path, "sss-state-bench", peer_query, survive_errors=True)


# ================================================================================================
# the two systems
# ================================================================================================
def peer_state(progress: Sequence[dict]) -> dict:
    """From the peer's batches (spark_peer.serve_queries's progress entries): the largest
    memoryUsedBytes summed over the state operators of a batch, the rows in state at the end, the rows
    dropped by the watermark."""
    peak = None
    for p in progress:
        if p["state"]:
            mem = sum(s.get("memoryUsedBytes") or 0 for s in p["state"])
            peak = mem if peak is None else max(peak, mem)
    last = progress[-1]["state"] if progress else []
    return {
        "state_peak": peak,
        "state_rows_end": sum(s.get("numRowsTotal") or 0 for s in last) if last else None,
        "late_dropped": sum(s.get("numRowsDroppedByWatermark") or 0 for p in progress for s in p["state"]),
    }


class PeerSide(spark_peer.PeerSide):
    script = os.path.abspath(__file__)

    def launch(self, job: Job, inputs: dict, out: str, knob: int, _job_file: str | None = None) -> Callable[[], dict]:
        return self.submit({"job": job.name, "out": out, "shuffle_partitions": knob, **inputs}, peer_state)


class SluiceSide(paired_runs.SluiceSide):
    """The example jobs (or the instrumented `job_file`) on the local cluster."""

    def launch(self, job: Job, inputs: dict, out: str, knob: int, job_file: str | None = None) -> Callable[[], dict]:
        if job.name == "dedup":
            path = job_file or DEDUP_JOB
            args = ["--input", inputs["input"], "--ttl-ms", str(inputs["ttl_ms"])]
            form = inputs.get("form", "process")  # the function per key, in its batch form, or stream.deduplicate
            args += FORM_FLAGS.get(form, "").split()
        else:
            path = job_file or JOIN_JOB
            args = ["--impressions", inputs["impressions"], "--clicks", inputs["clicks"]]
            args += ["--upper-ms", str(inputs["upper_ms"])]
        args += ["--output", out, "--out-of-orderness-ms", str(inputs["delay_ms"])]
        args += ["--checkpoint-interval", str(knob)]
        return self.submit(path, args)


# ================================================================================================
# runs
# ================================================================================================
@dataclass
class Data:
    """One job's input and its expected answer."""

    job: Job
    inputs: dict  # the query's / the job's inputs and parameters
    dirs: list[str]  # input directories (the window starts at the first read of a file in any)
    events: int
    check: Callable[[str, Any], Check]  # (system, rows) -> the check
    expected_rows: dict[str, Any] = field(default_factory=dict)


class Bench(paired_runs.PairedBench):
    item_key = "job"
    error_chars = 600

    def __init__(self, args, work: str, data: dict[str, Data]):
        super().__init__(args, work)
        self.data = data

    def events(self, item: Job) -> int:
        return self.data[item.name].events

    def inputs(self, item: Job) -> list[str]:
        return self.data[item.name].dirs

    def launch(self, side: Any, item: Job, out: str, knob: int, **extra: Any) -> Callable[[], dict]:
        return side.launch(item, self.data[item.name].inputs, out, knob, extra.get("job_file"))

    def judge(self, system: str, item: Job, files: list[str], r: dict) -> tuple[Check, dict[str, int]]:
        got, per = read_rows(files, item.columns)
        return self.data[item.name].check(system, got), per

    def unreadable(self, error: str) -> Check:
        return Check(error=error)

    def usage(self, r: dict, usage: Any, system: str) -> None:
        r["steal_s"] = usage.steal_s
        rss = rss_parts(usage.peak_rss.get(paired_runs.MEASURED, {}), system)
        r.update(rss_py=rss["py"] or None, rss_jvm=rss["jvm"] or None, rss=rss["total"] or None)
        r["rss_processes"] = dict(usage.peak_rss.get(paired_runs.MEASURED, {}))

    def log_extra(self, r: dict) -> str:
        return f"RSS {size(r.get('rss'))}, "

    def count_calls(self) -> dict | None:
        """The instrumented dedup run (uncounted): python calls of the process function."""
        counts = os.path.join(self.work, "calls")
        os.makedirs(counts, exist_ok=True)
        path = os.path.join(self.work, "dedup_counted.py")
        with open(path, "w") as f:
            f.write(counted_job_text(counts))
        r = self.run(SLUICE, JOBS["dedup"], "instrumented", job_file=path)
        if "error" in r:
            return None
        calls: dict[str, Any] = read_call_counts(counts)  # the counts, then their events and rate
        r["calls"] = calls
        d = self.data["dedup"]
        calls["events"] = d.events
        calls["per_event"] = (calls["process"] + calls["on_timer"]) / d.events if d.events else None
        log(
            f"instrumented dedup: {calls['process']:,} process + {calls['on_timer']:,} on_timer calls in "
            f"{calls['instances']} instances = {fmt(calls['per_event'], '.3f')} per event"
        )
        return calls


# ================================================================================================
# report
# ================================================================================================
def run_row(r: dict) -> str:
    cfg, state, out = paired_report.run_cells(r, 200, 200)
    return (
        f"| {r['n']} | {r['phase']} | {r['job']} | {r['system']} | {cfg} | {paired_report.timing_cells(r)} | {state} | "
        f"{size(r.get('rss_py'))} + {size(r.get('rss_jvm'))} | {fmt(r.get('output_rows'), ',')} | "
        f"{fmt(r.get('late_dropped'), ',')} | {paired_report.foreign_cell(r)} | {out} |"
    )


def report(facts: dict, command: str, runs: Sequence[dict], plan: dict, notes: Sequence[str]) -> str:
    jobs: dict[str, Job] = plan["jobs"]
    L = section_head("Keyed state: Sluice vs Spark Structured Streaming", command, facts)
    L += paired_report.check_banner(runs)
    if "dedup" in jobs:
        L.append(
            f"**dedup**: {plan['dedup_events']:,} page views ({plan['dedup_files']} files) of {plan['users']:,} users "
            f"(seed {PAGE_SEED}), timestamps out of order by up to {plan['disorder_ms']:,} ms. Sluice "
            f"`examples/dedup.py --ttl-ms {plan['ttl_ms']} --out-of-orderness-ms {plan['disorder_ms']}"
            f"{FORM_FLAGS.get(plan.get('dedup_operator', 'process'), '')}`: per user, "
            f"the first event within {plan['ttl_ms']:,} ms of event time, in timestamp order "
            f'({plan["expected_dedup"]:,} events expected). Peer: `withWatermark("et", "{plan["ttl_ms"]} '
            'milliseconds")` + `dropDuplicatesWithinWatermark(["user"])`: the first arrival per user, kept '
            "until the watermark passes its time + the delay (with the whole input in one batch: one row per user)."
        )
        L.append("")
    if "join" in jobs:
        L.append(
            f"**join**: {plan['impressions']:,} impressions and {plan['clicks']:,} clicks ({plan['join_files']} "
            f"files each, seed {CLICK_SEED}), timestamps out of order by up to {plan['disorder_ms']:,} ms; "
            f"clicks joined to their impression when 0 <= click ts − impression ts <= {plan['upper_ms']:,} ms "
            f"({plan['expected_join']:,} pairs expected). Sluice `examples/click_join.py --upper-ms "
            f"{plan['upper_ms']} --out-of-orderness-ms {plan['disorder_ms']}`; peer: stream-stream inner join on "
            f"imp_id, watermarks of {plan['disorder_ms']:,} ms on both sides, `c_et BETWEEN imp_et AND imp_et + "
            f"interval {plan['upper_ms']} milliseconds`, append mode."
        )
        L.append("")
    L.append(
        "Sluice: 1 TaskManager x 2 slots, parallelism 2, checkpoints every "
        f"{plan['checkpoint_interval']} ms. Peer: local[2], CSV file sink, Trigger.AvailableNow "
        f"(maxFilesPerTrigger unset); shuffle partitions {plan['shuffle_text']}. Window = first read of an input "
        "file (inotify IN_ACCESS; for the join either input directory) → commit of the last output holding a "
        "result line (Sluice: the rename of its part; peer: `_spark_metadata/<batch>`); events/s = input events / "
        "window; CPU = the measured system's processes from the first read to the end seen by the harness, per "
        "million events. State: Sluice the largest completed checkpoint of the run (`size_bytes`); peer the largest "
        "`memoryUsedBytes` over its batches (summed over its state operators) and its checkpoint's `state/` on disk "
        "at the end. RSS: peak (VmHWM since the process started: a high-water mark over the runs before too) of "
        "Sluice's TaskManager, Python + its Spark JVM, and of the peer's driver, Python + JVM. Output check: Sluice's "
        "dedup exactly against `expected_firsts` (every expected event once, nothing else); the peer's dedup for "
        "sanity against Spark's own guarantee (each row an input event, none twice, every user at least once, no two "
        f"rows of a user within {plan['ttl_ms']:,} ms); both joins exactly against `expected_joins` (the same "
        "multiset of (imp_id, ts, ts_right), ads right). Medians with percentile-bootstrap 95 % intervals over the "
        f"kept runs (load rule: other processes above {plan['max_foreign_cores']} cores on average exclude a run); "
        "ratio Sluice/peer of the median events/s (above 1: Sluice faster) and peer/Sluice of CPU per event "
        "(above 1: Sluice cheaper); *every valid run*: the same median with the load rule off."
    )
    L.append("")
    L += [
        "| job | system | runs kept/valid/all | events/s | ratio S/P | events/s, every valid run | window s | "
        "startup s | CPU s per M events | CPU ratio P/S | state (peak) | RSS Python + JVM | output rows |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for j, s, rs, rate, ratio in paired_report.summary_groups(runs, "job", jobs):
        cpu_ratio = paired_report.ratio_of(est(rs[PEER], "cpu_per_m").median, est(rs[SLUICE], "cpu_per_m").median)
        rss = f"{fmt_bytes_est(est(rs[s], 'rss_py'))} + {fmt_bytes_est(est(rs[s], 'rss_jvm'))}"
        L.append(
            f"| {j} | {s} | {paired_report.summary_cells(rs[s], rate, ratio, s)} | "
            f"{fmt(cpu_ratio) if s == SLUICE else ''} | {paired_report.state_summary(rs[s], s)} | {rss} | "
            f"{fmt_estimate(est(rs[s], 'output_rows'), ',.0f')} |"
        )
    L.append("")
    calls = plan.get("calls")
    if "dedup" in jobs and SLUICE in plan["systems"]:
        if calls:
            L.append(
                f"Python calls of Sluice's dedup process function (one instrumented run, run {calls['run']}, "
                f"not in the figures): {calls['process']:,} `process` + {calls['on_timer']:,} `on_timer` = "
                f"{calls['process'] + calls['on_timer']:,} calls for {calls['events']:,} events, "
                f"**{fmt(calls['per_event'], '.3f')} per event** ({calls['instances']} function instances). Exact for "
                "that run; the process calls (one per user present in a batch) vary with the source's adaptive "
                "batching from run to run. The peer calls no Python per event."
            )
        else:
            L.append(
                "Python calls per event: not obtained (the instrumented run was not made or failed; see the notes)."
            )
        L.append("")
    L += ["### Every run", ""]
    L += [
        "| run | phase | job | system | configuration | window s | events/s | startup s | CPU s per M | state | "
        "RSS Python + JVM | output rows | late dropped | foreign cores | output checked |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    L += [run_row(r) for r in runs]
    L.append("")
    checks = sorted({(r["job"], r["system"], r["check"]) for r in runs if r.get("check_ok")})
    if checks:
        L.append("What the passing checks found (per job and system, each distinct summary once):")
        L.append("")
        L += [f"- {j}, {s}: {c}" for j, s, c in checks]
        L.append("")
    L += notes_lines(notes)
    return "\n".join(L) + "\n"


# ================================================================================================
# main
# ================================================================================================
FORM_FLAGS = {"builtin": " --builtin", "batch": " --batch-form"}  # --dedup-operator -> examples/dedup.py's flag


def prepare_dedup(
    work: str, events: int, users: int, disorder_ms: int, ttl_ms: int, form: str = "process"
) -> tuple[Data, dict]:
    from generate_page_views import generate

    data = os.path.join(work, "page-views")
    files = max(1, -(-events // EVENTS_PER_FILE))
    generate(data, events=events, files=files, urls=10_000, seed=PAGE_SEED, disorder_ms=disorder_ms, users=users)
    frame = read_jsonl(data, DEDUP_COLUMNS)
    expected = expected_firsts(frame, ttl_ms)
    input_frame = frame[DEDUP_COLUMNS]

    def check(system: str, got: Any) -> Check:
        if system == SLUICE:
            return check_dedup_exact(got, expected)
        return check_dedup_peer(got, input_frame, ttl_ms)

    d = Data(
        JOBS["dedup"],
        {"job": "dedup", "input": data, "ttl_ms": ttl_ms, "delay_ms": disorder_ms, "form": form},
        [data],
        len(frame),
        check,
    )
    return d, {"dedup_events": len(frame), "dedup_files": files, "expected_dedup": len(expected)}


def prepare_join(work: str, impressions: int, disorder_ms: int, upper_ms: int) -> tuple[Data, dict]:
    from generate_clicks import expected_joins, generate

    data = os.path.join(work, "clicks-data")
    files = max(1, -(-impressions // EVENTS_PER_FILE))
    generate(data, impressions=impressions, files=files, disorder_ms=disorder_ms, seed=CLICK_SEED)
    imps = read_jsonl(os.path.join(data, "impressions"), ["imp_id", "ad"])
    clicks = count_lines(os.path.join(data, "clicks"))
    ads = dict(zip(imps["imp_id"].tolist(), imps["ad"].tolist(), strict=True))
    expected = expected_joins(data, 0, upper_ms)

    def check(_system: str, got: Any) -> Check:
        return check_join(got, expected, ads)

    inputs: dict[str, Any] = {
        "job": "join",
        "impressions": os.path.join(data, "impressions"),
        "clicks": os.path.join(data, "clicks"),
        "upper_ms": upper_ms,
        "delay_ms": disorder_ms,
    }
    d = Data(JOBS["join"], inputs, [inputs["impressions"], inputs["clicks"]], len(imps) + clicks, check)
    return d, {
        "impressions": len(imps),
        "clicks": clicks,
        "join_files": files,
        "expected_join": sum(expected.values()),
    }


def sluice_ready() -> str | None:
    """Why the Sluice side cannot run (None: it can)."""
    for path in (DEDUP_JOB, JOIN_JOB):
        if not os.path.exists(path):
            return f"{os.path.relpath(path, REPO)} does not exist"
    try:
        import sluice.api  # noqa: F401 — imported only to see that it imports
    except Exception as exc:  # noqa: BLE001 — reported, not raised
        return f"sluice.api does not import: {exc}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="small inputs, 2 runs per system and job")
    ap.add_argument("--jobs", default="dedup,join", help=f"any of {', '.join(JOBS)}")
    ap.add_argument("--events", type=int, default=None, help="dedup: page views (default 400,000; quick 200,000)")
    ap.add_argument("--users", type=int, default=None, help="dedup: distinct users (default 20,000; quick 10,000)")
    ap.add_argument("--ttl-ms", type=int, default=60_000, help="dedup: T (Sluice's TTL, the peer's watermark delay)")
    ap.add_argument("--impressions", type=int, default=None, help="join: impressions (default 750,000; quick 150,000)")
    ap.add_argument("--upper-ms", type=int, default=600_000, help="join: a click's latest time after its impression")
    ap.add_argument("--disorder-ms", type=int, default=2000, help="timestamps out of order by up to this; the bound")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per system and job (5; quick 2)")
    paired_runs.add_peer_args(ap, "job")
    ap.add_argument("--no-count-calls", action="store_true", help="skip the instrumented dedup run")
    ap.add_argument(
        "--dedup-operator",
        choices=("process", "batch", "builtin"),
        default="process",
        help="Sluice's dedup: examples/dedup.py's process function, its --batch-form, or its --builtin "
        "stream.deduplicate",
    )
    paired_runs.add_run_args(ap, 600)
    args = ap.parse_args()
    if args.child:
        return child_main(args.child)
    runs, shuffle = paired_runs.runs_and_shuffle(args)
    events = args.events or (200_000 if args.quick else 400_000)
    users = args.users or (10_000 if args.quick else 20_000)
    impressions = args.impressions or (150_000 if args.quick else 750_000)
    try:
        jobs = {j.strip(): JOBS[j.strip()] for j in args.jobs.split(",") if j.strip()}
    except KeyError as exc:
        ap.error(f"unknown job {exc}; known: {', '.join(JOBS)}")
    if min(events, users, impressions, args.ttl_ms, args.upper_ms) <= 0 or args.disorder_ms < 0 or runs < 1:
        ap.error("--events, --users, --impressions, --ttl-ms, --upper-ms > 0, --disorder-ms >= 0, --runs >= 1")
    if not shuffle or not jobs:
        ap.error("--peer-shuffle and --jobs not empty")
    systems = paired_runs.choose_systems(ap, args, sluice_ready)
    if systems is None:
        return 2

    command, facts, temp, work = begin_run(REPO, args.workdir, "state-bench-", log)
    t_begin = time.monotonic()
    plan: dict = {
        "jobs": jobs,
        "systems": systems,
        "users": users,
        "ttl_ms": args.ttl_ms,
        "upper_ms": args.upper_ms,
        "disorder_ms": args.disorder_ms,
        "checkpoint_interval": args.checkpoint_interval,
        "max_foreign_cores": args.max_foreign_cores or "off",
        "shuffle_text": "",
    }
    data: dict[str, Data] = {}
    t0 = time.monotonic()
    if "dedup" in jobs:
        data["dedup"], facts_d = prepare_dedup(work, events, users, args.disorder_ms, args.ttl_ms, args.dedup_operator)
        facts_d["dedup_operator"] = args.dedup_operator
        plan.update(facts_d)
        log(
            f"dedup: {facts_d['dedup_events']:,} events of {users:,} users, {facts_d['expected_dedup']:,} expected "
            f"firsts ({time.monotonic() - t0:.1f}s)"
        )
    t0 = time.monotonic()
    if "join" in jobs:
        data["join"], facts_j = prepare_join(work, impressions, args.disorder_ms, args.upper_ms)
        plan.update(facts_j)
        log(
            f"join: {facts_j['impressions']:,} impressions, {facts_j['clicks']:,} clicks, "
            f"{facts_j['expected_join']:,} expected pairs ({time.monotonic() - t0:.1f}s)"
        )
    bench = Bench(args, work, data)

    def count_calls() -> None:
        if SLUICE in systems and "dedup" in jobs and not args.no_count_calls and args.dedup_operator == "process":
            calls = bench.count_calls()
            if calls is not None:
                plan["calls"] = calls | {"run": bench.n}

    return paired_runs.conduct(
        bench,
        systems,
        (SluiceSide, PeerSide),
        list(jobs.values()),
        runs,
        shuffle,
        noun="job",
        plan=plan,
        label=lambda j: j,
        report=lambda: report(facts, command, bench.runs, plan, bench.notes),
        after_warmup=count_calls,
        temp=temp,
        t_begin=t_begin,
    )


if __name__ == "__main__":
    run_main(main)
