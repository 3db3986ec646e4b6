"""bench/process_forms_bench.py end to end on a small input: both forms run, their outputs are
compared (equal), and the section names each form with its calls and the CPU ratio."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_bench_runs_both_forms_on_the_same_batches_and_reports_the_ratio(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "process_forms_bench.py"),
            "--events",
            "6000",
            "--users",
            "200",
            "--files",
            "4",
            "--runs",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "per-key form vs batch form" in text and "less." in text
    rows = [
        line
        for line in text.splitlines()
        if line.startswith(("| this checkout: per-key |", "| this checkout: batch |"))
    ]
    assert len(rows) == 2 and all("| 2 |" in r for r in rows), rows  # two measured runs per form
    calls = {r.split("|")[1].strip(): int(r.split("|")[6].strip().replace(",", "")) for r in rows}
    assert calls["this checkout: batch"] < calls["this checkout: per-key"]  # one call per batch, not per key


def test_before_runs_another_commits_operator_in_child_processes_and_compares_outputs(tmp_path):
    """--before HEAD: the committed code against this checkout, alternating, outputs equal."""
    out = tmp_path / "RESULTS.md"
    argv = [sys.executable, os.path.join(ROOT, "bench", "process_forms_bench.py")]
    argv += ["--events", "3000", "--users", "100", "--files", "3", "--runs", "1", "--forms", "batch"]
    proc = subprocess.run(
        [*argv, "--before", "HEAD", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "| this checkout: batch | 1 |" in text and "| before HEAD: batch | 1 |" in text, text
    assert "batch: this checkout against HEAD, median CPU:" in text
