"""bench/checkpoint_overhead.py and its plan and report modules: the data sets (every url of a state
size occurs, counts known), the interleaving of on/off runs, how pairs become an overhead with an
interval, and the command line."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import checkpoint_overhead_plan as plan
import checkpoint_overhead_report as co
from procstat import Usage
from stats import median_ci


def test_url_sequence_holds_every_url_and_counts_differ_by_at_most_one():
    seq = plan.url_sequence(1000, 2500, seed=1)
    counts = np.bincount(seq, minlength=1000)
    assert len(seq) == 2500 and counts.min() >= 2 and counts.max() <= 3
    assert set(plan.url_sequence(50, 50, seed=2).tolist()) == set(range(50))


def test_make_dataset_counts_match_the_files_and_copies_are_links(tmp_path):
    spec = plan.StateSize("t", keys=300, base_files=3, per_file=200, copies=2)
    expected = plan.make_dataset(str(tmp_path), spec, seed=5)
    names = sorted(os.listdir(tmp_path))
    assert len(names) == spec.files == 6
    assert os.stat(tmp_path / names[0]).st_ino == os.stat(tmp_path / "events-001-0000.jsonl").st_ino
    counted: Counter = Counter()
    for n in names:
        with open(tmp_path / n) as f:
            for line in f:
                counted[json.loads(line)["url"]] += 1
    assert dict(counted) == expected
    assert len(expected) == 300 and sum(expected.values()) == spec.events == 1200


def test_block_order_alternates_direction_and_rotates_the_intervals():
    iv = [250, 1000, 10000]
    assert plan.block_order(iv, 0) == [0, 250, 1000, 10000]
    assert plan.block_order(iv, 1) == [10000, 1000, 250, 0]
    assert plan.block_order(iv, 2) == [0, 1000, 10000, 250]
    assert plan.block_order(iv, 3) == [250, 10000, 1000, 0]
    assert plan.block_order([1000], 0) == [0, 1000] and plan.block_order([1000], 1) == [1000, 0]
    for b in range(6):
        assert sorted(plan.block_order(iv, b)) == [0, 250, 1000, 10000]


def _run(tput, ok=True, excluded=False, checkpoints=()):
    return {"throughput": tput, "counts_ok": ok, "excluded": excluded, "checkpoints": list(checkpoints)}


def test_cases_pair_each_interval_with_its_blocks_off_run_and_leave_out_bad_pairs():
    blocks = [
        {0: _run(100.0), 1000: _run(95.0), 250: _run(80.0)},
        {0: _run(110.0), 1000: _run(100.0), 250: _run(88.0, ok=False)},
        {0: _run(90.0, excluded=True), 1000: _run(90.0), 250: _run(75.0)},
    ]
    c250, c1000 = co.cases(blocks, "10k", [250, 1000])
    assert c1000.overheads == pytest.approx([100 / 95 - 1, 110 / 100 - 1])
    assert c1000.pairs_left_out == 1
    assert c250.overheads == pytest.approx([100 / 80 - 1]) and c250.pairs_left_out == 2
    est = c1000.estimate
    assert est.low is not None and est.median is not None and est.high is not None
    assert est.n == 2 and est.excluded == 1 and est.low <= est.median <= est.high


def test_checkpoint_figures_and_peak_rss():
    cks = [{"duration_ms": d, "size_bytes": s} for d, s in [(100, 10), (300, 30), (200, 20)]]
    runs = [_run(1.0, checkpoints=cks[:2]), _run(1.0, checkpoints=cks[2:]), _run(1.0, ok=False, checkpoints=cks)]
    f = co.checkpoint_figures(runs)
    assert f["per_run"] == [2, 1] and f["p50_ms"] == 200 and f["max_ms"] == 300 and f["max_size"] == 30
    u = Usage(1.0, {"sluice": 1.0}, {"sluice": {"zookeeper 1": 5, "taskmanager 2": 7, "taskmanager 3": 9}}, 0.0, 0.0)
    run = {"usage": u, "roles": {1: "taskmanager", 2: "taskmanager", 3: "spark-jvm"}}
    assert co.peak_rss([run], "taskmanager") == 7 and co.peak_rss([run], "spark-jvm") == 9
    assert co.peak_rss([{}], "taskmanager") is None


def test_fmt_pct_and_parse_blocks():
    est = median_ci([0.01, 0.03, 0.02, 0.05])
    text = co.fmt_pct(est)
    assert text.startswith("+2.5 % [") and text.endswith(" %]")
    assert co.fmt_pct(median_ci([0.04])) == "+4.0 % (1 pair, no interval)"
    assert plan.parse_blocks("10k=4, 1M=3") == {"10k": 4, "1m": 3}


def test_report_has_one_row_per_case_and_marks_failed_runs():
    spec = plan.StateSize("10k", 10_000, 2, 100, 1)
    blocks = [{0: _run(100.0), 1000: _run(90.0, ok=False)}, {1000: _run(95.0), 0: _run(100.0)}]
    res = {"10k": {"intervals": [1000], "blocks": blocks, "cases": co.cases(blocks, "10k", [1000])}}
    args = SimpleNamespace(quick=True, max_foreign_cores=0.3)
    facts = dict(commit="abc", cores=2, cpu="x", ram="1 GiB", python="3", java="j", pyspark="4", load="0")
    text = co.report(args, facts, "python bench/checkpoint_overhead.py --quick", {"10k": spec}, res, [])
    assert "**OUTPUT CHECK FAILED** in 1 runs" in text
    assert "| 10,000 | 200 / 2 | 1,000 | +5.3 % (1 pair, no interval) | 1 (1) |" in text
    assert text.count("| 10k | ") == 4


def test_parse_args_sizes_intervals_and_blocks():
    import checkpoint_overhead as suite

    args, table, names, intervals, blocks = suite.parse_args(["--quick"])
    assert args.quick and table is plan.QUICK and names == ["10k"] and intervals == [1000] and blocks == {"10k": 2}
    _, table, names, intervals, blocks = suite.parse_args(["--sizes", "1M,5m", "--blocks", "5m=3"])
    assert table is plan.FULL and names == ["1m", "5m"] and intervals == [250, 1000, 10000]
    assert blocks == {"1m": 4, "5m": 3}
    assert suite.StateSize is plan.StateSize and suite.make_dataset is plan.make_dataset  # bench/key_sweep.py's
