"""The reconfiguration benchmark's report (bench/reconfigure_bench.py): its runs -> the
"Reconfiguration" section of bench/RESULTS.md (the setup, a summary per method, the goal, where the
time goes, every run, the load rule) and the notes the runs themselves give. Pure: no cluster, no
clock but the section's heading time.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from markdown import bullets, cell, paragraph, section, table
from reconfigure_analysis import STORAGE_WARNING
from reconfigure_workload import (
    CHECKPOINT_MS,
    METHODS,
    MONITOR_MS,
    OPERATOR,
    P_FROM,
    P_TO,
    POST_S,
    PRE_S,
    SEED_INITIAL,
    SHORT,
)
from stats import Estimate, fmt_estimate, median_ci

TITLE = "Reconfiguration: live vs stop-with-savepoint and restore"
PHASES = {
    "a": ("client", "savepoint", "finish", "resubmit", "deploy", "first commit"),
    "b": ("client", "prepare", "barrier+retire", "deploy", "first commit"),
}
PHASE_TEXT = {
    "client": "command started → request at the JobManager (the CLI's Python start-up, TLS connection, RPC)",
    "savepoint": "stop-with-savepoint requested → savepoint completed (sources stop, a checkpoint, sinks commit)",
    "finish": "savepoint completed → old job FINISHED",
    "resubmit": "old job FINISHED → new job submitted (the CLI reads the savepoint's path, submits the job graph)",
    "deploy": "(a) new job submitted → its last task RUNNING (slots, deployment, restore); "
    "(b) last old task FINISHED → last new task RUNNING",
    "prepare": "reconfiguration requested → its barrier's checkpoint triggered (PrepareReconfiguration to the "
    "affected tasks, then the first moment a checkpoint may trigger: after the one in flight)",
    "barrier+retire": "barrier triggered → the last old subtask of the counts chain FINISHED (the barrier "
    "passes the sources after their batch in progress, the checkpoint completes, the old subtasks commit and end)",
    "first commit": "last task of the new configuration RUNNING → its first committed part seen",
}
SUMMARY_KEYS = (
    "total_s", "server_s", "cli_s", "running_s", "out_stall_s", "out_base_s", "out_extra_s", "src_gap_s",
    "src_base_s", "src_extra_s", "src_status_gap_s", "src_status_base_s",
)  # fmt: skip
SUMMARY_HEADER = (
    "method", "runs kept/valid/all", "total s", "from the request s", "command returned s", "last task RUNNING s",
    "output stall s", "baseline s", "over baseline s", "source stall s", "baseline s", "over baseline s",
    "source stall (records_out) s", "baseline s", "source tasks kept",
)  # fmt: skip
RUN_HEADER = (
    "run", "phase", "method", "job", "total s", "command s", "RUNNING s", "output stall (baseline) s",
    "source stall (baseline) s", "records_out (baseline) s", "source tasks kept", "phases s",
    "pause / savepoint ms", "catch-up s", "files fed", "check", "foreign cores", "load 1 min",
)  # fmt: skip


def measured(runs: list[dict], method: str) -> list[dict]:
    return [r for r in runs if r["phase"] == "measured" and r["method"] == method]


def kept(runs: list[dict], method: str) -> list[dict]:
    """The measured runs of `method` that passed and the load rule kept."""
    return [r for r in measured(runs, method) if r.get("ok") and not r.get("excluded")]


def est_of(rs: list[dict], get: Callable[[dict], Any], excluded: int = 0) -> Estimate:
    return median_ci((get(r) for r in rs), excluded=excluded)


def value_of(key: str) -> Callable[[dict], Any]:
    return lambda r: r.get(key)


def phase(name: str) -> Callable[[dict], Any]:
    return lambda r: (r.get("phases") or {}).get(name)


def sec(e: Estimate) -> str:
    return fmt_estimate(e, ".2f")


def median_of(runs: list[dict], method: str, key: str) -> float | None:
    return est_of(kept(runs, method), value_of(key)).median


def setup_text(plan: dict) -> list[str]:
    return paragraph(
        f"**Job**: `examples/page_views.py` (watched directory, `--monitor-interval {MONITOR_MS} "
        f"--checkpoint-interval {CHECKPOINT_MS}`) at parallelism {P_FROM} on one cluster of 2 TaskManagers x 2 "
        f"slots, reused by every round. **Input** per round: {plan['events']:,} events in {plan['files']} files "
        f"({plan['urls']:,} urls, seed {SEED_INITIAL}), then one more file of {plan['feed_events']} events every "
        f"{plan['feed_every_ms']} ms ({plan['feed_rate']:,.0f} events/s, renamed into the directory) until "
        f"{POST_S:g} s after the change. **Change**: the `{OPERATOR}` operator from parallelism {P_FROM} to {P_TO}, "
        f"(a) {METHODS['a']}: a new job, every operator at {P_TO}; (b) {METHODS['b']}: the counts chain "
        f"(counts → counts sink) redeployed at {P_TO}, the {P_FROM} source tasks switched. Each round starts the "
        f"change once the committed output has caught up with the feed, after a steady window of {PRE_S:g} s."
    )


def measures_text(plan: dict) -> list[str]:
    return paragraph(
        "**Total**: the command started → the new configuration has every task RUNNING (JobManager log) and its "
        "first part committed (output directory listed every 20 ms). **Output stall**: the longest gap between "
        f"consecutive commits from {PRE_S:g} s before the command to {POST_S:g} s after the total's end; *baseline*: "
        f"the longest in the {PRE_S:g} s before the command. **Source stall**: the same over the ends of source "
        "batches of all source subtasks together (each TaskManager logs one line per batch, ms; with a file every "
        f"{plan['feed_every_ms']} ms and a directory listing every {MONITOR_MS} ms the sources as a whole have work "
        "at every listing; a single subtask may get no file for a second, so gaps of one subtask say little); "
        "*over baseline*: the median of each run's stall less its own baseline; and over the growth of the source "
        "tasks' summed `records_out` in `sluice status` sampled every 0.1 s (reported by heartbeat every 1 s: its "
        "resolution). *From the request*: the total less the command's own start (its request's time at the "
        "JobManager → the end). *Source tasks kept*: the same source subtasks RUNNING in every status sample and "
        "no state change of a source task in the JobManager log within the window. **Check**: after the feed "
        "stops, every url's largest committed count equals its count over all files fed, no line twice (a run "
        "failing it fails the benchmark). Medians with percentile-bootstrap 95 % intervals over the measured runs "
        "the load rule kept."
    )


def summary_row(runs: list[dict], method: str) -> list[Any]:
    """One method's row of the summary table: medians [95 % interval] over the runs kept."""
    rs, every = kept(runs, method), measured(runs, method)
    valid = [r for r in every if r.get("ok")]
    n_ex = sum(1 for r in valid if r.get("excluded"))
    cells = [sec(est_of(rs, value_of(k), n_ex)) for k in SUMMARY_KEYS]
    sources = f"{sum(1 for r in rs if r.get('sources_kept'))}/{len(rs)}"
    return [SHORT[method], f"{len(rs)}/{len(valid)}/{len(every)}", *cells, sources]


def goal_text(runs: list[dict]) -> list[str]:
    ta, tb = median_of(runs, "a", "total_s"), median_of(runs, "b", "total_s")
    ratio = ta / tb if ta and tb else None
    sa, sb = median_of(runs, "a", "server_s"), median_of(runs, "b", "server_s")
    limit = CHECKPOINT_MS / 1000
    worst = max((r["src_gap_s"] for r in kept(runs, "b") if r.get("src_gap_s") is not None), default=None)
    return paragraph(
        f"**Against the goal.** End to end, (a)/(b) = {cell(ratio)} (medians; goal ≥ 10): "
        f"{'met' if ratio is not None and ratio >= 10 else 'missed'}; from the request on, "
        f"{cell(sa / sb if sa and sb else None)}. The source tasks, which (b) leaves running: the longest gap between "
        f"source batches was {cell(median_of(runs, 'b', 'src_gap_s'))} s (median; the worst run {cell(worst)} s; "
        f"baseline before the command {cell(median_of(runs, 'b', 'src_base_s'))} s) against one checkpoint "
        f"interval, {limit:.2f} s (goal): {'met' if worst is not None and worst <= limit else 'missed'}."
    )


def phase_bullets(runs: list[dict]) -> list[str]:
    """Where the time goes: each method's phases, then the JobManager's own pause and savepoint times."""
    items = []
    for m in ("a", "b"):
        rs = kept(runs, m)
        parts = [f"{p} {sec(est_of(rs, phase(p)))}" for p in PHASES[m]]
        items.append(f"{SHORT[m]}: " + "; ".join(parts) + ".")
    pause = est_of(kept(runs, "b"), value_of("pause_ms"))
    sp = est_of(kept(runs, "a"), value_of("savepoint_ms"))
    items.append(
        "`pause_ms` the JobManager reports for (b) (barrier → redeployed tasks running): "
        f"{fmt_estimate(pause, ',.0f')}; the savepoint's `duration_ms` for (a): {fmt_estimate(sp, ',.0f')}."
    )
    return bullets(items)


def run_row(r: dict) -> list[Any]:
    """One run's row of the table of every run."""
    g = r.get
    phases = ", ".join(f"{k} {cell(v)}" for k, v in (g("phases") or {}).items())
    pms = g("pause_ms") if r["method"] == "b" else g("savepoint_ms")
    return [
        r["n"], r["phase"], r["method"], " → ".join(j[:8] for j in g("jobs", [])),
        cell(g("total_s")), cell(g("cli_s")), cell(g("running_s")),
        f"{cell(g('out_stall_s'))} ({cell(g('out_base_s'))})",
        f"{cell(g('src_gap_s'))} ({cell(g('src_base_s'))})",
        f"{cell(g('src_status_gap_s'))} ({cell(g('src_status_base_s'))})",
        f"{'yes' if g('sources_kept') else 'no'} ({g('source_changes', '—')} changes)", phases,
        cell(None if pms is None else float(pms), ",.0f"), cell(g("catchup_s"), ".1f"), g("fed_files", "—"),
        g("check") or f"FAILED: {g('error')}",
        f"{cell(g('foreign_cores'))}{' (excluded)' if g('excluded') else ''}",
        f"{cell(g('load_start'))}→{cell(g('load_end'))}",
    ]  # fmt: skip


def load_rule_text(runs: list[dict], limit: float) -> list[str]:
    if not limit:
        return ["Load rule: off (every run counted)."]
    left_out = [r for r in runs if r["phase"] == "measured" and r.get("excluded")]
    return paragraph(
        f"Load rule: a run during which other processes used more than {limit:g} cores on average (from "
        f"{PRE_S:g} s before the command to {POST_S:g} s after the total's end) is left out of the medians "
        f"(marked *excluded*); {len(left_out)} measured run(s) left out."
    )


def report(facts: dict, command: str, runs: list[dict], plan: dict, notes: list[str]) -> str:
    """The section: `plan` the sizes of the input and feed and the load rule's limit."""
    blocks = [
        setup_text(plan),
        measures_text(plan),
        table(SUMMARY_HEADER, [summary_row(runs, m) for m in ("a", "b")]),
        goal_text(runs),
        ["Where the time goes (medians [95 % interval] in seconds, over the same runs):"],
        phase_bullets(runs),
        ["Phases:"],
        bullets(f"*{k}*: {v}" for k, v in PHASE_TEXT.items()),
        ["### Every run"],
        table(RUN_HEADER, [run_row(r) for r in runs]),
        load_rule_text(runs, plan["max_foreign_cores"]),
    ]
    return section(TITLE, command, facts, blocks, notes) + "\n"  # and a blank line, as the section always ended


def run_notes(runs: list[dict]) -> list[str]:
    """The notes the runs give: the failed ones, the JobManager's storage warnings, the feed's
    punctuality, the catching up."""
    notes = []
    bad = [r for r in runs if not r.get("ok")]
    if bad:
        notes.append("failed runs: " + "; ".join(f"run {r['n']} ({SHORT[r['method']]}): {r.get('error')}" for r in bad))
    per: collections.Counter[str] = collections.Counter()
    for r in runs:
        per[r["method"]] += r.get("storage_warnings", 0)
    if sum(per.values()):
        notes.append(
            f"the JobManager logged `{STORAGE_WARNING}` (with an empty message) {sum(per.values())} time(s) in the "
            "measured windows: " + ", ".join(f"{SHORT[m]} {k}" for m, k in sorted(per.items()) if k)
        )
    late = max((r.get("feed_late_max", 0) for r in runs), default=0)
    skipped = sum(r.get("feed_skipped", 0) for r in runs)
    notes.append(
        f"the feed landed each file at most {late * 1000:.0f} ms after its slot"
        + (f"; {skipped} slots skipped" if skipped else "")
    )
    catch = median_ci(r.get("catchup_s") for r in runs if r.get("ok"))
    notes.append(
        f"catching up with the initial input and the feed took {fmt_estimate(catch, '.1f')} s per round (submit → "
        "committed counts at least the fed ones); once caught up the job kept up with the feed"
    )
    return notes
