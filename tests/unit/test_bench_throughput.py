"""bench/throughput_suite.py's pure parts: the sweep grid (bench/throughput_plan.py), the best
configuration and the matched pair, the fixed + per-event fit, process labels, and the report built
from runs (bench/throughput_report.py). The run orders: test_bench_throughput_orders.py."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import throughput_plan as tp
import throughput_report as tr
from throughput_plan import HEADLINE, SLUICE, PeerConfig, SluiceConfig


def run(cfg, rate, phase="sweep", events=1_000_000, ok=True, excluded=False, n=1):
    window = events / rate
    return {
        "n": n,
        "phase": phase,
        "system": cfg.system,
        "config": cfg,
        "events": events,
        "window": window,
        "rate": rate,
        "startup": 1.0,
        "cpu_per_m": 3.0,
        "other_cpu_s": 0.1,
        "foreign_cores": 0.5 if excluded else 0.05,
        "excluded": excluded,
        "ok": ok,
        "check_ok": ok,
        "check": "exactly once" if ok else "VIOLATION: duplicate line",
        "rss": {f"taskmanager {n}": 2**30} if cfg.system == SLUICE else {f"spark-jvm {n}": 2**29},
    }


def test_sweep_grid():
    sluice, peer = tp.sweep_configs()
    assert [(c.taskmanagers, c.slots, c.parallelism) for c in sluice] == [(1, 2, 2), (2, 1, 2), (2, 2, 2), (2, 2, 4)]
    assert all(c.parallelism <= c.threads for c in sluice)
    assert len(peer) == 4 * 3 * 2 and len(set(peer)) == 24
    assert {c.mfpt for c in peer} == {0, 40, 20, 8}
    assert PeerConfig(4, 0, 2).label == "local[4], maxFilesPerTrigger unset, shuffle 2"
    assert SluiceConfig(2, 2, 4).threads == 4


def test_best_config_uses_kept_runs_only():
    fast, slow = PeerConfig(2, 0, 2), PeerConfig(4, 8, 1)
    runs = [
        run(fast, 100.0),
        run(fast, 110.0),
        run(slow, 90.0),
        run(slow, 95.0),
        run(slow, 500.0, ok=False),  # failed its output check: never counts
        run(slow, 400.0, excluded=True),  # left out by the load rule
    ]
    assert tp.best_config(runs, [fast, slow]) == fast
    assert tp.best_with_threads(runs, [fast, slow], 4) == slow
    assert tp.best_with_threads(runs, [fast, slow], 8) is None
    assert tp.best_config([], [fast]) is None


def test_headline_pairs_are_the_best_and_the_matched_configurations():
    s_best, s_m = SluiceConfig(2, 2, 4), SluiceConfig(2, 1, 2)
    p_best, p_m = PeerConfig(4, 0, 2), PeerConfig(2, 20, 2)
    sweep = [run(s_best, 300.0), run(s_m, 200.0), run(p_best, 250.0), run(p_m, 150.0)]
    assert tp.headline_pairs(sweep, [s_best, s_m], [p_best, p_m], 2) == [
        (s_best, p_best, "best"),
        (s_m, p_m, "matched"),
    ]
    assert tp.headline_pairs(sweep, [s_best, s_m], [p_best, p_m], 4) == [(s_best, p_best, "best = matched")]
    # no kept run of a system: the matched pair at 2 task threads stands in
    fallback = tp.headline_pairs(sweep[2:], [s_best, s_m], [p_best, p_m], 2)
    assert fallback == [(tp.MATCHED_SLUICE, p_best, "best"), (tp.MATCHED_SLUICE, p_m, "matched")]


def test_fit_recovers_fixed_and_per_event_cost():
    events = [500_000, 500_000, 2_000_000, 2_000_000, 8_000_000, 8_000_000]
    seconds = [0.9 + 0.48e-6 * e for e in events]
    a, b = tr.fit_line(events, seconds)
    assert a == pytest.approx(0.9) and b == pytest.approx(0.48e-6)
    fit = tr.fit_with_ci(events, seconds, resamples=200)
    assert fit is not None
    fixed, per = fit
    assert fixed.median == pytest.approx(0.9) and per.median == pytest.approx(0.48)
    assert fixed.low == pytest.approx(0.9) and per.high == pytest.approx(0.48)  # exact data: no spread
    noisy = [s + d for s, d in zip(seconds, [0.1, -0.1, 0.05, -0.05, 0.2, -0.2], strict=True)]
    fit = tr.fit_with_ci(events, noisy, resamples=500)
    assert fit is not None
    fixed, per = fit
    assert fixed.low is not None and fixed.median is not None and fixed.high is not None
    assert per.low is not None and per.median is not None and per.high is not None
    assert fixed.low < fixed.median < fixed.high and per.low < per.median < per.high
    assert tr.fit_with_ci([1e6, 1e6], [1.0, 2.0]) is None
    with pytest.raises(ValueError):
        tr.fit_line([1.0], [1.0])


def test_parse_sizes():
    assert tp.parse_sizes("0.5,2,8,20") == [500_000, 2_000_000, 8_000_000, 20_000_000]
    with pytest.raises(ValueError):
        tp.parse_sizes("0.25")


def test_process_roles():
    assert tr.process_role(["/v/python3", "-m", "jobmanager", "--zookeeper", "127.0.0.1:1"]) == "jobmanager"
    assert tr.process_role(["/v/python3", "-m", "taskmanager", "--zookeeper", "x"]) == "taskmanager"
    assert tr.process_role(["/v/python3", "-m", "sluice.cli.supervisor", "--dir", "d"]) == "supervisor"
    assert tr.process_role(["/usr/bin/java", "-cp", "zookeeper.jar", "org.apache.zookeeper.server.Main"]) == "zookeeper"
    assert tr.process_role(["/usr/bin/java", "-cp", "/v/site-packages/pyspark/jars/*", "x"]) == "spark-jvm"
    assert tr.process_role(["python", "bench/structured_streaming_bench.py", "--child", "s"]) == "peer driver (python)"
    assert tr.process_role(["bash"]) is None
    assert tr.process_role([]) is None


def test_peak_rss_by_process():
    cfg = SluiceConfig(1, 2, 2)
    runs = [run(cfg, 100.0, n=7), {**run(cfg, 100.0, n=7), "rss": {"taskmanager 7": 2**31}}]
    assert tr.peak_rss_by_process(runs) == {"taskmanager 7": 2**31}


def test_report_has_headline_sweep_sizes_and_every_run():
    s_best, s_m = SluiceConfig(2, 2, 4), SluiceConfig(1, 2, 2)
    p_best, p_m = PeerConfig(4, 0, 2), PeerConfig(2, 20, 2)
    runs, n = [], 0

    def add(cfg, rate, phase, events=1_000_000, **kw):
        nonlocal n
        n += 1
        runs.append(run(cfg, rate, phase, events, n=n, **kw))

    add(s_best, 100_000.0, "warm-up")
    for cfg, rate in ((s_best, 300_000.0), (s_m, 200_000.0), (p_best, 250_000.0), (p_m, 150_000.0)):
        add(cfg, rate, "sweep")
        add(cfg, rate * 1.1, "sweep")
    for i in range(3):
        add(s_best, 300_000.0 + i, HEADLINE)
        add(p_best, 250_000.0 + i, HEADLINE)
        add(s_m, 200_000.0 + i, HEADLINE)
        add(p_m, 150_000.0 + i, HEADLINE, excluded=i == 0)
    for size in (500_000, 2_000_000):
        for _ in range(2):
            add(s_best, 300_000.0, f"size {size}", events=size)
            add(p_best, 250_000.0, f"size {size}", events=size)
    add(p_best, 1.0, "size 2000000", events=2_000_000, ok=False)
    plan = {
        "max_foreign_cores": 0.3,
        "skipped": "",
        "headline": [(s_best, p_best, "best"), (s_m, p_m, "matched")],
        "sluice_cfgs": [s_best, s_m],
        "peer_cfgs": [p_best, p_m],
        "best_sluice": s_best,
        "best_peer": p_best,
        "sweep_events": 1_000_000,
        "sizes": [500_000, 2_000_000],
        "size_sluice": s_best,
        "size_peer": p_best,
    }
    text = tr.report(
        {k: "x" for k in ("date", "cores", "cpu", "ram", "python", "java", "pyspark", "os", "load", "commit")},
        "python bench/throughput_suite.py",
        runs,
        ["a note"],
        plan,
    )
    assert "— Throughput suite: one window for both systems" in text
    assert "**OUTPUT CHECK FAILED**" in text  # the failed size run
    best_row = next(line for line in text.splitlines() if line.startswith("| best | 2 TM x 2 slots"))
    assert "300,001 [300,000–300,002]" in best_row and "| 1.20 |" in best_row  # ratio 300,001 / 250,001
    matched_row = next(line for line in text.splitlines() if line.startswith("| matched | 1 TM x 2 slots"))
    assert matched_row.endswith("| 3/2 |")  # one peer run excluded by the load rule
    assert "**local[4], maxFilesPerTrigger unset, shuffle 2**" in text  # the best peer config, marked
    fit_row = next(line for line in text.splitlines() if line.startswith("| Sluice | 2 TM x 2 slots, p=4 | "))
    assert "µs per event" in text and fit_row.count("[") >= 2
    assert "0.50 (excluded)" in text and "- a note" in text
    assert "Warm-up runs" in text and "100,000 events/s" in text
    assert "| Sluice: 2 TM x 2 slots, p=4 | 3/3/3 |" in text  # the headline summary, one row per configuration
