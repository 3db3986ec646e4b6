"""bench/window.py: the measurement window (first read of an input file → commit of the output file
after which every key's final count is committed), from event lists, without inotify; and the
watcher itself on a temporary directory."""

from __future__ import annotations

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

from output_check import check_updates
from window import INPUT, OUTPUT, FsEvent, WindowWatch, commit_times, first_read, measure, window_end


def ev(t, where, name, *kinds, is_dir=False):
    return FsEvent(t, where, name, tuple(kinds), is_dir)


def check_of(parts, expected):
    return check_updates([(p, list(enumerate(lines, 1))) for p, lines in parts], expected)


def test_first_read_ignores_directory_listings_and_output():
    events = [
        ev(1.0, INPUT, "", "access", is_dir=True),  # a listing of the input directory
        ev(1.5, OUTPUT, "part-1.csv", "moved_to"),
        ev(2.0, INPUT, "b.jsonl", "access"),
        ev(1.8, INPUT, "a.jsonl", "access"),
    ]
    read = first_read(events)
    assert read is not None and read.name == "a.jsonl"
    assert first_read(events[:2]) is None


def test_commit_time_is_the_rename_not_the_temp_write():
    events = [
        ev(1.0, OUTPUT, ".batch-000000.csv.tmp", "create"),
        ev(1.1, OUTPUT, ".batch-000000.csv.tmp", "close_write"),
        ev(1.2, OUTPUT, "batch-000000.csv", "moved_to"),
        ev(2.0, OUTPUT, "in-place.csv", "create"),
        ev(2.5, OUTPUT, "in-place.csv", "close_write"),
        ev(3.0, OUTPUT, "_SUCCESS", "create"),
        ev(3.5, OUTPUT, "only-created.csv", "create"),
        ev(4.0, OUTPUT, "batch-000000.csv", "moved_to"),  # a later rewrite does not move the first commit
    ]
    assert commit_times(events) == {"batch-000000.csv": 1.2, "in-place.csv": 2.5, "only-created.csv": 3.5}


def test_window_ends_at_the_latest_commit_holding_a_final_line():
    parts = [
        ("/o/part-000000000001-00000-j-a.csv", [["x", "1"], ["y", "1"]]),
        ("/o/part-000000000001-00001-j-b.csv", [["z", "2"]]),
        ("/o/part-000000000002-00000-j-a.csv", [["x", "3"]]),
        ("/o/part-000000000003-00000-j-a.csv", []),  # committed last, holds no final line
    ]
    check = check_of(parts, {"x": 3, "y": 1, "z": 2})
    assert check.ok
    commits = {
        "part-000000000001-00000-j-a.csv": 10.0,
        "part-000000000001-00001-j-b.csv": 12.0,  # subtask 1 renamed later than subtask 0's next part
        "part-000000000002-00000-j-a.csv": 11.0,
        "part-000000000003-00000-j-a.csv": 13.0,
    }
    assert window_end(check.final, commits) == (12.0, "part-000000000001-00001-j-b.csv", [])
    del commits["part-000000000002-00000-j-a.csv"]
    t, name, missing = window_end(check.final, commits)
    assert (t, name, missing) == (None, None, ["part-000000000002-00000-j-a.csv"])


def test_measure_gives_window_startup_and_rate():
    parts = [("/o/batch-000000.csv", [["x", "2"]]), ("/o/batch-000001.csv", [["x", "4"], ["y", "1"]])]
    check = check_of(parts, {"x": 4, "y": 1})
    events = [
        ev(10.5, INPUT, "", "access", is_dir=True),
        ev(11.0, INPUT, "e1.jsonl", "access"),
        ev(12.0, OUTPUT, "batch-000000.csv", "moved_to"),
        ev(14.0, OUTPUT, "batch-000001.csv", "moved_to"),
    ]
    w = measure(10.0, events, check)
    assert w.ok and w.error is None
    assert w.seconds == pytest.approx(3.0)
    assert w.startup == pytest.approx(1.0)
    assert w.end_part == "batch-000001.csv"
    assert w.commits == 2
    assert w.rate(6) == pytest.approx(2.0)


def test_measure_refuses_what_it_cannot_time():
    parts = [("/o/batch-000000.csv", [["x", "1"]])]
    good = check_of(parts, {"x": 1})
    wrong = check_of(parts, {"x": 2})
    read = ev(1.0, INPUT, "e.jsonl", "access")
    commit = ev(2.0, OUTPUT, "batch-000000.csv", "moved_to")
    assert measure(0.0, [commit], good).error == "no read of an input file seen"
    assert "output check failed" in (measure(0.0, [read, commit], wrong).error or "")
    assert "overflowed" in (measure(0.0, [read, commit], good, overflowed=True).error or "")
    w = measure(0.0, [read], good)
    assert not w.ok and "no commit event" in (w.error or "") and w.rate(10) is None


def test_watcher_sees_first_read_and_commits(tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    (inp / "a.jsonl").write_text("x\n")
    (inp / "b.jsonl").write_text("y\n")
    called: list[float] = []
    watch = WindowWatch(str(inp), str(out), on_first_read=called.append).start()
    try:
        os.listdir(inp)
        time.sleep(0.1)
        t0 = time.monotonic()
        (inp / "a.jsonl").read_text()
        (inp / "b.jsonl").read_text()
        (out / ".part.tmp").write_text("x,1\n")
        os.replace(out / ".part.tmp", out / "part-1.csv")
    finally:
        events = watch.stop()
    read = first_read(events)
    assert read is not None and read.name == "a.jsonl" and read.t >= t0
    assert called == [read.t]
    assert set(commit_times(events)) == {"part-1.csv"}
    assert not watch.overflowed
