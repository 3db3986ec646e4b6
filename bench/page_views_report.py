"""The Markdown section of bench/page_views_bench.py: the machine, the throughput runs with checkpoints
on and off and the overhead of their medians, the checkpoint durations, the recovery runs after kill -9
of a TaskManager. Pure: runs (dicts of bench/page_views_runs.py and bench/page_views_recovery.py) in,
text out; tables through bench/markdown.py, each row made by a function of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from bench_common import fmt, median, pct, size
from markdown import heading, notes_lines, table
from stats import fmt_load

OVERHEAD_GOAL = 0.05  # checkpoint overhead of the throughput
RECOVERY_GOAL_S = 3.0  # (b): first committed file written after the kill
MACHINE = ("date", "cores", "cpu", "ram", "python", "java", "os", "load")
MACHINE_LABELS = {"date": "date -u", "load": "load average at start"}
# (key, label, better when higher) of the medians compared between checkpoints on and off
COMPARED = (
    ("throughput", "events/s", True),
    ("submit_to_end", "submit→FINISHED s", False),
    ("running_to_end", "RUNNING→FINISHED s", False),
    ("wall", "wall s", False),
)
RECOVERY_TEXT = (
    "Seconds from the kill of the TaskManager hosting subtask 0 of the first task (its Spark JVM "
    "dies with it). Spare: *cold* = a fresh cluster whose spare TaskManager has never run a job; "
    "*warm* = every TaskManager ran a short page_views job (parallelism 3) first. "
    "1st checkpoint = submission → first completed checkpoint (before the kill). "
    "Detected = first poll (every {poll} s) showing the job or a task not RUNNING, or a restart; "
    "(a) = state RUNNING, restarts ≥ 1 and every task RUNNING; checkpoint = first checkpoint after "
    "the restored one completed; (b) = first committed (visible) output file written after the kill "
    "(not there before it, mtime after it); any new file = first visible file not there before the "
    "kill, whenever written (may be a commit of the last checkpoint before the kill, finishing late on "
    "a surviving TaskManager, or a pending part committed on restore). Output: the committed lines "
    "when the job was canceled, no (url, count) line twice and each url's counts increasing "
    "(bench/output_check.py; a canceled job has no final counts to compare)."
)


def pct_text(ratio: float | None) -> str:
    """An overhead ratio as `+5.7 %` (`— %` when unknown)."""
    return f"{fmt(None if ratio is None else ratio * 100, '+.1f')} %"


def yes_no(ok: bool) -> str:
    return "yes" if ok else "**NO**"


# -- rows ------------------------------------------------------------------------------------------
def machine_rows(facts: dict) -> list[list]:
    return [[MACHINE_LABELS.get(k, k), facts[k]] for k in MACHINE]


def throughput_row(i: int, r: dict) -> list:
    on = r["mode"] == "on"
    return [
        i,
        "1000 ms" if on else "off",
        f"{r['throughput']:,.0f}",
        f"{r['submit_to_end']:.2f}",
        f"{r['wall']:.2f}",
        fmt(r["running_to_end"]),
        len(r["checkpoints"]) if on else "—",
        yes_no(r["counts_ok"]),
        fmt_load(r),
    ]


def overhead(key: str, better_high: bool, on: Sequence[dict], off: Sequence[dict]) -> tuple:
    """(median with checkpoints on, median off, overhead): off/on − 1 where higher is better, else on/off − 1."""
    a, b = median(r[key] for r in on), median(r[key] for r in off)
    ov = ((b / a - 1) if better_high else (a / b - 1)) if a and b else None
    return a, b, ov


def overhead_row(key: str, label: str, better_high: bool, on: Sequence[dict], off: Sequence[dict]) -> list:
    a, b, ov = overhead(key, better_high, on, off)
    spec = ",.0f" if key == "throughput" else ".2f"
    return [label, fmt(a, spec), fmt(b, spec), pct_text(ov)]


def checkpoint_row(ck: Sequence[dict]) -> list:
    durs = [c["duration_ms"] for c in ck]
    return [
        len(ck),
        fmt(pct(durs, 50), ".0f"),
        fmt(pct(durs, 99), ".0f"),
        fmt(max(durs) if durs else None, ".0f"),
        size(median(c["size_bytes"] for c in ck)),
    ]


def recovery_row(i: int, r: dict) -> list:
    return [
        i,
        r["spare"],
        fmt(r["first_checkpoint"], ".1f"),
        fmt(r["detected"]),
        fmt(r["running"]),
        fmt(r["checkpoint_after"]),
        fmt(r["first_written_file"]),
        fmt(r["first_file"]),
        f"{r['restored']} / {r['checkpoint_before']}",
        " → ".join(f"{s}@{t}" for t, s in r["states"]),
        yes_no(r["output_check"].ok),
        fmt_load(r),
    ]


def recovery_median_row(spare: str, rs: Sequence[dict]) -> list:
    def med(key: str, spec: str = ".2f") -> str:
        return fmt(median(r[key] for r in rs), spec)

    return [
        "**median**",
        spare,
        med("first_checkpoint", ".1f"),
        med("detected"),
        f"**{med('running')}**",
        med("checkpoint_after"),
        f"**{med('first_written_file')}**",
        med("first_file"),
    ]


# -- blocks ----------------------------------------------------------------------------------------
def head(command: str, facts: dict) -> list[str]:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        *heading(f"{now} — page_views: checkpoint overhead and recovery", 2),
        "",
        f"Command: `{command}`",
        "",
        *table(["machine", ""], machine_rows(facts)),
        "",
    ]


def throughput_lines(args, tput: Sequence[dict], warmup: Sequence[dict], poll: float) -> list[str]:
    warm_text = ", ".join(f"{w['mode']} {w['submit_to_end']:.1f} s" for w in warmup) or "none"
    header = [
        "run",
        "checkpoints",
        "events/s",
        "submit→FINISHED s",
        "wall s",
        "RUNNING→FINISHED s",
        "completed checkpoints",
        "output exactly once",
        "load, 1 min, start→end",
    ]
    return [
        *heading(f"Throughput: {args.events:,} events in {args.files} files, parallelism 2, 2 TaskManagers x 2 slots"),
        "",
        "Per run: events / (JobManager submitted → FINISHED); wall = CLI launch → FINISHED seen; "
        f"RUNNING → FINISHED with RUNNING as first seen polling every {poll} s. "
        "Runs alternate on, off | off, on | on, off ... so that a drift favours neither mode. "
        f"Warm-up runs (not counted): {warm_text}.",
        "",
        *table(header, (throughput_row(i, r) for i, r in enumerate(tput, 1))),
        "",
        "Output exactly once: every committed line read in commit order, no (url, count) line twice, each "
        "url's counts increasing, final counts equal to the generator's (bench/output_check.py).",
        "",
    ]


def overhead_lines(on: Sequence[dict], off: Sequence[dict]) -> list[str]:
    header = ["median", "checkpoints 1000 ms", "checkpoints off", "overhead (off/on − 1)"]
    ov = overhead("throughput", True, on, off)[2]
    verdict = "—" if ov is None else ("meets" if ov <= OVERHEAD_GOAL else "misses")
    return [
        *table(header, (overhead_row(key, label, high, on, off) for key, label, high in COMPARED)),
        "",
        f"**Checkpoint overhead (throughput): {pct_text(ov)}** ({verdict} the goal of ≤ 5 %). "
        "For times the overhead is on/off − 1.",
        "",
    ]


def checkpoint_lines(on: Sequence[dict]) -> list[str]:
    ck = [c for r in on for c in r["checkpoints"]]
    header = ["checkpoints", "p50 duration ms", "p99 duration ms", "max duration ms", "median size"]
    lines = [
        *heading("Checkpoint durations (COMPLETED checkpoints of the 1000 ms runs)"),
        "",
        *table(header, [checkpoint_row(ck)]),
    ]
    failed = [
        c
        for r in on
        for c in r["checkpoints_all"]
        if c["status"] not in ("COMPLETED", "IN_PROGRESS")
        and "superseded by the final checkpoint" not in c.get("failure", "")
    ]
    if failed:
        lines += [
            "",
            f"{len(failed)} checkpoints did not complete: "
            + "; ".join(f"{c['id']} {c['status']} {c.get('failure', '')}".strip() for c in failed[:5]),
        ]
    return [*lines, ""]


def recovery_lines(args, recovery: Sequence[dict], poll: float) -> list[str]:
    header = [
        "run",
        "spare",
        "1st checkpoint s",
        "detected s",
        "(a) RUNNING again s",
        "checkpoint s",
        "(b) first file written after the kill s",
        "any new file s",
        "restored / last before kill",
        "states after the kill",
        "output exactly once",
        "load, 1 min, start→end",
    ]
    spares = {sp: [r for r in recovery if r["spare"] == sp] for sp in ("cold", "warm")}
    spares = {sp: rs for sp, rs in spares.items() if rs}
    rows = [recovery_row(i, r) for i, r in enumerate(recovery, 1)]
    rows += [recovery_median_row(sp, rs) for sp, rs in spares.items()]
    lines = [
        *heading(
            f"Recovery after kill -9 of a TaskManager: {args.recovery_events:,} events in "
            f"{args.recovery_files} files, checkpoints every 500 ms, 3 TaskManagers x 2 slots"
        ),
        "",
        RECOVERY_TEXT.format(poll=poll),
        "",
        *table(header, rows),
        "",
    ]
    for sp, rs in spares.items():
        ma, mb = median(r["running"] for r in rs), median(r["first_written_file"] for r in rs)
        verdict = "—" if mb is None else ("meets" if mb < RECOVERY_GOAL_S else "misses")
        lines += [
            f"**Recovery, {sp} spare (median of {len(rs)}): (a) RUNNING again after {fmt(ma)} s, "
            f"(b) first committed file written after the kill after {fmt(mb)} s** ({verdict} the goal "
            "of < 3 s).",
            "",
        ]
    return lines


def report(
    args,
    facts: dict,
    command: str,
    tput: Sequence[dict],
    warmup: Sequence[dict],
    recovery: Sequence[dict],
    notes: Sequence[str],
    poll: float,
) -> str:
    """The section: `args` the command line's (events, files, recovery_events, recovery_files), `poll`
    the seconds between the runs' status polls."""
    lines = head(command, facts)
    if tput:
        on = [r for r in tput if r["mode"] == "on"]
        off = [r for r in tput if r["mode"] == "off"]
        lines += throughput_lines(args, tput, warmup, poll) + overhead_lines(on, off) + checkpoint_lines(on)
    if recovery:
        lines += recovery_lines(args, recovery, poll)
    lines += notes_lines(notes)
    return "\n".join(lines) + "\n"
