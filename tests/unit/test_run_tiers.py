"""tests/run_tiers.py, `make test`'s runner: steps start once what they follow succeeded, run side
by side, a failed step fails the run and skips what follows it, and each step's output is kept.
A stand-in for `make` (a shell script) plays the targets."""

from __future__ import annotations

import os
import stat
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import run_tiers

FAKE_MAKE = """#!/bin/sh
# $2: the target. Each writes when it started and ended; "fail-*" targets exit 2.
target="$2"
echo "start $target $(date +%s.%N)" >> "$TRACE"
echo "output of $target"
sleep 0.3
echo "end $target $(date +%s.%N)" >> "$TRACE"
case "$target" in fail-*) exit 2 ;; esac
"""


@pytest.fixture
def fake_make(tmp_path, monkeypatch):
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(make.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("TRACE", str(tmp_path / "trace"))
    monkeypatch.chdir(tmp_path)
    return str(make)


def trace(tmp_path) -> dict[str, tuple[float, float]]:
    times: dict[str, dict[str, float]] = {}
    for line in (tmp_path / "trace").read_text().splitlines():
        what, target, at = line.split()
        times.setdefault(target, {})[what] = float(at)
    return {t: (v["start"], v["end"]) for t, v in times.items()}


def test_steps_run_side_by_side_and_after_what_they_follow(fake_make, tmp_path, capsys):
    steps = (
        run_tiers.Step("a", "t-a"),
        run_tiers.Step("b", "t-b"),
        run_tiers.Step("c", "t-c", after=("a",)),
    )
    assert run_tiers.run(steps, fake_make, sequential=False) == 0
    t = trace(tmp_path)
    assert t["t-b"][0] < t["t-a"][1], "b did not start while a ran"
    assert t["t-c"][0] >= t["t-a"][1], "c started before a, which it follows, ended"
    out = capsys.readouterr().out
    assert "output of t-c" in out and "step durations: a " in out
    assert (tmp_path / "build" / "test-results" / "b.log").read_text() == "output of t-b\n"


def test_a_failed_step_fails_the_run_and_skips_what_follows_it(fake_make, tmp_path, capsys):
    steps = (
        run_tiers.Step("a", "fail-a"),
        run_tiers.Step("b", "t-b"),
        run_tiers.Step("c", "t-c", after=("a",)),
    )
    assert run_tiers.run(steps, fake_make, sequential=False) == 1
    assert set(trace(tmp_path)) == {"fail-a", "t-b"}, "c ran although a, which it follows, failed"
    out = capsys.readouterr().out
    assert "a: FAILED (exit 2)" in out and "c: not run, because a failed" in out
    assert "failed: a c" in out


def test_sequential_runs_one_step_at_a_time(fake_make, tmp_path):
    steps = (run_tiers.Step("a", "t-a"), run_tiers.Step("b", "t-b"))
    assert run_tiers.run(steps, fake_make, sequential=True) == 0
    t = trace(tmp_path)
    assert t["t-b"][0] >= t["t-a"][1]
