"""The Markdown section of bench/profile_hot_path.py: the jobs (warm-up, references, the profiled one),
py-spy's distortion and coverage, seconds per bucket of the task threads and of the data-exchange
threads, the top leaf frames. Pure: the runs and bench/profile_hot_path_samples.py's `classify` result
in, text out; tables through bench/markdown.py, each row made by a function of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from bench_common import fmt, median
from markdown import heading, table

TOP_LEAVES = 15
RUN_HEADER = ["run", "py-spy", "submit→FINISHED s", "events/s", "counts correct"]
TASK_HEADER = ["bucket", "seconds", "% of task-thread time", "ms per source batch"]
EXCHANGE_HEADER = ["bucket", "seconds", "ms per source batch"]
LEAF_HEADER = ["leaf frame ← its caller", "nearest Sluice frame", "seconds", "% of task-thread time"]
OTHER_THREADS = "other threads (heartbeats, reports, gRPC server pool, ZooKeeper, py4j finalizer; mostly idle)"
CLOSING = (
    "Seconds are thread-seconds (wall time per thread, summed over the 4 task threads); idle rows are "
    "threads waiting (input, final checkpoint). Spark rows include the JVM's work: the Python thread waits "
    "on the py4j or Arrow socket while the JVM reads the JSON files, projects and serialises to Arrow."
)


class SpyCounts(Protocol):
    """What the report reads of one py-spy recording."""

    @property
    def behind(self) -> int: ...

    @property
    def errors(self) -> str: ...


def bold(text: str) -> str:
    return f"**{text}**"


# -- rows ------------------------------------------------------------------------------------------
def run_row(label: str, spy: str, r: dict, strong: bool = False) -> list:
    """A job: submit→FINISHED and events/s bold for the profiled one."""
    mark = bold if strong else str
    return [
        label,
        spy,
        mark(f"{r['submit_to_end']:.2f}"),
        mark(f"{r['throughput']:,.0f}"),
        "yes" if r["counts_ok"] else "NO",
    ]


def task_row(bucket: str, s: float, total: float, per_batch: Callable[[float], float | None], strong=False) -> list:
    mark = bold if strong else str
    return [
        mark(bucket),
        mark(f"{s:.2f}"),
        mark(f"{100 * s / total:.1f} %"),
        mark(fmt(per_batch(s), ".0f")),
    ]


def exchange_row(bucket: str, s: float, per_batch: Callable[[float], float | None]) -> list:
    return [bucket, f"{s:.2f}", fmt(per_batch(s), ".0f")]


def leaf_row(leaf: str, via: str, s: float, total: float) -> list:
    return [f"`{leaf}`", f"`{via}`", f"{s:.2f}", f"{100 * s / total:.1f} %"]


# -- blocks ----------------------------------------------------------------------------------------
def head(args, facts: dict, command: str, batches: int, logged: float) -> list[str]:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        *heading(f"{now} — profile of the TaskManager hot path (py-spy)", 2),
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {facts['cores']} cores ({facts['cpu']}), {facts['ram']}, Python {facts['python']}, "
        f"pyspark {facts['pyspark']}, {facts['java']}; load average at start {facts['load']}.",
        "",
        f"Job: examples/page_views.py, parallelism 2, checkpoints every 1000 ms, on 2 TaskManagers x 2 slots; "
        f"{args.events:,} events in {args.files} files (generate(seed=7), {args.urls:,} urls); "
        f"**{batches} source batches** "
        f"(logged batch time {logged:.2f} s in total).",
        "",
    ]


def runs_lines(args, job: dict, refs: Sequence[dict], warm: dict) -> list[str]:
    mode = "blocking" if args.blocking else "--nonblocking"
    rows = [
        run_row("warm-up (first job on the cluster)", "no", warm),
        *(run_row(f"reference {i}", "no", r) for i, r in enumerate(refs, 1)),
        run_row(bold("profiled"), f"{mode}, {args.rate} Hz, --idle", job, strong=True),
    ]
    return [*table(RUN_HEADER, rows), ""]


def sampling_lines(args, job: dict, refs: Sequence[dict], res: dict, logged: float, spies) -> list[str]:
    """py-spy's distortion (against the references) and its coverage of the logged batch time."""
    lines = []
    ref_tput = median(r["throughput"] for r in refs)
    if ref_tput:
        lines.append(
            f"py-spy distortion: profiled throughput / median reference = "
            f"{job['throughput'] / ref_tput:.2f} (job-to-job spread of the references: "
            f"{fmt(min(r['throughput'] for r in refs), ',.0f')}–{fmt(max(r['throughput'] for r in refs), ',.0f')}"
            " events/s)."
        )
    lines.append(
        f"Sampling: effective {res['rate']:.0f} samples/s per thread (nominal {args.rate}); py-spy reported "
        f"falling behind {sum(s.behind for s in spies)} times; sampling errors "
        f"{', '.join(s.errors for s in spies)} (per TaskManager). Coverage check: sampled time inside "
        f"Task._run_source {res['source']:.2f} s vs logged source batch time {logged:.2f} s "
        f"(ratio {fmt(res['source'] / logged if logged else None)})."
    )
    return [*lines, ""]


def task_lines(res: dict, per_batch: Callable[[float], float | None]) -> list[str]:
    total = sum(res["task"].values())
    busy = sum(s for b, s in res["task"].items() if not b.startswith("idle"))
    spark = sum(s for b, s in res["task"].items() if b.startswith("Spark"))
    rows = [task_row(b, s, total, per_batch) for b, s in sorted(res["task"].items(), key=lambda kv: -kv[1])]
    rows.append(task_row("busy (not idle)", busy, total, per_batch, strong=True))
    rows.append(task_row("of which Spark (all Spark rows)", spark, total, per_batch))
    return [
        *heading(f"Task threads (`task-<chain>-<subtask>`, {total:.2f} thread-seconds)"),
        "",
        *table(TASK_HEADER, rows),
        "",
    ]


def exchange_lines(res: dict, per_batch: Callable[[float], float | None]) -> list[str]:
    rows = [exchange_row(b, s, per_batch) for b, s in sorted(res["exchange"].items(), key=lambda kv: -kv[1])]
    rows.append([OTHER_THREADS, f"{res['other']:.2f}", "—"])
    return [*heading("Data-exchange and checkpoint-upload threads"), "", *table(EXCHANGE_HEADER, rows), ""]


def leaf_lines(res: dict) -> list[str]:
    total = sum(res["task"].values())
    top = sorted(res["leaves"].items(), key=lambda kv: -kv[1])[:TOP_LEAVES]
    rows = [leaf_row(leaf, via, s, total) for (leaf, via), s in top]
    return [*heading(f"Top {TOP_LEAVES} leaf frames of the task threads"), "", *table(LEAF_HEADER, rows), ""]


def report(
    args,
    facts: dict,
    command: str,
    job: dict,
    refs: Sequence[dict],
    warm: dict,
    res: dict,
    batches: int,
    logged: float,
    spies: Sequence[SpyCounts],
) -> str:
    """The section: `res` classify()'s seconds per bucket, `batches` and `logged` the profiled job's
    source batches and their logged time, `spies` the py-spy recordings (one per TaskManager)."""

    def per_batch(s: float) -> float | None:
        return s * 1000 / batches if batches else None

    lines = head(args, facts, command, batches, logged)
    lines += runs_lines(args, job, refs, warm)
    lines += sampling_lines(args, job, refs, res, logged, spies)
    lines += task_lines(res, per_batch) + exchange_lines(res, per_batch) + leaf_lines(res)
    return "\n".join([*lines, CLOSING, ""])
