"""bench/compare.py's section of bench/RESULTS.md (pure): from the runs of both systems and their
figures (bench/compare_figures.py `summarize`) to the headline table Sluice / Structured Streaming,
the tables of the throughput and recovery runs, the failover and fixed-rate runs, the goals and the
notes. Tables are bench/markdown.py's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bench_common import fmt
from compare_figures import load_groups, paced_runs
from compare_plan import INTERVAL, PACED_EVENTS_PER_FILE, PACED_RATE, PARALLELISM, SHORT_INTERVAL, SIZES
from markdown import notes_lines, table
from stats import fmt_estimate, fmt_load, load_rule_text

HEADLINE = ["figure", "Sluice", "Structured Streaming", "ratio"]
RUNS = [
    "run",
    "Sluice, checkpoints 1 s",
    "load",
    "Sluice, checkpoints off",
    "load",
    "Structured Streaming",
    "load",
    "peer micro-batches",
]
RECOVERY = [
    "run",
    "Sluice detected",
    "Sluice RUNNING again",
    "Sluice first output",
    "Sluice load",
    "peer query started",
    "peer first output",
    "peer first commit",
    "peer load",
]


def ratio(a: float | None, b: float | None, invert: bool = False) -> str:
    if a is None or b is None or not b:
        return "—"
    return f"{(b / a if invert else a / b):.2f}"


def run_cell(run: dict | None, key: str, spec: str = ".2f") -> str:
    """A run's figure in a run table; a run the load rule left out is marked."""
    if not run:
        return "—"
    return fmt(run.get(key), spec) + (" *excluded*" if run.get("excluded") else "")


def overhead_input(cfg: Any, sl: dict) -> str:
    """What the checkpoint overhead was measured on."""
    if sl["overhead"]:
        return f"{cfg.overhead_events:,} events in {cfg.overhead_files} files"
    return (
        "the throughput runs (jobs of about a second: too short to resolve a few per cent; "
        f"the full size measures it on {SIZES['full']['overhead_events']:,}-event jobs)"
    )


def head(cfg: Any, facts: dict, command: str, failures: list[str]) -> list[list[str]]:
    """The section's first paragraphs: title, the output check's banner, command, machine, data."""
    title = (
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} — Sluice vs. Spark Structured Streaming "
        f"({cfg.size}, one invocation)"
    )
    banner = (
        f"**OUTPUT CHECK FAILED in {len(failures)} run(s): committed output not exactly once** — "
        f"{failures[0]}" + (" (all of them under Notes)" if len(failures) > 1 else "")
        if failures
        else ""
    )
    machine = (
        f"Machine: {facts['cores']} cores ({facts['cpu']}), {facts['ram']} RAM, Python {facts['python']}, "
        f"{facts['java']}, load average at start {facts['load']}."
    )
    data = (
        f"Data: {cfg.events:,} events in {cfg.files} files (throughput; seed 7) and {cfg.recovery_events:,} events "
        f"in {cfg.recovery_files} files (recovery; seed 11); 10,000 urls, Zipf s = 1. Sluice: 2 TaskManagers x 2 "
        f"slots, parallelism {PARALLELISM}, checkpoints every {INTERVAL} ms. Structured Streaming: local[2], "
        f"maxFilesPerTrigger {cfg.mfpt} (recovery {cfg.recovery_mfpt}), update mode, one warm SparkSession. "
        f"Medians of {cfg.runs} runs after {cfg.warmups} warm-up jobs/queries each, with their 95 % "
        "confidence interval in brackets (percentile bootstrap, bench/README.md); ratio = Sluice / peer "
        "of the medians for rates, peer / Sluice for times (above 1 = Sluice better)."
    )
    return [
        [title],
        [banner] if banner else [],
        [f"Command: `{command}` at commit {facts['commit']}"],
        [machine],
        [data],
    ]


def throughput_rows(f: dict) -> list[list[str]]:
    """The headline rows of the throughput runs: throughput, latency, and both with short checkpoints."""

    def E(key: str, spec: str = ".2f") -> str:
        return fmt_estimate(f[f"{key}_est"], spec)

    return [
        ["throughput, events/s", E("s_tput", ",.0f"), E("p_tput", ",.0f"), f"**{ratio(f['s_tput'], f['p_tput'])}**"],
        [
            "end-to-end latency p50, s (read → count committed)",
            fmt(f["s_p50"]),
            fmt(f["p_p50"]),
            ratio(f["s_p50"], f["p_p50"], invert=True),
        ],
        ["end-to-end latency p99, s", fmt(f["s_p99"]), fmt(f["p_p99"]), ratio(f["s_p99"], f["p_p99"], invert=True)],
        [
            f"with checkpoints every {SHORT_INTERVAL} ms: throughput, events/s; latency p50 / p99, s",
            f"{E('short_tput', ',.0f')}; {fmt(f['short_p50'])} / {fmt(f['short_p99'])}",
            "(as above)",
            f"{ratio(f['short_tput'], f['p_tput'])}; {ratio(f['short_p50'], f['p_p50'], invert=True)} / "
            f"{ratio(f['short_p99'], f['p_p99'], invert=True)}",
        ],
    ]


def paced_row(f: dict) -> list[str]:
    """The headline row of the fixed-rate runs."""

    def pair(a: str, b: str) -> str:
        return (
            f"{ratio(f[f'{a}_p50'], f[f'{b}_p50'], invert=True)} / {ratio(f[f'{a}_p99'], f[f'{b}_p99'], invert=True)}"
        )

    return [
        "end-to-end latency at a fixed rate, p50 / p99, s "
        f"({PACED_RATE * PACED_EVENTS_PER_FILE:,.0f} events/s: "
        f"a file of {PACED_EVENTS_PER_FILE:,} events arrives every {1 / PACED_RATE:g} s; arrival → its counts "
        "committed)",
        f"checkpoints {INTERVAL} ms: {fmt(f['pc_s_p50'])} / {fmt(f['pc_s_p99'])}; "
        f"{SHORT_INTERVAL} ms: {fmt(f['pc_short_p50'])} / {fmt(f['pc_short_p99'])}",
        f"{fmt(f['pc_p_p50'])} / {fmt(f['pc_p_p99'])}",
        f"{pair('pc_s', 'pc_p')}; {SHORT_INTERVAL} ms: {pair('pc_short', 'pc_p')}",
    ]


def other_rows(f: dict, o_input: str) -> list[list[str]]:
    """The headline rows after the latency ones: overhead, recovery, failover, startup, output check."""

    def E(key: str, spec: str = ".2f") -> str:
        return fmt_estimate(f[f"{key}_est"], spec)

    return [
        [
            f"checkpoint overhead (throughput off / on − 1), {o_input}",
            f"{fmt(f['overhead'] and 100 * f['overhead'], '+.1f')} % ({E('o_on', ',.0f')} events/s on, "
            f"{E('o_off', ',.0f')} off)",
            "n/a: always checkpoints",
            "",
        ],
        [
            "recovery: kill -9 → first output written after it, s",
            f"{E('s_rec')} (TaskManager)",
            f"{E('p_rec')} (driver, restarted at once)",
            f"**{ratio(f['s_rec'], f['p_rec'], invert=True)}**",
        ],
        [
            "recovery: kill -9 → processing again, s",
            f"{E('s_rec_running')} (job RUNNING)",
            f"{E('p_rec_ready')} (query started)",
            ratio(f["s_rec_running"], f["p_rec_ready"], invert=True),
        ],
        [
            "JobManager failover: kill -9 of the leader → job RUNNING, s",
            f"{E('failover')} (first checkpoint {E('failover_ckpt')})",
            "— (no standby driver)",
            "",
        ],
        [
            "startup (not in throughput), s",
            f"cluster {fmt(f['s_startup'], '.1f')}; job submit → RUNNING {E('s_job_start')}",
            f"process + SparkSession {fmt(f['p_startup'], '.1f')}; query start {E('p_query_start')}",
            "",
        ],
        [
            "committed output exactly once (every run, warm-ups, recovery and failover included: no line twice, "
            "counts increasing, final counts exact)",
            "yes" if f["s_counts"] else "**NO**",
            "yes" if f["p_counts"] else "**NO**",
            "",
        ],
    ]


def headline(cfg: Any, sl: dict, peer: dict, f: dict) -> list[str]:
    """The table Sluice / Structured Streaming, figure by figure."""
    paced = [paced_row(f)] if sl["paced"] or peer.get("paced") else []
    return table(HEADLINE, throughput_rows(f) + paced + other_rows(f, overhead_input(cfg, sl)))


def run_row(n: int, on: dict | None, off: dict | None, p: dict | None) -> list[Any]:
    """Round `n` of the throughput runs: Sluice with checkpoints on and off, the peer."""
    return [
        n,
        run_cell(on, "throughput", ",.0f"),
        fmt_load(on) if on else "—",
        run_cell(off, "throughput", ",.0f"),
        fmt_load(off) if off else "—",
        run_cell(p, "throughput", ",.0f"),
        fmt_load(p) if p else "—",
        p["batches"] if p else "—",
    ]


def runs_table(cfg: Any, sl: dict, peer: dict) -> list[str]:
    rows = []
    for i in range(cfg.runs):
        on = next((r for r in sl["runs"] if r["label"] == f"run {i + 1}" and r["mode"] == "on"), None)
        off = next((r for r in sl["runs"] if r["label"] == f"run {i + 1}" and r["mode"] == "off"), None)
        rows.append(run_row(i + 1, on, off, peer["runs"][i] if i < len(peer["runs"]) else None))
    return table(RUNS, rows)


def recovery_row(n: int, s: dict, p: dict) -> list[Any]:
    """Recovery run `n` of each system (empty: that system has no run `n`)."""
    return [
        n,
        fmt(s.get("detected")),
        run_cell(s, "running"),
        run_cell(s, "first_written_file"),
        fmt_load(s) if s else "—",
        run_cell(p, "ready"),
        run_cell(p, "first_output"),
        fmt(p.get("first_commit")),
        fmt_load(p) if p else "—",
    ]


def recovery_table(sl: dict, peer: dict) -> list[str]:
    s_runs, p_runs = sl["recovery"], peer["recovery"]
    rows = [
        recovery_row(i + 1, s_runs[i] if i < len(s_runs) else {}, p_runs[i] if i < len(p_runs) else {})
        for i in range(max(len(s_runs), len(p_runs)))
    ]
    return table(RECOVERY, rows)


def sluice_only_runs(cfg: Any, sl: dict, f: dict, o_input: str) -> list[list[str]]:
    """The paragraphs under the runs table: off / on over the runs, the overhead and short runs."""
    blocks = [[f"Off / on − 1 over these runs: {fmt(f['job_overhead'] and 100 * f['job_overhead'], '+.1f')} %."]]
    if sl["overhead"]:
        runs = "; ".join(f"{r['mode']} {run_cell(r, 'throughput', ',.0f')} ({fmt_load(r)})" for r in sl["overhead"])
        blocks.append([f"Checkpoint overhead runs ({o_input}), events/s (load): {runs}."])
    if sl["short"]:
        runs = ", ".join(f"{run_cell(r, 'throughput', ',.0f')} ({fmt_load(r)})" for r in sl["short"])
        blocks.append(
            [f"Sluice with checkpoints every {SHORT_INTERVAL} ms (after the runs above), events/s (load): {runs}."]
        )
    return blocks


def exactly_once(r: dict) -> str:
    return "exactly once" if r["output_check"].ok else "**NOT exactly once**"


def failover_line(cfg: Any, failover: list[dict]) -> list[str]:
    if not failover:
        return []
    runs = "; ".join(
        f"new leader {fmt(r.get('leader'))}, RUNNING {run_cell(r, 'running')}, checkpoint "
        f"{fmt(r.get('ckpt'))}, output {exactly_once(r)}, load {fmt_load(r)}"
        for r in failover
    )
    return [
        "JobManager failover runs (s from kill -9 of the leader; 2 JobManagers, ZooKeeper session "
        f"timeout {cfg.session_timeout:g} s): {runs}"
    ]


def paced_line(cfg: Any, sl: dict, peer: dict) -> list[str]:
    paced = paced_runs(sl, peer)
    if not paced:
        return []
    import paced_latency  # its constants only; imported with fixed-rate runs to report

    runs = "; ".join(
        f"{who}: {r['counted']} files counted, min {fmt(min(r['latencies'], default=None))} s, "
        f"max {fmt(max(r['latencies'], default=None))} s, output {exactly_once(r)}"
        for who, r, _color in paced
    )
    return [
        f"Fixed-rate runs ({cfg.paced_files} files, the first {paced_latency.WARM_FRACTION:.0%} left out of "
        "the percentiles; each system watches the directory itself — Sluice lists it every "
        f"{paced_latency.MONITOR_MS} ms — and a marker event per file tells when its counts are committed): "
        f"{runs}."
    ]


def reading(cfg: Any) -> list[str]:
    return [
        "Reading the figures: Sluice's file sink is exactly-once by two-phase commit, so a count becomes "
        "visible when the checkpoint after its batch completes — latency is batch time + the wait for the next "
        "checkpoint (up to one interval) + its completion, and the interval is the knob (the row for "
        f"{SHORT_INTERVAL} ms). The peer commits each micro-batch when it ends. The latency rows of the throughput "
        "runs are taken under a backlog (all input there at the start); the fixed-rate row is latency below "
        "capacity, from a file's arrival, where Sluice's follows a saw-tooth of the checkpoint interval (see the "
        "plot). The peer's recovery runs use "
        f"maxFilesPerTrigger {cfg.recovery_mfpt} on small files so that its query is still running at the kill; "
        "that also keeps its first micro-batch after the restart small, which favours it in the recovery figure."
    ]


def goals(sl: dict, f: dict) -> list[str]:
    """The goals met or missed, one line."""
    unjudged = "not judged (no valid runs)"

    def verdict(value: float | None, met: bool) -> str:
        return unjudged if value is None else ("met" if met else "missed")

    tput = (
        unjudged if f["s_tput"] is None or f["p_tput"] is None else ("met" if f["s_tput"] >= f["p_tput"] else "missed")
    )
    overhead = (
        "not judged (jobs too short; see a full run)"
        if not sl["overhead"]
        else verdict(f["overhead"], f["overhead"] is not None and f["overhead"] <= 0.05)
    )
    items = [
        f"throughput ratio ≥ 1.0: {tput}",
        f"checkpoint overhead ≤ 5 %: {overhead}",
        f"recovery < 3 s: {verdict(f['s_rec'], f['s_rec'] is not None and f['s_rec'] < 3)}",
        "committed output exactly once in every run: " + ("met" if not f["output_failures"] else "**MISSED**"),
    ]
    return ["Goals: " + "; ".join(items) + "."]


def report(
    cfg: Any,
    facts: dict,
    command: str,
    sl: dict,
    peer: dict,
    failover: list[dict],
    f: dict,
    plot_link: str | None,
    notes: list[str],
) -> str:
    """The whole section: paragraphs and tables, each followed by a blank line, then the notes (the
    output check's failures first)."""
    failures = f["output_failures"]
    o_input = overhead_input(cfg, sl)
    plot = (
        f"Plot: [{plot_link}]({plot_link}) (events read per second; the recovery panel marks the "
        "kill and when output came again; with fixed-rate runs, a panel of each file's latency)."
    )
    blocks = [
        *head(cfg, facts, command, failures),
        [load_rule_text(f["max_load"], load_groups(sl, peer, failover))],
        headline(cfg, sl, peer, f),
        [plot] if plot_link else [],
        [
            "Runs (events/s; Sluice by submit → FINISHED, the peer by query start → all input processed; load = "
            "the machine's 1-minute load average at the run's start → end):"
        ],
        runs_table(cfg, sl, peer),
        *sluice_only_runs(cfg, sl, f, o_input),
        ["Recovery runs (seconds from the kill):"],
        recovery_table(sl, peer),
        failover_line(cfg, failover),
        paced_line(cfg, sl, peer),
        reading(cfg),
        goals(sl, f),
    ]
    lines = [line for block in blocks if block for line in (*block, "")]
    lines += notes_lines([f"**OUTPUT CHECK FAILED**: {x}" for x in failures] + notes)
    return "\n".join(lines).rstrip("\n") + "\n"
