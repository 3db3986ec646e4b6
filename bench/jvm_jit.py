"""How much of a TaskManager's Spark JVM CPU goes to the JIT compiler while it reads page views,
call after call, and whether a JVM option changes that: the share of the per-event cost that is
the JVM warming up rather than the work.

    python bench/jvm_jit.py [--events 1000000] [--events-per-file 12500] [--calls 16] [--repeats 2]
        [--options "default=;c1-only=-XX:TieredStopAtLevel=1;no-tiers=-XX:-TieredCompilation"]
        [--out bench/RESULTS.md] [--no-append] [--workdir DIR]

Per JVM option set (`name=options`, `;`-separated; the sets alternate, repeat by repeat): one
fresh SparkSession in a process of its own (a fresh JVM with those options), started as a
TaskManager starts it (SparkEngine, local[2], warmed up), then --calls source calls of one
subtask's share of page views at parallelism 2 (every other file), each what a page-views
source call does — FileFormatReader.read, the key and its key group projected,
`toArrow`. Per call: wall seconds, and the JVM's CPU seconds by thread kind from
/proc/<pid>/task (JIT compiler threads, GC threads, all others: Spark's executor threads and the
rest). The first call (the session's first plan of this shape) is reported apart; "calls 2..N"
sums the others. Medians over the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import begin_run, finish_workdir, fmt, median, publish, run_main
from markdown import section_head, table
from page_views_runs import REPO
from run_matrix import Cell, Order, matrix
from spark_call_costs import SCHEMA, log, subtask_inputs

sys.path.insert(0, REPO)
DEFAULT_OPTIONS = "default=;c1-only=-XX:TieredStopAtLevel=1;no-tiers=-XX:-TieredCompilation"
KINDS = ("work", "jit", "gc")


def thread_kind(name: str) -> str:
    """A JVM thread's kind from its name (HotSpot names its JIT threads `C1/C2 CompilerThreadN`
    and its GC threads `GC Thread#N`, `G1 ...`)."""
    if "CompilerThre" in name:
        return "jit"
    if name.startswith(("GC Thread", "G1 ")) or re.match(r"G1\w", name):
        return "gc"
    return "work"


def jvm_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of a process's live threads, by `thread_kind`."""
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(KINDS, 0.0)
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[thread_kind(name)] += (int(fields[11]) + int(fields[12])) / tick
    return out


def session(options: str, files: list[str], path: str, calls: int) -> list[dict]:
    """One SparkSession with `options`, in a process of its own (a JVM takes its options when it
    starts, and pyspark keeps one JVM per Python process): per call, its wall seconds and JVM
    CPU by kind."""
    child = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            "--calls",
            str(calls),
            "--path",
            path,
            f"--options={options}",
        ],
        input=json.dumps(files),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if child.returncode != 0:
        raise RuntimeError(f"session with {options!r} failed: {child.stderr[-2000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def child_session(options: str, files: list[str], path: str, calls: int) -> list[dict]:
    """The session itself (`session`'s child process)."""
    import psutil

    from sluice import key_groups
    from taskmanager.operators.file_reader import FileFormatReader
    from taskmanager.spark_engine import SparkEngine

    engine = SparkEngine(2, conf={"spark.driver.extraJavaOptions": options} if options else None)
    engine.start()  # warmed up, as a TaskManager's
    try:
        jvm = next(c.pid for c in psutil.Process().children(recursive=True) if "java" in c.name())
        kg = key_groups.spark_key_group("url", 128)
        payload = {"format": "json", "path": path, "schema": SCHEMA, "options": {}}
        rows = []
        for _ in range(calls):
            before, t0 = jvm_cpu(jvm), time.monotonic()
            FileFormatReader(payload, engine).read(files).select("url", kg).toArrow()
            wall, after = time.monotonic() - t0, jvm_cpu(jvm)
            rows.append({"wall": wall, **{k: max(after[k] - before[k], 0.0) for k in KINDS}})
        return rows
    finally:
        engine.stop()


def set_row(name: str, options: str, sessions: Sequence[list[dict]]) -> list:
    """An option set's medians over its sessions: the first call's wall, calls 2..N's wall and JVM
    CPU by kind, the JIT's share of that CPU, the last call's wall and JIT CPU."""

    def med(f):
        return median([f(s) for s in sessions])

    rest = {k: med(lambda s, k=k: sum(c[k] for c in s[1:])) for k in ("wall", *KINDS)}
    cpu = sum(rest[k] for k in KINDS)
    return [
        f"{name}: `{options or '(none)'}`",
        fmt(med(lambda s: s[0]["wall"])),
        fmt(rest["wall"]),
        fmt(rest["work"]),
        fmt(rest["jit"]),
        fmt(rest["gc"]),
        f"{fmt(100 * rest['jit'] / cpu if cpu else None, '.0f')} %",
        fmt(med(lambda s: s[-1]["wall"])),
        fmt(med(lambda s: s[-1]["jit"])),
    ]


def call_row(i: int, results: dict[str, list[list[dict]]]) -> list:
    """Call `i` (0-based) of each set's first session: wall s / jit CPU s."""
    return [i + 1, *(f"{fmt(s[0][i]['wall'])} / {fmt(s[0][i]['jit'])}" for s in results.values())]


SET_HEADER = (
    "JVM options", "call 1 wall s", "calls 2..N wall s", "work CPU s", "jit CPU s", "gc CPU s",
    "jit share of JVM CPU", "last call wall s", "last call jit CPU s",
)  # fmt: skip


def report(
    results: dict[str, list[list[dict]]],
    sets: Sequence[tuple[str, str]],
    events: int,
    nfiles: int,
    calls: int,
    repeats: int,
    command: str,
    facts: dict,
) -> str:
    """The section: per option set (`sets`: (name, options)), the medians over its sessions
    (`results`: name -> per session, per call, wall s and JVM CPU s by kind); then call by call."""
    options: dict[str, str] = {}
    for name, o in sets:
        options.setdefault(name, o)
    lines = section_head("the Spark JVM's JIT compiler over a TaskManager's first source calls", command, facts)
    lines += [
        f"One source subtask's share of page views at parallelism 2 ({nfiles} files, {events:,} events) read "
        f"{calls} times in one fresh, warmed-up SparkSession (local[2]) per JVM option set; {repeats} "
        "sessions per set, the sets alternating. JVM CPU seconds from /proc by thread kind: jit = the JIT "
        "compiler threads, gc = GC threads, work = every other thread (Spark's executors first). Medians "
        "over the sessions.",
        "",
        *table(SET_HEADER, [set_row(name, options[name], sessions) for name, sessions in results.items()]),
        "",
        "Per call (wall s / jit CPU s), the first session of each set:",
        "",
        *table(("call", *results), [call_row(i, results) for i in range(calls)]),
    ]
    return "\n".join(lines) + "\n"


def session_order(sets: Sequence[tuple[str, str]], repeats: int) -> list[Cell[tuple[str, str]]]:
    """The sessions in order: `repeats` rounds of every option set, forward in the first round,
    backward in the second, and so on."""
    return matrix([""], sets, repeats, items_order=Order.REVERSE)


def parse_options(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(";"):
        name, _, options = item.partition("=")
        if name.strip():
            pairs.append((name.strip(), options.strip()))
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--events-per-file", type=int, default=12_500)
    ap.add_argument("--calls", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--options", default=DEFAULT_OPTIONS)
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--no-append", action="store_true", help="print the section only")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one session: the files on stdin, its rows as JSON on stdout
        print(json.dumps(child_session(args.options, json.load(sys.stdin), args.path, args.calls)), flush=True)
        return 0
    if args.calls < 2 or args.repeats < 1:
        ap.error("--calls must be at least 2 and --repeats at least 1")
    sets = parse_options(args.options)
    if not sets:
        ap.error("--options names no option set (name=options;...)")
    command, facts, temp, work = begin_run(REPO, args.workdir, "sluice-jvm-jit-", log)
    results: dict[str, list[list[dict]]] = {name: [] for name, _ in sets}
    try:
        path, (files,) = subtask_inputs(work, args.events, args.events_per_file, 1)
        for cell in session_order(sets, args.repeats):
            name, options = cell.item
            rows = session(options, files, path, args.calls)
            results[name].append(rows)
            log(f"repeat {cell.round}, {name}: calls 2..N {sum(c['wall'] for c in rows[1:]):.2f} s wall")
    finally:
        finish_workdir(work, temp, log)
    section = report(results, sets, args.events // 2, len(files), args.calls, args.repeats, command, facts)
    publish(section, args.out, log, append=not args.no_append)
    return 0


if __name__ == "__main__":
    run_main(main)
