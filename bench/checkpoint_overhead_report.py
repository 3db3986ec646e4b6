"""The checkpoint overhead suite's section of bench/RESULTS.md (bench/checkpoint_overhead.py): the
pairs of a state size's blocks -> an overhead per interval with a bootstrap interval
(bench/stats.py), checkpoint and memory figures per case, and the Markdown of the case and run
tables (bench/markdown.py). Pure: no cluster, no clock but the heading's time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bench_common import fmt, pct, size
from checkpoint_overhead_plan import StateSize, block_order
from markdown import notes_lines, paragraph, section_head, table
from procstat import fmt_rss
from stats import Estimate, fmt_estimate, median_ci

PARALLELISM = 2  # the job's (page_views_bench.Cluster.submit's default)
CASE_HEADER = [
    "state (urls)",
    "events / files",
    "interval ms",
    "overhead [95 % CI]",
    "pairs (left out)",
    "on events/s",
    "off events/s",
    "checkpoints per run",
    "checkpoint p50 / max ms",
    "state size p50 / max",
    "peak RSS TaskManager / Spark JVM",
]
RUN_HEADER = [
    "#",
    "state",
    "block",
    "interval ms",
    "events/s",
    "s",
    "checkpoints",
    "foreign cores",
    "steal s",
    "exactly once",
    "counted",
]


@dataclass
class Case:
    size: str
    interval: int
    overheads: list[float] = field(default_factory=list)  # per kept pair: off / on - 1
    pairs_left_out: int = 0
    on_runs: list[dict] = field(default_factory=list)
    off_runs: list[dict] = field(default_factory=list)

    @property
    def estimate(self) -> Estimate:
        return median_ci(self.overheads, excluded=self.pairs_left_out)


def usable(run: dict | None) -> bool:
    """Counted in the figures: it ran, its output passed the check, the load rule kept it."""
    return run is not None and bool(run.get("counts_ok")) and not run.get("excluded", False)


def cases(blocks: list[dict[int, dict]], size: str, intervals: Sequence[int]) -> list[Case]:
    """Pairs per interval from the blocks of one state size: (the interval's run, the block's off run)."""
    out = []
    for interval in intervals:
        case = Case(size, interval)
        for block in blocks:
            on, off = block.get(interval), block.get(0)
            if on is None or off is None:
                continue
            case.on_runs.append(on)
            case.off_runs.append(off)
            if usable(on) and usable(off):
                case.overheads.append(off["throughput"] / on["throughput"] - 1)
            else:
                case.pairs_left_out += 1
        out.append(case)
    return out


def checkpoint_figures(runs: Sequence[dict]) -> dict:
    """Completed checkpoints per run (all, and without the final one), duration p50/max, state size."""
    kept = [r for r in runs if usable(r)]
    per_run = [len(r["checkpoints"]) for r in kept]
    cks = [c for r in kept for c in r["checkpoints"]]
    durations = [c["duration_ms"] for c in cks if c.get("duration_ms") is not None]
    sizes = [c["size_bytes"] for c in cks if c.get("size_bytes")]
    return {
        "per_run": per_run,
        "durations": durations,
        "p50_ms": pct(durations, 50),
        "max_ms": max(durations) if durations else None,
        "size": pct(sizes, 50),
        "max_size": max(sizes) if sizes else None,
    }


def peak_rss(runs: Sequence[dict], role: str) -> int | None:
    """The highest peak RSS over the runs of the processes whose role (`roles`: pid -> role, from
    cluster.json and the process tree) is `role`."""
    peaks = [
        v
        for r in runs
        if r.get("usage")
        for k, v in r["usage"].peak_rss.get("sluice", {}).items()
        # keys are "<name> <pid>", and one "<n> small processes, largest" (procstat.py): no role
        if (pid := k.rsplit(" ", 1)[-1]).isdigit() and r.get("roles", {}).get(int(pid)) == role
    ]
    return max(peaks) if peaks else None


def fmt_range(xs: Sequence[int]) -> str:
    if not xs:
        return "—"
    lo, hi = min(xs), max(xs)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def fmt_pct(est: Estimate) -> str:
    """An overhead estimate in per cent: `+3.1 % [−1.2–+6.0]`."""
    if est.median is None:
        return fmt_estimate(est)
    if est.low is None:
        return f"{est.median * 100:+.1f} % (1 pair, no interval)"
    scaled = Estimate(
        est.median * 100,
        None if est.low is None else est.low * 100,
        None if est.high is None else est.high * 100,
        est.n,
        est.excluded,
    )
    return fmt_estimate(scaled, "+.1f").replace("]", " %]").replace(" [", " % [", 1)


def run_label(r: dict) -> str:
    if not r.get("counts_ok"):
        return "**FAILED**"
    return "excluded" if r.get("excluded") else "kept"


def case_row(spec: StateSize, case: Case) -> list[str]:
    """A case's row: its overhead, the pairs, both throughputs, its checkpoints and peak memory."""
    ck = checkpoint_figures(case.on_runs)
    on = median_ci(r["throughput"] for r in case.on_runs if usable(r))
    off = median_ci(r["throughput"] for r in case.off_runs if usable(r))
    return [
        f"{spec.keys:,}",
        f"{spec.events:,} / {spec.files}",
        f"{case.interval:,}",
        fmt_pct(case.estimate),
        f"{len(case.overheads)} ({case.pairs_left_out})",
        fmt_estimate(on),
        fmt_estimate(off),
        fmt_range(ck["per_run"]),
        f"{fmt(ck['p50_ms'], '.0f')} / {fmt(ck['max_ms'], '.0f')}",
        f"{size(ck['size'])} / {size(ck['max_size'])}",
        f"{fmt_rss(peak_rss(case.on_runs, 'taskmanager'))} / {fmt_rss(peak_rss(case.on_runs, 'spark-jvm'))}",
    ]


def run_row(n: int, name: str, block: int, interval: int, r: dict) -> list[str]:
    """Run `n` (1-based, in the order run) of state size `name`, in `block` (0-based)."""
    u = r.get("usage")
    return [
        str(n),
        name,
        str(block + 1),
        str(interval or "off"),
        fmt(r.get("throughput"), ",.0f"),
        fmt(r.get("submit_to_end")),
        str(len(r.get("checkpoints", []))),
        fmt(u.foreign_cores() if u else None),
        fmt(u.steal_s if u else None, ".1f"),
        "yes" if r.get("counts_ok") else "**NO**",
        run_label(r),
    ]


def run_rows(results: dict) -> list[list[str]]:
    """Every run, in the order run: state size by state size, block by block, in each block's order."""
    rows: list[list[str]] = []
    for name, res in results.items():
        for b, block in enumerate(res["blocks"]):
            for interval in block_order(res["intervals"], b):
                if (r := block.get(interval)) is not None:
                    rows.append(run_row(len(rows) + 1, name, b, interval, r))
    return rows


def report(args, facts: dict, command: str, sizes: dict[str, StateSize], results: dict, notes: list[str]) -> str:
    """The RESULTS.md section."""
    title = f"Sluice checkpoint overhead by state size and interval ({'quick' if args.quick else 'full'})"
    L: list[str] = section_head(title, command, facts)
    failed = [r for res in results.values() for b in res["blocks"] for r in b.values() if not r.get("counts_ok")]
    if failed:
        L += [f"**OUTPUT CHECK FAILED** in {len(failed)} runs (see the run table).", ""]
    L += paragraph(
        f"Job: examples/page_views.py, parallelism {PARALLELISM}, on 2 TaskManagers x 2 slots (one cluster for every "
        "run). Data per state size: every url occurs in base files of random url permutations, hard-linked "
        "several times. Overhead = off events/s ÷ on events/s − 1 per pair (an interval's run and the off run "
        "of its block), median over the pairs with a 95 % bootstrap interval; positive = checkpoints cost "
        "throughput. Checkpoints: completed per run, the final one of a bounded job included. Load rule: a run "
        f"whose foreign processes used more than {args.max_foreign_cores:g} cores on average is excluded "
        "(0 = off); a pair with an excluded or failed run is left out."
    ) + [""]
    case_rows = (case_row(sizes[name], case) for name, res in results.items() for case in res["cases"])
    L += [*table(CASE_HEADER, case_rows), ""]
    L += paragraph(
        "Runs in order (events/s; checkpoints completed; foreign = cores used on average by processes outside "
        "the benchmark; peak RSS is each process's high-water mark since it started, so it only grows):"
    ) + [""]
    L += [*table(RUN_HEADER, run_rows(results)), ""]
    L += notes_lines(notes)
    return "\n".join(L) + "\n"
