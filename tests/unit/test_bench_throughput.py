"""bench/throughput_suite.py's pure parts: the sweep grid and run orders, the best configuration and
the matched pair, the fixed + per-event fit, process labels, and the report built from runs."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import throughput_suite as ts
from throughput_suite import PEER, SLUICE, PeerConfig, SluiceConfig


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
    sluice, peer = ts.sweep_configs()
    assert [(c.taskmanagers, c.slots, c.parallelism) for c in sluice] == [(1, 2, 2), (2, 1, 2), (2, 2, 2), (2, 2, 4)]
    assert all(c.parallelism <= c.threads for c in sluice)
    assert len(peer) == 4 * 3 * 2 and len(set(peer)) == 24
    assert {c.mfpt for c in peer} == {0, 40, 20, 8}
    assert PeerConfig(4, 0, 2).label == "local[4], maxFilesPerTrigger unset, shuffle 2"
    assert SluiceConfig(2, 2, 4).threads == 4


def test_orders():
    assert ts.round_robin(["a", "b", "c"], 2) == ["a", "b", "c", "c", "b", "a"]
    assert ts.alternating(3) == [SLUICE, PEER, PEER, SLUICE, SLUICE, PEER]
    assert ts.alternating(1, PEER) == [PEER, SLUICE]
    a, b = ["s1", "s2"], [f"p{i}" for i in range(8)]
    mixed = ts.interleave(a, b)
    assert sorted(mixed) == sorted(a + b)
    assert [x for x in mixed if x in a] == a and [x for x in mixed if x in b] == b
    assert 1 <= mixed.index("s1") <= 3 and 5 <= mixed.index("s2") <= 7  # spread, not bunched
    assert ts.interleave([], b) == b


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
    assert ts.best_config(runs, [fast, slow]) == fast
    assert ts.best_with_threads(runs, [fast, slow], 4) == slow
    assert ts.best_with_threads(runs, [fast, slow], 8) is None
    assert ts.best_config([], [fast]) is None


def test_fit_recovers_fixed_and_per_event_cost():
    events = [500_000, 500_000, 2_000_000, 2_000_000, 8_000_000, 8_000_000]
    seconds = [0.9 + 0.48e-6 * e for e in events]
    a, b = ts.fit_line(events, seconds)
    assert a == pytest.approx(0.9) and b == pytest.approx(0.48e-6)
    fit = ts.fit_with_ci(events, seconds, resamples=200)
    assert fit is not None
    fixed, per = fit
    assert fixed.median == pytest.approx(0.9) and per.median == pytest.approx(0.48)
    assert fixed.low == pytest.approx(0.9) and per.high == pytest.approx(0.48)  # exact data: no spread
    noisy = [s + d for s, d in zip(seconds, [0.1, -0.1, 0.05, -0.05, 0.2, -0.2], strict=True)]
    fit = ts.fit_with_ci(events, noisy, resamples=500)
    assert fit is not None
    fixed, per = fit
    assert fixed.low is not None and fixed.median is not None and fixed.high is not None
    assert per.low is not None and per.median is not None and per.high is not None
    assert fixed.low < fixed.median < fixed.high and per.low < per.median < per.high
    assert ts.fit_with_ci([1e6, 1e6], [1.0, 2.0]) is None
    with pytest.raises(ValueError):
        ts.fit_line([1.0], [1.0])


def test_parse_sizes():
    assert ts.parse_sizes("0.5,2,8,20") == [500_000, 2_000_000, 8_000_000, 20_000_000]
    with pytest.raises(ValueError):
        ts.parse_sizes("0.25")


def test_process_roles():
    assert ts.process_role(["/v/python3", "-m", "jobmanager", "--zookeeper", "127.0.0.1:1"]) == "jobmanager"
    assert ts.process_role(["/v/python3", "-m", "taskmanager", "--zookeeper", "x"]) == "taskmanager"
    assert ts.process_role(["/v/python3", "-m", "sluice.cli.supervisor", "--dir", "d"]) == "supervisor"
    assert ts.process_role(["/usr/bin/java", "-cp", "zookeeper.jar", "org.apache.zookeeper.server.Main"]) == "zookeeper"
    assert ts.process_role(["/usr/bin/java", "-cp", "/v/site-packages/pyspark/jars/*", "x"]) == "spark-jvm"
    assert ts.process_role(["python", "bench/structured_streaming_bench.py", "--child", "s"]) == "peer driver (python)"
    assert ts.process_role(["bash"]) is None
    assert ts.process_role([]) is None


def test_peak_rss_by_process():
    cfg = SluiceConfig(1, 2, 2)
    runs = [run(cfg, 100.0, n=7), {**run(cfg, 100.0, n=7), "rss": {"taskmanager 7": 2**31}}]
    assert ts.peak_rss_by_process(runs) == {"taskmanager 7": 2**31}


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
        add(s_best, 300_000.0 + i, ts.HEADLINE)
        add(p_best, 250_000.0 + i, ts.HEADLINE)
        add(s_m, 200_000.0 + i, ts.HEADLINE)
        add(p_m, 150_000.0 + i, ts.HEADLINE, excluded=i == 0)
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
    text = ts.report(
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


def test_pairs_run_a_shared_configuration_once_per_round():
    s_cfg = SluiceConfig(1, 2, 2)
    p_best, p_m = PeerConfig(4, 0, 1), PeerConfig(2, 20, 2)
    seen = []

    class Recorded(ts.Suite):
        def run(self, cfg, data, phase):
            seen.append((cfg, phase))

    suite = Recorded.__new__(Recorded)
    suite.pairs([(s_cfg, p_best, "best"), (s_cfg, p_m, "matched")], ts.Dataset("", 0, 0, {}), 2)
    assert [c for c, _ in seen] == [p_best, s_cfg, p_m, p_m, s_cfg, p_best]
    assert {phase for _, phase in seen} == {ts.HEADLINE}
