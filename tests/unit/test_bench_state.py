"""bench/state_bench.py's pure parts (bench/state_bench_checks.py, _jobs.py, _runs.py, _report.py): the
expected dedup answer (vectorized against the plain loop of tests/integration/test_user_state.py), the
output checks of both jobs and systems, the CSV and count file readers, the instrumented job's text,
the peer's state figures and the report. Small hand-checked cases; no Spark, no cluster."""

from __future__ import annotations

import collections
import json
import os
import random
import sys

import pandas as pd
import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from generate_clicks import expected_joins
from generate_clicks import generate as generate_clicks
from generate_page_views import generate
from paired_runs import PEER, SLUICE, read_rows
from state_bench_checks import (
    DEDUP_COLUMNS,
    JOIN_COLUMNS,
    Check,
    check_dedup_exact,
    check_dedup_peer,
    check_join,
    expected_firsts,
    expected_firsts_plain,
)
from state_bench_jobs import JOBS, count_lines, read_jsonl
from state_bench_report import report
from state_bench_runs import counted_job_text, peer_state, read_call_counts, rss_parts


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=DEDUP_COLUMNS)


def as_set(f: pd.DataFrame) -> set:
    return {(int(u), int(t), str(x)) for u, t, x in f[DEDUP_COLUMNS].itertuples(index=False)}


# -- the expected dedup answer ------------------------------------------------------------------------
def test_expected_firsts_by_hand():
    events = [
        (1, 100, "/a"),
        (1, 150, "/b"),  # within 100 of 100: dropped
        (1, 200, "/c"),  # exactly ttl after the last kept one: kept
        (1, 299, "/d"),
        (1, 300, "/f"),  # tie at 300: the smaller url first
        (1, 300, "/e"),
        (2, 120, "/x"),
        (2, 50, "/y"),  # out of order: user 2's first in time
    ]
    want = {(1, 100, "/a"), (1, 200, "/c"), (1, 300, "/e"), (2, 50, "/y")}  # (2, 120) is within 100 of 50
    assert expected_firsts_plain(events, 100) == want
    assert as_set(expected_firsts(frame(events), 100)) == want


@pytest.mark.parametrize("seed", range(6))
def test_expected_firsts_vectorized_equals_the_plain_loop(seed):
    rnd = random.Random(seed)
    users = rnd.randint(1, 40)
    events = [
        (rnd.randrange(users), 1_700_000_000_000 + rnd.randrange(5_000), f"/page/{rnd.randrange(6)}")
        for _ in range(rnd.randint(1, 3_000))
    ]
    events += events[: rnd.randint(0, 20)]  # exact duplicates too
    ttl = rnd.choice([1, 7, 250, 1_000, 10_000])
    got = expected_firsts(frame(events), ttl)
    assert as_set(got) == expected_firsts_plain(events, ttl)
    assert len(got) == len(as_set(got))  # each kept event once
    assert list(got.columns) == DEDUP_COLUMNS


def test_expected_firsts_of_generated_files_equals_the_integration_tests_computation(tmp_path):
    d = str(tmp_path / "in")
    generate(d, events=5_000, files=3, urls=50, seed=8, disorder_ms=1_000, users=40)
    f = read_jsonl(d, DEDUP_COLUMNS)
    assert len(f) == 5_000 and list(f.columns) == DEDUP_COLUMNS
    # tests/integration/test_user_state.py's expected_firsts reads the files with json, line by line
    plain = []
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name)) as fh:
            plain += [(e["user"], e["ts"], e["url"]) for e in map(json.loads, fh)]
    assert as_set(expected_firsts(f, 300)) == expected_firsts_plain(plain, 300)


def test_expected_firsts_edges():
    assert len(expected_firsts(frame([]), 10)) == 0
    assert as_set(expected_firsts(frame([(5, 1, "/a")]), 10)) == {(5, 1, "/a")}
    with pytest.raises(ValueError):
        expected_firsts(frame([(5, 1, "/a")]), 0)


# -- Sluice's dedup: exact ---------------------------------------------------------------------------
EXPECTED = frame([(1, 100, "/a"), (1, 200, "/c"), (2, 50, "/y")])


def strings(rows) -> pd.DataFrame:
    return pd.DataFrame([[str(x) for x in r] for r in rows], columns=DEDUP_COLUMNS)


def test_dedup_exact_passes_in_any_order():
    c = check_dedup_exact(strings([(2, 50, "/y"), (1, 200, "/c"), (1, 100, "/a")]), EXPECTED)
    assert c.ok, c.describe()
    assert c.describe() == "exact: all 3 expected events once (2 users)"


@pytest.mark.parametrize(
    ("rows", "what"),
    [
        ([(1, 100, "/a"), (1, 200, "/c")], "1 expected events missing"),
        ([(1, 100, "/a"), (1, 200, "/c"), (2, 50, "/y"), (2, 120, "/x")], "1 events kept that should not be"),
        ([(1, 100, "/a"), (1, 200, "/c"), (2, 50, "/y"), (1, 100, "/a")], "1 lines committed twice"),
        ([(1, 100, "/a"), (1, 200, "/c"), (2, 50, "/y"), ("x", 5, "/z")], "1 malformed lines"),
        ([], "3 expected events missing"),
    ],
)
def test_dedup_exact_names_each_violation(rows, what):
    c = check_dedup_exact(strings(rows), EXPECTED)
    assert not c.ok
    assert what in c.describe() and c.describe().startswith("VIOLATION")


# -- the peer's dedup: its own guarantee --------------------------------------------------------------
INPUT = frame([(1, 100, "/a"), (1, 150, "/b"), (1, 200, "/c"), (1, 260, "/d"), (2, 50, "/y"), (2, 120, "/x")])


def test_dedup_peer_accepts_first_arrivals_that_are_not_the_earliest():
    # one row per user (one batch), not the earliest in time: Spark keeps the first arrival
    c = check_dedup_peer(strings([(1, 150, "/b"), (2, 120, "/x")]), INPUT, 100)
    assert c.ok, c.describe()
    assert "2 rows" in c.describe() and "all 2 users" in c.describe()
    c = check_dedup_peer(strings([(1, 100, "/a"), (1, 200, "/c"), (2, 50, "/y")]), INPUT, 100)
    assert c.ok, c.describe()  # exactly the delay apart: allowed


@pytest.mark.parametrize(
    ("rows", "what"),
    [
        ([(1, 100, "/a"), (1, 150, "/b"), (2, 50, "/y")], "1 pairs of a user's rows less than 100 ms apart"),
        ([(1, 100, "/a")], "1 input users never emitted"),
        ([(1, 100, "/a"), (2, 51, "/y")], "1 rows that are no input event"),
        ([(1, 100, "/a"), (2, 50, "/y"), (2, 50, "/y")], "1 lines committed twice"),
    ],
)
def test_dedup_peer_names_each_violation(rows, what):
    c = check_dedup_peer(strings(rows), INPUT, 100)
    assert not c.ok and what in c.describe(), c.describe()


# -- the join: exact for both ---------------------------------------------------------------------------
JOIN_EXPECTED = collections.Counter({(1, 100, 150): 1, (1, 100, 700): 1, (3, 300, 300): 2})
ADS = {1: "ad-1", 2: "ad-2", 3: "ad-3"}


def join_rows(rows) -> pd.DataFrame:
    return pd.DataFrame([[str(x) for x in r] for r in rows], columns=JOIN_COLUMNS)


GOOD_JOIN = [(1, "ad-1", 100, 700), (3, "ad-3", 300, 300), (1, "ad-1", 100, 150), (3, "ad-3", 300, 300)]


def test_join_exact_counts_legitimate_repeats():
    c = check_join(join_rows(GOOD_JOIN), JOIN_EXPECTED, ADS)
    assert c.ok, c.describe()
    assert c.describe() == "exact: all 4 expected pairs, each as often as expected, ads right"


@pytest.mark.parametrize(
    ("rows", "what"),
    [
        (GOOD_JOIN[:3], "1 expected pairs missing"),
        ([*GOOD_JOIN, (1, "ad-1", 100, 150)], "1 lines not expected"),
        ([*GOOD_JOIN, (2, "ad-2", 5, 6)], "1 lines not expected"),
        ([(1, "ad-2", 100, 700), *GOOD_JOIN[1:]], "1 rows with another impression's ad"),
        ([*GOOD_JOIN, (1, "ad-1", "x", 5)], "1 malformed lines"),
    ],
)
def test_join_names_each_violation(rows, what):
    c = check_join(join_rows(rows), JOIN_EXPECTED, ADS)
    assert not c.ok and what in c.describe(), c.describe()


def test_join_check_against_the_generators_answer(tmp_path):
    d = str(tmp_path / "clicks")
    generate_clicks(d, impressions=3_000, files=3, click_rate=0.5, max_delay_ms=60_000, disorder_ms=200)
    want = expected_joins(d, 0, 30_000)
    imps = read_jsonl(os.path.join(d, "impressions"), ["imp_id", "ad"])
    ads = dict(zip(imps["imp_id"].tolist(), imps["ad"].tolist(), strict=True))
    rows = [(i, ads[i], t, r) for (i, t, r), n in want.items() for _ in range(n)]
    random.Random(1).shuffle(rows)
    assert check_join(join_rows(rows), want, ads).ok
    assert not check_join(join_rows(rows[1:]), want, ads).ok
    assert count_lines(os.path.join(d, "impressions")) == 3_000


# -- readers --------------------------------------------------------------------------------------------
def test_read_rows_concatenates_headerless_files(tmp_path):
    a, b, e = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "e.csv"
    a.write_text("1,100,/a\n2,50,/y\n")
    b.write_text("3,7,/z")  # no final newline
    e.write_text("")
    got, per = read_rows([str(a), str(b), str(e)], DEDUP_COLUMNS)
    assert got.values.tolist() == [["1", "100", "/a"], ["2", "50", "/y"], ["3", "7", "/z"]]
    assert per == {str(a): 2, str(b): 1, str(e): 0}
    empty, per = read_rows([str(e)], JOIN_COLUMNS)
    assert list(empty.columns) == JOIN_COLUMNS and len(empty) == 0


def test_read_rows_leaves_a_short_line_to_the_check(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("1,100,/a\n2,50\n")
    got, _ = read_rows([str(p)], DEDUP_COLUMNS)
    c = check_dedup_exact(got, frame([(1, 100, "/a")]))
    assert "1 malformed lines" in c.describe()


def test_call_counts_sum_over_instances(tmp_path):
    for name, body in (
        ("calls-10-1.json", {"process": 5, "on_timer": 7}),
        ("calls-11-2.json", {"process": 1, "on_timer": 2}),
        ("calls-11-2.json.tmp", {"process": 100, "on_timer": 100}),  # a write cut short: not counted
    ):
        (tmp_path / name).write_text(json.dumps(body))
    assert read_call_counts(str(tmp_path)) == {"process": 6, "on_timer": 9, "instances": 2}
    assert read_call_counts(str(tmp_path / "none")) == {"process": 0, "on_timer": 0, "instances": 0}


def test_counted_job_is_python_and_subclasses_the_example(tmp_path):
    text = counted_job_text(str(tmp_path))
    compile(text, "dedup_counted.py", "exec")
    assert "dedup.FirstWithinTtl = Counted" in text and repr(str(tmp_path)) in text


def test_rss_parts_by_role():
    peaks = {"taskmanager 10": 300, "spark-jvm 11": 1000, "jobmanager 5": 200, "zookeeper 4": 90}
    assert rss_parts(peaks, SLUICE) == {"py": 300, "jvm": 1000, "total": 1300}
    assert rss_parts({"python3 20": 150, "spark-jvm 21": 900}, PEER) == {"py": 150, "jvm": 900, "total": 1050}
    # a JVM's child between fork and exec looks like a second JVM of the same size: counted once
    caught = {"python3 20": 150, "spark-jvm 21": 900, "spark-jvm 30": 890, "3 small processes, largest": 9}
    assert rss_parts(caught, PEER) == {"py": 150, "jvm": 900, "total": 1050}


def test_peer_state_figures():
    progress = [
        {"state": [{"memoryUsedBytes": 100, "numRowsTotal": 5, "numRowsDroppedByWatermark": 0}]},
        {"state": [{"memoryUsedBytes": 300, "numRowsTotal": 9, "numRowsDroppedByWatermark": 1}] * 2},
        {"state": [{"memoryUsedBytes": 50, "numRowsTotal": 2, "numRowsDroppedByWatermark": 0}]},
    ]
    assert peer_state(progress) == {"state_peak": 600, "state_rows_end": 2, "late_dropped": 2}
    assert peer_state([]) == {"state_peak": None, "state_rows_end": None, "late_dropped": 0}


def test_check_without_rows_is_not_ok():
    assert not Check().ok
    assert Check(rows=1).ok
    assert Check(rows=1, error="x").describe() == "VIOLATION: x"


# -- the report -------------------------------------------------------------------------------------------
def fake_run(n, system, job, rate, phase="measured", ok=True):
    return {
        "n": n,
        "phase": phase,
        "system": system,
        "job": job,
        "window": 1_000_000 / rate,
        "rate": rate,
        "startup": 1.0,
        "cpu_per_m": 3.0 if system == SLUICE else 1.0,
        "state_peak": 2_000_000,
        "state_disk": 1_000_000 if system == PEER else None,
        "rss_py": 200 * 2**20,
        "rss_jvm": 900 * 2**20,
        "output_rows": 10,
        "late_dropped": 0,
        "foreign_cores": 0.01,
        "excluded": False,
        "check": "exact: fine" if ok else "VIOLATION: 1 expected pairs missing",
        "check_ok": ok,
        "ok": ok,
        "shuffle": 2 if system == PEER else None,
    }


def test_report_has_the_figures_and_ratios():
    runs = [
        fake_run(1, SLUICE, "dedup", 100_000),
        fake_run(2, PEER, "dedup", 400_000),
        fake_run(3, SLUICE, "dedup", 110_000),
        fake_run(4, PEER, "dedup", 420_000),
        fake_run(5, SLUICE, "join", 300_000),
        fake_run(6, PEER, "join", 200_000, ok=False),
    ]
    plan = {
        "jobs": JOBS,
        "systems": [SLUICE, PEER],
        "users": 50_000,
        "ttl_ms": 60_000,
        "upper_ms": 600_000,
        "disorder_ms": 2000,
        "checkpoint_interval": 1000,
        "max_foreign_cores": 0.3,
        "shuffle_text": "2",
        "dedup_events": 1_000_000,
        "dedup_files": 80,
        "expected_dedup": 600_000,
        "impressions": 750_000,
        "clicks": 260_000,
        "join_files": 60,
        "expected_join": 120_000,
        "calls": {"run": 5, "process": 500, "on_timer": 700, "instances": 2, "events": 1000, "per_event": 1.2},
    }
    facts = {"commit": "abc", "cores": 2, "cpu": "x", "ram": "1 GiB", "python": "3", "java": "j", "pyspark": "4"}
    facts["load"] = "0.1"
    text = report(facts, "python bench/state_bench.py", runs, plan, ["a note"])
    assert "Keyed state" in text and "**OUTPUT CHECK FAILED**" in text
    assert "| dedup | Sluice | 2/2/2 | 105,000 [100,000–110,000] | 0.26 |" in text
    assert "**1.200 per event**" in text
    assert "- a note" in text
