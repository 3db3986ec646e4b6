"""bench/state_backend_bench.py's section of bench/RESULTS.md ("state backends at scale"): its runs
(one dict per run of a state backend configuration, a "system") -> Markdown: a summary row per
system, a line per run, and the ratios between the systems. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from bench_common import median, size
from markdown import bullets, section_head, table
from paired_report import fmt_bytes_est
from stats import Estimate, fmt_estimate, median_ci

SUMMARY_HEAD = [
    "system",
    "runs (exact)",
    "load rows/s",
    "update rows/s",
    "peak TM RSS",
    "update-phase ckpt size",
    "update-phase ckpt duration s",
    "largest ckpt",
    "restore s",
    "kill -> running s",
]


def summary_row(system: str, rs: Sequence[dict]) -> list[str]:
    """One system's figures over its runs (SUMMARY_HEAD): medians over the runs, of each run's median
    for the per-checkpoint figures."""

    def est(key: str) -> Estimate:
        return median_ci([r[key] for r in rs])

    def est_med(key: str) -> Estimate:
        return median_ci([median(r[key]) for r in rs])

    return [
        system,
        f"{len(rs)} ({sum(r['exact'] for r in rs)})",
        fmt_estimate(est("load_rate")),
        fmt_estimate(est("update_rate")),
        fmt_bytes_est(est("peak_rss")),
        fmt_bytes_est(est_med("ckpt_sizes")),
        fmt_estimate(est_med("ckpt_durations"), ".2f"),
        fmt_bytes_est(est("max_ckpt_size")),
        fmt_estimate(est("restore"), ".2f"),
        fmt_estimate(est("recovery"), ".1f"),
    ]


def run_line(r: dict) -> str:
    return (
        f"{r['system']} job {r['job_id']}: {'exact' if r['exact'] else 'WRONG'}, wall {r['wall']:.0f} s, "
        f"{r['checkpoints']} checkpoints, update-phase sizes {[size(s) for s in r['ckpt_sizes']]}, "
        f"rows between update-phase checkpoints {[f'{100 * x:.1f} %' for x in r['updates_per_checkpoint']]} "
        "of the keys"
    )


def ratio_lines(runs: Sequence[dict]) -> list[str]:
    """The systems compared: incremental against full checkpoint sizes, rows between checkpoints,
    rocksdb's load throughput against memory's."""

    def of(system: str, key: str) -> list[Any]:
        return [x for r in runs if r["system"] == system for x in r[key]]

    lines = []
    inc, full = of("rocksdb-incremental", "ckpt_sizes"), of("rocksdb-full", "ckpt_sizes")
    if inc and full:
        lines += [
            "",
            f"Incremental / full update-phase checkpoint size: median {np.median(inc) / np.median(full):.1%}, "
            f"mean {np.mean(inc) / np.mean(full):.1%} (compactions make some incremental checkpoints large).",
        ]
    between = of("rocksdb-incremental", "updates_per_checkpoint")
    if between:
        lines.append(
            f"Rows between two update-phase checkpoints (rocksdb-incremental): median {np.median(between):.1%} "
            "of the keys."
        )
    mem = [r["load_rate"] for r in runs if r["system"] == "memory" and r["load_rate"]]
    rdb = [r["load_rate"] for r in runs if r["system"] == "rocksdb-incremental" and r["load_rate"]]
    if mem and rdb:
        lines.append(f"rocksdb-incremental load throughput / memory: {np.median(rdb) / np.median(mem):.0%}.")
    return lines


def report(args: Any, command: str, facts: dict, runs: Sequence[dict], systems: Sequence[str]) -> str:
    """The section (`args`: the job's sizes and --kill; `systems`: every system, in the summary's order)."""
    lines = section_head("state backends at scale (bench/state_backend_bench.py)", command, facts)
    updates = args.keys * args.updates_pct // 100
    lines += [
        f"Job: {args.keys:,} distinct keys, then {updates:,} updates spread over them, keyed count at parallelism 1 "
        f"on 2 TaskManagers x 1 slot, checkpoints every {args.interval_ms} ms, generator batches of {args.batch:,}"
        f"{'; kill -9 of the keyed count TaskManager half way through the updates' if args.kill else ''}.",
        "",
    ]
    ran = [s for s in systems if any(r["system"] == s for r in runs)]
    lines += table(SUMMARY_HEAD, [summary_row(s, [r for r in runs if r["system"] == s]) for s in ran])
    lines += ["", "Per run:", "", *bullets(run_line(r) for r in runs)]
    lines += ratio_lines(runs)
    return "\n".join(lines) + "\n"
