"""bench/reconfigure_bench.py and its modules: the run order, the workload's reader and feed, a run's
figures from what a round recorded, and the report (no cluster, no Spark)."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import reconfigure_analysis as ra
import reconfigure_bench as rb
import reconfigure_report as rr
import reconfigure_workload as rw
from bench_common import log_epoch

PURE = ("reconfigure_report", "reconfigure_analysis", "reconfigure_workload", "external_spark_report")


# -- the run order -------------------------------------------------------------------------------
def test_run_order_is_the_warm_ups_then_pairs_alternating_who_goes_first():
    assert rb.run_order(3, 2) == [
        ("warm-up", "a"),
        ("warm-up", "a"),
        ("measured", "a"),
        ("measured", "b"),
        ("measured", "b"),
        ("measured", "a"),
        ("measured", "a"),
        ("measured", "b"),
    ]
    assert rb.run_order(1, 0) == [("measured", "a"), ("measured", "b")]


def test_parse_args_sizes():
    q = rb.parse_args(["--quick"])
    assert (q.rounds, q.warmup, q.events, q.files) == (1, 0, 50_000, 10)
    f = rb.parse_args([])
    assert (f.rounds, f.warmup, f.events, f.files) == (10, 1, 200_000, 40)
    with pytest.raises(SystemExit):
        rb.parse_args(["--rounds", "0"])


def test_the_pure_modules_import_no_grpc_nor_pyspark():
    code = (
        f"import sys; sys.path.insert(0, {BENCH!r}); import {', '.join(PURE)}; "
        "print(sorted(m for m in ('grpc', 'pyspark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# -- the workload ----------------------------------------------------------------------------------
def test_output_reader_keeps_each_urls_largest_count_and_lines_twice(tmp_path):
    (tmp_path / "part-000001-a.csv").write_text("/a,1\n/b,2\n\n/p?x=1,y,3\n")
    (tmp_path / ".part-000002-b.csv.pending").write_text("/a,9\n")
    reader = rw.OutputReader(str(tmp_path))
    reader.poll()
    (tmp_path / "part-000002-b.csv").write_text("/a,2\n/b,2\nbad,x\n")
    reader.poll()
    reader.poll()  # a part is read once
    assert reader.final == {"/a": 2, "/b": 2, "/p?x=1,y": 3}
    assert reader.twice == [("/b", 2)] and reader.lines == 5 and len(reader.malformed) == 1
    assert reader.read == {"part-000001-a.csv", "part-000002-b.csv"}
    expected = collections.Counter({"/a": 3, "/b": 1, "/p?x=1,y": 3})
    assert not reader.covers(expected) and reader.short(expected) == ["/a"] and reader.over(expected) == ["/b"]


def test_data_and_the_feed_keep_the_counts_of_everything_fed(tmp_path):
    data = rw.Data(str(tmp_path / "data"), events=200, files=2, feed_files=3, feed_events=20, urls=30)
    assert sum(data.initial.values()) == 200 and len(data.feed) == 3
    inp = tmp_path / "in"
    data.copy_initial(str(inp))
    feeder = rw.Feeder(data, str(inp), str(tmp_path / "stage"), every=0.1)
    for _ in range(4):
        feeder.feed_one()
    assert sorted(n for n in os.listdir(inp) if n.startswith("feed-")) == [f"feed-{i:05d}.jsonl" for i in range(4)]
    assert feeder.fed == 4 and sum(feeder.snapshot().values()) == 200 + 4 * 20
    assert (
        feeder.snapshot()
        == data.initial + data.feed_counts[0] + data.feed_counts[1] + data.feed_counts[2] + data.feed_counts[0]
    )
    assert os.listdir(tmp_path / "stage") == []


# -- a run's figures -------------------------------------------------------------------------------
BASE = datetime(2026, 3, 1, 10, 0, 0)


def at(t: float) -> str:
    """The log time of monotonic time `t` (with the offset OFF)."""
    return (BASE + timedelta(milliseconds=round(t * 1000))).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


OFF = BASE.timestamp()


def jm(t: float, text: str) -> str:
    return f"{at(t)} INFO  jobmanager jobmanager.dispatcher [grpc] {text}"


def change(t: float, job: str, task: str, subtask: int, state: str) -> str:
    return jm(t, f"[job {job}] task {job}/1/{task}/{subtask} -> {state}")


def samples(job: str, times: list[float], start: int = 0) -> list[ra.Sample]:
    """Status samples of `job` whose three source subtasks grow by 10 records each time."""
    out: list[ra.Sample] = []
    for i, t in enumerate(times):
        tasks = [(rw.SOURCE_CHAIN, s, "RUNNING", "tm-0", start + 10 * (i + 1)) for s in range(3)]
        out.append((t, job, "RUNNING", [*tasks, ("counts", 0, "RUNNING", "tm-1", 5)]))
    return out


def batches(job: str, times: list[float]) -> list[tuple[str, str, str]]:
    return [(at(t), job, rw.SOURCE_TASK) for t in times]


def test_max_gap_and_log_epoch():
    assert ra.max_gap([5.0, 1.0, 2.0, 4.5, 9.0], 0.0, 6.0) == pytest.approx(2.5)
    assert ra.max_gap([1.0, 9.0], 0.0, 6.0) is None
    assert log_epoch(at(1.5)) == pytest.approx(OFF + 1.5)


def test_live_run_figures():
    r: dict[str, Any] = {"t_issue": 100.0, "t_first": 101.0, "t_running_seen": 100.9, "jobs": ["J1"]}
    r.update(barrier=5, rid="R1", request_t=100.2)
    rec = ra.Recorded(off=OFF)
    rec.jm_lines = [
        jm(90.0, "[job J1] storage operation failed: "),
        jm(97.0, "[job J1] storage operation failed: "),
        jm(100.3, "[job J1 attempt 1] triggering checkpoint 5"),
        change(100.5, "J1", "counts", 2, "FINISHED"),
        change(100.8, "J1", "counts", 1, "RUNNING"),
        change(100.7, "J9", "counts", 1, "RUNNING"),  # another job's
        jm(100.85, "[job J1 attempt 1] [reconfiguration R1] COMPLETED"),
        "a line of another process",
    ]
    rec.first_seen = {f"part-{i}": t for i, t in enumerate([96.5, 97.0, 98.0, 99.0, 101.0, 102.0])}
    src = [96.1 + 0.3 * i for i in range(14)] + [100.6 + 0.3 * i for i in range(12)]
    rec.batches = batches("J1", src) + batches("J9", [100.1]) + [(at(100.2), "J1", "counts")]
    rec.samples = samples("J1", [96.0 + 0.5 * i for i in range(16)])
    ra.analyse(r, "b", rec)
    assert r["storage_warnings"] == 1 and r["source_changes"] == 0
    assert r["barrier_t"] == pytest.approx(100.3) and r["retired_t"] == pytest.approx(100.5)
    assert r["running_t"] == pytest.approx(100.8) and r["completed_t"] == pytest.approx(100.85)
    assert (r["total_s"], r["running_s"], r["server_s"]) == pytest.approx((1.0, 0.8, 0.8))
    assert (r["out_stall_s"], r["out_base_s"], r["out_extra_s"]) == pytest.approx((2.0, 1.0, 1.0))
    assert (r["src_gap_s"], r["src_base_s"]) == pytest.approx((0.6, 0.3))
    assert (r["src_status_gap_s"], r["src_status_base_s"]) == pytest.approx((0.5, 0.5))
    assert r["sources_kept"] is True
    assert list(r["phases"]) == list(rr.PHASES["b"])
    assert list(r["phases"].values()) == pytest.approx([0.2, 0.1, 0.2, 0.3, 0.2])


def test_stop_and_restore_run_figures():
    r: dict[str, Any] = {"t_issue": 100.0, "t_first": 103.5, "t_running_seen": 103.2, "jobs": ["J1", "J2"]}
    r.update(request_t=100.3, savepoint_done_t=101.0, old_ended_t=101.5, submitted_t=102.0)
    rec = ra.Recorded(off=OFF)
    rec.jm_lines = [
        change(101.4, "J1", rw.SOURCE_TASK, 0, "FINISHED"),
        change(102.5, "J2", rw.SOURCE_TASK, 0, "RUNNING"),
        change(103.0, "J2", "counts", 1, "RUNNING"),
    ]
    rec.first_seen = {"part-1": 99.0, "part-2": 103.5}
    rec.samples = samples("J1", [99.0, 99.5, 100.0, 100.5]) + samples("J2", [103.0, 103.3], start=100)
    ra.analyse(r, "a", rec)
    assert r["running_t"] == pytest.approx(103.0) and r["total_s"] == pytest.approx(3.5)
    assert r["source_changes"] == 2 and r["sources_kept"] is False
    assert r["src_gap_s"] is None and r["src_status_gap_s"] == pytest.approx(2.5)  # J2's first sample counts
    assert list(r["phases"]) == list(rr.PHASES["a"])
    assert list(r["phases"].values()) == pytest.approx([0.3, 0.7, 0.5, 0.5, 1.0, 0.5])


def test_a_run_that_never_saw_the_new_configuration_has_no_figures():
    r: dict[str, Any] = {"jobs": ["J1"]}
    ra.analyse(r, "b", ra.Recorded(off=OFF))
    assert r == {"jobs": ["J1"]}


# -- the report ------------------------------------------------------------------------------------
FACTS = dict.fromkeys(("commit", "cores", "cpu", "ram", "python", "java", "pyspark", "load"), "x")  # machine facts
PLAN = {
    "events": 50_000,
    "files": 10,
    "urls": 10_000,
    "feed_events": 250,
    "feed_every_ms": 100,
    "feed_rate": 2500.0,
    "max_foreign_cores": 0.3,
}


def run(n: int, method: str, total: float, phase: str = "measured", **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"n": n, "phase": phase, "method": method, "ok": True, "jobs": ["0123456789"]}
    r.update(total_s=total, server_s=total - 0.5, src_gap_s=0.2, src_base_s=0.2, catchup_s=10.0, sources_kept=True)
    r.update(phases={p: 0.1 for p in rr.PHASES[method]}, pause_ms=1234, savepoint_ms=2345, check="exact")
    r.update(load_start=1.0, load_end=1.5, foreign_cores=0.1, source_changes=0, fed_files=7)
    r.update(extra)
    return r


def table_widths(text: str) -> list[set[int]]:
    """The number of cells of each line, per table of `text`."""
    tables: list[set[int]] = []
    last = False
    for line in text.splitlines():
        row = line.startswith("| ")
        if row and not last:
            tables.append(set())
        if row:
            tables[-1].add(line.count(" | ") + 1)
        last = row
    return tables


def test_report_tables_and_goal():
    runs = [run(1, "a", 9.0, phase="warm-up"), run(2, "a", 10.0), run(3, "b", 1.0), run(4, "b", 0.5)]
    runs += [run(5, "a", 12.0, excluded=True), run(6, "b", 2.0, ok=False, check=None, error="BenchError: x")]
    text = rr.report(FACTS, "cmd", runs, PLAN, ["a note"])
    assert table_widths(text) == [{len(rr.SUMMARY_HEADER)}, {len(rr.RUN_HEADER)}]
    assert "| (a) stop + restore | 1/2/2 | 10.00 (1 run, no interval) |" in text
    assert "| (b) live | 2/2/3 | 0.75 [" in text
    assert "(a)/(b) = 13.33 (medians; goal ≥ 10): met" in text
    assert "| 2,345 | 10.0 | 7 | exact | 0.10 | 1.00→1.50 |" in text
    assert "| FAILED: BenchError: x | 0.10 | 1.00→1.50 |" in text and "0.10 (excluded)" in text
    assert "1 measured run(s) left out" in text and text.endswith("- a note\n\n")
    off = rr.report(FACTS, "cmd", runs[:1], dict(PLAN, max_foreign_cores=0), [])
    assert "Load rule: off (every run counted)." in off and "(a)/(b) = — (medians; goal ≥ 10): missed" in off


def test_run_notes():
    runs = [run(1, "a", 9.0, storage_warnings=2, feed_late_max=0.05, feed_skipped=3)]
    runs.append(run(2, "b", 1.0, ok=False, error="BenchError: y", storage_warnings=1))
    notes = rr.run_notes(runs)
    assert notes[0] == "failed runs: run 2 ((b) live): BenchError: y"
    assert "3 time(s) in the measured windows: (a) stop + restore 2, (b) live 1" in notes[1]
    assert notes[2] == "the feed landed each file at most 50 ms after its slot; 3 slots skipped"
    assert notes[3].startswith("catching up with the initial input and the feed took 10.0 (1 run, no interval) s")
