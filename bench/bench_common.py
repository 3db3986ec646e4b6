"""Helpers shared by the benchmark scripts: machine facts, statistics,
formatting, appending a section to bench/RESULTS.md, and the process
plumbing every script's main() needs (signals, command line, working
directory, exit code)."""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime

import numpy as np
import psutil

from sluice.units import format_bytes

# TaskManager log lines the benchmarks read (their formats: taskmanager/task.py's SOURCE_BATCH_LOG and
# SOURCE_SNAPSHOT_LOG, and the file sink's commit line)
LOG_TIME = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
TASK_TAG = r"\[job (\w+) attempt (\d+) task (\S+)#(\d+)\]"
# groups: time, job, attempt, task, subtask, offsets before and after, seconds, then (since the line
# has them) the plan's and Spark's seconds of the batch
SOURCE_BATCH = re.compile(
    LOG_TIME
    + r" .*?"
    + TASK_TAG
    + r" source batch: offset (\d+) -> (\d+) in ([\d.]+)s(?: \(plan ([\d.]+)s, spark ([\d.]+)s\))?"
)
SOURCE_SNAPSHOT = re.compile(LOG_TIME + r" .*?" + TASK_TAG + r" checkpoint (\d+): source snapshot at offset (\d+)")
COMMITTED = re.compile(LOG_TIME + r" .*?" + TASK_TAG + r" committed \S+ \(checkpoint (\d+)\)")


def log_epoch(text: str) -> float:
    """A log line's time (LOG_TIME: local time, as Python's logging writes it) as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _commit() -> str:
    """The commit measured, marked when the working tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + (" with uncommitted changes" if dirty else "")


def machine_facts() -> dict:
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        java = "not found"
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        from importlib.metadata import version

        pyspark = version("pyspark")
    except Exception:  # noqa: BLE001 — only a label in the report
        pyspark = "?"
    date = subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip()
    return {
        "date": date,
        "commit": _commit(),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "ram": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "python": platform.python_version(),
        "java": java,
        "pyspark": pyspark,
        "os": platform.platform(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def fmt(x, spec: str = ".2f", none: str = "—") -> str:
    return none if x is None else format(x, spec)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(xs, q):
    xs = [x for x in xs if x is not None]
    return float(np.percentile(xs, q)) if xs else None


def size(n) -> str:
    return "—" if n is None else format_bytes(n)


RESULTS_HEADER = """# Sluice benchmark results

Generated output only: each benchmark run appends one section, headed
`## <date> — <benchmark>`, newest last, with its command, commit and machine.
`make bench` writes the reference sections; bench/README.md says how to read them.

"""


def append_results(path: str, section: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a") as f:
        f.write(RESULTS_HEADER if new else "\n")
        f.write(section)


def publish(section: str, path: str, log, append: bool = True) -> None:
    """Print a finished section and append it to the results file (what every script ends with;
    `append` False: print it only, a script's --no-append)."""
    print()
    print(section, flush=True)
    if append:
        append_results(path, section)
        log(f"appended to {path}")


def add_worktree(repo: str, commit: str, path: str) -> str:
    """Check `commit` out at `path` (a detached git worktree of `repo`), for a run of an earlier
    commit's code beside this one; `remove_worktree` when done. Returns `path`."""
    subprocess.run(["git", "-C", repo, "worktree", "add", "--detach", path, commit], check=True)
    return path


def remove_worktree(repo: str, path: str) -> None:
    """Remove a worktree `add_worktree` made (whatever state it is in)."""
    subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", path], check=False)


def write_atomically(path: str, text: str) -> None:
    """Write `path` whole or not at all (a go file a child polls for, say): a temp file, renamed."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def aborted(run, exc: BaseException, what: str, log) -> bool:
    """What a script's main does when its runs end by an exception `exc`: an interrupt is logged
    (stopping `what`) and returns True; anything else marks `run` (its `failed` and `notes`) failed."""
    if isinstance(exc, KeyboardInterrupt):
        log(f"interrupted ({exc or 'Ctrl-C'}): stopping {what}")
        return True
    run.failed = True
    log(f"aborting: {type(exc).__name__}: {exc}")
    run.notes.append(f"aborted: {type(exc).__name__}: {exc}".split("\n")[0])
    return False


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_signals() -> None:
    """Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread,
    so a script's `finally` stops its clusters and children whichever way it is
    stopped (SIGINT too when the script was started with it ignored)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)


def command_line(repo: str) -> str:
    """How this script was run, for a RESULTS.md section: `python bench/x.py ...`."""
    return shlex.join(["python", os.path.relpath(os.path.abspath(sys.argv[0]), repo), *sys.argv[1:]])


def begin_run(repo: str, workdir: str | None, prefix: str, log=None) -> tuple[str, dict, bool, str]:
    """What every script's main() does first: signals, the command line, machine facts, and
    its working directory (a fresh temp dir unless `workdir` is given). Returns
    (command, facts, temp, work)."""
    interrupt_on_signals()
    command, facts = command_line(repo), machine_facts()
    temp = workdir is None
    work = tempfile.mkdtemp(prefix=prefix) if workdir is None else os.path.abspath(workdir)
    os.makedirs(work, exist_ok=True)
    if log is not None:
        log(f"working directory {work}; {facts['cores']} cores, load {facts['load']}")
    return command, facts, temp, work


def finish_workdir(work: str, remove: bool, log, what: str = "") -> None:
    """Remove a run's scratch directory, or say where it was kept (for its logs)."""
    if remove:
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"kept the working directory {work}" + (f" ({what})" if what else ""))


def run_main(main) -> None:
    """Exit with main()'s code; 130 after an interrupt, as a shell would."""
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
