"""bench/recovery_suite.py (with its parts recovery_scenarios, recovery_watch, recovery_report) and
bench/spark_standalone.py: the pure parts (no Spark, no cluster)."""

from __future__ import annotations

import os
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
sys.path.insert(0, BENCH)

import recovery_report as rr
import recovery_scenarios as sc
import recovery_suite as rs
import recovery_watch as rw
import spark_standalone as ss
from output_check import OutputCheck, Violation
from procstat import Usage


def V(name: str, seen: float, mtime: float, **maxima: int) -> rw.Version:
    return rw.Version(name, seen, mtime, {f"/page/{k}": v for k, v in maxima.items()})


# -- reading committed files ---------------------------------------------------------------------------
def test_file_maxima_takes_each_keys_highest_count_and_skips_other_lines():
    text = "/a,3\n/b,1\n/a,5\nnot a line\n/c,x\n\n/b,2\n"
    assert rw.file_maxima(text) == {"/a": 5, "/b": 2}


def test_file_maxima_keeps_a_key_with_commas():
    assert rw.file_maxima("/p?x=1,y=2,7\n") == {"/p?x=1,y=2": 7}


def test_committed_names():
    assert rw.sluice_committed("part-000000000003-00001-abc.csv")
    assert not rw.sluice_committed(".part-000000000003-00001-abc.csv.pending")
    assert not rw.sluice_committed("_checkpoint")
    assert rw.peer_committed("batch-000004.csv")
    assert not rw.peer_committed(".batch-000004.csv.tmp")


def test_output_watch_sees_new_names_and_rewritten_files(tmp_path):
    w = rw.OutputWatch(str(tmp_path), rw.peer_committed)
    assert w.scan() == 0  # nothing yet
    (tmp_path / "batch-000000.csv").write_text("/a,1\n")
    (tmp_path / ".batch-000001.csv.tmp").write_text("/a,2\n")
    assert w.scan() == 1
    assert w.scan() == 1  # the same version is not read twice
    tmp = tmp_path / ".x"
    tmp.write_text("/a,1\n/b,4\n")
    os.replace(tmp, tmp_path / "batch-000000.csv")  # a replayed batch rewrites its file
    assert w.scan() == 2
    assert [v.maxima for v in w.versions] == [{"/a": 1}, {"/a": 1, "/b": 4}]
    w.stop()  # never started: no join, one last scan


def test_output_watch_of_a_missing_directory(tmp_path):
    assert rw.OutputWatch(str(tmp_path / "none"), rw.sluice_committed).scan() == 0


# -- the two latencies ---------------------------------------------------------------------------------
def test_recovery_times_first_output_is_any_version_seen_after_the_kill():
    versions = [V("p1", 1.0, 100.0, a=1), V("p2", 2.0, 101.0, a=2), V("p3", 12.5, 105.0, a=2)]
    t = rw.recovery_times(versions, 2, t_kill=10.0, t_kill_wall=108.0)
    assert t["first_output"] == pytest.approx(2.5)  # p3: a pending part committed on restore
    assert t["progressing"] is None  # written before the kill, and no count above a=2
    assert t["versions_before"] == 2 and t["versions_after"] == 1
    assert t["last_seen"] == 12.5


def test_recovery_times_progressing_needs_a_version_written_after_the_kill_with_a_higher_count():
    versions = [
        V("p1", 1.0, 100.0, a=5, b=1),
        V("p2", 11.0, 99.0, a=9),  # committed after the kill, but written before it
        V("p3", 12.0, 111.0, a=5),  # written after the kill, a replay: no count above the pre-kill maximum
        V("p4", 13.0, 112.0, b=2),  # written after the kill, b above 1: progressing
        V("p5", 14.0, 113.0, a=10),
    ]
    t = rw.recovery_times(versions, 1, t_kill=10.0, t_kill_wall=110.0)
    assert t["first_output"] == pytest.approx(1.0)
    assert t["progressing"] == pytest.approx(3.0)
    assert t["progressing_file"] == "p4"


def test_recovery_times_a_new_key_counts_as_progress():
    versions = [V("p1", 1.0, 100.0, a=5), V("p2", 11.0, 111.0, z=1)]
    t = rw.recovery_times(versions, 1, t_kill=10.0, t_kill_wall=110.0)
    assert t["progressing"] == pytest.approx(1.0)


def test_recovery_times_without_output_after_the_kill():
    t = rw.recovery_times([V("p1", 1.0, 100.0, a=5)], 1, t_kill=10.0, t_kill_wall=110.0)
    assert t["first_output"] is None and t["progressing"] is None and t["last_seen"] == 1.0
    assert rw.recovery_times([], 0, 1.0, 1.0)["last_seen"] is None


def test_kill_figures_time_the_kill_and_the_total_from_the_launch():
    watch = rw.OutputWatch("/nonexistent", rw.sluice_committed)
    watch.versions += [V("p1", 3.0, 100.0, a=1), V("p2", 7.5, 111.0, a=2)]
    kill = rw.Kill(versions_before=1, t=5.0, wall=110.0)
    f = kill.figures(watch, t_launch=1.0)
    assert f["kill_at"] == pytest.approx(4.0) and f["total"] == pytest.approx(6.5)
    assert f["first_output"] == pytest.approx(2.5) and f["progressing"] == pytest.approx(2.5)
    assert rw.Kill(0, 5.0, 110.0).figures(rw.OutputWatch("/nonexistent", rw.sluice_committed), 1.0)["total"] is None


# -- the order of runs ---------------------------------------------------------------------------------
def test_schedule_alternates_systems_and_reverses_every_other_round():
    # the order the suite made before it used bench/run_matrix.py, written out
    assert sc.schedule(2, "a") == [sc.SPARE, sc.EXECUTOR, sc.NOSPARE, sc.NOSPARE, sc.EXECUTOR, sc.SPARE]
    assert sc.schedule(3, "a") == [
        "sluice-spare", "peer-executor", "sluice-nospare",
        "sluice-nospare", "peer-executor", "sluice-spare",
        "sluice-spare", "peer-executor", "sluice-nospare",
    ]  # fmt: skip
    assert sc.schedule(3, "b") == [sc.APP, sc.DRIVER, sc.DRIVER, sc.APP, sc.APP, sc.DRIVER]
    order = sc.schedule(4, "b")
    assert all(order[i] != order[i + 1] for i in range(0, len(order), 2))  # each round holds both systems
    assert order.count(sc.APP) == order.count(sc.DRIVER) == 4


def test_plan_is_phase_a_then_the_stop_step_then_phase_b():
    assert sc.plan("ab", 2) == [
        "sluice-spare", "peer-executor", "sluice-nospare", "sluice-nospare", "peer-executor", "sluice-spare",
        "stop-a", "sluice-app", "peer-driver", "peer-driver", "sluice-app",
    ]  # fmt: skip
    assert sc.plan("a", 1) == ["sluice-spare", "peer-executor", "sluice-nospare"]
    assert sc.plan("b", 1) == ["stop-a", "sluice-app", "peer-driver"]
    assert sc.plan("", 3) == []


# -- figures and the report ----------------------------------------------------------------------------
def usage(foreign: float, wall: float = 10.0, cpu: float = 5.0) -> Usage:
    return Usage(wall, {"sluice": cpu, "spark": cpu}, {"sluice": {}, "spark": {}}, foreign * wall, 0.0)


def run(kind: str, first: float, prog: float | None, total: float, ok: bool = True, foreign: float = 0.0) -> dict:
    check = OutputCheck() if ok else OutputCheck(violation=Violation("duplicate line", "f", 1, "/a", "twice"))
    return {
        "kind": kind,
        "kill_at": 5.0,
        "first_output": first,
        "progressing": prog,
        "total": total,
        "restarts": 1,
        "check": check,
        "usage": usage(foreign),
    }


def test_summarize_leaves_out_failed_checks_errors_and_runs_under_load():
    runs = [
        run(sc.APP, 8.0, 9.0, 30.0),
        run(sc.APP, 10.0, 11.0, 32.0),
        run(sc.APP, 99.0, 99.0, 99.0, ok=False),  # output check failed
        run(sc.APP, 50.0, 50.0, 50.0, foreign=1.0),  # other processes used a core: excluded
        {"kind": sc.APP, "error": "RunError: boom"},
        run(sc.DRIVER, 1.0, 2.0, 3.0),
    ]
    s = rr.summarize(sc.APP, runs, limit=0.3)
    assert (s.runs, s.failed, s.excluded) == (5, 2, 1)
    assert s.first_output.n == 2 and s.first_output.median == pytest.approx(9.0)
    assert s.progressing.median == pytest.approx(10.0)
    low, high = s.first_output.low, s.first_output.high
    assert low is not None and high is not None and low <= 9.0 <= high
    off = rr.summarize(sc.APP, runs, limit=None)  # the load rule off: the loaded run counts
    assert off.excluded == 0 and off.first_output.n == 3


def test_report_has_a_summary_row_per_scenario_run_and_every_runs_row():
    class Args:
        events, files, max_files_per_trigger, kill_after = 500_000, 100, 4, 1.5

    facts = {"commit": "abc1234", "date": "today", "cores": 2, "load": "1 1 1"}
    runs = [
        run(sc.SPARE, 1.2, 2.5, 20.0),
        run(sc.EXECUTOR, 0.8, 1.9, 25.0),
        {"kind": sc.NOSPARE, "error": "RunError: no committed output"},
        {**run(sc.APP, 30.0, 31.0, 60.0, ok=False), "restart_s": 25.0, "ready": 26.0, "restored": 4},
        {**run(sc.DRIVER, 9.0, 10.0, 40.0), "ready": 7.5},
    ]
    text = rr.report(Args, facts, "python bench/recovery_suite.py --quick", runs, ["a note"], limit=0.3)
    assert text.startswith("## ") and "recovery: paired scenarios" in text.splitlines()[0]
    assert "at commit abc1234" in text
    assert "**OUTPUT CHECK FAILED** in 1 runs" in text
    for kind in (sc.SPARE, sc.EXECUTOR, sc.NOSPARE, sc.APP, sc.DRIVER):
        assert f") {kind} |" in text  # summary row
        assert f"| {kind} |" in text  # run row
    assert "1.20 (1 run, no interval)" in text
    assert "| 0 / 1 |" in text  # the failed scenario counts no run
    assert "**FAILED**" in text and "cluster ready: 26.0 s" in text and "query started: 7.5 s" in text
    assert "- a note" in text


def test_report_with_the_load_rule_off():
    class Args:
        events, files, max_files_per_trigger, kill_after = 1, 1, 1, 1.0

    text = rr.report(Args, {"commit": "x"}, "cmd", [run(sc.DRIVER, 1.0, 2.0, 3.0)], [], limit=None)
    assert "Load rule: off." in text and "counted" in text


def test_parse_args_quick_and_full_sizes():
    q = rs.parse_args(["--quick"])
    assert (q.runs, q.events, q.files, q.kill_after) == (1, 300_000, 60, 1.5)
    f = rs.parse_args(["--runs", "2"])
    assert (f.runs, f.events) == (2, rs.FULL["events"])


# -- spark_standalone ------------------------------------------------------------------------------------
def test_parse_executor_command_line():
    cmd = [
        "/usr/bin/java",
        "-cp",
        "x",
        "org.apache.spark.executor.CoarseGrainedExecutorBackend",
        "--driver-url",
        "spark://CoarseGrainedScheduler@127.0.0.1:40000",
        "--executor-id",
        "1",
        "--hostname",
        "127.0.0.1",
        "--cores",
        "2",
        "--app-id",
        "app-20261123171000-0000",
    ]
    assert ss.parse_executor(cmd) == ("1", "app-20261123171000-0000")
    assert ss.parse_executor(["java", "org.apache.spark.deploy.worker.Worker"]) is None


def test_free_port_and_spark_home():
    port = ss.free_port()
    assert 0 < port < 65536
    assert os.path.exists(os.path.join(ss.spark_home(), "bin", "spark-class"))


def test_stop_before_start_is_harmless(tmp_path):
    spark = ss.SparkStandalone(str(tmp_path), log=lambda _m: None)
    t0 = time.monotonic()
    spark.stop()
    assert spark.pids() == [] and spark.executors() == [] and time.monotonic() - t0 < 5
