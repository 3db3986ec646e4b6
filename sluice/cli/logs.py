"""`sluice logs JOB_ID | TASKMANAGER [--dir DIR] [--follow] [--lines N]`: the logs of a local cluster.

It reads the log files cluster.json lists (each process entry's `log`), no cluster needed.
Every Sluice process logs one line per event (sluice/logs.py):

    2026-11-26 02:50:01,722 INFO  jobmanager sluice.jobmanager.job [jm-tick] [job <id> attempt 0] ...

with the job's id as correlation id in its brackets; a committed file's name carries the id's
first 8 characters (`part-...-c866c7b1-...csv`). Lines without a timestamp (a traceback) belong
to the record above them; Spark's own lines (`26/11/26 02:49:35 WARN ...`) are records of their
own.

- A job (its id, or a unique prefix of at least 8 characters, looked up in the JobManagers'
  logs): the records of every JobManager and TaskManager log that name the job, merged in time
  order, each line prefixed with its process (`jobmanager-0 | ...`).
- A TaskManager (its resource id, its address as in cluster.json, or `taskmanager-<i>`): the
  tail of its log.

At most the last `MAX_BYTES` of each file are read, and the last `--lines` records printed;
`--follow` then prints what the files gain until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sluice.client import SluiceError
from sluice.cluster_file import ClusterFile, ClusterFileError, ProcessEntry

MAX_BYTES = 64 * 1024 * 1024  # read at most the last 64 MiB of each log
DEFAULT_LINES = 200
MIN_PREFIX = 8  # a job id's shortest accepted prefix (the tag in file names)
FOLLOW_POLL = 0.5  # seconds between two looks at the files with --follow

_OURS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")  # sluice/logs.py's asctime
_SPARK = re.compile(r"^(\d\d)/(\d\d)/(\d\d) (\d\d:\d\d:\d\d) ")  # log4j's yy/MM/dd HH:mm:ss
_JOB_ID = re.compile(r"\[job ([0-9a-f]{32})\b")
_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class LogSource:
    """One process's log: the name its lines are prefixed with, and the file."""

    name: str  # jobmanager-0, taskmanager-1, ...
    path: str
    aliases: tuple[str, ...] = ()  # what else names it on the command line: address, resource id


@dataclass
class Record:
    """One log event: its first line and the lines that continue it (a traceback)."""

    time: str  # sortable: `2026-11-26 02:50:01,722`; "" when unknown
    lines: list[str] = field(default_factory=list)


def sources_of(cluster: ClusterFile) -> tuple[list[LogSource], list[LogSource]]:
    """The JobManagers' and TaskManagers' logs of a cluster, named `<role>-<i>` in cluster.json's
    order (a TaskManager also by its address and resource id)."""
    jobmanagers: list[LogSource] = []
    taskmanagers: list[LogSource] = []
    for role, out in (("jobmanager", jobmanagers), ("taskmanager", taskmanagers)):
        for i, p in enumerate(cluster.of_role(role)):
            if p.log:
                out.append(LogSource(f"{role}-{i}", p.log, _aliases(p)))
    return jobmanagers, taskmanagers


def _aliases(p: ProcessEntry) -> tuple[str, ...]:
    names = [p.address] if p.address else []
    command = p.extra.get("command")
    if isinstance(command, list) and "--resource-id" in command:
        at = command.index("--resource-id") + 1
        if at < len(command):
            names.append(str(command[at]))
    if p.log:
        names.append(os.path.splitext(os.path.basename(p.log))[0])  # taskmanager-0 (the log's name)
    return tuple(names)


# -- reading ------------------------------------------------------------------------------------------
def read_tail(path: str, max_bytes: int = MAX_BYTES) -> tuple[str, int]:
    """The text of the last `max_bytes` of a file (from its first whole line), and the offset
    where the file ended. A missing file is empty."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(size - max_bytes, 0)
            f.seek(start)
            data = f.read(size - start)
    except FileNotFoundError:
        return "", 0
    if start > 0:  # cut inside a line: drop its end
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data.decode("utf-8", errors="replace"), size


def _clean(line: str) -> str:
    """A line as a terminal would show it last: Spark's console progress bar rewrites itself
    with carriage returns before our line."""
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line.rstrip("\n")


def timestamp(line: str) -> str | None:
    """A record's sortable time when `line` starts one; None for a continuation line."""
    m = _OURS.match(line)
    if m:
        return m.group(1)
    m = _SPARK.match(line)
    if m:
        yy, mm, dd, hms = m.groups()
        return f"20{yy}-{mm}-{dd} {hms},000"
    return None


def records(text: str) -> list[Record]:
    """The records of a log's text, in file order."""
    out: list[Record] = []
    for raw in text.split("\n"):  # not splitlines(): a carriage return does not end a line here
        line = _clean(raw)
        if not line.strip():
            continue
        t = timestamp(line)
        if t is not None or not out:
            out.append(Record(t or (out[-1].time if out else ""), [line]))
        else:
            out[-1].lines.append(line)
    return out


def matches_job(job_id: str) -> Callable[[Record], bool]:
    """Does a record name the job: its id, or its 8-character tag standing alone (file names)."""
    tag = re.compile(rf"(?<![0-9a-f]){re.escape(job_id[:MIN_PREFIX])}(?![0-9a-f])")
    return lambda r: job_id in r.lines[0] or tag.search(r.lines[0]) is not None


def merged(per_source: Iterable[tuple[LogSource, list[Record]]], limit: int) -> list[str]:
    """The records of several logs in time order (stable: a log's own order kept for equal
    times), each line prefixed with its process; the last `limit` records."""
    tagged = [(r.time, i, n, src.name, r) for i, (src, recs) in enumerate(per_source) for n, r in enumerate(recs)]
    tagged.sort(key=lambda x: (x[0], x[1], x[2]))
    width = max((len(x[3]) for x in tagged), default=0)
    out: list[str] = []
    for _t, _i, _n, name, r in tagged[-limit:] if limit > 0 else []:
        out.extend(f"{name:<{width}} | {line}" for line in r.lines)
    return out


# -- what the argument names ------------------------------------------------------------------------
def find_taskmanager(name: str, taskmanagers: list[LogSource]) -> LogSource | None:
    for tm in taskmanagers:
        if name == tm.name or name in tm.aliases:
            return tm
    return None


def job_ids_in(jobmanagers: list[LogSource], max_bytes: int = MAX_BYTES) -> set[str]:
    """The job ids the JobManagers' logs name."""
    ids: set[str] = set()
    for jm in jobmanagers:
        ids.update(_JOB_ID.findall(read_tail(jm.path, max_bytes)[0]))
    return ids


def resolve_job(prefix: str, known: set[str]) -> str:
    """The job a prefix names; SluiceError when none or several do."""
    found = sorted(j for j in known if j.startswith(prefix))
    if len(found) == 1:
        return found[0]
    if len(prefix) == 32 and not found:
        return prefix  # a full id, only not in the logs' tails: nothing to show, but not an error
    if found:
        raise SluiceError(f"{prefix!r} is the start of several jobs' ids: {', '.join(found)}")
    raise SluiceError(f"no job with an id starting with {prefix!r} in the JobManagers' logs")


def unknown(name: str, taskmanagers: list[LogSource]) -> SluiceError:
    known = "; ".join(f"{tm.name} ({', '.join(a for a in tm.aliases if a != tm.name)})" for tm in taskmanagers)
    return SluiceError(
        f"{name!r} is neither a job id (or a prefix of at least {MIN_PREFIX} characters) nor a TaskManager; "
        f"TaskManagers: {known or 'none in cluster.json'}"
    )


# -- the command ----------------------------------------------------------------------------------------
def cmd_logs(args: argparse.Namespace) -> int:
    try:
        cluster = ClusterFile.read(args.dir)
    except ClusterFileError as exc:
        raise SluiceError(f"{exc} (sluice logs reads the logs of a local cluster: give its --dir)") from None
    jobmanagers, taskmanagers = sources_of(cluster)
    lines = args.lines if args.lines is not None else DEFAULT_LINES
    tm = find_taskmanager(args.target, taskmanagers)
    if tm is not None:
        chosen, keep = [tm], None
    elif len(args.target) >= MIN_PREFIX and _HEX.match(args.target):
        job_id = resolve_job(args.target, job_ids_in(jobmanagers))
        chosen, keep = [*jobmanagers, *taskmanagers], matches_job(job_id)
    else:
        raise unknown(args.target, taskmanagers)
    offsets: dict[str, int] = {}
    per_source = []
    for src in chosen:
        text, offsets[src.path] = read_tail(src.path)
        recs = records(text)
        per_source.append((src, [r for r in recs if keep is None or keep(r)]))
    _write(merged(per_source, lines))
    if args.follow:
        try:
            follow(chosen, offsets, keep)
        except KeyboardInterrupt:
            pass
    return 0


def follow(
    chosen: list[LogSource], offsets: dict[str, int], keep: Callable[[Record], bool] | None, polls: int | None = None
) -> None:
    """Print the whole lines the logs gain (a file that shrank is read again from its start),
    until Ctrl-C (or `polls` looks, for tests)."""
    n = 0
    while polls is None or n < polls:
        n += 1
        fresh = []
        for src in chosen:
            recs = records(_whole_lines_from(src.path, offsets))
            fresh.append((src, [r for r in recs if keep is None or keep(r)]))
        _write(merged(fresh, sys.maxsize))
        if polls is None or n < polls:
            time.sleep(FOLLOW_POLL)


def _whole_lines_from(path: str, offsets: dict[str, int]) -> str:
    """The whole lines written to `path` since `offsets[path]`, which moves past them (a line
    still being written waits for the next look)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = offsets.get(path, 0)
            if size < start:  # truncated or replaced
                start = 0
            start = max(start, size - MAX_BYTES)
            f.seek(start)
            data = f.read(size - start)
    except FileNotFoundError:
        return ""
    data = data[: data.rfind(b"\n") + 1]
    offsets[path] = start + len(data)
    return data.decode("utf-8", errors="replace")


def _write(lines: list[str]) -> None:
    if not lines:
        return
    try:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()
    except BrokenPipeError:  # `sluice logs ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None


def add_logs_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], default_dir: str) -> None:
    lg = sub.add_parser(
        "logs",
        help="print a local cluster's log lines of a job (every process) or the tail of a TaskManager's log",
        description="Reads the log files listed in DIR/cluster.json. JOB_ID (or a unique prefix of at least 8 "
        "characters): the lines of every JobManager and TaskManager log that name the job, merged in time order, "
        "each after its process. TASKMANAGER (its resource id, its address in cluster.json, or taskmanager-<i>): "
        "the tail of its log. At most the last 64 MiB of each file are read.",
    )
    lg.add_argument("target", metavar="JOB_ID|TASKMANAGER")
    lg.add_argument(
        "--dir", "--cluster-dir", dest="dir", default=default_dir, help="default $SLUICE_CLUSTER_DIR, else .sluice"
    )
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    lg.add_argument(
        "--lines", "-n", type=int, default=None, metavar="N", help=f"print the last N records (default {DEFAULT_LINES})"
    )
    lg.set_defaults(handler=cmd_logs)
