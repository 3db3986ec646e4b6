"""The report cells bench/windowed_bench.py and bench/state_bench.py share (their runs: bench/paired_runs.py):
a system's summary cells and a run's cells (each a list, for bench/markdown.py's `table`, with the
headers of those columns), the output-check banner, state sizes with their intervals. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from bench_common import fmt, size
from paired_runs import PEER, SLUICE
from stats import Estimate, est, fmt_estimate, kept, median_ci, valid


def fmt_bytes_est(e: Estimate) -> str:
    if e.median is None:
        return "—"
    if e.low is None or e.high is None:
        return f"{size(e.median)} (1 run)"
    return f"{size(e.median)} [{size(e.low)}–{size(e.high)}]"


def ratio_of(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def check_banner(runs: Iterable[dict]) -> list[str]:
    """A section's first block when an output check failed (empty when none did)."""
    return (
        ["**OUTPUT CHECK FAILED** (see the notes)."] if any(r.get("check") and not r["check_ok"] for r in runs) else []
    )


def summary_groups(
    runs: Iterable[dict], key: str, names: Iterable[str]
) -> Iterator[tuple[str, str, dict[str, list[dict]], Estimate, float | None]]:
    """The summary table's rows: per item (`key` of a run: its name) and system that has measured runs,
    (item, system, the item's measured runs per system, the system's events/s, the ratio Sluice/peer
    of the median events/s)."""
    measured = [r for r in runs if r["phase"] == "measured"]
    for name in names:
        rs = {s: [r for r in measured if r[key] == name and r["system"] == s] for s in (SLUICE, PEER)}
        rate = {s: est(rs[s], "rate") for s in rs}
        ratio = ratio_of(rate[SLUICE].median, rate[PEER].median)
        for s in (SLUICE, PEER):
            if rs[s]:
                yield name, s, rs, rate[s], ratio


SUMMARY_HEAD = [
    "runs kept/valid/all",
    "events/s",
    "ratio S/P",
    "events/s, every valid run",
    "window s",
    "startup s",
    "CPU s per M events",
]


def summary_cells(runs_s: Sequence[dict], rate: Estimate, ratio: float | None, system: str) -> list[str]:
    """A summary row's common cells (SUMMARY_HEAD), from the run counts to CPU per million events."""
    return [
        f"{len(kept(runs_s))}/{len(valid(runs_s))}/{len(runs_s)}",
        fmt_estimate(rate),
        fmt(ratio) if system == SLUICE else "",
        fmt_estimate(median_ci(r["rate"] for r in valid(runs_s))),
        fmt_estimate(est(runs_s, "window"), ".2f"),
        fmt_estimate(est(runs_s, "startup"), ".2f"),
        fmt_estimate(est(runs_s, "cpu_per_m"), ".2f"),
    ]


def state_summary(runs_s: Sequence[dict], system: str) -> str:
    state = fmt_bytes_est(est(runs_s, "state_peak"))
    if system == PEER:
        return f"memory {state}; disk {fmt_bytes_est(est(runs_s, 'state_disk'))}"
    return f"checkpoint {state}"


def run_cells(r: dict, error_chars: int, check_chars: int) -> tuple[str, str, str]:
    """A run row's (configuration, state, output check) cells."""
    state = (
        f"checkpoint {size(r.get('state_peak'))}"
        if r["system"] == SLUICE
        else f"memory {size(r.get('state_peak'))}, disk {size(r.get('state_disk'))}"
    )
    out = "yes" if r["check_ok"] else ("**NO**" if r.get("check") else "failed")
    if r.get("error"):
        out += f": {r['error'][:error_chars]}"
    elif r.get("check") and not r["check_ok"]:
        out += f": {r['check'][:check_chars]}"
    elif r.get("window_error"):
        out += f" (no window: {r['window_error']})"
    cfg = "1 TM x 2 slots, p=2" if r["system"] == SLUICE else f"local[2], shuffle {r.get('shuffle')}"
    return cfg, state, out


TIMING_HEAD = ["window s", "events/s", "startup s", "CPU s per M"]


def run_head(noun: str) -> list[str]:
    """A run table's first columns, up to the run's state (`noun`: the column naming its item; the
    cells: `run_start`)."""
    return ["run", "phase", noun, "system", "configuration", *TIMING_HEAD, "state"]


def run_start(r: dict, item: str, error_chars: int, check_chars: int) -> tuple[list[str], str]:
    """A run row's first cells (`run_head`'s columns; `item`: the run's item as the table names it)
    and its output-check cell (`run_cells`), which the tables put last."""
    cfg, state, out = run_cells(r, error_chars, check_chars)
    return [str(r["n"]), r["phase"], item, r["system"], cfg, *timing_cells(r), state], out


def timing_cells(r: dict) -> list[str]:
    """A run row's window, events/s, startup and CPU cells (TIMING_HEAD)."""
    return [fmt(r["window"]), fmt(r["rate"], ",.0f"), fmt(r["startup"]), fmt(r.get("cpu_per_m"))]


def foreign_cell(r: dict) -> str:
    return f"{fmt(r.get('foreign_cores'))}{' (excluded)' if r.get('excluded') else ''}"
