"""The external Spark benchmark's report (bench/external_spark_bench.py): its runs -> a section of
bench/RESULTS.md (a summary per system, the ratios to local Spark, every run). Pure: no cluster, no
clock but the section's heading time.
"""

from __future__ import annotations

import argparse
from typing import Any

from markdown import bullets, cell, paragraph, section, table
from stats import fmt_estimate, median_ci

TITLE = "page views: TaskManagers on local Spark vs a Spark standalone cluster vs Spark Connect"
SYSTEM_HEADER = (
    "system", "throughput (events/s), median [95 % CI]", "time (s)", "CPU s per run", "runs kept / run", "exact",
    "throughput of every exact run, load rule off",
)  # fmt: skip
RUN_HEADER = ("round", "system", "time (s)", "events/s", "CPU s", "foreign cores", "restarts", "exact")
BASE = "local"  # the system the others' throughput is compared with


def kept(runs: list[dict]) -> list[dict]:
    """The runs whose output was exact and that the load rule kept."""
    return [r for r in runs if r["counts_ok"] and not r["excluded"]]


def exact_throughput(runs: list[dict]) -> list[float]:
    return [r["throughput"] for r in runs if r["counts_ok"]]


def system_row(system: str, rs: list[dict]) -> list[Any]:
    """One system's row: medians [95 % interval] over its runs kept, and over every exact run."""
    k = kept(rs)
    return [
        system,
        fmt_estimate(median_ci([r["throughput"] for r in k], excluded=len(rs) - len(k))),
        fmt_estimate(median_ci([r["submit_to_end"] for r in k]), ".2f"),
        fmt_estimate(median_ci([r["cpu_s"] for r in k]), ".1f"),
        f"{len(k)} / {len(rs)}",
        f"{sum(r['counts_ok'] for r in rs)} of {len(rs)}",
        fmt_estimate(median_ci(exact_throughput(rs))),
    ]


def ratio_lines(systems: list[str], by_system: dict[str, list[dict]]) -> list[str]:
    """Each system's median throughput over local Spark's, over the runs kept and over every exact run."""
    medians = {
        "runs the load rule kept": {
            s: median_ci([r["throughput"] for r in kept(by_system[s])]).median for s in systems
        },
        "every exact run": {s: median_ci(exact_throughput(by_system[s])).median for s in systems},
    }
    items = []
    for label, of in medians.items():
        base = of.get(BASE)
        for system in systems:
            value = of.get(system)
            if system != BASE and base and value:
                items.append(f"{system} / {BASE} throughput, ratio of medians over {label}: {value / base:.2f}")
    return bullets(items)


def run_row(r: dict) -> list[Any]:
    return [
        r["round"],
        r["system"],
        f"{r['submit_to_end']:.2f}",
        f"{r['throughput']:,.0f}",
        cell(r["cpu_s"], ".1f"),
        f"{cell(r['foreign_cores'])}{' (excluded)' if r['excluded'] else ''}",
        r["restarts"],
        "yes" if r["counts_ok"] else "NO",
    ]


def report(a: argparse.Namespace, command: str, facts: dict, runs: list[dict], notes: list[str]) -> str:
    """The section; `a` the command line (systems, sizes, checkpoint interval, load rule's limit)."""
    by_system = {s: [r for r in runs if r["system"] == s] for s in a.systems}
    setup = paragraph(
        f"{a.events:,} events in {a.files} files, 1 TaskManager x 2 slots per cluster, parallelism 2, checkpoints "
        f"every {a.interval} ms; {a.runs} measured runs per system after one warm-up, alternating (order rotating "
        "per round). Throughput = events / (submitted -> ended); CPU = the measured cluster's processes, Spark's "
        f"included. Load rule: runs with more than {a.max_foreign_cores or 'no limit'} foreign cores left out."
    )
    blocks = [
        setup,
        table(SYSTEM_HEADER, [system_row(s, by_system[s]) for s in a.systems]),
        ratio_lines(a.systems, by_system),
        table(RUN_HEADER, [run_row(r) for r in runs]),
    ]
    return section(TITLE, command, facts, blocks, notes) + "\n"  # and a blank line, as the section always ended
