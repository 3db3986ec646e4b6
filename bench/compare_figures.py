"""How bench/compare.py's runs become its figures (pure): event-weighted latency percentiles, the
events read per second over time, the load rule applied by group, the output check's failures, and
`summarize`: the headline figures, medians with their 95 % intervals (bench/stats.py).
"""

from __future__ import annotations

from compare_plan import INTERVAL, SHORT_INTERVAL
from stats import Estimate, apply_load_rule, estimate

BIN = 0.25  # seconds per bin of the throughput timelines


def weighted_pct(pairs: list[tuple[float, int]], q: float) -> float | None:
    """The q-th percentile of values each repeated `weight` times."""
    pairs = sorted((v, w) for v, w in pairs if w > 0)
    total = sum(w for _, w in pairs)
    if not total:
        return None
    rank, seen = q / 100 * total, 0
    for v, w in pairs:
        seen += w
        if seen >= rank:
            return v
    return pairs[-1][0]


def timeline(
    batches: list[tuple[float, float, int]], origin: float, end: float | None = None
) -> list[tuple[float, float]]:
    """(bin start s since origin, events/s) from batches (start, end, events), each batch's events
    spread evenly over its duration."""
    if not batches:
        return []
    last = end if end is not None else max(b[1] for b in batches)
    n = int((last - origin) / BIN) + 1
    bins = [0.0] * max(n, 1)
    for start, stop, events in batches:
        stop = max(stop, start + 1e-3)
        rate = events / (stop - start)
        i = max(0, int((start - origin) / BIN))
        while i < n and origin + i * BIN < stop:
            lo, hi = max(start, origin + i * BIN), min(stop, origin + (i + 1) * BIN)
            if hi > lo:
                bins[i] += rate * (hi - lo)
            i += 1
    return [(i * BIN, v / BIN) for i, v in enumerate(bins)]


def peer_spans(detail: list[tuple[float, int, float]]) -> list[tuple[float, float, int]]:
    """The peer's micro-batches (start, rows, ms) as timeline batches (start, end, events)."""
    return [(start, start + ms / 1000, rows) for start, rows, ms in detail]


def load_groups(sl: dict, peer: dict, failover: list[dict]) -> list[tuple[str, list[dict]]]:
    """The runs the load rule applies to, by what their medians are of."""
    return [
        ("Sluice throughput, checkpoints on", [r for r in sl["runs"] if r["mode"] == "on"]),
        ("Sluice throughput, checkpoints off", [r for r in sl["runs"] if r["mode"] == "off"]),
        ("Structured Streaming throughput", peer["runs"]),
        (f"Sluice checkpoints {SHORT_INTERVAL} ms", sl["short"]),
        ("Sluice checkpoint overhead", sl["overhead"]),
        ("Sluice recovery", sl["recovery"]),
        ("Structured Streaming recovery", peer["recovery"]),
        ("JobManager failover", failover),
    ]


def output_failures(sl: dict, peer: dict, failover: list[dict]) -> list[str]:
    """Every run, warm-ups included, whose committed output broke exactly-once: which, and how."""
    runs = [("Sluice", r.get("label", ""), r) for r in sl["warmup"] + sl["runs"] + sl["short"] + sl["overhead"]]
    runs += [("Sluice", r.get("label", "recovery"), r) for r in sl["recovery"]]
    runs += [("Sluice", f"fixed rate, checkpoints {i} ms", r) for i, r in sl["paced"].items() if r]
    runs += [("Structured Streaming", r["label"], r) for r in peer.get("warmups", []) + peer["runs"]]
    runs += [("Structured Streaming", f"recovery {r['run']}", r) for r in peer["recovery"]]
    runs += [("Structured Streaming", "fixed rate", peer["paced"])] if peer.get("paced") else []
    runs += [("Sluice", f"JobManager failover {i}", r) for i, r in enumerate(failover, 1)]
    return [
        f"{who} {label}{' (job ' + r['job_id'] + ')' if r.get('job_id') else ''}: {r['output_check'].describe()}"
        for who, label, r in runs
        if r.get("output_check") is not None and not r["output_check"].ok
    ]


def kept(runs: list[dict]) -> list[dict]:
    """The runs the load rule kept."""
    return [r for r in runs if not r.get("excluded")]


def _estimates(sl: dict, peer: dict, failover: list[dict]) -> dict[str, Estimate]:
    """Every headline median with its interval, over the runs the load rule kept."""
    on = [r for r in sl["runs"] if r["mode"] == "on"]
    off = [r for r in sl["runs"] if r["mode"] == "off"]
    est = {
        "s_tput": estimate(on, "throughput"),
        "s_tput_off": estimate(off, "throughput"),
        "p_tput": estimate(peer["runs"], "throughput"),
        "short_tput": estimate(sl["short"], "throughput"),
        "s_rec": estimate(sl["recovery"], "first_written_file"),
        "s_rec_running": estimate(sl["recovery"], "running"),
        "p_rec": estimate(peer["recovery"], "first_output"),
        "p_rec_ready": estimate(peer["recovery"], "ready"),
        "s_job_start": estimate(sl["runs"], "to_running"),
        "p_query_start": estimate(peer["runs"], "query_start"),
        "failover": estimate(failover, "running"),
        "failover_ckpt": estimate(failover, "ckpt"),
    }
    if sl["overhead"]:
        est["o_on"] = estimate([r for r in sl["overhead"] if r["mode"] == "on"], "throughput")
        est["o_off"] = estimate([r for r in sl["overhead"] if r["mode"] == "off"], "throughput")
    else:
        est["o_on"], est["o_off"] = est["s_tput"], est["s_tput_off"]
    return est


def _latencies(sl: dict, peer: dict) -> dict:
    """The latency percentiles: of the throughput runs' batches (weighted by events) and of the
    fixed-rate runs' files."""
    s_lat = [p for r in kept(sl["runs"]) if r["mode"] == "on" for p in r.get("latency", [])]
    short_lat = [p for r in kept(sl["short"]) for p in r.get("latency", [])]
    p_lat = [(ms / 1000, rows) for r in kept(peer["runs"]) for _s, rows, ms in r["detail"]]
    f: dict = {}
    for key, lat in (("s", s_lat), ("short", short_lat), ("p", p_lat)):
        f[f"{key}_p50"], f[f"{key}_p99"] = weighted_pct(lat, 50), weighted_pct(lat, 99)
    for key, r in (
        ("pc_s", sl["paced"].get(INTERVAL)),
        ("pc_short", sl["paced"].get(SHORT_INTERVAL)),
        ("pc_p", peer.get("paced")),
    ):
        lat = [(x, 1) for x in r["latencies"]] if r else []
        f[f"{key}_p50"], f[f"{key}_p99"] = weighted_pct(lat, 50), weighted_pct(lat, 99)
    return f


def summarize(sl: dict, peer: dict, failover: list[dict], max_load: float | None = None) -> dict:
    """The headline figures: medians with their 95 % intervals (`<name>_est`, bench/stats.py) over the
    runs the load rule kept, and the latency percentiles over those runs' batches."""
    for _name, runs in load_groups(sl, peer, failover):
        apply_load_rule(runs, max_load)
    est = _estimates(sl, peer, failover)
    f: dict = {k: e.median for k, e in est.items()} | {f"{k}_est": e for k, e in est.items()}
    f |= _latencies(sl, peer)
    f |= {
        "s_startup": sl["startup"],
        "p_startup": peer["warmup"]["process"] + peer["warmup"]["session"] if peer.get("warmup") else None,
        "output_failures": output_failures(sl, peer, failover),
        "max_load": max_load,
    }
    f["s_counts"] = not any(x.startswith("Sluice") for x in f["output_failures"])
    f["p_counts"] = not any(x.startswith("Structured") for x in f["output_failures"])
    f["overhead"] = None if not (f["o_on"] and f["o_off"]) else f["o_off"] / f["o_on"] - 1
    f["job_overhead"] = None if not (f["s_tput"] and f["s_tput_off"]) else f["s_tput_off"] / f["s_tput"] - 1
    return f


def paced_runs(sl: dict, peer: dict) -> list[tuple[str, dict, str]]:
    """(who, fixed-rate result, plot colour) of every fixed-rate run that produced a result."""
    runs = [(f"Sluice, checkpoints {i} ms", r, "C0" if i == INTERVAL else "C2") for i, r in sl["paced"].items() if r]
    return runs + ([("Structured Streaming", peer["paced"], "C1")] if peer.get("paced") else [])
