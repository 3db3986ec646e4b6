"""The section bench/throughput_suite.py appends to bench/RESULTS.md, built from its runs, pure: the
figures (the fixed + per-event fit with its bootstrap intervals, the ratio, the processes' peak RSS
and their roles) and the Markdown (bench/markdown.py): the machine, the headline pairs with a
summary and peak RSS per process, the sweeps, the input sizes, and every run.

A run is a dict (bench/throughput_runs.py's Suite.run): its `n`, `phase` (bench/throughput_plan.py's
WARM_UP, SWEEP, HEADLINE or "size <events>"), `system`, `config`, `events`, the window's figures
(`window`, `rate`, `startup`, `tail`), the CPU figures and the load rule (`cpu_per_m`,
`other_cpu_s`, `foreign_cores`, `excluded`), `rss`, and the output check (`check`, `check_ok`,
`ok`, `error`, `window_error`). `plan` says what the invocation ran (bench/throughput_suite.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from markdown import cell, heading, notes_lines, paragraph, table
from procstat import fmt_rss
from stats import RESAMPLES, SEED, Estimate, est, fmt_estimate, kept, valid
from throughput_plan import HEADLINE, PEER, SLUICE, SWEEP, WARM_UP, Config, Pair

TITLE = "Throughput suite: one window for both systems"
MACHINE = (
    ("date -u", "date"),
    *((k, k) for k in ("cores", "cpu", "ram", "python", "java", "pyspark", "os")),
    ("load average at start", "load"),
)
RUN_HEADER = (
    "run",
    "system",
    "configuration",
    "events",
    "window s",
    "events/s",
    "startup s",
    "end seen after s",
    "CPU s per M events",
    "others' CPU s",
    "foreign cores",
    "output exactly once",
)


# ================================================================================================
# figures
# ================================================================================================
def fit_line(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Least squares y = a + b x; returns (a, b)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) < 2 or np.ptp(xs) == 0:
        raise ValueError("a fit needs runs at two sizes at least")
    b, a = np.polyfit(xs, ys, 1)
    return float(a), float(b)


def fit_with_ci(
    events: Sequence[float], seconds: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[Estimate, Estimate] | None:
    """window = fixed + per_event x events over all runs: (fixed seconds, µs per event), each the
    least-squares value with a percentile-bootstrap 95 % interval over the runs (resamples with
    fewer than two distinct sizes are skipped). None with fewer than two sizes."""
    x, y = np.asarray(events, dtype=float), np.asarray(seconds, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return None
    a, b = fit_line(x, y)
    rng = np.random.default_rng(seed)
    fixed, per = [], []
    for idx in rng.integers(0, len(x), size=(resamples, len(x))):
        if np.ptp(x[idx]) == 0:
            continue
        ra, rb = fit_line(x[idx], y[idx])
        fixed.append(ra)
        per.append(rb * 1e6)
    n = len(x)
    if not fixed:
        return Estimate(a, None, None, n), Estimate(b * 1e6, None, None, n)
    lo, hi = np.percentile(fixed, [2.5, 97.5])
    plo, phi = np.percentile(per, [2.5, 97.5])
    return Estimate(a, float(lo), float(hi), n), Estimate(b * 1e6, float(plo), float(phi), n)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def process_role(cmdline: Sequence[str]) -> str | None:
    """What a process of either system is, from its command line (None: not one of these)."""
    joined = " ".join(cmdline)
    if "-m" in cmdline[:-1]:
        module = cmdline[cmdline.index("-m") + 1]
        roles = {"jobmanager": "jobmanager", "taskmanager": "taskmanager", "sluice.cli.supervisor": "supervisor"}
        if module in roles:
            return roles[module]
    if "org.apache.zookeeper" in joined:
        return "zookeeper"
    if "structured_streaming_bench.py" in joined and "--child" in cmdline:
        return "peer driver (python)"
    if cmdline and os.path.basename(cmdline[0]) == "java" and "pyspark" in joined:
        return "spark-jvm"
    return None


def peak_rss_by_process(runs: Iterable[dict]) -> dict[str, int]:
    """Process label -> its highest peak RSS over the runs."""
    peaks: dict[str, int] = {}
    for r in runs:
        for name, rss in (r.get("rss") or {}).items():
            peaks[name] = max(peaks.get(name, 0), rss)
    return peaks


# ================================================================================================
# cells and rows
# ================================================================================================
def num(x: Any, spec: str = ".2f") -> str:
    """A figure's cell: a number by `spec`, None as "—"."""
    return cell(None if x is None else float(x), spec)


def fmt_cfg(c: Config | None) -> str:
    return "—" if c is None else f"{c.system}: {c.label}"


def of_config(runs: Iterable[dict], cfg: Config, phase: str | None = None) -> list[dict]:
    """The runs of `cfg` (in `phase`, when given)."""
    return [r for r in runs if r["config"] == cfg and (phase is None or r["phase"] == phase)]


def check_text(r: dict) -> str:
    """A run's output check in words: "yes", "**NO**" (the check failed), or why the run failed."""
    if r["check_ok"]:
        return "yes"
    return "**NO**" if r.get("check") else f"failed: {(r.get('error') or r.get('window_error') or '')[:80]}"


def run_row(r: dict) -> list[str]:
    no_window = "" if r.get("ok") or not r["check_ok"] else f" (no window: {r.get('window_error')})"
    return [
        str(r["n"]),
        r["system"],
        r["config"].label,
        f"{r['events']:,}",
        num(r["window"]),
        num(r["rate"], ",.0f"),
        num(r["startup"]),
        num(r.get("tail")),
        num(r.get("cpu_per_m")),
        num(r.get("other_cpu_s")),
        num(r.get("foreign_cores")) + (" (excluded)" if r.get("excluded") else ""),
        check_text(r) + no_window,
    ]


def summary_row(name: str, runs: Sequence[dict]) -> list[str]:
    return [
        name,
        f"{len(kept(runs))}/{len(valid(runs))}/{len(runs)}",
        fmt_estimate(est(runs, "window"), ".2f"),
        fmt_estimate(est(runs, "rate")),
        fmt_estimate(est(runs, "startup"), ".2f"),
        fmt_estimate(est(runs, "cpu_per_m"), ".2f"),
    ]


def summary_table(groups: Sequence[tuple[str, Sequence[dict]]]) -> list[str]:
    header = ("", "runs (kept/valid/all)", "window s", "events/s", "startup s", "CPU s per M events")
    return table(header, [summary_row(name, runs) for name, runs in groups])


def headline_row(pair: Pair, measured: Sequence[dict]) -> list[str]:
    s_cfg, p_cfg, name = pair
    rs, rp = of_config(measured, s_cfg, HEADLINE), of_config(measured, p_cfg, HEADLINE)
    es, ep = est(rs, "rate"), est(rp, "rate")
    return [
        name,
        s_cfg.label,
        p_cfg.label,
        fmt_estimate(es),
        fmt_estimate(ep),
        num(ratio(es.median, ep.median)),
        fmt_estimate(est(rs, "cpu_per_m"), ".2f"),
        fmt_estimate(est(rp, "cpu_per_m"), ".2f"),
        f"{len(kept(rs))}/{len(kept(rp))}",
    ]


def rss_rows(cfg: Config, runs: Iterable[dict]) -> list[list[str]]:
    """A configuration's processes with their peak RSS over `runs`, then all of them together."""
    peaks = peak_rss_by_process(runs)
    rows = [[fmt_cfg(cfg), name, fmt_rss(peaks[name])] for name in sorted(peaks)]
    if peaks:
        rows.append([fmt_cfg(cfg), "**all**", f"**{fmt_rss(sum(peaks.values()))}**"])
    return rows


def sweep_row(c: Config, runs: Sequence[dict], best: Config | None) -> list[str]:
    mark = "**" if c == best else ""
    return [
        f"{mark}{c.label}{mark}",
        str(c.threads),
        f"{len(kept(runs))}/{len(runs)}",
        fmt_estimate(est(runs, "rate")),
        fmt_estimate(est(runs, "window"), ".2f"),
        fmt_estimate(est(runs, "startup"), ".2f"),
        fmt_estimate(est(runs, "cpu_per_m"), ".2f"),
    ]


def size_row(cfg: Config, runs: Sequence[dict], sizes: Sequence[int]) -> list[str]:
    """A configuration's fit over its kept `runs`, and its median window at each of `sizes`."""
    rk = kept(runs)
    f = fit_with_ci([r["events"] for r in rk], [r["window"] for r in rk])
    return [
        cfg.system,
        cfg.label,
        fmt_estimate(f[0], ".2f") if f else "—",
        fmt_estimate(f[1], ".3f") if f else "—",
        f"{len(rk)}/{len(runs)}",
        *(fmt_estimate(est([r for r in runs if r["events"] == s], "window"), ".2f") for s in sizes),
    ]


def warm_up_text(r: dict) -> str:
    check = "output exactly once" if r["check_ok"] else "OUTPUT CHECK FAILED" if r.get("check") else "failed"
    return f"{r['system']} {r['config'].label}: {num(r['rate'], ',.0f')} events/s, {check}"


# ================================================================================================
# the section
# ================================================================================================
def head(facts: dict, command: str, runs: Sequence[dict], plan: dict, when: float | None) -> list[list[str]]:
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(when))
    failed = any(not r["check_ok"] and r.get("check") for r in runs)
    return [
        heading(f"{stamp} UTC — {TITLE}", 2),
        [f"Command: `{command}` at commit {facts['commit']}"],
        table(("machine", ""), [(label, facts[key]) for label, key in MACHINE]),
        ["**OUTPUT CHECK FAILED** (see the notes)."] if failed else [],
        paragraph(
            "Window = first read of an input file (inotify IN_ACCESS) → commit (IN_MOVED_TO) of the output file "
            "after which the committed output holds every url's final count; events/s = events / window; startup = "
            "launch → first read; end seen after = window end → the harness saw the run end; CPU = the measured "
            "system's processes from the first read to the end seen by the harness; others' CPU = every other "
            "cluster and SparkSession of the suite, idle meanwhile; foreign cores = CPU of every other "
            f"process / wall time (load rule: above {plan['max_foreign_cores']} excluded). Medians with "
            "percentile-bootstrap 95 % intervals over the kept runs; ratios Sluice/peer of the medians (above 1: "
            "Sluice better for events/s). Sluice: checkpoints every 1 s (the job's default).",
            plan["skipped"],
        ),
    ]


def headline_blocks(plan: dict, measured: Sequence[dict]) -> list[list[str]]:
    pairs: list[Pair] = plan.get("headline", [])
    if not pairs:
        return []
    header = (
        "pair",
        "Sluice configuration",
        "peer configuration",
        "Sluice events/s",
        "peer events/s",
        "ratio",
        "Sluice CPU s/M",
        "peer CPU s/M",
        "runs kept S/P",
    )
    cfgs: list[Config] = list(dict.fromkeys(c for pair in pairs for c in pair[:2]))
    return [
        ["### Headline"],
        table(header, [headline_row(p, measured) for p in pairs]),
        summary_table([(fmt_cfg(c), of_config(measured, c, HEADLINE)) for c in cfgs]),
        ["Peak RSS per process (highest over the headline runs of the configuration):"],
        table(
            ("configuration", "process", "peak RSS"),
            [row for c in cfgs for row in rss_rows(c, of_config(measured, c, HEADLINE))],
        ),
    ]


def sweep_blocks(plan: dict, measured: Sequence[dict]) -> list[list[str]]:
    sweep = [r for r in measured if r["phase"] == SWEEP]
    if not sweep:
        return []
    header = (
        "configuration",
        "task threads",
        "runs kept/all",
        "events/s",
        "window s",
        "startup s",
        "CPU s per M events",
    )
    blocks = [
        [
            f"### Sweeps ({plan['sweep_events']:,} events, {len(plan['peer_cfgs'])} peer and "
            f"{len(plan['sluice_cfgs'])} Sluice configurations)"
        ]
    ]
    for system, cfgs, best in (
        (SLUICE, plan["sluice_cfgs"], plan.get("best_sluice")),
        (PEER, plan["peer_cfgs"], plan.get("best_peer")),
    ):
        blocks.append([f"{system} (best: {best.label if best else '—'}):"])
        blocks.append(table(header, [sweep_row(c, of_config(sweep, c), best) for c in cfgs]))
    return blocks


def size_blocks(plan: dict, measured: Sequence[dict]) -> list[list[str]]:
    if not any(r["phase"].startswith("size") for r in measured):
        return []
    fit_runs = [r for r in measured if r["phase"].startswith("size") or r["phase"] == HEADLINE]
    sizes = sorted({r["events"] for r in fit_runs})
    header = (
        "system",
        "configuration",
        "fixed s",
        "µs per event",
        "runs kept",
        *(f"{s:,} events: window s" for s in sizes),
    )
    cfgs = (plan["size_sluice"], plan["size_peer"])
    return [
        ["### Input sizes: window = fixed + per event x events"],
        paragraph(
            "Fit: least squares over every kept run of the configuration in the size sweep and in the headline "
            "(its runs at the headline size); intervals: percentile bootstrap over those runs."
        ),
        table(header, [size_row(c, of_config(fit_runs, c), sizes) for c in cfgs]),
    ]


def every_run_blocks(runs: Sequence[dict], measured: Sequence[dict]) -> list[list[str]]:
    warm = [warm_up_text(r) for r in runs if r["phase"] == WARM_UP]
    blocks = [
        ["### Every run"],
        paragraph(
            "Warm-up runs (one per new cluster or SparkSession, not counted): " + ("; ".join(warm) or "none") + "."
        ),
    ]
    for phase in dict.fromkeys(r["phase"] for r in measured):
        blocks.append([f"{phase}:"])
        blocks.append(table(RUN_HEADER, [run_row(r) for r in measured if r["phase"] == phase]))
    return blocks


def report(
    facts: dict, command: str, runs: Sequence[dict], notes: Sequence[str], plan: dict, when: float | None = None
) -> str:
    """The section: its head, the headline, the sweeps, the input sizes and every run (each part only
    when its runs were made), then the notes."""
    measured = [r for r in runs if r["phase"] != WARM_UP]
    blocks = [
        *head(facts, command, runs, plan, when),
        *headline_blocks(plan, measured),
        *sweep_blocks(plan, measured),
        *size_blocks(plan, measured),
        *every_run_blocks(runs, measured),
    ]
    lines = [line for block in blocks if block for line in (*block, "")]
    return "\n".join(lines + notes_lines(notes)) + "\n"
