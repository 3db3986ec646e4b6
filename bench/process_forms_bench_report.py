"""bench/process_forms_bench.py's section of bench/RESULTS.md ("Keyed process function: per-key
form vs batch form"): its measured runs (one dict per run: code, form, CPU, snapshots, calls, rows)
-> Markdown, a row per checkout and form, the CPU ratios, every run. Pure."""

from __future__ import annotations

import argparse

from markdown import heading, section_head, table
from run_matrix import by
from stats import fmt_estimate, median_ci

DISORDER_MS, SEED = 2_000, 7  # the input's disorder and seed
FORMS = ("per-key", "batch")
THIS = "this checkout"  # the code label of this checkout's runs


FORM_HEAD = ["form", "runs", "CPU s", "of it snapshots, s", "events/s of CPU", "calls into user code", "rows out"]
RUN_HEAD = ["run", "code", "form", "CPU s", "snapshots s", "calls"]


def form_row(mine: list[dict], events: int) -> list[str]:
    """One checkout's form over its measured runs `mine` (FORM_HEAD)."""
    return [
        f"{mine[0]['code']}: {mine[0]['form']}",
        str(len(mine)),
        fmt_estimate(median_ci(r["cpu"] for r in mine), ".2f"),
        fmt_estimate(median_ci(r["snapshots"] for r in mine), ".2f"),
        fmt_estimate(median_ci(events / r["cpu"] for r in mine)),
        f"{mine[0]['calls']:,}",
        f"{mine[0]['rows']:,}",
    ]


def run_row(i: int, r: dict) -> list[str]:
    """The `i`th measured run (RUN_HEAD)."""
    return [str(i), r["code"], r["form"], f"{r['cpu']:.2f}", f"{r['snapshots']:.2f}", f"{r['calls']:,}"]


def report(command: str, facts: dict, args: argparse.Namespace, runs: list[dict], events: int) -> str:
    """The section: the setup, a row per checkout and form, the CPU ratios, every measured run."""
    lines = section_head("Keyed process function: per-key form vs batch form (operator only)", command, facts)
    lines += [
        f"{events:,} page views ({args.files} batches) of {args.users:,} users (seed {SEED}, out of order by up to "
        f"{DISORDER_MS:,} ms); examples/dedup.py's rule (first event per user within {args.ttl_ms:,} ms of event "
        "time) as "
        f"`FirstWithinTtl` (per key) and `FirstWithinTtlBatch` (batch form); memory backend, a snapshot every "
        f"{args.checkpoint_every} batches; forms alternating run by run, one uncounted warm-up run each. CPU = this "
        "process's CPU seconds for the whole input. Medians with percentile-bootstrap 95 % intervals.",
        "",
    ]
    groups = by(runs, lambda r: f"{r['code']} {r['form']}")
    lines += table(FORM_HEAD, [form_row(mine, events) for mine in groups.values()])
    medians = {key: median_ci(r["cpu"] for r in mine).median for key, mine in groups.items()}
    per_key, batch = medians.get(f"{THIS} per-key"), medians.get(f"{THIS} batch")
    if per_key and batch:
        lines += ["", f"Batch form against the per-key form, median CPU: {per_key / batch:.2f}x less."]
    for form in FORMS:
        now, before = medians.get(f"{THIS} {form}"), medians.get(f"before {args.before} {form}")
        if now and before:
            lines += ["", f"{form}: this checkout against {args.before}, median CPU: {before / now:.2f}x less."]
    lines += ["", *heading("Every run"), "", *table(RUN_HEAD, [run_row(i, r) for i, r in enumerate(runs, 1)])]
    return "\n".join(lines) + "\n"
