"""The report of bench/batch_bench.py: its runs (batch_runs.Bench's run dicts) -> one Markdown section
of bench/RESULTS.md, a block per part (a summary table with medians and their intervals, the goal,
every run). Pure: no process started, nothing read but the runs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from batch_runs import ARMS, STRATEGIES
from bench_common import fmt
from markdown import paragraph, section, table
from paired_report import foreign_cell
from run_matrix import by
from stats import RESAMPLES, SEED, Estimate, est, fmt_estimate, kept, valid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TITLE = "Batch mode and fine-grained recovery"
ARM_NAMES = {"off": "straggler, speculation off", "on": "straggler, speculation on", "none": "no straggler"}


class Invocation(Protocol):
    """What the report reads of an invocation (batch_runs.Bench)."""

    args: argparse.Namespace
    runs: list[dict]
    notes: list[str]
    chosen: dict[str, Any]


# ================================================================================================
# figures and cells
# ================================================================================================
def ratio_ci(num: Sequence[float], den: Sequence[float]) -> Estimate:
    """median(num) / median(den) with a percentile-bootstrap 95 % interval (each side resampled on its
    own, stats.SEED)."""
    import numpy as np

    x, y = np.array(num, dtype=float), np.array(den, dtype=float)
    if len(x) == 0 or len(y) == 0:
        return Estimate(None, None, None, 0)
    ratio = float(np.median(x) / np.median(y))
    if len(x) < 2 or len(y) < 2:
        return Estimate(ratio, None, None, 1)
    rng = np.random.default_rng(SEED)
    mx = np.median(x[rng.integers(0, len(x), size=(RESAMPLES, len(x)))], axis=1)
    my = np.median(y[rng.integers(0, len(y), size=(RESAMPLES, len(y)))], axis=1)
    low, high = np.percentile(mx / my, [2.5, 97.5])
    return Estimate(ratio, float(low), float(high), min(len(x), len(y)))


def values(rs: Iterable[dict], key: str) -> list[float]:
    return [r[key] for r in kept(rs) if r.get(key) is not None]


def median_cell(rs: Sequence[dict], key: str, spec: str = ".2f") -> str:
    return fmt_estimate(est(rs, key), spec)


def counts_cell(rs: Sequence[dict]) -> str:
    return f"{len(kept(rs))}/{len(valid(rs))}/{len(rs)}"


def check_cell(r: dict) -> str:
    if r.get("error"):
        return f"failed: {r['error'][:200]}"
    return ("" if r.get("check_ok") else "**NO**: ") + str(r.get("check"))


def goal(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**missed**")


def part_runs(runs: Iterable[dict], part: str, phase: str | None = None) -> list[dict]:
    return [r for r in runs if r["part"] == part and (phase is None or r["phase"] == phase)]


def run_table(
    rs: Sequence[dict], heads: Sequence[str], cells: Callable[[dict], list[str]], system_column: bool = False
) -> list[str]:
    """ "Every run:" and a table of the runs: number, phase, arm (or system and configuration), the
    part's `cells` under `heads`, the foreign cores and the output check."""
    first = ("system", "configuration") if system_column else ("arm",)
    rows = [[*run_lead(r, system_column), *cells(r), foreign_cell(r), check_cell(r)] for r in rs]
    return ["Every run:", "", *table(("run", "phase", *first, *heads, "foreign cores", "output"), rows)]


def run_lead(r: dict, system_column: bool) -> list[Any]:
    return [str(r["n"]), r["phase"], r["arm"], *([r.get("config", "")] if system_column else [])]


# ================================================================================================
# 1. page views
# ================================================================================================
PAGE_VIEWS_HEADS = ("time s", "JobManager s", "go → done s", "CPU s/M")


def page_views_cells(r: dict) -> list[str]:
    return [fmt(r.get("time")), fmt(r.get("jm_time")), fmt(r.get("parent_time")), fmt(r.get("cpu_per_m"))]


def page_views_row(system: str, label: str, rs: Sequence[dict]) -> list[Any]:
    """A system's summary: kept/valid/all and the median of each time (None: not the system's)."""
    jm = median_cell(rs, "jm_time") if system == "Sluice" else None
    go_done = median_cell(rs, "parent_time") if system == "peer" else None
    return [system, label, counts_cell(rs), median_cell(rs, "time"), jm, go_done, median_cell(rs, "cpu_per_m")]


def page_views_intro(a: argparse.Namespace, chosen: dict[str, Any]) -> str:
    return (
        f"Input: {a.events:,} page views in {a.files} files (examples/generate_page_views.py, 10,000 urls, seed 7; "
        f"cached under {os.path.relpath(os.path.abspath(a.data_dir), REPO)}/). Sluice: `examples/page_views_batch.py` "
        f"(no --top-output) on {chosen.get('sluice', '—')}, one cluster started before the runs; *time* = `sluice "
        "run --detach` started → FINISHED seen by a 0.1 s status poll (CLI start-up, submission, scheduling, both "
        "stages, the commit of the output); *JobManager* = its submitted → ended. The peer: "
        '`spark.read.schema(...).json(dir).groupBy("url").count().write.csv(out)` in one warm SparkSession '
        f"(local[2], shuffle partitions {chosen.get('shuffle', '—')}) in a child process; *time* = the query "
        "alone (read, aggregate, write, job commit); *go → done* = the harness's go file → the child's done "
        "event. Neither side's time includes starting a cluster or a SparkSession. Runs alternate S P, P S, …; "
        "each output checked: every url once with exactly the generator's count."
    )


def tuning_lines(rs: Sequence[dict]) -> list[str]:
    """The tuning runs' times per system and configuration (none: no lines)."""
    groups = by(part_runs(rs, "page-views", "tuning"), lambda r: (r["arm"], r["config"])).values()
    times = [
        f"{rr[0]['arm']} {rr[0]['config']}: {', '.join(fmt(r.get('time')) for r in rr)} s"
        for rr in sorted(groups, key=lambda rr: (rr[0]["arm"], rr[0]["config"]))
    ]
    if not times:
        return []
    return ["Tuning (after each configuration's warm-up; the fastest median measured): " + "; ".join(times) + ".", ""]


def page_views_report(b: Invocation) -> list[str]:
    rs = part_runs(b.runs, "page-views")
    if not rs:
        return []
    m = {s: [r for r in rs if r["phase"] == "measured" and r["arm"] == s] for s in ("Sluice", "peer")}
    labels = {"Sluice": b.chosen.get("sluice", "—"), "peer": f"local[2], shuffle {b.chosen.get('shuffle')}"}
    head = ("system", "configuration", "runs kept/valid/all", "time s", "JobManager s", "go → done s")
    summary = table((*head, "CPU s per M events"), [page_views_row(s, labels[s], m[s]) for s in m if m[s]])
    ratio = ratio_ci(values(m["Sluice"], "time"), values(m["peer"], "time"))
    ratio_jm = ratio_ci(values(m["Sluice"], "jm_time"), values(m["peer"], "time"))
    met = None if ratio.median is None else ratio.median <= 1.2
    return [
        "### 1. Batch page views: Sluice BATCH vs plain Spark batch",
        "",
        page_views_intro(b.args, b.chosen),
        "",
        *summary,
        "",
        f"**Sluice / peer time: {fmt_estimate(ratio, '.2f')}** (goal ≤ 1.2: {goal(met)}); with Sluice's "
        f"JobManager time instead: {fmt_estimate(ratio_jm, '.2f')}.",
        "",
        *tuning_lines(rs),
        *run_table(rs, PAGE_VIEWS_HEADS, page_views_cells, system_column=True),
    ]


# ================================================================================================
# 2. failover
# ================================================================================================
FAILOVER_HEADS = (
    "victim subtask",
    "kill at s",
    "detected s",
    "recovery s",
    "after detection s",
    "restarted",
    "restarts",
    "total s",
)


FAILOVER_SUMMARY = (
    "strategy",
    "runs kept/valid/all",
    "detected s",
    "recovery s",
    "after detection s",
    "tasks restarted (per run)",
    "job attempt rose",
    "restarts",
    "job total s",
)


def failover_cells(r: dict) -> list[str]:
    return [
        str(r.get("victim", "—")),
        fmt(r.get("kill_at"), ".1f"),
        fmt(r.get("detect")),
        fmt(r.get("recovery")),
        fmt(r.get("redeploy")),
        f"{r.get('restarted', '—')}/{r.get('tasks', '—')}",
        str(r.get("restarts", "—")),
        fmt(r.get("total"), ".1f"),
    ]


def failover_row(strategy: str, rs: Sequence[dict]) -> list[Any]:
    """A strategy's summary: medians, and per kept run the tasks restarted, whether the job attempt rose
    and the restarts counted."""
    k = kept(rs)
    return [
        strategy,
        counts_cell(rs),
        median_cell(rs, "detect"),
        median_cell(rs, "recovery"),
        median_cell(rs, "redeploy"),
        ", ".join(f"{r['restarted']}/{r['tasks']}" for r in k) or "—",
        f"{sum(1 for r in k if r.get('job_restarted'))}/{len(k)}",
        ", ".join(str(r.get("restarts")) for r in k) or "—",
        median_cell(rs, "total", ".1f"),
    ]


def failover_intro(a: argparse.Namespace) -> str:
    return (
        f"`bench/jobs/failover_copy.py` at parallelism 4 on 4 TaskManagers x 2 slots (each subtask on its own "
        f"TaskManager), {a.failover_events:,} page views in {a.failover_files} files, {a.failover_pause} s per batch "
        f"in the paced map, checkpoints every 500 ms; kill -9 of the process group of the TaskManager hosting one "
        f"subtask {a.kill_after:g} s after the first completed checkpoint. *Detected*: kill → the first status poll "
        "(every 50 ms) showing the failure (a task not RUNNING, a new attempt or a restart counted). *Recovery*: kill "
        "→ every task RUNNING (or FINISHED) again, the restarted ones in a new execution; *after detection*: the "
        "recovery less the detection (what the strategy decides). *Restarted*: tasks whose (job attempt, execution "
        "attempt) rose. Output: every input row exactly once."
    )


def failover_report(b: Invocation) -> list[str]:
    rs = part_runs(b.runs, "failover")
    if not rs:
        return []
    per = {s: [r for r in rs if r["arm"] == s] for s in STRATEGIES}
    region = kept(per["region"])
    met = None if not region else all(r["restarted"] * 4 <= r["tasks"] for r in region)
    ratio = ratio_ci(values(per["full"], "recovery"), values(per["region"], "recovery"))
    after = ratio_ci(values(per["full"], "redeploy"), values(per["region"], "redeploy"))
    return [
        "### 2. Region vs full failover (streaming, 4 independent pipelines)",
        "",
        failover_intro(b.args),
        "",
        *table(FAILOVER_SUMMARY, [failover_row(s, per[s]) for s in STRATEGIES if per[s]]),
        "",
        f"**Region restarts ≤ 1/4 of the tasks in every kept run: {goal(met)}.** Full / region: recovery "
        f"{fmt_estimate(ratio, '.2f')}, after detection {fmt_estimate(after, '.2f')}.",
        "",
        *run_table(rs, FAILOVER_HEADS, failover_cells),
    ]


# ================================================================================================
# 3. speculation
# ================================================================================================
SPECULATION_HEADS = ("time s", "JobManager s", "backups", "straggled")


def backups_cell(r: dict, missing: str = "—") -> str:
    return f"{r.get('backups', missing)}{' (won)' if r.get('backup_won') else ''}"


def speculation_cells(r: dict) -> list[str]:
    return [fmt(r.get("time")), fmt(r.get("jm_time")), backups_cell(r), "yes" if r.get("straggled") else "no"]


def speculation_row(arm: str, rs: Sequence[dict]) -> list[Any]:
    backups = ", ".join(backups_cell(r) for r in kept(rs))
    return [ARM_NAMES[arm], counts_cell(rs), median_cell(rs, "time"), median_cell(rs, "jm_time"), backups or "—"]


def speculation_cut(ratio: Estimate) -> tuple[str, float | None]:
    """How much speculation cuts the time (1 - on/off) as text with its interval, and as a number."""
    cut = None if ratio.median is None else 1 - ratio.median
    text = "—" if cut is None else f"{cut * 100:.0f} %"
    if ratio.low is not None and ratio.high is not None:
        text += f" [{(1 - ratio.high) * 100:.0f}–{(1 - ratio.low) * 100:.0f} %]"
    return text, cut


def speculation_report(b: Invocation) -> list[str]:
    a = b.args
    rs = part_runs(b.runs, "speculation")
    if not rs:
        return []
    per = {s: [r for r in rs if r["arm"] == s and r["phase"] == "measured"] for s in ARMS}
    ratio = ratio_ci(values(per["on"], "time"), values(per["off"], "time"))
    cut_text, cut = speculation_cut(ratio)
    head = ("arm", "runs kept/valid/all", "time s", "JobManager s", "backups (won)")
    return [
        "### 3. Speculative execution with one straggler (BATCH)",
        "",
        f"`tests/integration/jobs/batch_counts.py` at parallelism 4 on 2 TaskManagers x 2 slots, "
        f"{a.speculation_events:,} page views in {a.speculation_files} files, {a.speculation_delay} s per source "
        f"batch; the straggler (the first source attempt to take the marker file) sleeps {a.straggle:g} s once. "
        "Speculation with the defaults (min-finished 0.75, multiplier 1.5, min-runtime 1 s). *Time*: `sluice run "
        "--detach` started → FINISHED seen (0.1 s poll); *JobManager*: submitted → ended. Exact counts checked.",
        "",
        *table(head, [speculation_row(s, per[s]) for s in ARMS if per[s]]),
        "",
        f"**Speculation cuts the time by {cut_text}** (on / off {fmt_estimate(ratio, '.2f')}; goal ≥ 40 %: "
        f"{goal(None if cut is None else cut >= 0.4)}).",
        "",
        *run_table(rs, SPECULATION_HEADS, speculation_cells),
    ]


# ================================================================================================
# the section
# ================================================================================================
def closing_notes(b: Invocation, seconds: float) -> list[str]:
    """The invocation's notes, then how long other processes held the runs back and how long it took."""
    notes = list(b.notes)
    waits = [r["waited"] for r in b.runs if r.get("waited", 0) > 5]
    if waits:
        notes.append(
            f"Other processes loaded the machine before {len(waits)} runs; the harness waited {sum(waits):.0f} s in "
            f"all (at most {max(waits):.0f} s before one run) for it to be quiet (--quiet-wait)."
        )
    return [*notes, f"The invocation took {seconds:.0f} s."]


def report(b: Invocation, command: str, facts: dict, seconds: float, when: float | None = None) -> str:
    """The section: the load rule, each part that ran, the runs the load rule left out, the notes."""
    load_rule = paragraph(
        "Load rule: a run during which processes of neither the measured system nor the harness used more than "
        f"{b.args.max_foreign_cores:g} cores on average is excluded (`procstat.py`); medians with percentile-bootstrap "
        "95 % intervals over the kept runs; ratios of medians with a bootstrap interval (both arms resampled). "
        "*Runs kept/valid/all*: valid = completed with its output exact."
    )
    n_out = sum(1 for r in b.runs if r.get("excluded"))
    left_out = [f"The load rule left out {n_out} run{'s' if n_out != 1 else ''} (marked above)."] if n_out else []
    blocks = [load_rule, page_views_report(b), failover_report(b), speculation_report(b), left_out]
    return section(TITLE, command, facts, blocks, closing_notes(b, seconds), when)
