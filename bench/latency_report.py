"""The Markdown section of bench/latency_suite.py: capacity, the fixed-rate points, the maximum
sustainable throughput at each p99 bound and the sustained run (per minute, then its CPU and memory),
and a run's one-line log. Pure: runs (dicts of bench/latency_runs.py) in, text out; tables through
bench/markdown.py, each row made by a function of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench_common import fmt
from latency_figures import BLOCK_S, BOUNDS, PEER, SYSTEMS, counted, max_sustainable, per_minute
from markdown import heading, paragraph, section, table
from procstat import Usage, fmt_rss
from stats import fmt_estimate

CAPACITY_HEADER = ["system", "events", "files", "events/s", "foreign cores", "exactly once", "counted"]
POINT_HEADER = [
    "system",
    "% of own capacity",
    "events/s",
    "events/file",
    "samples",
    "p50 s [95 % CI]",
    "p95 s",
    "p99 s",
    "max s",
    "CPU s per M events",
    "foreign cores",
    "exactly once",
    "counted",
]
MAX_HEADER = ["system", "rates tested, events/s", "p99 ≤ 1 s", "p99 ≤ 2 s"]
MINUTE_HEADER = ["system", "minute", "samples", "p50 s", "p95 s", "p99 s", "max s"]
RESOURCE_HEADER = [
    "system",
    "CPU s",
    "CPU s per M events",
    "cores used",
    "peak RSS per process",
    "foreign cores",
    "exactly once",
    "counted",
]


def status_of(r: dict) -> str:
    if not r.get("ok"):
        return "**FAILED**"
    return "excluded" if r.get("excluded") else "counted"


def exactly_once(r: dict) -> str:
    return "yes" if r["check"].ok else "**NO**"


def foreign_cores(r: dict) -> str:
    u: Usage | None = r.get("usage")
    return fmt(u.foreign_cores() if u else None)


def cpu_of(r: dict) -> tuple[float | None, float | None]:
    """(CPU s of the run's system, CPU s per million events) within the run's window."""
    u: Usage | None = r.get("usage")
    if u is None:
        return None, None
    cpu = u.cpu_s.get(r["system"])
    events = r["files"] * r["events_per_file"]
    return cpu, (cpu / events * 1e6 if cpu is not None and events else None)


def process_rss(r: dict) -> list[tuple[str, int]]:
    """(process, peak RSS) of the run's system; Sluice's processes named by their role in cluster.json."""
    u: Usage | None = r.get("usage")
    if u is None:
        return []
    roles = r.get("roles", {})
    out = []
    for key, v in u.peak_rss.get(r["system"], {}).items():
        if v < 2**20:  # a process that lived between two samples, or a helper (jspawnhelper)
            continue
        name, _, pid = key.rpartition(" ")
        out.append((f"{roles.get(int(pid), name) if pid.isdigit() else name} {pid}", v))
    return sorted(out)


# -- rows ------------------------------------------------------------------------------------------
def capacity_row(system: str, c: dict) -> list:
    return [
        system,
        f"{c['files'] * c['events_per_file']:,}",
        c["files"],
        fmt(c.get("capacity"), ",.0f"),
        foreign_cores(c),
        exactly_once(c),
        status_of(c),
    ]


def point_row(r: dict) -> list:
    return [
        r["system"],
        r["label"],
        f"{r['rate']:,.0f}",
        f"{r['events_per_file']:,}",
        r["n"],
        fmt_estimate(r["p50_ci"], ".2f"),
        fmt(r["p95"]),
        fmt(r["p99"]),
        fmt(r["max"]),
        fmt(cpu_of(r)[1], ".1f"),
        foreign_cores(r),
        exactly_once(r),
        status_of(r),
    ]


def max_sustainable_row(system: str, mine: Sequence[dict]) -> list:
    """A system's rates tested and, per bound, its highest rate within it (`mine`: its points and sustained run)."""
    tested = ", ".join(
        f"{r['rate']:,.0f}" + ("" if counted(r) else " (not counted)") for r in sorted(mine, key=lambda r: r["rate"])
    )
    cells = []
    for b in BOUNDS:
        best = max_sustainable(mine, b)
        cells.append(
            "none of the rates tested" if best is None else f"{best['rate']:,.0f} events/s (p99 {best['p99']:.2f} s)"
        )
    return [system, tested or "—", *cells]


def minute_rows(r: dict) -> list[list]:
    """The sustained run's summary per minute of arrivals, then over the whole run."""
    rows: list[list] = [
        [r["system"], m["minute"], m["n"], fmt(m["p50"]), fmt(m["p95"]), fmt(m["p99"]), fmt(m["max"])]
        for m in per_minute(r["series"])
    ]
    all_ = [r["system"], "**all**", r["n"], fmt_estimate(r["p50_ci"], ".2f"), fmt(r["p95"]), fmt(r["p99"])]
    return [*rows, [*all_, fmt(r["max"])]]


def resource_row(r: dict) -> list:
    cpu, per_m = cpu_of(r)
    u: Usage | None = r.get("usage")
    rss = ", ".join(f"{k} {fmt_rss(v)}" for k, v in process_rss(r)) or "—"
    return [
        r["system"],
        fmt(cpu, ".0f"),
        fmt(per_m, ".1f"),
        fmt(cpu / u.wall_s if u and cpu else None),
        rss,
        foreign_cores(r),
        exactly_once(r),
        status_of(r),
    ]


# -- blocks ----------------------------------------------------------------------------------------
def intro(args, runs: Sequence[dict], monitor_ms: int) -> list[list[str]]:
    """The failure banner (when a run failed), the method, and what quick leaves out."""
    bad = [r for r in runs if not r.get("ok")]
    banner = f"**OUTPUT CHECK FAILED or markers missing** in {len(bad)} runs (marked **FAILED** below)."
    method = paragraph(
        f"Input: files written into a watched directory at {args.file_rate:g} files/s, the rate set by events per "
        f"file; {args.urls:,} urls (Zipf); a marker per file; latency = the file's rename → its marker seen in a "
        f"committed output file. The first {args.warm_files} files of each run are left out. Sluice: page_views, "
        f"parallelism 2 on {args.taskmanagers} TaskManagers x {args.slots} slots, checkpoints every "
        f"{args.interval} ms, the directory listed "
        f"every {monitor_ms} ms. {PEER}: local[2], default trigger, one warm SparkSession, a new query per run. "
        f"Load rule: a run whose foreign processes used more than {args.max_foreign_cores:g} cores on average is "
        f"excluded (0 = off). p50's interval: block bootstrap over {BLOCK_S:g} s blocks of arrivals."
    )
    quick = (
        f"Quick: 2 rates (25 %, 75 % of each system's capacity), {args.samples} samples per point, no knee "
        f"points{', no sustained run' if not args.sustained_s else ''}; not for conclusions."
    )
    return [[banner] if bad else [], method, [quick] if args.quick else []]


def sustained_blocks(args, sustained: Sequence[dict]) -> list[list[str]]:
    if not sustained:
        return []
    title = (
        f"Sustained run: {sustained[0]['rate']:,.0f} events/s for {args.sustained_s:g} s on both (50 % of the "
        "slower system's capacity)"
    )
    return [
        heading(title),
        table(MINUTE_HEADER, [row for r in sustained for row in minute_rows(r)]),
        table(RESOURCE_HEADER, [resource_row(r) for r in sustained]),
    ]


def report(args, facts: dict, command: str, res: dict, notes: Sequence[str], monitor_ms: int) -> str:
    """The section: `res` the suite's runs ("capacity": system -> run, "points", "sustained", "runs": all),
    `monitor_ms` Sluice's listing interval of the watched directory."""
    kind = "quick" if args.quick else "full"
    title = f"latency at fixed rates, sustained run, maximum sustainable throughput ({kind})"
    capacity = [(s, res["capacity"][s]) for s in SYSTEMS if res["capacity"].get(s)]
    everything = res["points"] + res["sustained"]
    blocks = [
        *intro(args, res["runs"], monitor_ms),
        heading("Capacity (backlog drain through the watched directory)"),
        table(CAPACITY_HEADER, [capacity_row(s, c) for s, c in capacity]),
        heading("Fixed rates"),
        table(POINT_HEADER, [point_row(r) for r in res["points"]]),
        heading("Maximum sustainable throughput (highest rate tested with p99 within the bound)"),
        table(MAX_HEADER, [max_sustainable_row(s, [r for r in everything if r["system"] == s]) for s in SYSTEMS]),
        *sustained_blocks(args, res["sustained"]),
    ]
    return section(title, command, facts, blocks, notes)


def describe(r: dict) -> str:
    """A run in one log line."""
    return (
        f"{r['system']} {r['label']}: {fmt(r.get('capacity', r['rate']), ',.0f')} events/s, {r['n']} samples, "
        f"p50 {fmt(r['p50'])} s, "
        f"p99 {fmt(r['p99'])} s, max {fmt(r['max'])} s, missing {r['missing']}, output "
        f"{'ok' if r['check'].ok else 'FAILED: ' + r['check'].describe()}{', excluded' if r.get('excluded') else ''}"
    )
