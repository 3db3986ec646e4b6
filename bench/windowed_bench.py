"""Event-time windows: Sluice and Spark Structured Streaming (the peer) count page views per url and
window over the same out-of-order events, checked exactly against counts computed without either
system, and timed from the outside in the same way (first input read → last result committed).

    python bench/windowed_bench.py [--quick] [--events 1000000] [--urls 10000] [--disorder-ms 2000]
        [--runs 5] [--workloads tumbling,sliding] [--peer-shuffle 2,200] [--skip-sluice] [--skip-peer]
        [--max-foreign-cores 0.3] [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

Input: examples/generate_page_views.py's generate() (Zipf urls, seed 7), 12,500 events per file,
timestamps out of order by up to --disorder-ms (event i: 1.7e12 + i - uniform[0, disorder] ms, so
1 M events span 1,000 s of event time). The expected count of every (url, window) is computed from
the files in numpy (`expected_windows`, not Sluice code). Workloads (windows aligned to epoch 0,
[start, end), end excluded): *tumbling* 10 s; *sliding* 60 s every 10 s. The out-of-orderness
bound of both systems is the disorder, so no event is late on either.

- **Sluice**: one local cluster, 1 TaskManager x 2 slots (its best configuration, bench/README.md),
  `examples/windowed_page_views.py --window-ms W [--slide-ms S] --out-of-orderness-ms D
  --checkpoint-interval 1000` at parallelism 2; committed lines `url,window_start,window_end,count`.
  At the end of bounded input Sluice fires every window: the check is that every expected
  (url, window) is committed exactly once with its exact count (no line twice, none missing, none
  unexpected). State size: the largest completed checkpoint (`size_bytes`, as `sluice status
  --json` shows it) of the run.
- **Peer**: one SparkSession (local[2]) in a child process; per run the query
  `readStream.schema("url string, user long, ts long").json(DIR).withColumn("et", timestamp_millis(ts))
  .withWatermark("et", "D milliseconds").groupBy(window("et", W, S), "url").count()`, append mode,
  the CSV file sink with a checkpointLocation, Trigger.AvailableNow (maxFilesPerTrigger unset: one
  batch, then the no-data batch that evicts the windows the watermark passed). Append mode emits
  only windows whose end passed the watermark, so with bounded input the last windows stay in
  state: the check is that every window emitted has its exact count and none twice, and that every
  window whose end is at or below the final watermark was emitted; the rest are reported as
  unemitted. Shuffle partitions: each of --peer-shuffle is tried once per workload after the
  warm-up, and the fastest is kept (quick: 2 only). State size: the largest `memoryUsedBytes` of the
  query's state operator over its batches (StreamingQueryProgress), and the checkpoint's `state/`
  on disk at the end.
- **Window** (bench/window.py's WindowWatch, inotify): from the first read(2) of an input file to the
  commit of the last output holding a result line. Sluice commits a part by renaming it
  (IN_MOVED_TO of `part-...csv`); the peer's file sink writes its data files in place and commits a
  batch by writing `_spark_metadata/<batch id>` (an atomic rename), so the peer's commit time is that
  log file's, watched in `_spark_metadata/`. events/s = events / window. Startup (launch → first
  read) is reported apart; CPU seconds per million events and the load rule on other processes' CPU
  are bench/procstat.py's, as in bench/throughput_suite.py.
- **Order**: one uncounted warm-up run per system and workload, then --runs rounds; in each round
  each workload runs Sluice, then the peer (S P S P ...). Medians with bootstrap 95 % intervals
  (bench/stats.py).
- **Latency** from the watermark passing a window's end to its row's commit is not measured (neither
  system exposes when its watermark passed an end without instrumenting it).

Quick (--quick): 200,000 events, 2 runs per system and workload, the peer at 2 shuffle partitions.
Appends one section to bench/RESULTS.md ("Event-time windows").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")
WINDOWED_JOB = os.path.join(EXAMPLES, "windowed_page_views.py")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_common import begin_run, finish_workdir, fmt, notes_lines, publish, run_main, section_head, size
from stats import Estimate, fmt_estimate, median_ci

SCHEMA = "url string, user long, ts long"
COLUMNS = ["url", "window_start", "window_end", "count"]
KEY = ["url", "window_start", "window_end"]
EVENTS_PER_FILE = 12_500
SEED = 7
SLUICE, PEER = "Sluice", "peer"
MEASURED, OTHERS = "measured", "others"  # ResourceMeter systems: the run's system; the other one (idle)
SPARK_LOG = "_spark_metadata"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass(frozen=True)
class Workload:
    name: str
    size_ms: int
    slide_ms: int

    @property
    def label(self) -> str:
        if self.size_ms == self.slide_ms:
            return f"tumbling {self.size_ms / 1000:g} s"
        return f"sliding {self.size_ms / 1000:g} s every {self.slide_ms / 1000:g} s"


WORKLOADS = {"tumbling": Workload("tumbling", 10_000, 10_000), "sliding": Workload("sliding", 60_000, 10_000)}


# ================================================================================================
# the output check (pure)
# ================================================================================================
@dataclass
class WindowCheck:
    """The committed windows against the expected ones. `complete`: every expected window must be
    there (Sluice); otherwise only emitted windows are judged, and those with an end at or below
    `emitted_through` must be there (the peer's final watermark)."""

    rows: int = 0  # lines read
    expected: int = 0  # expected (url, window) rows
    duplicates: int = 0  # rows whose (url, window) is on another row too
    unexpected: int = 0  # (url, window) never expected
    wrong: int = 0  # count differs from the expected one
    missing: int = 0  # expected windows not committed (complete) / unemitted (peer)
    missing_due: int = 0  # peer: unemitted although their end is at or below emitted_through
    malformed: int = 0
    complete: bool = True
    emitted_through: int | None = None
    samples: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        bad = self.duplicates or self.unexpected or self.wrong or self.malformed or self.error
        if self.complete:
            return not bad and not self.missing and self.rows > 0
        return not bad and not self.missing_due

    def describe(self) -> str:
        if self.error:
            return f"VIOLATION: {self.error}"
        if not self.ok:
            parts = [
                f"{n} {what}"
                for n, what in (
                    (self.malformed, "malformed lines"),
                    (self.duplicates, "lines of a window committed twice"),
                    (self.unexpected, "windows never expected"),
                    (self.wrong, "wrong counts"),
                    (self.missing if self.complete else self.missing_due, "expected windows missing"),
                )
                if n
            ] or ["no output"]
            return "VIOLATION: " + ", ".join(parts) + (f"; e.g. {'; '.join(self.samples[:3])}" if self.samples else "")
        if self.complete:
            return f"exact: all {self.expected:,} windows once, every count exact"
        return (
            f"exact: {self.rows:,} windows emitted once, every count exact; {self.missing:,} of {self.expected:,} "
            "unemitted (end above the final watermark)"
        )


def _frame(rows: Any) -> Any:
    import pandas as pd

    return rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows), columns=COLUMNS)


def check_windows(got: Any, expected: Any, complete: bool = True, emitted_through: int | None = None) -> WindowCheck:
    """Judge committed window rows `got` (a DataFrame or (url, window_start, window_end, count) tuples)
    against `expected` (the same columns: generate_page_views.window_count_table)."""
    import pandas as pd

    got, expected = _frame(got), _frame(expected)
    r = WindowCheck(rows=len(got), expected=len(expected), complete=complete, emitted_through=emitted_through)
    got = got.copy()
    for c in COLUMNS[1:]:
        got[c] = pd.to_numeric(got[c], errors="coerce")
    bad = got[COLUMNS[1:]].isna().any(axis=1) | got["url"].isna()
    r.malformed = int(bad.sum())
    if r.malformed:
        r.samples.append(f"malformed line {','.join(map(str, got[bad].iloc[0].tolist()))}")
    got = got[~bad].astype({c: "int64" for c in COLUMNS[1:]})
    got["url"] = got["url"].astype(str)
    dup = got.duplicated(KEY, keep=False)
    r.duplicates = int(dup.sum())
    if r.duplicates:
        d = got[dup].sort_values(KEY).head(2)
        r.samples.append(f"twice: {' and '.join(_row(x) for x in d.itertuples(index=False))}")
    m = got.drop_duplicates(KEY).merge(
        expected.astype({c: "int64" for c in COLUMNS[1:]}),
        on=KEY,
        how="outer",
        suffixes=("", "_expected"),
        indicator=True,
    )
    unexpected = m[m["_merge"] == "left_only"]
    missing = m[m["_merge"] == "right_only"]
    both = m[m["_merge"] == "both"]
    wrong = both[both["count"] != both["count_expected"]]
    r.unexpected, r.missing, r.wrong = len(unexpected), len(missing), len(wrong)
    if emitted_through is not None:
        r.missing_due = int((missing["window_end"] <= emitted_through).sum())
    elif not complete:
        r.missing_due = 0
    if r.unexpected:
        r.samples.append(f"never expected: {_row(unexpected.iloc[0])}")
    if r.wrong:
        w = wrong.iloc[0]
        r.samples.append(f"count {int(w['count'])}, expected {int(w['count_expected'])}: {_key(w)}")
    if complete and r.missing:
        r.samples.append(f"missing: {_key(missing.iloc[0])} (expected {int(missing.iloc[0]['count_expected'])})")
    if not complete and r.missing_due:
        due = missing[missing["window_end"] <= emitted_through].iloc[0]
        r.samples.append(f"not emitted although its end <= the final watermark {emitted_through}: {_key(due)}")
    return r


def _key(row: Any) -> str:
    return f"({row['url']}, {int(row['window_start'])}, {int(row['window_end'])})"


def _row(row: Any) -> str:
    if hasattr(row, "_asdict"):
        row = row._asdict()
    return f"{_key(row)} = {int(row['count'])}"


def read_lines(paths: Iterable[str]) -> tuple[Any, dict[str, int]]:
    """The CSV lines `url,window_start,window_end,count` of `paths` (headerless) as one DataFrame of
    strings, and the number of lines per path."""
    import io

    import pandas as pd

    data = bytearray()
    per: dict[str, int] = {}
    for p in paths:
        with open(p, "rb") as f:
            chunk = f.read()
        per[p] = sum(1 for line in chunk.split(b"\n") if line.strip())
        data += chunk
        if chunk and not chunk.endswith(b"\n"):
            data += b"\n"
    if not data.strip():
        return pd.DataFrame({c: pd.Series(dtype=str) for c in COLUMNS}), per
    frame = pd.read_csv(io.BytesIO(bytes(data)), header=None, dtype=str, keep_default_na=False)
    if frame.shape[1] != len(COLUMNS):
        raise ValueError(f"lines of {frame.shape[1]} fields; expected {len(COLUMNS)}: {','.join(COLUMNS)}")
    frame.columns = COLUMNS
    return frame, per


def spark_sink_log(out: str) -> dict[int, list[str]]:
    """The committed files of a Structured Streaming file sink under `out`, per batch id, from its
    `_spark_metadata` log (`<batch id>` and `<batch id>.compact` files: "v1", then one JSON entry per
    line with the file's path and action; a compact file holds every entry up to it). Files written
    but not in the log are not committed and not returned."""
    from urllib.parse import unquote, urlparse

    logdir = os.path.join(out, SPARK_LOG)
    batches: dict[int, list[str]] = {}
    deleted: set[str] = set()
    seen: set[str] = set()
    names = [n for n in (os.listdir(logdir) if os.path.isdir(logdir) else []) if n.removesuffix(".compact").isdigit()]
    for name in sorted(names, key=lambda n: (int(n.removesuffix(".compact")), n.endswith(".compact"))):
        base = name.removesuffix(".compact")
        with open(os.path.join(logdir, name)) as f:
            lines = f.read().splitlines()
        for line in lines[1:]:
            if not line.strip():
                continue
            e = json.loads(line)
            path = unquote(urlparse(e["path"]).path)
            if e.get("action", "add") == "delete":
                deleted.add(path)
            elif path not in seen:
                seen.add(path)
                batches.setdefault(int(base), []).append(path)
    return {b: [p for p in ps if p not in deleted] for b, ps in sorted(batches.items())}


def commit_end(commits: dict[str, float], holders: Iterable[str]) -> tuple[float | None, str | None, list[str]]:
    """The window's end: the latest commit time among `holders` (the committed names that hold result
    lines). Returns (time, name, holders without a commit event)."""
    holders = sorted(set(holders))
    missing = [h for h in holders if h not in commits]
    known = [(commits[h], h) for h in holders if h in commits]
    if missing or not known:
        return None, None, missing
    t, name = max(known)
    return t, name, missing


def spark_time_ms(text: str | None) -> int | None:
    """A progress time (`2023-11-14T22:29:57.950Z`) as epoch ms."""
    if not text:
        return None
    return round(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp() * 1000)


def dir_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# ================================================================================================
# peer child: one SparkSession, one query per go file
# ================================================================================================
def child_main(spec_path: str) -> int:
    from structured_streaming_bench import _progress, emit

    emit("python_ready")
    with open(spec_path) as f:
        spec = json.load(f)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    emit("imported")
    t0 = time.monotonic()
    builder = SparkSession.builder.appName("sss-windowed-bench").master(spec["master"])
    for k, v in {
        # structured_streaming_bench.py's settings (those of taskmanager/spark_engine.py)
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
    }.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    emit("session", seconds=time.monotonic() - t0)
    i = 0
    while True:
        go = os.path.join(spec["dir"], f"go-{i:04d}.json")
        while not os.path.exists(go):
            time.sleep(0.005)
        with open(go) as f:
            q = json.load(f)
        if q.get("exit"):
            break
        spark.conf.set("spark.sql.shuffle.partitions", str(int(q["shuffle_partitions"])))
        t_def = time.monotonic()
        counts = (
            spark.readStream.schema(SCHEMA)
            .json(q["input"])
            .withColumn("et", F.timestamp_millis("ts"))
            .withWatermark("et", f"{int(q['delay_ms'])} milliseconds")
            .groupBy(F.window("et", f"{int(q['size_ms'])} milliseconds", f"{int(q['slide_ms'])} milliseconds"), "url")
            .count()
            .select(
                "url",
                F.unix_millis(F.col("window.start")).alias("window_start"),
                F.unix_millis(F.col("window.end")).alias("window_end"),
                "count",
            )
        )
        query = (
            counts.writeStream.outputMode("append")
            .format("csv")
            .option("path", q["out"])
            .option("checkpointLocation", q["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        t_started = time.monotonic()
        emit("started", query=i, seconds=t_started - t_def)
        query.awaitTermination()
        t_done = time.monotonic()
        progress = [
            {
                "batchId": p.get("batchId"),
                "numInputRows": p.get("numInputRows", 0),
                "triggerExecution": p.get("durationMs", {}).get("triggerExecution"),
                "watermark": p.get("eventTime", {}).get("watermark"),
                "state": [
                    {k: s.get(k) for k in ("numRowsTotal", "memoryUsedBytes", "numRowsDroppedByWatermark")}
                    for s in p.get("stateOperators", [])
                ],
            }
            for p in _progress(query)
        ]
        query.stop()
        emit("done", query=i, processing=t_done - t_started, progress=progress)
        i += 1
    spark.stop()
    emit("exit")
    return 0


# ================================================================================================
# the two systems
# ================================================================================================
class RunError(Exception):
    pass


def _write_atomically(path: str, text: str) -> None:
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class PeerSide:
    """The peer's SparkSession in this script's --child process; each run is a query handed to it by a
    go file."""

    system = PEER

    def __init__(self, work: str, master: int, timeout: float):
        self.dir = os.path.join(work, "peer")
        os.makedirs(self.dir, exist_ok=True)
        self.master, self.timeout = master, timeout
        self.next = 0
        self.child: Any = None
        self.t_spawn = 0.0

    def spawn(self) -> PeerSide:
        from structured_streaming_bench import Child

        class WindowedChild(Child):
            """structured_streaming_bench's Child (events on stdout, its own process group, killed with
            its JVM), running this script's child mode."""

            def __init__(self, spec: dict, workdir: str, name: str):
                self.name = name
                self.spec_path = os.path.join(workdir, f"{name}.spec.json")
                with open(self.spec_path, "w") as f:
                    json.dump(spec, f)
                self.log_path = os.path.join(workdir, f"{name}.log")
                self.events: list[dict] = []
                self.cond = threading.Condition()
                self.logf = open(self.log_path, "w")  # closed by Child.reap
                self.t_spawn = time.monotonic()
                self.proc = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--child", self.spec_path],
                    stdout=subprocess.PIPE,
                    stderr=self.logf,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    cwd=REPO,
                    start_new_session=True,
                )
                Child.live.append(self)
                self.reader = threading.Thread(target=self._read, daemon=True)
                self.reader.start()

        self.t_spawn = time.monotonic()
        self.child = WindowedChild({"master": f"local[{self.master}]", "dir": self.dir}, self.dir, "peer")
        return self

    def start(self) -> PeerSide:
        if self.child is None:
            self.spawn()
        self.child.wait_for("session", self.timeout)
        log(f"peer SparkSession local[{self.master}] ready {time.monotonic() - self.t_spawn:.1f}s after its spawn")
        return self

    def roots(self) -> list[int]:
        return [self.child.proc.pid] if self.child is not None and self.child.proc.poll() is None else []

    def prepare(self, out: str) -> str:
        """The directory whose commits end the window: the file sink's log."""
        path = os.path.join(out, SPARK_LOG)
        os.makedirs(path, exist_ok=True)
        return path

    def launch(self, wl: Workload, data: str, out: str, delay_ms: int, shuffle: int) -> Callable[[], dict]:
        i = self.next
        self.next += 1
        ckpt = out + "-ckpt"
        q = {
            "input": data,
            "out": out,
            "checkpoint": ckpt,
            "size_ms": wl.size_ms,
            "slide_ms": wl.slide_ms,
            "delay_ms": delay_ms,
            "shuffle_partitions": shuffle,
        }
        _write_atomically(os.path.join(self.dir, f"go-{i:04d}.json"), json.dumps(q))

        def wait() -> dict:
            done = self.child.wait_for("done", self.timeout, query=i)
            progress = done["progress"]
            state = [s for p in progress for s in p["state"]]
            watermark = spark_time_ms(progress[-1]["watermark"]) if progress else None
            r = {
                "batches": len(progress),
                "rows_in": sum(p["numInputRows"] for p in progress),
                "state_peak": max((s.get("memoryUsedBytes") or 0 for s in state), default=None),
                "state_rows_end": state[-1].get("numRowsTotal") if state else None,
                "late_dropped": sum(s.get("numRowsDroppedByWatermark") or 0 for s in state),
                "state_disk": dir_size(os.path.join(ckpt, "state")),
                "watermark": watermark,
            }
            shutil.rmtree(ckpt, ignore_errors=True)
            return r

        return wait

    def committed(self, out: str) -> tuple[list[str], dict[str, str]]:
        """(the committed data files, data file -> the name of the log file that committed it)."""
        files, by = [], {}
        logdir = os.path.join(out, SPARK_LOG)
        for batch, paths in spark_sink_log(out).items():
            name = str(batch) if os.path.exists(os.path.join(logdir, str(batch))) else f"{batch}.compact"
            for p in paths:
                files.append(p)
                by[p] = name
        return files, by

    def stop(self) -> None:
        if self.child is None:
            return
        try:
            if self.child.proc.poll() is None:
                _write_atomically(os.path.join(self.dir, f"go-{self.next:04d}.json"), json.dumps({"exit": True}))
                self.child.finish(30)
        finally:
            self.child.kill()


class SluiceSide:
    """One local cluster through page_views_bench.Cluster; windowed_page_views.py submitted with the CLI."""

    system = SLUICE

    def __init__(self, work: str, taskmanagers: int, slots: int, parallelism: int, timeout: float):
        from page_views_bench import Cluster

        self.cluster = Cluster(os.path.join(work, f"cluster-{taskmanagers}x{slots}"), taskmanagers, slots)
        self.parallelism, self.timeout = parallelism, timeout

    def start(self) -> SluiceSide:
        self.cluster.start()
        return self

    def roots(self) -> list[int]:
        return sorted(self.cluster.pids)

    def prepare(self, out: str) -> str:
        return out

    def launch(self, wl: Workload, data: str, out: str, delay_ms: int, interval_ms: int) -> Callable[[], dict]:
        from page_views_bench import sluice

        args = ["--input", data, "--output", out, "--window-ms", str(wl.size_ms)]
        if wl.slide_ms != wl.size_ms:
            args += ["--slide-ms", str(wl.slide_ms)]
        args += ["--out-of-orderness-ms", str(delay_ms), "--checkpoint-interval", str(interval_ms)]
        proc = sluice(
            "run",
            WINDOWED_JOB,
            "--detach",
            "--parallelism",
            str(self.parallelism),
            "--cluster-dir",
            self.cluster.dir,
            "--",
            *args,
            timeout=300,
        )
        job_id = proc.stdout.strip().splitlines()[-1].strip()

        def wait() -> dict:
            from page_views_bench import follow

            r = follow(self.cluster, job_id, self.timeout, time.time())
            if r["state"] != "FINISHED":
                st = r["status"]
                raise RunError(f"job {job_id} ended {r['state']}: {st['failure'] or st['message']}")
            done = [c for c in r["checkpoints"].values() if c["status"] == "COMPLETED"]
            return {
                "job_id": job_id,
                "restarts": r["status"]["restarts"],
                "records_dropped": r["status"].get("records_dropped"),
                "late_dropped": r["status"].get("records_late_dropped"),
                "checkpoints": len(done),
                "state_peak": max((c["size_bytes"] for c in done), default=None),
            }

        return wait

    def committed(self, out: str) -> tuple[list[str], dict[str, str]]:
        from sluice.output import committed_parts

        parts = committed_parts(out)
        return parts, {p: os.path.basename(p) for p in parts}

    def stop(self) -> None:
        self.cluster.stop()


# ================================================================================================
# runs
# ================================================================================================
class Bench:
    def __init__(self, args, work: str, data: str, events: int, expected: dict[str, Any]):
        self.args, self.work, self.data, self.events, self.expected = args, work, data, events, expected
        self.sides: dict[str, Any] = {}
        self.runs: list[dict] = []
        self.notes: list[str] = []
        self.n = 0
        self.failed = False
        self.shuffle: dict[str, int] = {}  # workload -> the peer's shuffle partitions

    def meter_systems(self, measured) -> dict[str, Callable[[], Iterable[int]]]:
        def others() -> list[int]:
            return [p for s in self.sides.values() if s is not measured for p in s.roots()]

        return {MEASURED: measured.roots, OTHERS: others}

    def run(self, system: str, wl: Workload, phase: str, shuffle: int | None = None) -> dict:
        from procstat import ResourceMeter, excluded
        from window import WindowWatch, commit_times, first_read

        side = self.sides[system]
        self.n += 1
        out = os.path.join(self.work, f"out-{self.n:04d}")
        os.makedirs(out)
        watched = side.prepare(out)
        if system == PEER:
            shuffle = shuffle or self.shuffle.get(wl.name, 2)
        r: dict = {"n": self.n, "phase": phase, "system": system, "workload": wl.name, "events": self.events}
        if system == PEER:
            r["shuffle"] = shuffle
        meter = ResourceMeter(self.meter_systems(side))
        started: list[bool] = []

        def on_first_read(_t: float) -> None:
            meter.start()
            started.append(True)

        watch = WindowWatch(self.data, watched, on_first_read=on_first_read)
        usage = None
        launch = None
        watch.start()
        try:
            launch = time.monotonic()
            knob = shuffle if system == PEER else self.args.checkpoint_interval
            wait = side.launch(wl, self.data, out, self.args.disorder_ms, knob)
            r.update(wait())
            r["end_seen"] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 — a failed run is reported, the others go on
            r["error"] = f"{type(exc).__name__}: {exc}".split("\n")[0][:400]
        finally:
            if started:
                usage = meter.stop()
            events = watch.stop()
        check = None
        holders: set[str] = set()
        if "error" not in r:
            try:
                files, committer = side.committed(out)
                got, per = read_lines(files)
                check = check_windows(
                    got,
                    self.expected[wl.name],
                    complete=system == SLUICE,
                    emitted_through=r.get("watermark") if system == PEER else None,
                )
                holders = {committer[p] for p, n in per.items() if n > 0}
            except Exception as exc:  # noqa: BLE001 — unreadable output fails the check, named
                check = WindowCheck(error=f"reading the output: {type(exc).__name__}: {exc}"[:300])
            r["output_rows"] = check.rows
            r["unemitted"] = check.missing if system == PEER else None
        r["check"] = check.describe() if check is not None else None
        r["check_ok"] = check is not None and check.ok
        read = first_read(events)
        commits = commit_times(events)
        end = end_name = None
        if watch.overflowed:
            r["window_error"] = "inotify queue overflowed"
        elif read is None:
            r["window_error"] = "no read of an input file seen"
        elif check is not None and check.ok:
            end, end_name, missing = commit_end(commits, holders)
            if missing:
                r["window_error"] = f"no commit event for {len(missing)} output files, e.g. {missing[0]}"
            elif end is None:
                r["window_error"] = "no committed output"
        window = end - read.t if end is not None and read is not None else None
        r.update(
            window=window,
            rate=self.events / window if window else None,
            startup=read.t - launch if read is not None and launch is not None else None,
            end_part=end_name,
            tail=r["end_seen"] - end if end is not None and "end_seen" in r else None,
        )
        if usage is not None:
            r["cpu_per_m"] = usage.cpu_per_million(MEASURED, self.events)
            r["other_cpu_s"] = usage.cpu_s.get(OTHERS, 0.0)
            r["foreign_cores"] = usage.foreign_cores()
            r["excluded"] = excluded(usage, self.args.max_foreign_cores or None)
        r["ok"] = "error" not in r and r["check_ok"] and window is not None
        what = f"run {self.n} ({system}, {wl.label}, {phase})"
        if "error" in r:
            self.notes.append(f"{what} failed: {r['error']}")
            if phase != "tuning":
                self.failed = True
        elif not r["check_ok"]:
            self.failed = True
            self.notes.append(f"{what}: OUTPUT CHECK FAILED: {r['check']} (output kept in {out})")
        elif r.get("window_error"):
            self.notes.append(f"{what}: no window: {r['window_error']}")
        if r["check_ok"]:
            shutil.rmtree(out, ignore_errors=True)  # an output that broke the check stays, for a look at it
        self.runs.append(r)
        log(
            f"{phase} run {self.n}: {system} {wl.label}{'' if shuffle is None else f' shuffle {shuffle}'}: window "
            f"{fmt(r['window'])} s = {fmt(r['rate'], ',.0f')} events/s, startup {fmt(r['startup'])} s, state "
            f"{size(r.get('state_peak'))}, CPU {fmt(r.get('cpu_per_m'))} s/M, foreign {fmt(r.get('foreign_cores'))}"
            + (" (excluded)" if r.get("excluded") else "")
            + f"; {r['check'] or r.get('error')}"
        )
        return r

    def tune_peer(self, workloads: Sequence[Workload], candidates: Sequence[int]) -> None:
        """One run per candidate shuffle-partition count and workload; the fastest valid one is kept."""
        for wl in workloads:
            if len(candidates) == 1:
                self.shuffle[wl.name] = candidates[0]
                continue
            tried = [(self.run(PEER, wl, "tuning", shuffle=s), s) for s in candidates]
            rated = [(r["rate"], s) for r, s in tried if r.get("ok") and r.get("rate")]
            self.shuffle[wl.name] = max(rated)[1] if rated else candidates[0]
            log(f"peer, {wl.label}: shuffle partitions {self.shuffle[wl.name]}")


# ================================================================================================
# report
# ================================================================================================
def valid(runs: Iterable[dict]) -> list[dict]:
    return [r for r in runs if r.get("ok")]


def kept(runs: Iterable[dict]) -> list[dict]:
    return [r for r in valid(runs) if not r.get("excluded")]


def est(runs: Sequence[dict], key: str) -> Estimate:
    v = valid(runs)
    k = [r for r in v if not r.get("excluded")]
    return median_ci((r.get(key) for r in k), excluded=len(v) - len(k))


def fmt_bytes_est(e: Estimate) -> str:
    if e.median is None:
        return "—"
    if e.low is None or e.high is None:
        return f"{size(e.median)} (1 run)"
    return f"{size(e.median)} [{size(e.low)}–{size(e.high)}]"


def run_row(r: dict, workloads: dict[str, Workload]) -> str:
    state = (
        f"checkpoint {size(r.get('state_peak'))}"
        if r["system"] == SLUICE
        else f"memory {size(r.get('state_peak'))}, disk {size(r.get('state_disk'))}"
    )
    out = "yes" if r["check_ok"] else ("**NO**" if r.get("check") else "failed")
    if r.get("error"):
        out += f": {r['error'][:120]}"
    elif r.get("check") and not r["check_ok"]:
        out += f": {r['check'][:160]}"
    elif r.get("window_error"):
        out += f" (no window: {r['window_error']})"
    cfg = "1 TM x 2 slots, p=2" if r["system"] == SLUICE else f"local[2], shuffle {r.get('shuffle')}"
    return (
        f"| {r['n']} | {r['phase']} | {workloads[r['workload']].label} | {r['system']} | {cfg} | {fmt(r['window'])} | "
        f"{fmt(r['rate'], ',.0f')} | {fmt(r['startup'])} | {fmt(r.get('cpu_per_m'))} | {state} | "
        f"{fmt(r.get('output_rows'), ',')} | {fmt(r.get('unemitted'), ',')} | {fmt(r.get('late_dropped'), ',')} | "
        f"{fmt(r.get('foreign_cores'))}{' (excluded)' if r.get('excluded') else ''} | {out} |"
    )


def report(facts: dict, command: str, runs: Sequence[dict], plan: dict, notes: Sequence[str]) -> str:
    workloads: dict[str, Workload] = plan["workloads"]
    L = section_head("Event-time windows: Sluice vs Spark Structured Streaming", command, facts)
    if any(r.get("check") and not r["check_ok"] for r in runs):
        L += ["**OUTPUT CHECK FAILED** (see the notes).", ""]
    L.append(
        f"Input: {plan['events']:,} events ({plan['files']} files, {plan['urls']:,} urls, seed {SEED}), timestamps "
        f"out of order by up to {plan['disorder_ms']:,} ms; both systems' out-of-orderness bound "
        f"{plan['disorder_ms']:,} ms. "
        "Count per url and window (aligned to epoch 0). Sluice: 1 TaskManager x 2 slots, parallelism 2, "
        f"`examples/windowed_page_views.py`, checkpoints every {plan['checkpoint_interval']} ms. Peer: local[2], "
        "`withWatermark` + `groupBy(window(...), url).count()`, append mode, CSV file sink, Trigger.AvailableNow "
        f"(maxFilesPerTrigger unset); shuffle partitions {plan['shuffle_text']}."
    )
    L.append("")
    L.append(
        "Window = first read of an input file (inotify IN_ACCESS) → commit of the last output holding a result "
        "line (Sluice: the rename of its part; peer: the rename of `_spark_metadata/<batch>` that commits its "
        "files); events/s = events / window; startup = launch → first read; CPU = the measured system's processes "
        "from the first read to the end seen by the harness, per million events. State: Sluice the largest "
        "completed checkpoint of the run (`size_bytes`); peer the largest `memoryUsedBytes` of its state operator "
        "(StreamingQueryProgress) and its checkpoint's `state/` on disk at the end. Output check: Sluice every "
        "expected (url, window) committed once with its exact count; peer every emitted window exact and once, "
        "every window whose end is at or below its final watermark emitted, the rest *unemitted* (append mode "
        "keeps them in state when the bounded input ends). Medians with percentile-bootstrap 95 % intervals over the "
        f"kept runs (load rule: other processes above {plan['max_foreign_cores']} cores on average exclude a run); "
        "ratio Sluice/peer of the median events/s (above 1: Sluice faster); *every valid run*: the same median with "
        "the load rule off (this machine is shared). Late dropped: Sluice `records_late_dropped`, peer "
        "`numRowsDroppedByWatermark` (0 expected: the bound is the disorder). Latency from the watermark passing a "
        "window's end to the commit of its row: not measured (the peer's bounded AvailableNow run passes every "
        "window's end at once, in its final no-data batch)."
    )
    L.append("")
    measured = [r for r in runs if r["phase"] == "measured"]
    L += [
        "| workload | system | runs kept/valid/all | events/s | ratio S/P | events/s, every valid run | window s | "
        "startup s | CPU s per M events | state (peak) | output windows | unemitted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for wl in workloads.values():
        rs = {s: [r for r in measured if r["workload"] == wl.name and r["system"] == s] for s in (SLUICE, PEER)}
        rate = {s: est(rs[s], "rate") for s in rs}
        ratio = rate[SLUICE].median / rate[PEER].median if rate[SLUICE].median and rate[PEER].median else None
        for s in (SLUICE, PEER):
            runs_s = rs[s]
            if not runs_s:
                continue
            state = fmt_bytes_est(est(runs_s, "state_peak"))
            if s == PEER:
                state = f"memory {state}; disk {fmt_bytes_est(est(runs_s, 'state_disk'))}"
            else:
                state = f"checkpoint {state}"
            L.append(
                f"| {wl.label} | {s} | {len(kept(runs_s))}/{len(valid(runs_s))}/{len(runs_s)} | "
                f"{fmt_estimate(rate[s])} | {fmt(ratio) if s == SLUICE else ''} | "
                f"{fmt_estimate(median_ci(r['rate'] for r in valid(runs_s)))} | "
                f"{fmt_estimate(est(runs_s, 'window'), '.2f')} | "
                f"{fmt_estimate(est(runs_s, 'startup'), '.2f')} | {fmt_estimate(est(runs_s, 'cpu_per_m'), '.2f')} | "
                f"{state} | {fmt_estimate(est(runs_s, 'output_rows'), ',.0f')} | "
                f"{'—' if s == SLUICE else fmt_estimate(est(runs_s, 'unemitted'), ',.0f')} |"
            )
    L.append("")
    L.append(
        "Expected windows: "
        + "; ".join(f"{workloads[w].label} {n:,} (url, window) rows" for w, n in plan["expected_rows"].items())
        + "."
    )
    L.append("")
    L += ["### Every run", ""]
    L += [
        "| run | phase | workload | system | configuration | window s | events/s | startup s | CPU s per M | state | "
        "output windows | unemitted | late dropped | foreign cores | output exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    L += [run_row(r, workloads) for r in runs]
    L.append("")
    L += notes_lines(notes)
    return "\n".join(L) + "\n"


# ================================================================================================
# main
# ================================================================================================
def sluice_ready() -> str | None:
    """Why the Sluice side cannot run yet (None: it can)."""
    if not os.path.exists(WINDOWED_JOB):
        return f"{os.path.relpath(WINDOWED_JOB, REPO)} does not exist"
    try:
        import sluice.api as api
    except Exception as exc:  # noqa: BLE001 — reported, not raised
        return f"sluice.api does not import: {exc}"
    if not hasattr(api, "TumblingEventTimeWindows"):
        return "sluice.api has no TumblingEventTimeWindows"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="200,000 events, 2 runs per system and workload")
    ap.add_argument("--events", type=int, default=None, help="events (default 1,000,000; quick 200,000)")
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--disorder-ms", type=int, default=2000, help="timestamps out of order by up to this; the bound")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per system and workload (5; quick 2)")
    ap.add_argument("--workloads", default="tumbling,sliding", help=f"any of {', '.join(WORKLOADS)}")
    ap.add_argument(
        "--peer-shuffle",
        default=None,
        help="the peer's shuffle partitions to try (fastest kept per workload); default 2,200 (200: Spark's "
        "default); quick 2",
    )
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="Sluice's, in ms")
    ap.add_argument("--skip-sluice", action="store_true", help="the peer only (e.g. before the Sluice job exists)")
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--max-foreign-cores", type=float, default=None, help="the load rule (procstat; 0: off)")
    ap.add_argument("--job-timeout", type=float, default=900)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to ('-': none)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args()
    if args.child:
        return child_main(args.child)
    from procstat import FOREIGN_CORES_LIMIT

    if args.max_foreign_cores is None:
        args.max_foreign_cores = FOREIGN_CORES_LIMIT
    events = args.events or (200_000 if args.quick else 1_000_000)
    runs = args.runs or (2 if args.quick else 5)
    shuffle = [int(x) for x in (args.peer_shuffle or ("2" if args.quick else "2,200")).split(",") if x.strip()]
    try:
        workloads = {w: WORKLOADS[w.strip()] for w in args.workloads.split(",") if w.strip()}
    except KeyError as exc:
        ap.error(f"unknown workload {exc}; known: {', '.join(WORKLOADS)}")
    if args.disorder_ms < 0 or events <= 0 or runs < 1 or not shuffle or not workloads:
        ap.error("--disorder-ms >= 0, --events > 0, --runs >= 1, --peer-shuffle and --workloads not empty")
    systems = [s for s, skip in ((SLUICE, args.skip_sluice), (PEER, args.skip_peer)) if not skip]
    if SLUICE in systems and (why := sluice_ready()):
        log(f"the Sluice side cannot run: {why} (--skip-sluice runs the peer only)")
        return 2
    if not systems:
        ap.error("nothing to run")

    command, facts, temp, work = begin_run(REPO, args.workdir, "windowed-bench-", log)
    t_begin = time.monotonic()
    from generate_page_views import expected_windows, generate

    data = os.path.join(work, "input")
    files = max(1, -(-events // EVENTS_PER_FILE))
    t0 = time.monotonic()
    generate(data, events=events, files=files, urls=args.urls, seed=SEED, disorder_ms=args.disorder_ms)
    expected = {w.name: expected_windows(data, w.size_ms, w.slide_ms) for w in workloads.values()}
    log(
        f"generated {events:,} events in {files} files, disorder {args.disorder_ms} ms; expected "
        + ", ".join(f"{w}: {len(e):,} windows" for w, e in expected.items())
        + f" ({time.monotonic() - t0:.1f}s)"
    )
    bench = Bench(args, work, data, events, expected)
    interrupted = False
    plan = {
        "workloads": workloads,
        "events": events,
        "files": files,
        "urls": args.urls,
        "disorder_ms": args.disorder_ms,
        "checkpoint_interval": args.checkpoint_interval,
        "max_foreign_cores": args.max_foreign_cores or "off",
        "expected_rows": {w: len(e) for w, e in expected.items()},
        "shuffle_text": "",
    }
    try:
        if PEER in systems:
            bench.sides[PEER] = PeerSide(work, 2, args.job_timeout).spawn()  # its JVM starts while the cluster does
        if SLUICE in systems:
            bench.sides[SLUICE] = SluiceSide(work, 1, 2, 2, args.job_timeout).start()
        if PEER in systems:
            bench.sides[PEER].start()
        for wl in workloads.values():
            for s in systems:
                bench.run(s, wl, "warm-up", shuffle=shuffle[0] if s == PEER else None)
        if PEER in systems:
            bench.tune_peer(list(workloads.values()), shuffle)
        log(f"{runs} measured runs per system and workload, alternating {', '.join(systems)}")
        for _ in range(runs):
            for wl in workloads.values():
                for s in systems:
                    bench.run(s, wl, "measured")
    except KeyboardInterrupt as exc:
        interrupted = True
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping the cluster and the SparkSession")
        raise
    except BaseException as exc:
        bench.failed = True
        log(f"aborting: {type(exc).__name__}: {exc}")
        bench.notes.append(f"aborted: {type(exc).__name__}: {exc}".split("\n")[0])
        raise
    finally:
        for name, side in list(bench.sides.items()):
            try:
                side.stop()
            except BaseException as exc:  # noqa: BLE001 — teardown goes on to the other side
                log(f"warning: stopping {name}: {exc}")
        from structured_streaming_bench import Child

        Child.kill_all()
        if PEER in systems:
            tuned = [r for r in bench.runs if r["phase"] == "tuning"]
            chosen = ", ".join(f"{workloads[w].label}: {s}" for w, s in bench.shuffle.items()) or str(shuffle[0])
            plan["shuffle_text"] = (
                f"{chosen}, the fastest of {', '.join(map(str, shuffle))} in one tuning run each ("
                + "; ".join(
                    f"{workloads[r['workload']].label} at {r['shuffle']}: {fmt(r['rate'], ',.0f')} events/s"
                    for r in tuned
                )
                + ")"
                if tuned
                else f"{chosen} (not tuned)"
            )
        if SLUICE not in systems:
            bench.notes.append("The Sluice side was not run (--skip-sluice).")
        if PEER not in systems:
            bench.notes.append("The peer was not run (--skip-peer).")
        if bench.runs:
            bench.notes.append(f"The invocation took {time.monotonic() - t_begin:.0f} s.")
            section = report(facts, command, bench.runs, plan, bench.notes)
            if args.out in ("", "-"):
                print("\n" + section, flush=True)
            else:
                publish(section, args.out, log)
        finish_workdir(work, temp and (interrupted or not bench.failed) and not args.keep_workdir, log)
    return 1 if bench.failed else 0


if __name__ == "__main__":
    run_main(main)
