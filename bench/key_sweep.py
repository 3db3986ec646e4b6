"""Key-cardinality sweep: Sluice and Spark Structured Streaming (the peer) on a running count per url
at fixed events over growing numbers of distinct urls (keys), measured under one window for both
(bench/window.py, as in the throughput suite: first record read → last result committed).

    python bench/key_sweep.py [--quick] [--events 3] [--keys 0.25,0.5,1,2] [--runs 3]
        [--max-foreign-cores 0.3] [--out bench/RESULTS.md] [--workdir DIR] [--keep-workdir]

What it answers (issue "The data plane at or beyond Structured Streaming"): is Sluice's cost linear
in keys, and where does it stand against the peer at 1 M and 2 M keys? Inputs: --events millions of
page views per key count, in files of 100,000 events (bench/checkpoint_overhead.py's data: random
permutations of all the urls one after the other, so every url occurs and the counts differ by at
most one). Both systems in the throughput suite's matched pair at 2 Spark task threads: Sluice 1
TaskManager × 2 slots, examples/page_views.py at parallelism 2 with checkpoints every 1 s (the
job's default); the peer local[2], 2 shuffle partitions, `Trigger.AvailableNow`, maxFilesPerTrigger
unset (one batch: its best configuration in the throughput sweeps). Each key count gets --runs runs
per system, alternating S P | P S | ... and the key counts in alternating order round by round; one
cluster and one SparkSession serve every run (one uncounted warm-up each). Every run's committed
output is checked exactly (bench/output_check.py); the load rule (bench/procstat.py) excludes a run
during which other processes used more than --max-foreign-cores cores.

Reported per key count: each system's median window with a bootstrap 95 % interval and events/s,
the ratio (Sluice's events/s over the peer's: above 1, Sluice faster), and per doubling of the keys
each system's time ratio (the issue's goal for Sluice: ≤ 1.5 per doubling).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

import checkpoint_overhead as co
import throughput_suite as ts  # (also puts the repo and examples/ on sys.path)
from bench_common import aborted, begin_run, finish_workdir, fmt, publish, run_main
from markdown import section_head
from stats import Estimate, fmt_estimate, median_ci

log = ts.log
PER_FILE = 100_000
SLUICE_CFG, PEER_CFG = ts.SluiceConfig(1, 2, 2), ts.PeerConfig(2, 0, 2)


def dataset(work: str, keys: int, events: int) -> ts.Dataset:
    """`events` page views over exactly `keys` urls in files of PER_FILE events."""
    spec = co.StateSize(f"{keys}", keys, events // PER_FILE, PER_FILE, 1)
    path = os.path.join(work, f"keys-{keys}")
    t0 = time.monotonic()
    expected = co.make_dataset(path, spec)
    log(f"{keys:,} keys: {events:,} events in {spec.files} files, generated in {time.monotonic() - t0:.1f}s")
    return ts.Dataset(path, events, spec.files, expected)


def plan(keys: Sequence[int], runs: int) -> list[tuple[int, ts.Config]]:
    """The measured runs in order: per round the key counts (reversed every other round), for each
    the two systems alternating which goes first."""
    out: list[tuple[int, ts.Config]] = []
    for r in range(runs):
        for i, k in enumerate(keys if r % 2 == 0 else list(reversed(keys))):
            pair: list[ts.Config] = [SLUICE_CFG, PEER_CFG] if (r + i) % 2 == 0 else [PEER_CFG, SLUICE_CFG]
            out += [(k, c) for c in pair]
    return out


def windows(runs: Sequence[dict], system: str, keys: int) -> Estimate:
    """The median window of the kept runs of `system` at `keys`."""
    mine = [r for r in runs if r["system"] == system and r["keys"] == keys and r["phase"] != "warm-up"]
    kept = [r["window"] for r in mine if r["ok"] and not r.get("excluded")]
    return median_ci(kept, excluded=len(mine) - len(kept))


def report(facts: dict, command: str, runs: list[dict], keys: Sequence[int], events: int, notes: list[str]) -> str:
    lines = section_head("Key-cardinality sweep: Sluice and the peer at fixed events", command, facts)
    lines += [
        f"A running count per url over {events:,} events at each key count, every url present (counts "
        f"differ by at most one). {ts.SLUICE}: {SLUICE_CFG.label}, checkpoints every 1 s; {ts.PEER}: "
        f"{PEER_CFG.label}, Trigger.AvailableNow. Window: first record read → last result committed "
        "(bench/window.py), median [95 % interval] over the kept runs; ratio = Sluice events/s ÷ peer "
        "events/s; per doubling = this key count's median window ÷ the previous one's (keys doubled).",
        "",
        "| keys | Sluice s | Sluice events/s | peer s | peer events/s | ratio | Sluice per doubling "
        "| peer per doubling |",
        "|---|---|---|---|---|---|---|---|",
    ]
    last: dict[str, float | None] = {ts.SLUICE: None, ts.PEER: None}
    prev_k = 0
    for k in keys:
        est = {s: windows(runs, s, k) for s in (ts.SLUICE, ts.PEER)}
        rate = {s: events / e.median if e.median else None for s, e in est.items()}
        doubled = k == 2 * prev_k
        growth: dict[str, float | None] = {}
        for s, e in est.items():
            before = last[s]
            growth[s] = e.median / before if doubled and e.median and before else None
        ours, theirs = rate[ts.SLUICE], rate[ts.PEER]
        ratio = ours / theirs if ours and theirs else None
        lines.append(
            f"| {k:,} | {fmt_estimate(est[ts.SLUICE], '.2f')} | {fmt(rate[ts.SLUICE], ',.0f')} | "
            f"{fmt_estimate(est[ts.PEER], '.2f')} | {fmt(rate[ts.PEER], ',.0f')} | {fmt(ratio, '.2f')} | "
            f"{fmt(growth[ts.SLUICE], '.2f')} | {fmt(growth[ts.PEER], '.2f')} |"
        )
        last, prev_k = {s: est[s].median for s in est}, k
    lines += [
        "",
        "Runs in order (window s, events/s, CPU s per million events of the measured system, foreign cores):",
        "",
        "| # | keys | system | phase | window s | events/s | CPU s/M | foreign | output exact | kept |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['n']} | {r['keys']:,} | {r['system']} | {r['phase']} | {fmt(r.get('window'))} | "
            f"{fmt(r.get('rate'), ',.0f')} | {fmt(r.get('cpu_per_m'))} | {fmt(r.get('foreign_cores'))} | "
            f"{'yes' if r.get('check_ok') else 'NO'} | {'no' if r.get('excluded') or not r['ok'] else 'yes'} |"
        )
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke sizes: 0.5 M events, 50k and 100k keys, 1 run")
    ap.add_argument("--events", type=float, default=None, help="millions of events per key count (3; quick 0.5)")
    ap.add_argument("--keys", default=None, help="millions of keys, comma-separated (0.25,0.5,1,2; quick 0.05,0.1)")
    ap.add_argument("--runs", type=int, default=None, help="runs per system and key count (3; quick 1)")
    ap.add_argument("--max-foreign-cores", type=float, default=None)
    ap.add_argument("--job-timeout", type=float, default=600)
    ap.add_argument("--out", default=os.path.join(ts.HERE, "RESULTS.md"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args()
    from procstat import FOREIGN_CORES_LIMIT

    if args.max_foreign_cores is None:
        args.max_foreign_cores = FOREIGN_CORES_LIMIT
    events = round((args.events if args.events is not None else (0.5 if args.quick else 3.0)) * 1e6)
    keys = [round(float(k) * 1e6) for k in (args.keys or ("0.05,0.1" if args.quick else "0.25,0.5,1,2")).split(",")]
    runs = args.runs or (1 if args.quick else 3)
    if events % PER_FILE or events <= 0:
        ap.error(f"--events is a positive multiple of {PER_FILE / 1e6:g}")
    if sorted(set(keys)) != keys or keys[0] <= 0:
        ap.error("--keys: increasing positive numbers")
    command, facts, temp, work = begin_run(ts.REPO, args.workdir, "key-sweep-", log)
    t_begin = time.monotonic()
    suite = ts.Suite(args, work)
    interrupted = False
    try:
        data = {k: dataset(work, k, events) for k in keys}
        suite.prestart([SLUICE_CFG, PEER_CFG], data[keys[0]])
        for k, cfg in plan(keys, runs):
            suite.run(cfg, data[k], f"keys {k}")["keys"] = k
    except BaseException as exc:
        interrupted = aborted(suite, exc, "the cluster and the SparkSession", log)
        raise
    finally:
        suite.stop_all()
        if suite.runs:
            for r in suite.runs:
                r.setdefault("keys", keys[0])  # the warm-up runs, on the smallest input
            suite.notes.append(f"The invocation took {time.monotonic() - t_begin:.0f} s.")
            publish(report(facts, command, suite.runs, keys, events, suite.notes), args.out, log)
        finish_workdir(work, temp and (interrupted or not suite.failed) and not args.keep_workdir, log)
    return 1 if suite.failed else 0


if __name__ == "__main__":
    run_main(main)
