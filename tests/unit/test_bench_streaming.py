"""The pure parts of bench/structured_streaming_bench.py (its child's settings and go files, its runs'
order and statistics, its report) and of bench/spark_call_costs.py, bench/jvm_jit.py and
bench/spark_peer.py: run orders written out literally, report tables checked cell by cell. No Spark,
no child process."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)

import jvm_jit
import spark_call_costs
import spark_peer
import structured_streaming_child as child
import structured_streaming_runs as runs
from structured_streaming_report import recovery_median_row, recovery_row, report, throughput_median_row

FACTS = {"date": "Thu Jan  1 00:00:00 UTC 2026", "commit": "abc123", "cores": 2, "cpu": "cpu", "ram": "7.7 GiB",
         "python": "3.11", "java": "openjdk 17", "pyspark": "3.5", "os": "Linux", "load": "0.10 0.20 0.30"}  # fmt: skip


# -- run orders ----------------------------------------------------------------------------------
def test_spark_call_costs_rotates_the_plans_every_round_and_counts_all_but_round_0():
    order = [(c.round, c.system, c.phase) for c in spark_call_costs.plan_order(["a", "b", "c"], 2)]
    assert order == [
        (0, "a", "warm-up"), (0, "b", "warm-up"), (0, "c", "warm-up"),
        (1, "b", "measured"), (1, "c", "measured"), (1, "a", "measured"),
        (2, "c", "measured"), (2, "a", "measured"), (2, "b", "measured"),
    ]  # fmt: skip


def test_spark_call_costs_order_is_the_one_its_loop_made():
    names = ["p", "q", "r", "s"]
    for n_runs in (1, 3, 6):
        before = []  # the script's loop before bench/run_matrix.py
        for r in range(n_runs + 1):
            before += [(r, name) for name in names[r % len(names) :] + names[: r % len(names)]]
        assert [(c.round, c.system) for c in spark_call_costs.plan_order(names, n_runs)] == before


def test_spark_call_costs_times_the_counted_runs_of_each_plan(monkeypatch):
    calls: list[str] = []
    clock = iter(float(i) for i in range(100))
    monkeypatch.setattr(
        spark_call_costs, "time", SimpleNamespace(monotonic=lambda: next(clock), strftime=time.strftime)
    )
    named = {n: functools.partial(calls.append, n) for n in ("a", "b")}
    times = spark_call_costs.timed_rounds(named, 2)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert times == {"b": [1.0, 1.0], "a": [1.0, 1.0]}


def test_jvm_jit_runs_the_option_sets_forward_then_backward():
    sets = [("x", ""), ("y", "-Xy"), ("z", "-Xz")]
    order = [(c.round, c.item[0]) for c in jvm_jit.session_order(sets, 3)]
    assert order == [(1, "x"), (1, "y"), (1, "z"), (2, "z"), (2, "y"), (2, "x"), (3, "x"), (3, "y"), (3, "z")]
    before = []  # the script's loop before bench/run_matrix.py
    for r in range(4):
        before += [(r + 1, name) for name, _ in (sets if r % 2 == 0 else list(reversed(sets)))]
    assert [(c.round, c.item[0]) for c in jvm_jit.session_order(sets, 4)] == before


def test_throughput_queries_are_the_warm_ups_then_the_counted_runs(tmp_path):
    args = SimpleNamespace(warmups=2, runs=2, max_files_per_trigger=1, trigger_ms=None)
    queries = runs.throughput_queries(args, str(tmp_path), "/in")
    assert [label for label, _ in queries] == ["warm-up", "warm-up", "run 1", "run 2"]
    assert [os.path.basename(q["out"]) for _, q in queries] == ["out-warmup1", "out-warmup2", "out-run1", "out-run2"]
    assert queries[0][1] == runs.query_spec(
        "/in", str(tmp_path / "ckpt-warmup1"), str(tmp_path / "out-warmup1"), 1, None
    )
    one = runs.throughput_queries(SimpleNamespace(runs=1, max_files_per_trigger=0, trigger_ms=5), "/w", "/in")
    assert [label for label, _ in one] == ["warm-up", "run 1"]  # one warm-up unless told


class FakeChild:
    made: list[tuple[str, int]] = []

    def __init__(self, spec, work, name):
        FakeChild.made.append((name, len(spec["queries"])))

    def finish(self, timeout):
        pass

    def kill(self):
        pass


def test_throughput_runs_a_child_per_query_or_all_in_one(monkeypatch):
    def collect(args, child, qi, spec, label, with_session, expected, events):
        return {"label": label, "qi": qi, "with_session": with_session}, [f"{label} noted"]

    monkeypatch.setattr(runs, "Child", FakeChild)
    monkeypatch.setattr(runs, "collect_run", collect)
    args = SimpleNamespace(runs=2, max_files_per_trigger=1, trigger_ms=None, session="per-run")
    FakeChild.made = []
    results, notes = runs.throughput(args, "/w", "/in", {}, 10)
    assert FakeChild.made == [("throughput-0", 1), ("throughput-1", 1), ("throughput-2", 1)]
    assert [(r["label"], r["qi"], r["with_session"]) for r in results] == [
        ("warm-up", 0, True), ("run 1", 0, True), ("run 2", 0, True)
    ]  # fmt: skip
    assert notes == ["warm-up noted", "run 1 noted", "run 2 noted"]
    FakeChild.made = []
    results, _ = runs.throughput(SimpleNamespace(**{**vars(args), "session": "shared"}), "/w", "/in", {}, 10)
    assert FakeChild.made == [("throughput-shared", 3)]
    assert [(r["label"], r["qi"], r["with_session"]) for r in results] == [
        ("warm-up", 0, True), ("run 1", 1, False), ("run 2", 2, False)
    ]  # fmt: skip


# -- the child -----------------------------------------------------------------------------------
def test_the_child_process_is_started_through_the_bench_script():
    assert os.path.basename(child.BENCH_SCRIPT) == "structured_streaming_bench.py"


def test_child_settings_take_the_spec_partitions_and_conf():
    s = child.child_settings({"shuffle_partitions": 4, "conf": {"spark.ui.enabled": "true", "x": "1"}})
    assert s["spark.sql.shuffle.partitions"] == s["spark.default.parallelism"] == "4"
    assert s["spark.ui.enabled"] == "true" and s["x"] == "1"
    assert child.child_settings({})["spark.sql.shuffle.partitions"] == "2"


def test_a_go_file_updates_its_query(tmp_path):
    go = tmp_path / "go"
    go.write_text(json.dumps({"trigger_ms": 50}))
    assert child.await_go({"go_file": str(go), "input": "i"}) == {"go_file": str(go), "input": "i", "trigger_ms": 50}
    go.write_text("")
    assert child.await_go({"go_file": str(go)}) == {"go_file": str(go)}


def test_peer_go_queries_are_read_in_order_until_exit(tmp_path):
    for i, q in enumerate([{"q": 0}, {"q": 1}, {"exit": True}]):
        (tmp_path / f"go-{i:04d}.json").write_text(json.dumps(q))
    assert list(spark_peer.go_queries(str(tmp_path))) == [(0, {"q": 0}), (1, {"q": 1})]
    assert spark_peer.go_path("d", 12) == os.path.join("d", "go-0012.json")


def test_pure_modules_start_nothing_and_import_no_spark():
    code = (
        "import sys; import structured_streaming_report, structured_streaming_runs, structured_streaming_child; "
        "print(any(m.split('.')[0] in ('pyspark', 'py4j') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- statistics and input ------------------------------------------------------------------------
def test_batch_stats_counts_the_batches_with_input():
    progress = [
        {"numInputRows": 0, "durationMs": {"triggerExecution": 5}, "timestamp": "2026-01-01T00:00:00.000Z"},
        {"numInputRows": 10, "durationMs": {"triggerExecution": 120}, "timestamp": "2026-01-01T00:00:01.500Z"},
        {"numInputRows": 7, "durationMs": {}, "timestamp": "2026-01-01T00:00:02.000Z"},
    ]
    st = runs.batch_stats(progress)
    assert (st["rows"], st["batches"], st["latencies"]) == (17, 1, [120])
    assert st["detail"] == [(1767225601.5, 10, 120)]


def test_count_urls_skips_hidden_files(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"url": "/x"}\n{"url": "/y"}\n\n{"url": "/x"}\n')
    (tmp_path / "_SUCCESS").write_text('{"url": "/z"}\n')
    (tmp_path / ".hidden").write_text('{"url": "/z"}\n')
    assert runs.count_urls(str(tmp_path)) == {"/x": 2, "/y": 1}


# -- reports -------------------------------------------------------------------------------------
def tput_run(label, i, ok=True):
    return {"label": label, "process": 1.0 + i, "session": 3.0, "query_start": 0.25, "startup": 3.25 + i,
            "processing": 10.0 + i, "throughput": 100_000 / (10 + i), "total": 15.0, "batches": 8,
            "latencies": [100.0 + i, 200.0], "counts_ok": ok, "load_start": 1.0, "load_end": None}  # fmt: skip


def rec_run(n, ok=True):
    return {"run": n, "before_kill": 12.34, "commits_before": 3, "spawn": 0.5, "process": 1.0, "session": 3.0,
            "ready": 5.0, "first_output": None if n == 2 else 7.0 + n, "first_commit": 8.0, "first_commit_id": 4,
            "first_batch": 2.0, "rest": 30.06, "counts_ok": ok, "load_start": 1.0, "load_end": 2.0}  # fmt: skip


def test_the_recovery_rows_keep_their_formats():
    rows = [rec_run(1), rec_run(2, ok=False)]
    assert recovery_row(rows[1]) == [2, "12.3", 3, "1.50", "3.00", "5.00", "—", "8.00 (4)", "2.00", "30.1", "**NO**",
                                     "1.00→2.00"]  # fmt: skip
    assert recovery_median_row(rows) == ["**median**", "12.3", "", "1.50", "3.00", "5.00", "**8.00**", "**8.00**",
                                         "2.00", "30.1", "1/2", ""]  # fmt: skip


def test_the_throughput_median_row_takes_p50_and_p99_over_all_batches():
    row = throughput_median_row([tput_run("run 1", 1), tput_run("run 2", 3, ok=False)])
    assert row == ["**median**", "3.00", "3.00", "0.25", "**5.25**", "12.00", "**8,392**", "15.00", "8", "**152**",
                   "**200**", "1/2", ""]  # fmt: skip


def test_the_report_has_a_table_per_part_and_the_notes():
    args = SimpleNamespace(trigger_ms=None, input=None, files=8, session="per-run", max_files_per_trigger=1,
                           recovery_input=None, recovery_files=400, recovery_max_files_per_trigger=4)  # fmt: skip
    tput = [tput_run("warm-up", 0), tput_run("run 1", 1), tput_run("run 2", 2, ok=False)]
    text = report(args, FACTS, "cmd", tput, 1_000_000, [rec_run(1)], 2_000_000, ["a note"])
    lines = text.splitlines()
    assert "| date -u | Thu Jan  1 00:00:00 UTC 2026 |" in lines
    t = lines.index(next(line for line in lines if line.startswith("| run | process s")))
    assert lines[t + 2].startswith(
        "| run 1 | 2.00 | 3.00 | 0.25 | 4.25 | 11.00 | 9,091 | 15.00 | 8 | 150 | 199 | yes |"
    )
    assert "| **NO** |" in lines[t + 3] and lines[t + 4].startswith("| **median** |") and lines[t + 5] == ""
    assert "Warm-up (not counted): startup 3.25 s, processing 10.00 s." in text
    assert "| 1 | 12.3 | 3 | 1.50 | 3.00 | 5.00 | 8.00 | 8.00 (4) | 2.00 | 30.1 | yes | 1.00→2.00 |" in lines
    assert text.endswith("Notes:\n\n- a note\n\n")
    only_recovery = report(args, FACTS, "cmd", [], 0, [rec_run(1)], 10, [])
    assert "### Throughput" not in only_recovery and "### Recovery" in only_recovery
    assert only_recovery.endswith("|\n\n")


def test_spark_call_costs_splits_a_share_into_calls_and_reads_shares_in_threads_of_their_own():
    assert spark_call_costs.calls(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert spark_call_costs.calls(["a", "b", "c"], 0) == [["a", "b", "c"]]
    seen: list[tuple[str, list[str]]] = []
    spark_call_costs.in_subtasks(
        lambda paths: seen.append((threading.current_thread().name, paths)), [["a", "c", "e"], ["b"]], 2
    )
    assert sorted(p for _t, p in seen) == [["a", "c"], ["b"], ["e"]]
    assert len({t for t, _p in seen}) == 2 and threading.current_thread().name not in {t for t, _p in seen}

    def fails(paths):
        raise ValueError(paths[0])

    with pytest.raises(ValueError, match="b"):
        spark_call_costs.in_subtasks(fails, [["b"]], 0)


def test_spark_call_costs_report_says_how_the_shares_were_read():
    text = spark_call_costs.report(["a"], {"a": [1.0]}, 320, 4_000_000, 3, "cmd", FACTS, subtasks=2, per_call=40)
    assert "2 source subtasks' shares, read at once, of page views at parallelism 2: 320 files" in text
    assert "4,000,000 events, in calls of 40 files each" in text


def test_spark_call_costs_report():
    text = spark_call_costs.report(["a", "b"], {"a": [0.5, 0.5, 0.5]}, 4, 1_000, 3, "cmd", FACTS)
    assert text.splitlines()[-4:] == ["| plan | seconds | events/s |", "| --- | --- | --- |",
                                      "| a | 0.500 [0.500–0.500] | 2,000 |", "| b | — | — |"]  # fmt: skip


def test_jvm_jit_report_rows():
    def session(k):
        return [
            {"wall": 2.0 * k, "work": 1.0, "jit": 0.5, "gc": 0.5},
            {"wall": 1.0, "work": 2.0, "jit": 1.0, "gc": 1.0},
        ]

    results = {"default": [session(1), session(2)], "c1": [session(3)]}
    text = jvm_jit.report(results, [("default", ""), ("c1", "-Xc")], 100, 2, 2, 2, "cmd", FACTS)
    lines = text.splitlines()
    assert "| default: `(none)` | 3.00 | 1.00 | 2.00 | 1.00 | 1.00 | 25 % | 1.00 | 1.00 |" in lines
    assert "| c1: `-Xc` | 6.00 | 1.00 | 2.00 | 1.00 | 1.00 | 25 % | 1.00 | 1.00 |" in lines
    assert lines[-3:] == [
        "| --- | --- | --- |",
        "| 1 | 2.00 / 0.50 | 6.00 / 0.50 |",
        "| 2 | 1.00 / 1.00 | 1.00 / 1.00 |",
    ]
