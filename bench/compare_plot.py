"""bench/compare.py's PNG plot: events read per second over the median throughput run of each system,
over the first recovery run of each with the kill marked, and with fixed-rate runs each file's latency
(matplotlib, imported when a plot is drawn)."""

from __future__ import annotations

from typing import Any

from compare_figures import kept, paced_runs, peer_spans, timeline
from compare_plan import PACED_EVENTS_PER_FILE, PACED_RATE


def _median_run(runs: list[dict], median: float | None) -> dict | None:
    """The kept run whose throughput is nearest the median."""
    return min(kept(runs), key=lambda r: abs(r["throughput"] - median)) if median is not None else None


def _throughput_panel(ax: Any, sl: dict, peer: dict, f: dict) -> None:
    s_run = _median_run([r for r in sl["runs"] if r["mode"] == "on"], f["s_tput"])
    p_run = _median_run(peer["runs"], f["p_tput"])
    if s_run and s_run["spans"]:
        tl = timeline(s_run["spans"], min(s[0] for s in s_run["spans"]))
        ax.step([t for t, _ in tl], [v / 1e6 for _, v in tl], where="post", label=f"Sluice ({s_run['label']})")
    if p_run and p_run["detail"]:
        spans = peer_spans(p_run["detail"])
        tl = timeline(spans, min(s[0] for s in spans))
        ax.step(
            [t for t, _ in tl], [v / 1e6 for _, v in tl], where="post", label=f"Structured Streaming ({p_run['label']})"
        )
    ax.set_title("Throughput run (median run of each; time from the first read)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("M events read / s")
    ax.legend()


def _recovery_line(ax: Any, spans: list, t_kill: float, first: float | None, who: str, color: str) -> None:
    """One system's events read per second from its recovery run's kill, and when output came again."""
    tl = timeline(spans, min(s[0] for s in spans))
    o = min(s[0] for s in spans) - t_kill
    ax.step([t + o for t, _ in tl], [v / 1e6 for _, v in tl], where="post", label=who, color=color)
    if first is not None:
        ax.axvline(first, color=color, linestyle=":", label=f"{who}: output again ({first:.2f} s)")


def _recovery_panel(ax: Any, sl: dict, peer: dict) -> None:
    s_rec = sl["recovery"][0] if sl["recovery"] else None
    p_rec = peer["recovery"][0] if peer["recovery"] else None
    if s_rec and s_rec["spans"]:
        _recovery_line(ax, s_rec["spans"], s_rec["t_kill_wall"], s_rec["first_written_file"], "Sluice", "C0")
    if p_rec and (p_rec["before"] or p_rec["after"]):
        spans = peer_spans(p_rec["before"] + p_rec["after"])
        _recovery_line(ax, spans, p_rec["t_kill_wall"], p_rec["first_output"], "Structured Streaming", "C1")
    ax.axvline(0, color="red", linewidth=2, label="kill -9 (Sluice: a TaskManager; peer: the driver)")
    ax.set_title("Recovery run (first of each; time from the kill)")
    ax.set_xlabel("seconds since kill -9")
    ax.set_ylabel("M events read / s")
    ax.legend(fontsize=8)


def _paced_panel(ax: Any, paced: list[tuple[str, dict, str]]) -> None:
    for who, r, color in paced:
        ax.plot(
            [t for t, _ in r["series"]],
            [x for _, x in r["series"]],
            marker=".",
            linewidth=0.8,
            label=who,
            color=color,
        )
    ax.set_title(
        f"Fixed rate: {PACED_RATE * PACED_EVENTS_PER_FILE:,.0f} events/s in files arriving "
        f"{PACED_RATE:g}/s; latency of each file (arrival → its counts committed)"
    )
    ax.set_xlabel("seconds since the first file arrived")
    ax.set_ylabel("latency, s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)


def plot(path: str, sl: dict, peer: dict, f: dict) -> None:
    """Write the PNG: the throughput panel, the recovery panel and, with fixed-rate runs, their panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paced = paced_runs(sl, peer)
    fig, axes = plt.subplots(3 if paced else 2, 1, figsize=(11, 12 if paced else 8))
    _throughput_panel(axes[0], sl, peer, f)
    _recovery_panel(axes[1], sl, peer)
    if paced:
        _paced_panel(axes[2], paced)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
