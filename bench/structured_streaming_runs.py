"""The Structured Streaming peer's runs, made from the parent (bench/structured_streaming_bench.py,
and bench/compare.py with the same functions): its input (`prepare_input`), its throughput runs
(`throughput`: warm-up queries, then the counted ones, each a fresh child or all in one shared
SparkSession) and its recovery runs (`recovery_run`: kill -9 of the driver after its first commit,
a restart on the same checkpoint, timed from the kill). Each run's output is checked
(bench/output_check.py). A run is a dict of figures (`structured_streaming_report.py` writes them).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench_common import fmt, pct
from stats import load1
from structured_streaming_child import REPO, BenchError, Child, log

EXAMPLES = os.path.join(REPO, "examples")
DIR_POLL = 0.02  # seconds between checkpoint/output directory listings (recovery)


# -- data ------------------------------------------------------------------------------------------
def count_urls(given: str) -> dict[str, int]:
    """Each url's events in the *.jsonl files of directory `given` (hidden and `_` files skipped)."""
    counts: dict[str, int] = {}
    for path in sorted(glob.glob(os.path.join(given, "*"))):
        if os.path.basename(path).startswith((".", "_")) or os.path.isdir(path):
            continue
        with open(path) as f:
            for line in f:
                if line.strip():
                    url = json.loads(line)["url"]
                    counts[url] = counts.get(url, 0) + 1
    return counts


def prepare_input(work: str, name: str, given: str | None, events: int, files: int, seed: int) -> tuple[str, dict, int]:
    """(input directory, expected count per url, events): `given`'s files counted, or `events` page
    views generated into `files` files under work/name."""
    if given:
        t0 = time.monotonic()
        counts = count_urls(given)
        n = sum(counts.values())
        log(f"using {given}: {n:,} events, {len(counts)} urls (counted in {time.monotonic() - t0:.1f}s)")
        return os.path.abspath(given), counts, n
    sys.path.insert(0, EXAMPLES)
    from generate_page_views import generate

    data = os.path.join(work, name)
    t0 = time.monotonic()
    expected = generate(data, events=events, files=files, urls=10_000, seed=seed)
    log(f"generated {events:,} events in {files} files ({len(expected)} urls) in {time.monotonic() - t0:.1f}s")
    return data, expected, events


def check_output(out: str, expected: dict):
    """bench/output_check.py's rules over this query's batch files. Imported here, in the parent:
    the child's process start (reported as startup) stays what it was."""
    from output_check import check_peer_output

    return check_peer_output(out, expected)


def query_spec(data: str, ckpt: str, out: str, mfpt: int, trigger_ms: int | None) -> dict:
    return {"input": data, "checkpoint": ckpt, "out": out, "max_files_per_trigger": mfpt, "trigger_ms": trigger_ms}


def progress_time(p: dict) -> float:
    """A micro-batch's trigger start (progress `timestamp`, ISO 8601 UTC) as epoch seconds."""
    return datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def batch_stats(progress: list[dict]) -> dict:
    """Input rows, batches with input, their durations (ms) and per batch (start epoch s, rows, ms):
    a batch's rows are read after its start and their counts are committed at its end."""
    with_input = [
        p for p in progress if p.get("numInputRows", 0) > 0 and p["durationMs"].get("triggerExecution") is not None
    ]
    return {
        "rows": sum(p.get("numInputRows", 0) for p in progress),
        "batches": len(with_input),
        "latencies": [p["durationMs"]["triggerExecution"] for p in with_input],
        "detail": [(progress_time(p), p["numInputRows"], p["durationMs"]["triggerExecution"]) for p in with_input],
    }


# -- throughput --------------------------------------------------------------------------------------
def throughput_queries(args, work: str, data: str) -> list[tuple[str, dict]]:
    """The throughput queries in run order, (label, query spec): `args.warmups` (default 1)
    uncounted ones first (the JVM's JIT warms up over several), then `args.runs` counted ones, each
    with its own checkpoint and output."""
    warmups = getattr(args, "warmups", 1)
    names = [(f"warmup{i + 1}", "warm-up") for i in range(warmups)] + [
        (f"run{i + 1}", f"run {i + 1}") for i in range(args.runs)
    ]
    return [
        (
            label,
            query_spec(
                data,
                os.path.join(work, f"ckpt-{name}"),
                os.path.join(work, f"out-{name}"),
                args.max_files_per_trigger,
                args.trigger_ms,
            ),
        )
        for name, label in names
    ]


def query_figures(child: Child, qi: int, events: int, timeout: float, with_session: bool) -> dict:
    """Query `qi`'s timings from the child's events, once it is done (with its SparkSession's when
    the child started for it)."""
    started = child.wait_for("started", timeout, query=qi)
    done = child.wait_for("done", timeout, query=qi)
    st = batch_stats(done["progress"])
    r = {
        "query_start": started["seconds"],
        "processing": done["processing"],
        "throughput": events / done["processing"],
        "rows": st["rows"],
        "batches": st["batches"],
        "latencies": st["latencies"],
        "detail": st["detail"],
        "load_start": started.get("load"),  # the machine's, taken by the child when the query started
        "load_end": done.get("load"),
    }
    if with_session:
        imported, session = child.wait_for("imported", 60), child.wait_for("session", 60)
        r["process"] = imported["t"] - child.t_spawn
        r["session"] = session["seconds"]
        r["startup"] = session["seconds"] + started["seconds"]
        r["total"] = done["t"] - child.t_spawn
    else:
        r["process"] = r["session"] = None
        r["startup"] = started["seconds"]
        r["total"] = done["t"] - child.wait_for("starting", 60, query=qi)["t"]
    return r


def collect_run(args, child: Child, qi: int, spec: dict, label: str, with_session: bool, expected: dict, events: int):
    """One throughput run's figures and notes: query `qi` of `child`, its output checked (and
    removed when it passed, with its checkpoint)."""
    notes: list[str] = []
    figures = query_figures(child, qi, events, args.timeout, with_session)
    check = check_output(spec["out"], expected)
    r = {"label": label, **figures, "counts_ok": check.ok, "output_check": check}
    if r["rows"] != events:
        notes.append(f"{label}: progress reports {r['rows']:,} input rows, expected {events:,}")
    if not r["counts_ok"]:
        notes.append(f"{label}: OUTPUT CHECK FAILED: {check.describe()}")
    log(
        f"{label}: startup {fmt(r['startup'])}s (session {fmt(r['session'])}s, query start "
        f"{r['query_start']:.2f}s), processing {r['processing']:.2f}s = {r['throughput']:,.0f} events/s, "
        f"{r['batches']} batches, p50 {fmt(pct(r['latencies'], 50), '.0f')} ms, "
        f"output {check.describe()}"
    )
    if check.ok:  # an output that broke the check stays, for a look at it
        shutil.rmtree(spec["out"], ignore_errors=True)
    shutil.rmtree(spec["checkpoint"], ignore_errors=True)
    return r, notes


def run_child(args, child: Child, queries: list[tuple[str, dict]], expected: dict, events: int, out: tuple) -> None:
    """Collect `queries` (query i of `child`, the first with the child's SparkSession start) into
    `out` (results, notes), then let the child exit."""
    results, notes = out
    try:
        for i, (label, spec) in enumerate(queries):
            r, n = collect_run(args, child, i, spec, label, i == 0, expected, events)
            results.append(r)
            notes += n
        child.finish(120)
    finally:
        child.kill()


def throughput(args, work: str, data: str, expected: dict, events: int) -> tuple[list[dict], list[str]]:
    """The throughput runs (warm-ups first, labelled "warm-up"), each query in a fresh child
    (--session per-run) or all of them in one (shared)."""
    queries = throughput_queries(args, work, data)
    out: tuple[list[dict], list[str]] = ([], [])
    if args.session == "shared":
        shared = Child({"queries": [spec for _, spec in queries]}, work, "throughput-shared")
        run_child(args, shared, queries, expected, events, out)
    else:
        for i, (label, spec) in enumerate(queries):
            run_child(args, Child({"queries": [spec]}, work, f"throughput-{i}"), [(label, spec)], expected, events, out)
    return out


# -- recovery --------------------------------------------------------------------------------------
def _commits(ckpt: str) -> set[str]:
    try:
        return {n for n in os.listdir(os.path.join(ckpt, "commits")) if n.isdigit()}
    except FileNotFoundError:
        return set()


def _outputs(out: str) -> dict[str, tuple[int, int]]:
    files = {}
    try:
        with os.scandir(out) as it:
            for e in it:
                if e.name.startswith("batch-"):
                    try:
                        st = e.stat()
                        files[e.name] = (st.st_ino, st.st_mtime_ns)
                    except FileNotFoundError:
                        pass
    except FileNotFoundError:
        pass
    return files


def await_first_commit(first: Child, ckpt: str, n: int, timeout: float) -> None:
    """Until the first child's query has committed a micro-batch (its checkpoint's commits/ has a
    file); BenchError if it exits, finishes or takes longer than `timeout` before that."""
    deadline = time.monotonic() + timeout
    while not _commits(ckpt):
        if first.proc.poll() is not None:
            raise BenchError(
                f"recovery {n}: the first child exited {first.proc.returncode} before a commit; "
                f"see {first.log_path}:\n{first.tail()}"
            )
        if first.find("done") is not None:
            raise BenchError(f"recovery {n}: all input processed before a commit was seen")
        if time.monotonic() > deadline:
            raise BenchError(f"recovery {n}: no commit within {timeout:.0f}s")
        time.sleep(DIR_POLL)
    try:  # the committed batch's progress reaches the parent ~0.1 s later: wait for it, for the timeline
        first.wait_for("batch", 2.0)
    except BenchError:
        pass


def batches_before(first: Child) -> list[tuple[float, int, int]]:
    """The killed child's micro-batches with input: (start epoch s, rows, ms)."""
    return [
        (
            progress_time(e["progress"]),
            e["progress"]["numInputRows"],
            e["progress"]["durationMs"].get("triggerExecution", 0),
        )
        for e in first.events
        if e["event"] == "batch" and e["progress"]["numInputRows"]
    ]


def watch_restart(second: Child, ckpt: str, out: str, before_commits: set, before_out: dict, n: int, timeout: float):
    """(time of the first new commit, its batch id, time of the first output file written or
    rewritten, its name) after the restart, each None if the restarted child ended without it."""
    t_commit = t_output = None
    first_commit = first_output = None
    deadline = time.monotonic() + timeout
    while t_commit is None or t_output is None:
        now = time.monotonic()
        if t_commit is None and _commits(ckpt) - before_commits:
            t_commit = now
            first_commit = min(map(int, _commits(ckpt) - before_commits))
        if t_output is None:
            changed = [name for name, v in _outputs(out).items() if before_out.get(name) != v]
            if changed:
                t_output, first_output = now, min(changed)
        if second.proc.poll() is not None and not (t_commit and t_output):
            break
        if now > deadline:
            raise BenchError(f"recovery {n}: no progress within {timeout:.0f}s after the restart")
        time.sleep(DIR_POLL)
    return t_commit, first_commit, t_output, first_output


def kill_first(first: Child, ckpt: str, out: str, n: int, notes: list[str]) -> tuple[dict, float, set, dict]:
    """SIGKILL the first child's process group (Python + JVM) now: (the run's figures of the time
    before the kill, the kill's time, the commits and output files there were)."""
    before_commits = _commits(ckpt)
    before_out = _outputs(out)
    t_kill, t_kill_wall = time.monotonic(), time.time()
    first.kill()
    t_killed = time.monotonic()
    if first.find("done") is not None:
        notes.append(
            f"recovery {n}: the first child had processed all input before the kill "
            "(make --recovery-events larger or --recovery-max-files-per-trigger smaller)"
        )
    r: dict[str, Any] = {
        "commits_before": len(before_commits),
        "last_commit_before": max(map(int, before_commits)),
        "before_kill": t_kill - first.t_spawn,
        "kill_reaped": t_killed - t_kill,
        "t_kill_wall": t_kill_wall,
        "before": batches_before(first),
    }
    log(
        f"recovery {n}: killed the first child {r['before_kill']:.1f}s after its start, commits "
        f"{sorted(map(int, before_commits))}, {len(before_out)} output files"
    )
    return r, t_kill, before_commits, before_out


def after_restart(
    second: Child, ckpt: str, out: str, t_kill: float, seen: tuple, expected: dict, timeout: float
) -> dict:
    """The restarted child's figures, timed from the kill (`seen`: `watch_restart`'s), once it has
    processed everything and exited; its output checked."""
    t_commit, first_commit, t_output, first_output = seen
    imported = second.wait_for("imported", 60)
    session = second.wait_for("session", 60)
    started = second.wait_for("started", 60)
    done = second.wait_for("done", timeout)
    second.finish(120)
    st = batch_stats(done["progress"])
    check = check_output(out, expected)
    return {
        "spawn": second.t_spawn - t_kill,
        "process": imported["t"] - second.t_spawn,
        "session": session["seconds"],
        "query_start": started["seconds"],
        "ready": started["t"] - t_kill,  # kill -> query started again
        "first_output": None if t_output is None else t_output - t_kill,
        "first_output_name": first_output,
        "first_commit": None if t_commit is None else t_commit - t_kill,
        "first_commit_id": None if t_commit is None else first_commit,
        "first_batch": None if t_commit is None else t_commit - started["t"],  # query started -> commit
        "rest": done["processing"],
        "rows_after": st["rows"],
        "batches_after": st["batches"],
        "after": st["detail"],
        "total_runtime": done["t"] - second.t_spawn,  # the run adds its time before the kill
        "counts_ok": check.ok,
        "output_check": check,
        "load_end": done.get("load"),
    }


def recovery_run(args, work: str, data: str, expected: dict, events: int, n: int) -> tuple[dict, list[str]]:
    """Recovery run `n`: the query over `data` in a child, killed after its first commit, restarted
    at once on the same checkpoint and output and run to the end. Its figures and notes."""
    notes: list[str] = []
    ckpt, out = os.path.join(work, f"ckpt-recovery-{n}"), os.path.join(work, f"out-recovery-{n}")
    query = query_spec(data, ckpt, out, args.recovery_max_files_per_trigger, args.trigger_ms)
    spec = {"queries": [{**query, "stream_progress": True}]}
    load_start = load1()
    first = Child(spec, work, f"recovery-{n}-first")
    second = None
    try:
        await_first_commit(first, ckpt, n, args.timeout)
        before, t_kill, before_commits, before_out = kill_first(first, ckpt, out, n, notes)
        r: dict[str, Any] = {"run": n, "load_start": load_start, **before}
        second = Child(spec, work, f"recovery-{n}-restart")
        seen = watch_restart(second, ckpt, out, before_commits, before_out, n, args.timeout)
        r.update(after_restart(second, ckpt, out, t_kill, seen, expected, args.timeout))
        r["total_runtime"] += r["before_kill"]
        if not r["counts_ok"]:
            notes.append(f"recovery {n}: OUTPUT CHECK FAILED after the restart: {r['output_check'].describe()}")
        if r["before_kill"] + r["rest"] < 15:
            notes.append(f"recovery {n}: the query ran < 15 s in all (make --recovery-events larger)")
        log(
            f"recovery {n}: after the kill: process {r['spawn'] + r['process']:.2f}s, SparkSession "
            f"+{r['session']:.2f}s, query started {r['ready']:.2f}s, first output {fmt(r['first_output'])}s "
            f"({r['first_output_name']}), first commit {fmt(r['first_commit'])}s (batch {r['first_commit_id']}); "
            f"rest of the input {r['rest']:.1f}s, output {r['output_check'].describe()}"
        )
        return r, notes
    finally:
        first.kill()
        if second is not None:
            second.kill()
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)
