"""The section bench/key_sweep.py appends to bench/RESULTS.md, pure: per key count each system's median
window over its kept runs (bootstrap 95 % interval) and events/s, the ratio Sluice/peer of the
events/s, each system's time ratio per doubling of the keys; then every run in order.

A run is a dict (bench/throughput_runs.py's Suite.run, plus its `keys`)."""

from __future__ import annotations

from collections.abc import Sequence

from markdown import cell, paragraph, section, table
from stats import Estimate, fmt_estimate, median_ci
from throughput_plan import MATCHED_PEER, MATCHED_SLUICE, PEER, SLUICE, WARM_UP

TITLE = "Key-cardinality sweep: Sluice and the peer at fixed events"
KEYS_HEADER = (
    "keys",
    "Sluice s",
    "Sluice events/s",
    "peer s",
    "peer events/s",
    "ratio",
    "Sluice per doubling",
    "peer per doubling",
)
RUNS_HEADER = ("#", "keys", "system", "phase", "window s", "events/s", "CPU s/M", "foreign", "output exact", "kept")


def windows(runs: Sequence[dict], system: str, keys: int) -> Estimate:
    """The median window of the kept runs of `system` at `keys`."""
    mine = [r for r in runs if r["system"] == system and r["keys"] == keys and r["phase"] != WARM_UP]
    kept = [r["window"] for r in mine if r["ok"] and not r.get("excluded")]
    return median_ci(kept, excluded=len(mine) - len(kept))


def key_rows(runs: Sequence[dict], keys: Sequence[int], events: int) -> list[list[str]]:
    """A row per key count; a doubling's time ratio only where the keys doubled from the row above."""
    rows = []
    last: dict[str, float | None] = {SLUICE: None, PEER: None}
    prev_k = 0
    for k in keys:
        est = {s: windows(runs, s, k) for s in (SLUICE, PEER)}
        rate = {s: events / e.median if e.median else None for s, e in est.items()}
        doubled = k == 2 * prev_k
        growth: dict[str, float | None] = {}
        for s, e in est.items():
            before = last[s]
            growth[s] = e.median / before if doubled and e.median and before else None
        ours, theirs = rate[SLUICE], rate[PEER]
        rows.append(
            [
                f"{k:,}",
                fmt_estimate(est[SLUICE], ".2f"),
                cell(rate[SLUICE], ",.0f"),
                fmt_estimate(est[PEER], ".2f"),
                cell(rate[PEER], ",.0f"),
                cell(ours / theirs if ours and theirs else None),
                cell(growth[SLUICE]),
                cell(growth[PEER]),
            ]
        )
        last, prev_k = {s: est[s].median for s in est}, k
    return rows


def run_row(r: dict) -> list[str]:
    return [
        str(r["n"]),
        f"{r['keys']:,}",
        r["system"],
        r["phase"],
        cell(r.get("window")),
        cell(r.get("rate"), ",.0f"),
        cell(r.get("cpu_per_m")),
        cell(r.get("foreign_cores")),
        "yes" if r.get("check_ok") else "NO",
        "no" if r.get("excluded") or not r["ok"] else "yes",
    ]


def report(
    facts: dict,
    command: str,
    runs: Sequence[dict],
    keys: Sequence[int],
    events: int,
    notes: Sequence[str],
    when: float | None = None,
) -> str:
    intro = paragraph(
        f"A running count per url over {events:,} events at each key count, every url present (counts "
        f"differ by at most one). {SLUICE}: {MATCHED_SLUICE.label}, checkpoints every 1 s; {PEER}: "
        f"{MATCHED_PEER.label}, Trigger.AvailableNow. Window: first record read → last result committed "
        "(bench/window.py), median [95 % interval] over the kept runs; ratio = Sluice events/s ÷ peer "
        "events/s; per doubling = this key count's median window ÷ the previous one's (keys doubled)."
    )
    blocks = [
        intro,
        table(KEYS_HEADER, key_rows(runs, keys, events)),
        ["Runs in order (window s, events/s, CPU s per million events of the measured system, foreign cores):"],
        table(RUNS_HEADER, [run_row(r) for r in runs]),
    ]
    return section(TITLE, command, facts, blocks, notes, when)
