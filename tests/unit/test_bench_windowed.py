"""examples/generate_page_views.py's disorder and expected windowed counts, and bench/windowed_bench.py's
pure parts: the exactness check of committed windows (bench/windowed_bench_workload.py), the report
(bench/windowed_bench_report.py), and those it shares (bench/spark_peer.py's Structured Streaming sink
log reader, bench/paired_runs.py's window end). Small hand-checked cases; no Spark, no cluster."""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np
import pandas as pd
import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from generate_page_views import (
    BASE_TS,
    disorder_draws,
    expected_windows,
    generate,
    read_events,
    window_count_table,
    window_counts,
)
from paired_runs import PEER, SLUICE, commit_end
from spark_peer import spark_sink_log, spark_time_ms
from windowed_bench_report import report
from windowed_bench_workload import WORKLOADS, check_windows, read_lines


def files_of(d) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}


def table_dict(frame) -> dict:
    return {(r.url, r.window_start, r.window_end): r.count for r in frame.itertuples(index=False)}


# -- the generator's disorder -----------------------------------------------------------------------
def test_disorder_zero_is_byte_identical_to_no_disorder(tmp_path):
    a = generate(str(tmp_path / "a"), events=3_001, files=4, urls=60, seed=5)
    b = generate(str(tmp_path / "b"), events=3_001, files=4, urls=60, seed=5, disorder_ms=0)
    assert a == b
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    urls, ts = read_events(str(tmp_path / "a"))
    assert ts.tolist() == [BASE_TS + i for i in range(3_001)]  # today's timestamps: base + i


def test_without_disorder_the_lines_are_those_of_before(tmp_path):
    """The first lines of seed 7, as the generator wrote them before --disorder-ms existed."""
    rng = np.random.default_rng(7)
    weights = 1.0 / np.arange(1, 101)
    url_idx = rng.choice(100, size=5, p=weights / weights.sum())
    users = rng.integers(0, 1_000_000, size=5)
    generate(str(tmp_path), events=5, files=1, urls=100, seed=7)
    want = [
        json.dumps({"url": f"/page/{int(u)}", "user": int(v), "ts": 1_700_000_000_000 + i})
        for i, (u, v) in enumerate(zip(url_idx, users, strict=True))
    ]
    assert (tmp_path / "events-0000.jsonl").read_text() == "\n".join(want) + "\n"


def test_disorder_moves_timestamps_only_and_within_the_bound(tmp_path):
    counts0 = generate(str(tmp_path / "a"), events=20_000, files=5, urls=300, seed=9)
    counts = generate(str(tmp_path / "b"), events=20_000, files=5, urls=300, seed=9, disorder_ms=700)
    assert counts == counts0
    lines0 = [json.loads(x) for n in sorted(os.listdir(tmp_path / "a")) for x in (tmp_path / "a" / n).open()]
    lines = [json.loads(x) for n in sorted(os.listdir(tmp_path / "b")) for x in (tmp_path / "b" / n).open()]
    assert [(e["url"], e["user"]) for e in lines] == [(e["url"], e["user"]) for e in lines0]  # same draws, order
    assert sorted(os.listdir(tmp_path / "a")) == sorted(os.listdir(tmp_path / "b"))
    d = np.array([BASE_TS + i - e["ts"] for i, e in enumerate(lines)])
    assert d.min() >= 0 and d.max() <= 700
    assert d.min() == 0 and d.max() == 700  # 20,000 draws reach both ends of [0, 700]
    assert abs(d.mean() - 350) < 10  # uniform
    ts = np.array([e["ts"] for e in lines])
    assert (np.diff(ts) < 0).any()  # out of order ...
    assert (np.maximum.accumulate(ts) - ts).max() <= 700  # ... by at most the bound behind the largest so far
    assert d.tolist() == disorder_draws(9, 20_000, 700).tolist()


def test_disorder_is_deterministic_per_seed(tmp_path):
    generate(str(tmp_path / "a"), events=2_000, files=2, urls=50, seed=3, disorder_ms=100)
    generate(str(tmp_path / "b"), events=2_000, files=2, urls=50, seed=3, disorder_ms=100)
    generate(str(tmp_path / "c"), events=2_000, files=2, urls=50, seed=4, disorder_ms=100)
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    assert read_events(str(tmp_path / "a"))[1].tolist() != read_events(str(tmp_path / "c"))[1].tolist()


def test_negative_disorder_is_refused(tmp_path):
    with pytest.raises(ValueError, match="disorder_ms"):
        generate(str(tmp_path), events=10, disorder_ms=-1)


def test_the_command_line_takes_disorder(tmp_path):
    import subprocess

    script = os.path.join(ROOT, "examples", "generate_page_views.py")
    args = ["--events", "500", "--files", "2", "--urls", "20", "--seed", "3"]
    subprocess.run([sys.executable, script, "--out", str(tmp_path / "a"), *args], check=True, capture_output=True)
    subprocess.run(
        [sys.executable, script, "--out", str(tmp_path / "b"), *args, "--disorder-ms", "0"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [sys.executable, script, "--out", str(tmp_path / "c"), *args, "--disorder-ms", "50"],
        check=True,
        capture_output=True,
    )
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    generate(str(tmp_path / "d"), events=500, files=2, urls=20, seed=3, disorder_ms=50)
    assert files_of(tmp_path / "c") == files_of(tmp_path / "d")


# -- expected windowed counts ---------------------------------------------------------------------------
def test_tumbling_windows_by_hand():
    events = [("/a", 0), ("/a", 9), ("/a", 10), ("/b", 19), ("/b", 20), ("/a", 29), ("/a", -1)]
    assert window_counts(events, 10, 10) == {
        ("/a", 0, 10): 2,
        ("/a", 10, 20): 1,
        ("/b", 10, 20): 1,
        ("/b", 20, 30): 1,
        ("/a", 20, 30): 1,
        ("/a", -10, 0): 1,  # aligned to epoch 0 below it too
    }


def test_sliding_windows_by_hand():
    # size 30, slide 10: the event at 25 is in [0, 30), [10, 40), [20, 50); the one at 30 in [10, 40) ...
    events = [("/a", 25), ("/a", 30), ("/b", 5)]
    assert window_counts(events, 30, 10) == {
        ("/a", 0, 30): 1,
        ("/a", 10, 40): 2,
        ("/a", 20, 50): 2,
        ("/a", 30, 60): 1,
        ("/b", -20, 10): 1,
        ("/b", -10, 20): 1,
        ("/b", 0, 30): 1,
    }


def test_window_ends_are_excluded_and_starts_included():
    got = window_counts([("/x", 59_999), ("/x", 60_000)], 60_000, 10_000)
    assert ("/x", 0, 60_000) in got and got[("/x", 0, 60_000)] == 1  # 60,000 is not in [0, 60,000)
    assert got[("/x", 10_000, 70_000)] == 2
    assert got[("/x", 60_000, 120_000)] == 1
    assert sum(got.values()) == 12  # each event in size / slide = 6 windows


def test_size_not_a_multiple_of_the_slide_and_gaps():
    # size 25, slide 10: 22 is in [0, 25), [10, 35), [20, 45)
    assert window_counts([("/a", 22)], 25, 10) == {("/a", 0, 25): 1, ("/a", 10, 35): 1, ("/a", 20, 45): 1}
    # slide above size: gaps between windows; 7 is in [0, 5)? no: in none
    assert window_counts([("/a", 7), ("/a", 3)], 5, 10) == {("/a", 0, 5): 1}


@pytest.mark.parametrize("size_ms,slide_ms", [(10, 10), (30, 10), (25, 10), (5, 10), (60_000, 10_000), (7, 3)])
def test_the_table_equals_the_plain_python_count(size_ms, slide_ms):
    r = random.Random(size_ms * 31 + slide_ms)
    events = [(f"/p/{r.randrange(7)}", r.randrange(-200, 200_000 if size_ms > 100 else 400)) for _ in range(3_000)]
    table = window_count_table([u for u, _ in events], [t for _, t in events], size_ms, slide_ms)
    assert table_dict(table) == window_counts(events, size_ms, slide_ms)
    assert list(table.columns) == ["url", "window_start", "window_end", "count"]
    assert (table["window_end"] - table["window_start"] == size_ms).all()
    assert (table["window_start"] % slide_ms == 0).all()
    assert not table.duplicated(["url", "window_start", "window_end"]).any()


def test_the_table_of_no_events_and_bad_windows():
    empty = window_count_table([], [], 10, 10)
    assert len(empty) == 0 and list(empty.columns) == ["url", "window_start", "window_end", "count"]
    for size_ms, slide_ms in ((0, 10), (10, 0), (-5, 5), (10.5, 10)):
        with pytest.raises(ValueError):
            window_counts([], size_ms, slide_ms)  # type: ignore[arg-type]  # 10.5: a float on purpose
        with pytest.raises(ValueError):
            window_count_table([], [], size_ms, slide_ms)  # type: ignore[arg-type]  # 10.5: a float on purpose


def test_expected_windows_reads_the_generated_files(tmp_path):
    generate(str(tmp_path), events=5_000, files=3, urls=40, seed=2, disorder_ms=300)
    urls, ts = read_events(str(tmp_path))
    assert len(urls) == 5_000
    tumbling = expected_windows(str(tmp_path), 1_000)
    assert table_dict(tumbling) == window_counts(zip(urls, ts, strict=True), 1_000, 1_000)
    assert tumbling["count"].sum() == 5_000
    sliding = expected_windows(str(tmp_path), 3_000, 1_000)
    assert table_dict(sliding) == window_counts(zip(urls, ts, strict=True), 3_000, 1_000)
    assert sliding["count"].sum() == 3 * 5_000


# -- the check of committed windows -------------------------------------------------------------------
EXPECTED = pd.DataFrame(
    [("/a", 0, 10, 2), ("/a", 10, 20, 1), ("/b", 10, 20, 3), ("/b", 20, 30, 1)],
    columns=["url", "window_start", "window_end", "count"],
)


def rows(*r):
    return [(u, str(s), str(e), str(c)) for u, s, e, c in r]


def test_complete_and_exact_output_passes():
    got = rows(("/b", 20, 30, 1), ("/a", 0, 10, 2), ("/b", 10, 20, 3), ("/a", 10, 20, 1))
    c = check_windows(got, EXPECTED, complete=True)
    assert c.ok, c.describe()
    assert c.describe() == "exact: all 4 windows once, every count exact"


def test_a_window_twice_fails_even_with_the_same_count():
    got = rows(("/a", 0, 10, 2), ("/a", 10, 20, 1), ("/b", 10, 20, 3), ("/b", 20, 30, 1), ("/a", 0, 10, 2))
    c = check_windows(got, EXPECTED)
    assert not c.ok and c.duplicates == 2
    assert "committed twice" in c.describe() and "(/a, 0, 10) = 2" in c.describe()


def test_missing_wrong_and_unexpected_windows_fail():
    c = check_windows(rows(("/a", 0, 10, 2), ("/a", 10, 20, 1), ("/b", 10, 20, 3)), EXPECTED)
    assert not c.ok and c.missing == 1 and "missing: (/b, 20, 30)" in c.describe()
    c = check_windows(rows(("/a", 0, 10, 2), ("/a", 10, 20, 1), ("/b", 10, 20, 4), ("/b", 20, 30, 1)), EXPECTED)
    assert not c.ok and c.wrong == 1 and "count 4, expected 3: (/b, 10, 20)" in c.describe()
    c = check_windows(rows(*[tuple(r) for r in EXPECTED.itertuples(index=False)], ("/c", 0, 10, 1)), EXPECTED)
    assert not c.ok and c.unexpected == 1 and "never expected: (/c, 0, 10) = 1" in c.describe()
    c = check_windows(rows(("/a", 0, 10, "x")), EXPECTED)
    assert not c.ok and c.malformed == 1
    assert not check_windows([], EXPECTED).ok


def test_the_peer_may_leave_windows_after_its_final_watermark_unemitted():
    got = rows(("/a", 0, 10, 2), ("/a", 10, 20, 1), ("/b", 10, 20, 3))
    c = check_windows(got, EXPECTED, complete=False, emitted_through=25)
    assert c.ok and c.missing == 1, c.describe()
    assert "1 of 4 unemitted" in c.describe()
    # a window whose end is at or below the final watermark must have been emitted
    c = check_windows(rows(("/a", 0, 10, 2), ("/b", 10, 20, 3)), EXPECTED, complete=False, emitted_through=20)
    assert not c.ok and c.missing_due == 1 and "(/a, 10, 20)" in c.describe()
    # what was emitted must be exact
    c = check_windows(rows(("/a", 0, 10, 3)), EXPECTED, complete=False, emitted_through=5)
    assert not c.ok and c.wrong == 1


def test_read_lines_counts_lines_per_file(tmp_path):
    (tmp_path / "p1.csv").write_text("/a,0,10,2\n/b,10,20,3\n")
    (tmp_path / "p2.csv").write_text("")
    (tmp_path / "p3.csv").write_text("/a,10,20,1")  # no final newline
    frame, per = read_lines([str(tmp_path / n) for n in ("p1.csv", "p2.csv", "p3.csv")])
    assert per == {str(tmp_path / "p1.csv"): 2, str(tmp_path / "p2.csv"): 0, str(tmp_path / "p3.csv"): 1}
    assert frame.values.tolist() == [["/a", "0", "10", "2"], ["/b", "10", "20", "3"], ["/a", "10", "20", "1"]]
    frame, per = read_lines([str(tmp_path / "p2.csv")])
    assert len(frame) == 0 and list(frame.columns) == ["url", "window_start", "window_end", "count"]


# -- the peer's file sink log and the window's end ----------------------------------------------------
def write_log(d, name, entries):
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("v1\n" + "\n".join(json.dumps(e) for e in entries))


def test_spark_sink_log_lists_committed_files_per_batch(tmp_path):
    log = tmp_path / "_spark_metadata"
    out = "file://" + str(tmp_path)
    write_log(log, "0", [{"path": f"{out}/part-0-a.csv", "size": 0, "action": "add"}])
    write_log(
        log,
        "1",
        [
            {"path": f"{out}/part-0-b.csv", "size": 10, "action": "add"},
            {"path": f"{out}/part-1-b%20x.csv", "size": 10, "action": "add"},
        ],
    )
    (log / ".2.tmp").write_text("v1\n")  # not committed
    (tmp_path / "part-9-uncommitted.csv").write_text("/z,0,10,1\n")
    got = spark_sink_log(str(tmp_path))
    assert got == {
        0: [f"{tmp_path}/part-0-a.csv"],
        1: [f"{tmp_path}/part-0-b.csv", f"{tmp_path}/part-1-b x.csv"],
    }
    # a compact log holds every entry up to it: files keep the batch that first committed them
    write_log(
        log,
        "9.compact",
        [{"path": f"{out}/part-0-a.csv", "action": "add"}, {"path": f"{out}/part-0-c.csv", "action": "add"}],
    )
    assert spark_sink_log(str(tmp_path))[9] == [f"{tmp_path}/part-0-c.csv"]
    assert spark_sink_log(str(tmp_path / "nowhere")) == {}


def test_commit_end_is_the_last_commit_holding_results():
    commits = {"0": 1.0, "1": 2.5, "part-a": 3.0}
    assert commit_end(commits, ["1", "0"]) == (2.5, "1", [])
    assert commit_end(commits, ["1", "2"]) == (None, None, ["2"])
    assert commit_end(commits, []) == (None, None, [])


def test_spark_time_and_workloads():
    assert spark_time_ms("2023-11-14T22:29:57.950Z") == 1_700_000_997_950
    assert spark_time_ms(None) is None
    assert (WORKLOADS["tumbling"].size_ms, WORKLOADS["tumbling"].slide_ms) == (10_000, 10_000)
    assert (WORKLOADS["sliding"].size_ms, WORKLOADS["sliding"].slide_ms) == (60_000, 10_000)
    assert WORKLOADS["sliding"].label == "sliding 60 s every 10 s"


# -- the report -----------------------------------------------------------------------------------------
def fake_run(n, system, workload, rate, ok=True, **more):
    r = {"n": n, "phase": "measured", "system": system, "workload": workload, "window": 1e6 / rate, "rate": rate}
    r |= {"startup": 1.0, "cpu_per_m": 2.0, "state_peak": 2**20, "state_disk": 2**19 if system == PEER else None}
    r |= {"output_rows": 1234, "unemitted": 5 if system == PEER else None, "late_dropped": 0, "foreign_cores": 0.1}
    r |= {"excluded": False, "check": "exact" if ok else "VIOLATION: x | y", "check_ok": ok, "ok": ok, "shuffle": 2}
    return r | more


def test_report_tables_and_cells():
    runs = [
        fake_run(1, SLUICE, "tumbling", 100_000),
        fake_run(2, PEER, "tumbling", 50_000),
        fake_run(3, PEER, "tumbling", 40_000, ok=False),
    ]
    plan = {
        "workloads": {"tumbling": WORKLOADS["tumbling"]},
        "events": 1_000_000,
        "files": 80,
        "urls": 10_000,
        "disorder_ms": 2000,
        "checkpoint_interval": 1000,
        "max_foreign_cores": 0.3,
        "expected_rows": {"tumbling": 4321},
        "shuffle_text": "2",
    }
    facts = {"commit": "c", "cores": 2, "cpu": "x", "ram": "1 GiB", "python": "3", "java": "j", "pyspark": "4"}
    text = report(facts | {"load": "0"}, "python bench/windowed_bench.py", runs, plan, ["a note"])
    lines = text.splitlines()
    assert lines[6] == "**OUTPUT CHECK FAILED** (see the notes)." and lines[7] == ""
    assert "| tumbling 10 s | Sluice | 1/1/1 | 100,000 (1 run, no interval) | 2.00 |" in text
    assert "| tumbling 10 s | peer | 1/1/2 | 50,000 (1 run, no interval) |  |" in text
    assert "| 3 | measured | tumbling 10 s | peer | local[2], shuffle 2 | 25.00 | 40,000 |" in text
    assert "| **NO**: VIOLATION: x \\| y |" in text  # a | in a cell is escaped
    assert "Expected windows: tumbling 10 s 4,321 (url, window) rows." in text
    assert text.endswith("- a note\n\n")
    widths = {line.count(" | ") for line in lines if line.startswith("| ") and "OUTPUT" not in line}
    assert len(widths) == 2  # the two tables, each of one width
