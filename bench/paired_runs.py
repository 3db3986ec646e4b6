"""What bench/windowed_bench.py and bench/state_bench.py share: Sluice on one local cluster and the
peer (Spark Structured Streaming, bench/spark_peer.py) run the same job over the same input,
alternating run by run, each run timed from the outside (bench/window.py) with the load rule of
bench/procstat.py.

- readers (pure): headerless CSV output files, the window's end among commit times;
- `SluiceSide`: a local cluster, jobs submitted with the CLI (each script subclasses it, and
  spark_peer.PeerSide, with its own launch);
- `PairedBench`: a run (`timed_launch`: watch, meter, launch; then check, window, CPU) and the
  peer's shuffle tuning, the script's job or workload ("item") specifics in a few hooks;
  `timed_launch`, `usage_figures` and `close_run` serve bench/throughput_suite.py's runs too;
- the command line both scripts share and `conduct`: a script's main loop (warm-up, tuning, rounds
  that alternate the systems, in bench/run_matrix.py's order), teardown and the section appended to
  bench/RESULTS.md; the cells both reports print are in bench/paired_report.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench_common import aborted, finish_workdir, fmt, publish, size
from run_matrix import matrix, warm_ups

if TYPE_CHECKING:
    from spark_peer import PeerSide

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE, PEER = "Sluice", "peer"
MEASURED, OTHERS = "measured", "others"  # ResourceMeter systems: the run's system; the other one (idle)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class RunError(Exception):
    pass


# ================================================================================================
# readers (pure)
# ================================================================================================
def read_rows(paths: Iterable[str], columns: Sequence[str], strict: bool = False) -> tuple[Any, dict[str, int]]:
    """The headerless CSV lines of `paths` as one DataFrame of strings with `columns`, and the number
    of lines per path. `strict`: lines of another number of fields raise ValueError; otherwise a short
    line's missing fields are empty (left to the output check)."""
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
        return pd.DataFrame({c: pd.Series(dtype=str) for c in columns}), per
    if strict:
        frame = pd.read_csv(io.BytesIO(bytes(data)), header=None, dtype=str, keep_default_na=False)
        if frame.shape[1] != len(columns):
            raise ValueError(f"lines of {frame.shape[1]} fields; expected {len(columns)}: {','.join(columns)}")
        frame.columns = list(columns)
        return frame, per
    frame = pd.read_csv(
        io.BytesIO(bytes(data)), header=None, dtype=str, keep_default_na=False, names=list(columns), index_col=False
    )
    return frame, per


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


# ================================================================================================
# the two systems
# ================================================================================================
class SluiceSide:
    """One local cluster through page_views_bench.Cluster; the script's example jobs submitted with the
    CLI. `command_in_errors`: a failed job's error names the command that submitted it."""

    system = SLUICE
    command_in_errors = True

    def __init__(self, work: str, taskmanagers: int, slots: int, parallelism: int, timeout: float):
        from page_views_runs import Cluster

        self.cluster = Cluster(os.path.join(work, f"cluster-{taskmanagers}x{slots}"), taskmanagers, slots)
        self.parallelism, self.timeout = parallelism, timeout
        self.last_command = ""

    def start(self) -> SluiceSide:
        self.cluster.start()
        return self

    def roots(self) -> list[int]:
        return sorted(self.cluster.pids)

    def prepare(self, out: str) -> str:
        return out

    def submit(self, path: str, args: Sequence[str]) -> Callable[[], dict]:
        """`sluice run path --detach` with the job's `args`; the wait follows the job to its end."""
        from page_views_runs import sluice

        cmd = ("run", path, "--detach", "--parallelism", str(self.parallelism), "--cluster-dir", self.cluster.dir)
        self.last_command = "sluice " + " ".join((*cmd, "--", *args))
        proc = sluice(*cmd, "--", *args, timeout=300)
        job_id = proc.stdout.strip().splitlines()[-1].strip()

        def wait() -> dict:
            from page_views_runs import follow

            r = follow(self.cluster, job_id, self.timeout, time.time())
            if r["state"] != "FINISHED":
                st = r["status"]
                why = f"job {job_id} ended {r['state']}: {st['failure'] or st['message']}"
                raise RunError(why + (f" (command: {self.last_command})" if self.command_in_errors else ""))
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
@dataclass
class Timed:
    """What `timed_launch` saw: the launch time, the watches' events, whether a watch's inotify queue
    overflowed, the meter's usage (None: no input read, the meter never started)."""

    launch: float | None
    events: list
    overflowed: bool
    usage: Any


def timed_launch(
    r: dict,
    systems: dict[str, Callable[[], Iterable[int]]],
    watched: Sequence[tuple[str, str]],
    start: Callable[[], Callable[[], dict]],
    error_chars: int,
) -> Timed:
    """One run, watched and metered from the outside: a WindowWatch per (input, output) directory of
    `watched`, a ResourceMeter of `systems` started at the first read of an input file; `start()`
    launches the run and returns its wait, whose figures go into `r` (a failure: `r["error"]`, cut to
    `error_chars`)."""
    from procstat import ResourceMeter
    from window import WindowWatch

    meter = ResourceMeter(systems)
    started: list[bool] = []
    lock = threading.Lock()

    def on_first_read(_t: float) -> None:
        with lock:
            if not started:
                meter.start()
                started.append(True)

    watches = [WindowWatch(i, o, on_first_read=on_first_read) for i, o in watched]
    usage = None
    launch = None
    for w in watches:
        w.start()
    try:
        launch = time.monotonic()
        wait = start()
        r.update(wait())
        r["end_seen"] = time.monotonic()
    except Exception as exc:  # noqa: BLE001 — a failed run is reported, the others go on
        r["error"] = f"{type(exc).__name__}: {exc}".split("\n")[0][:error_chars]
    finally:
        with lock:
            if started:
                usage = meter.stop()
        events = [e for w in watches for e in w.stop()]
    return Timed(launch, events, any(w.overflowed for w in watches), usage)


def usage_figures(usage: Any, events: int, max_foreign_cores: float | None) -> dict:
    """The measured system's CPU per million events, the other processes' CPU, and the load rule."""
    from procstat import excluded

    return {
        "cpu_per_m": usage.cpu_per_million(MEASURED, events),
        "other_cpu_s": usage.cpu_s.get(OTHERS, 0.0),
        "foreign_cores": usage.foreign_cores(),
        "excluded": excluded(usage, max_foreign_cores or None),
    }


def close_run(runs: list[dict], r: dict, out: str, line: str) -> None:
    """A run's end: its output removed when it passed the check (one that broke it stays, for a look at
    it), the run kept, its log line (`line`, then whether the load rule excluded it and the check)."""
    if r["check_ok"]:
        shutil.rmtree(out, ignore_errors=True)
    runs.append(r)
    log(line + (" (excluded)" if r.get("excluded") else "") + f"; {r['check'] or r.get('error')}")


class PairedBench:
    """The runs of one invocation. An *item* (a workload, a job) has a `name`; the subclass says how
    to launch, check and name it (the hooks below)."""

    item_key = "item"  # a run's field naming its item
    error_chars = 400  # a failed run's error, cut to this

    def __init__(self, args, work: str):
        self.args, self.work = args, work
        self.sides: dict[str, Any] = {}
        self.runs: list[dict] = []
        self.notes: list[str] = []
        self.n = 0
        self.failed = False
        self.shuffle: dict[str, int] = {}  # item -> the peer's shuffle partitions

    # -- hooks ----------------------------------------------------------------------------------
    def title(self, item: Any) -> str:
        """The item in log lines and notes."""
        return item.name

    def events(self, item: Any) -> int:
        raise NotImplementedError

    def inputs(self, item: Any) -> list[str]:
        """The input directories: the window starts at the first read of a file in any."""
        raise NotImplementedError

    def launch(self, side: Any, item: Any, out: str, knob: int, **extra: Any) -> Callable[[], dict]:
        """Start the run (`knob`: the peer's shuffle partitions, Sluice's checkpoint interval)."""
        raise NotImplementedError

    def judge(self, system: str, item: Any, files: list[str], r: dict) -> tuple[Any, dict[str, int]]:
        """The output check of committed `files`, and the result lines per file."""
        raise NotImplementedError

    def unreadable(self, error: str) -> Any:
        """The failed check of an output that could not be read."""
        raise NotImplementedError

    def checked(self, r: dict, system: str, check: Any) -> None:
        """More of the check's figures in the run's row."""

    def usage(self, r: dict, usage: Any, system: str) -> None:
        """More of the meter's figures in the run's row."""

    def log_extra(self, r: dict) -> str:
        """More of the run's figures in its log line, before its foreign cores."""
        return ""

    # -- a run ----------------------------------------------------------------------------------
    def meter_systems(self, measured) -> dict[str, Callable[[], Iterable[int]]]:
        def others() -> list[int]:
            return [p for s in self.sides.values() if s is not measured for p in s.roots()]

        return {MEASURED: measured.roots, OTHERS: others}

    def run(self, system: str, item: Any, phase: str, shuffle: int | None = None, **extra: Any) -> dict:
        from window import commit_times, first_read

        side = self.sides[system]
        n_events = self.events(item)
        self.n += 1
        out = os.path.join(self.work, f"out-{self.n:04d}")
        os.makedirs(out)
        watched = side.prepare(out)
        if system == PEER:
            shuffle = shuffle or self.shuffle.get(item.name, 2)
        r: dict = {"n": self.n, "phase": phase, "system": system, self.item_key: item.name, "events": n_events}
        if system == PEER:
            r["shuffle"] = shuffle
        watched_dirs = []
        for k, directory in enumerate(self.inputs(item)):  # the extra inputs' watches watch an empty directory
            target = watched if k == 0 else os.path.join(self.work, f"unwatched-{self.n:04d}-{k}")
            os.makedirs(target, exist_ok=True)
            watched_dirs.append((directory, target))
        knob: int = shuffle if system == PEER and shuffle is not None else self.args.checkpoint_interval
        t = timed_launch(
            r,
            self.meter_systems(side),
            watched_dirs,
            lambda: self.launch(side, item, out, knob, **extra),
            self.error_chars,
        )
        check = None
        holders: set[str] = set()
        if "error" not in r:
            try:
                files, committer = side.committed(out)
                check, per = self.judge(system, item, files, r)
                holders = {committer[p] for p, n in per.items() if n > 0}
            except Exception as exc:  # noqa: BLE001 — unreadable output fails the check, named
                check = self.unreadable(f"reading the output: {type(exc).__name__}: {exc}"[:300])
            r["output_rows"] = check.rows
            self.checked(r, system, check)
        r["check"] = check.describe() if check is not None else None
        r["check_ok"] = check is not None and check.ok
        read = first_read(t.events)
        commits = commit_times(t.events)
        end = end_name = None
        if t.overflowed:
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
            rate=n_events / window if window else None,
            startup=read.t - t.launch if read is not None and t.launch is not None else None,
            end_part=end_name,
            tail=r["end_seen"] - end if end is not None and "end_seen" in r else None,
        )
        if t.usage is not None:
            r.update(usage_figures(t.usage, n_events, self.args.max_foreign_cores))
            self.usage(r, t.usage, system)
        r["ok"] = "error" not in r and r["check_ok"] and window is not None
        what = f"run {self.n} ({system}, {self.title(item)}, {phase})"
        if "error" in r:
            self.notes.append(f"{what} failed: {r['error']}")
            if phase not in ("tuning", "instrumented"):  # those two are not in the figures
                self.failed = True
        elif not r["check_ok"]:
            self.failed = True
            self.notes.append(f"{what}: OUTPUT CHECK FAILED: {r['check']} (output kept in {out})")
        elif r.get("window_error"):
            self.notes.append(f"{what}: no window: {r['window_error']}")
        close_run(
            self.runs,
            r,
            out,
            f"{phase} run {self.n}: {system} {self.title(item)}{'' if shuffle is None else f' shuffle {shuffle}'}: "
            f"window {fmt(r['window'])} s = {fmt(r['rate'], ',.0f')} events/s, startup {fmt(r['startup'])} s, state "
            f"{size(r.get('state_peak'))}, CPU {fmt(r.get('cpu_per_m'))} s/M, {self.log_extra(r)}foreign "
            f"{fmt(r.get('foreign_cores'))}",
        )
        return r

    def tune_peer(self, items: Sequence[Any], candidates: Sequence[int]) -> None:
        """One run per candidate shuffle-partition count and item; the fastest valid one is kept."""
        for item in items:
            if len(candidates) == 1:
                self.shuffle[item.name] = candidates[0]
                continue
            tried = [(self.run(PEER, item, "tuning", shuffle=s), s) for s in candidates]
            rated = [(r["rate"], s) for r, s in tried if r.get("ok") and r.get("rate")]
            self.shuffle[item.name] = max(rated)[1] if rated else candidates[0]
            log(f"peer, {self.title(item)}: shuffle partitions {self.shuffle[item.name]}")


# ================================================================================================
# main
# ================================================================================================
def add_peer_args(ap: argparse.ArgumentParser, noun: str) -> None:
    """--peer-shuffle (the candidates, fastest kept per `noun`) and --checkpoint-interval."""
    ap.add_argument(
        "--peer-shuffle",
        default=None,
        help=f"the peer's shuffle partitions to try (fastest kept per {noun}); default 2,200 (200: Spark's default); "
        "quick 2",
    )
    ap.add_argument("--checkpoint-interval", type=int, default=1000, help="Sluice's, in ms")


def add_run_args(ap: argparse.ArgumentParser, job_timeout: float, skip_sluice_help: str | None = None) -> None:
    """The options every paired script ends with: the systems, the load rule, the output, the working
    directory."""
    ap.add_argument("--skip-sluice", action="store_true", help=skip_sluice_help)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--max-foreign-cores", type=float, default=None, help="the load rule (procstat; 0: off)")
    ap.add_argument("--job-timeout", type=float, default=job_timeout)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"), help="Markdown file to append to ('-': none)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")


def runs_and_shuffle(args: argparse.Namespace) -> tuple[int, list[int]]:
    """The measured runs per system and item and the peer's shuffle candidates (quick: 2 and [2]);
    the load rule's default set in `args`."""
    from procstat import FOREIGN_CORES_LIMIT

    if args.max_foreign_cores is None:
        args.max_foreign_cores = FOREIGN_CORES_LIMIT
    runs = args.runs or (2 if args.quick else 5)
    shuffle = [int(x) for x in (args.peer_shuffle or ("2" if args.quick else "2,200")).split(",") if x.strip()]
    return runs, shuffle


def choose_systems(
    ap: argparse.ArgumentParser, args: argparse.Namespace, sluice_ready: Callable[[], str | None]
) -> list[str] | None:
    """The systems to run (None: the Sluice side cannot run, said in the log)."""
    systems = [s for s, skip in ((SLUICE, args.skip_sluice), (PEER, args.skip_peer)) if not skip]
    if SLUICE in systems and (why := sluice_ready()):
        log(f"the Sluice side cannot run: {why} (--skip-sluice runs the peer only)")
        return None
    if not systems:
        ap.error("nothing to run")
    return systems


def conduct(
    bench: PairedBench,
    systems: Sequence[str],
    sides: tuple[type[SluiceSide], type[PeerSide]],
    items: Sequence[Any],
    runs: int,
    shuffle: Sequence[int],
    *,
    noun: str,
    plan: dict,
    label: Callable[[str], str],
    report: Callable[[], str],
    after_warmup: Callable[[], None] | None = None,
    temp: bool,
    t_begin: float,
) -> int:
    """A script's runs: the peer's child spawned (its JVM starts while the cluster does), both sides
    started (`sides`: the script's classes; Sluice 1 TaskManager x 2 slots at parallelism 2, the peer
    local[2]), one warm-up per item and system, `after_warmup`, the peer's tuning, then `runs` rounds,
    each item running every system in turn. Whatever happens, the sides stop and the section
    (`report()`, once the peer's shuffle_text is in `plan`; `label`: an item's name as that text says
    it) is appended to the --out file. Returns the exit code."""
    args = bench.args
    sluice_side, peer_side = sides
    interrupted = False
    try:
        if PEER in systems:
            bench.sides[PEER] = peer_side(bench.work, 2, args.job_timeout).spawn()
        if SLUICE in systems:
            bench.sides[SLUICE] = sluice_side(bench.work, 1, 2, 2, args.job_timeout).start()
        if PEER in systems:
            bench.sides[PEER].start()
        for cell in warm_ups(systems, items):
            bench.run(cell.system, cell.item, cell.phase, shuffle=shuffle[0] if cell.system == PEER else None)
        if after_warmup is not None:
            after_warmup()
        if PEER in systems:
            bench.tune_peer(list(items), shuffle)
        log(f"{runs} measured runs per system and {noun}, alternating {', '.join(systems)}")
        for cell in matrix(systems, items, runs):
            bench.run(cell.system, cell.item, cell.phase)
    except BaseException as exc:
        interrupted = aborted(bench, exc, "the cluster and the SparkSession", log)
        raise
    finally:
        for name, side in list(bench.sides.items()):
            try:
                side.stop()
            except BaseException as exc:  # noqa: BLE001 — teardown goes on to the other side
                log(f"warning: stopping {name}: {exc}")
        from structured_streaming_child import Child

        Child.kill_all()
        if PEER in systems:
            plan["shuffle_text"] = shuffle_text(bench, shuffle, label)
        if SLUICE not in systems:
            bench.notes.append("The Sluice side was not run (--skip-sluice).")
        if PEER not in systems:
            bench.notes.append("The peer was not run (--skip-peer).")
        if bench.runs:
            bench.notes.append(f"The invocation took {time.monotonic() - t_begin:.0f} s.")
            section = report()
            if args.out in ("", "-"):
                print("\n" + section, flush=True)
            else:
                publish(section, args.out, log)
        finish_workdir(bench.work, temp and (interrupted or not bench.failed) and not args.keep_workdir, log)
    return 1 if bench.failed else 0


def shuffle_text(bench: PairedBench, candidates: Sequence[int], label: Callable[[str], str]) -> str:
    """The peer's shuffle partitions as the report says them: chosen per item, and how."""
    tuned = [r for r in bench.runs if r["phase"] == "tuning"]
    chosen = ", ".join(f"{label(i)}: {s}" for i, s in bench.shuffle.items()) or str(candidates[0])
    if not tuned:
        return f"{chosen} (not tuned)"
    return (
        f"{chosen}, the fastest of {', '.join(map(str, candidates))} in one tuning run each ("
        + "; ".join(f"{label(r[bench.item_key])} at {r['shuffle']}: {fmt(r['rate'], ',.0f')} events/s" for r in tuned)
        + ")"
    )
