"""The Markdown section of bench/structured_streaming_bench.py ("Spark Structured Streaming peer"):
the machine, the query, a table of the throughput runs and one of the recovery runs, each with a
median row, then the notes. Pure: runs (structured_streaming_runs.py's dicts) in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bench_common import fmt, median, pct
from markdown import heading, notes_lines, table
from stats import fmt_load

MACHINE = ("date", "cores", "cpu", "ram", "python", "java", "pyspark", "os", "load")
MACHINE_LABELS = {"date": "date -u", "load": "load average at start"}
THROUGHPUT_HEADER = (
    "run", "process s", "SparkSession s", "query start s", "startup s", "processing s", "events/s", "total s",
    "batches", "p50 batch ms", "p99 batch ms", "output exactly once", "load, 1 min, start→end",
)  # fmt: skip
RECOVERY_HEADER = (
    "run", "before kill s", "commits before", "process up s", "SparkSession (duration) s", "query started s",
    "first output s", "first commit s (batch)", "first batch s", "rest of input s", "output exactly once",
    "load, 1 min, start→end",
)  # fmt: skip


def exactly_once(r: dict) -> str:
    return "yes" if r["counts_ok"] else "**NO**"


def ok_count(runs: Sequence[dict]) -> str:
    return f"{sum(r['counts_ok'] for r in runs)}/{len(runs)}"


def machine_table(facts: dict) -> list[str]:
    return table(("machine", ""), [(MACHINE_LABELS.get(k, k), facts[k]) for k in MACHINE])


def query_text(trigger_ms: int | None) -> str:
    trig = f"processingTime {trigger_ms} ms" if trigger_ms else "default (as fast as possible)"
    return (
        'Query: `readStream.schema("url string, user long, ts long").option("maxFilesPerTrigger", N)'
        '.json(DIR).groupBy("url").count()` → `writeStream.outputMode("update")` with a checkpointLocation, '
        "foreachBatch writing `url,count` lines to one file per batch id; local[2], shuffle partitions 2, "
        f"UI off, Arrow on, driver memory 2g; trigger {trig}."
    )


# -- throughput --------------------------------------------------------------------------------------
def throughput_row(r: dict) -> list[Any]:
    lat = r["latencies"]
    return [
        r["label"], fmt(r["process"]), fmt(r["session"]), fmt(r["query_start"]), fmt(r["startup"]),
        fmt(r["processing"]), fmt(r["throughput"], ",.0f"), fmt(r["total"]), r["batches"],
        fmt(pct(lat, 50), ".0f"), fmt(pct(lat, 99), ".0f"), exactly_once(r), fmt_load(r),
    ]  # fmt: skip


def throughput_median_row(runs: Sequence[dict]) -> list[Any]:
    """Medians over the counted runs; p50/p99 batch latency over all their batches."""
    lat = [x for r in runs for x in r["latencies"]]

    def med(key: str, spec: str = ".2f") -> str:
        return fmt(median(r[key] for r in runs), spec)

    return [
        "**median**", med("process"), med("session"), med("query_start"), f"**{med('startup')}**",
        med("processing"), f"**{med('throughput', ',.0f')}**", med("total"), med("batches", ".0f"),
        f"**{fmt(pct(lat, 50), '.0f')}**", f"**{fmt(pct(lat, 99), '.0f')}**", ok_count(runs), "",
    ]  # fmt: skip


def throughput_block(args, tput: Sequence[dict], events: int) -> list[str]:
    warm = [r for r in tput if r["label"] == "warm-up"]
    runs = [r for r in tput if r["label"] != "warm-up"]
    src = f"`{args.input}`" if args.input else f"generate(events={events:,}, files={args.files}, seed=7)"
    sess = (
        "a fresh child process (Python driver + JVM) per run"
        if args.session == "per-run"
        else "one child process, one SparkSession: the warm-up and the runs are successive queries in it"
    )
    warm_text = ", ".join(f"startup {fmt(w['startup'])} s, processing {w['processing']:.2f} s" for w in warm)
    n_batches = sum(len(r["latencies"]) for r in runs)
    return [
        *heading(
            f"Throughput: {events:,} events ({src}), maxFilesPerTrigger {args.max_files_per_trigger or 'unset'}, {sess}"
        ),
        "",
        "Startup = SparkSession creation + query definition and `start()` (the Python + pyspark import "
        "before it is shown apart as *process*); processing = `start()` returned → "
        "`processAllAvailable()` returned; events/s = events / processing; total = child spawned → all "
        "processed (shared session: query defined → all processed). Batch latency = "
        f"`durationMs.triggerExecution` of the micro-batches with input. Warm-up (not counted): {warm_text or 'none'}.",
        "",
        *table(THROUGHPUT_HEADER, [*map(throughput_row, runs), throughput_median_row(runs)]),
        "",
        f"Median row: p50/p99 batch latency over all {n_batches} batches of the counted runs. Output exactly "
        "once: every batch file read in batch id order, no (url, count) line twice, each url's counts "
        "increasing, final counts equal to the generator's (bench/output_check.py).",
        "",
    ]


# -- recovery --------------------------------------------------------------------------------------
def recovery_row(r: dict) -> list[Any]:
    return [
        r["run"], fmt(r["before_kill"], ".1f"), r["commits_before"], fmt(r["spawn"] + r["process"]),
        fmt(r["session"]), fmt(r["ready"]), fmt(r["first_output"]),
        f"{fmt(r['first_commit'])} ({r['first_commit_id']})", fmt(r["first_batch"]), fmt(r["rest"], ".1f"),
        exactly_once(r), fmt_load(r),
    ]  # fmt: skip


def recovery_median_row(recovery: Sequence[dict]) -> list[Any]:
    def med(value, spec: str = ".2f") -> str:
        return fmt(median(value(r) for r in recovery), spec)

    return [
        "**median**", med(lambda r: r["before_kill"], ".1f"), "", med(lambda r: r["spawn"] + r["process"]),
        med(lambda r: r["session"]), med(lambda r: r["ready"]), f"**{med(lambda r: r['first_output'])}**",
        f"**{med(lambda r: r['first_commit'])}**", med(lambda r: r["first_batch"]), med(lambda r: r["rest"], ".1f"),
        ok_count(recovery), "",
    ]  # fmt: skip


def recovery_block(args, recovery: Sequence[dict], events: int) -> list[str]:
    src = (
        f"`{args.recovery_input}`"
        if args.recovery_input
        else f"generate(events={events:,}, files={args.recovery_files}, seed=11)"
    )
    return [
        *heading(
            f"Recovery after kill -9 of the driver: {events:,} events ({src}), maxFilesPerTrigger "
            f"{args.recovery_max_files_per_trigger}"
        ),
        "",
        "Once `commits/` of the checkpoint has a file, the child's process group (Python driver and its "
        "JVM) gets SIGKILL and a new child starts at once on the same checkpointLocation. Seconds from "
        "the kill (cumulative, except the SparkSession's own duration): process up = new child's Python + "
        "pyspark import done; SparkSession = its creation time; "
        "query started = `start()` returned; first output = first batch file written after the kill (new "
        "or a replayed batch's rewritten, polled every 20 ms); first commit = first new file in "
        "`commits/`; first batch = query started → first commit. Before kill = first child's start → "
        "kill. The output is checked (bench/output_check.py) after the restarted query processed everything.",
        "",
        *table(RECOVERY_HEADER, [*map(recovery_row, recovery), recovery_median_row(recovery)]),
        "",
    ]


def report(
    args,
    facts: dict,
    command: str,
    tput: list[dict],
    tput_events: int,
    recovery: list[dict],
    rec_events: int,
    notes: list[str],
) -> str:
    """The section: `args` the script's options (the inputs, the trigger, the session), `tput` the
    throughput runs (warm-ups labelled "warm-up"), `recovery` the recovery runs."""
    lines = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} — Spark Structured Streaming peer",
        "",
        f"Command: `{command}`",
        "",
        *machine_table(facts),
        "",
        query_text(args.trigger_ms),
        "",
    ]
    if any(r["label"] != "warm-up" for r in tput):
        lines += throughput_block(args, tput, tput_events)
    if recovery:
        lines += recovery_block(args, recovery, rec_events)
    lines += notes_lines(notes)
    return "\n".join(lines) + "\n"
