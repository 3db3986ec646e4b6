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


def test_run_order_warms_up_then_reverses_the_conditions_every_other_round():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from process_forms_bench import run_order

    t, b = "this checkout", "before HEAD"
    conditions = [(t, "per-key"), (t, "batch"), (b, "per-key"), (b, "batch")]
    assert run_order(conditions, 2) == [
        (0, (t, "per-key")), (0, (t, "batch")), (0, (b, "per-key")), (0, (b, "batch")),
        (1, (b, "batch")), (1, (b, "per-key")), (1, (t, "batch")), (1, (t, "per-key")),
        (2, (t, "per-key")), (2, (t, "batch")), (2, (b, "per-key")), (2, (b, "batch")),
    ]  # fmt: skip
    assert run_order([(t, "batch")], 1) == [(0, (t, "batch")), (1, (t, "batch"))]


def test_report_rows_per_checkout_and_form_and_the_ratios():
    import argparse

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from process_forms_bench_report import report

    facts = {"commit": "c", "cores": 2, "cpu": "x", "ram": "1 GiB", "python": "3", "java": "j", "pyspark": "4"}
    args = argparse.Namespace(files=4, users=200, ttl_ms=60_000, checkpoint_every=4, before="abc")
    runs = [
        {"code": code, "form": "batch", "cpu": cpu, "snapshots": 0.25, "calls": 4, "rows": 5678}
        for code, cpu in (("this checkout", 1.0), ("before abc", 3.0), ("this checkout", 1.0), ("before abc", 3.0))
    ]
    text = report("python bench/process_forms_bench.py", facts | {"load": "0"}, args, runs, 6000)
    assert (
        "| this checkout: batch | 2 | 1.00 [1.00–1.00] | 0.25 [0.25–0.25] | 6,000 [6,000–6,000] | 4 | 5,678 |" in text
    )
    assert "batch: this checkout against abc, median CPU: 3.00x less." in text
    assert "| 2 | before abc | batch | 3.00 | 0.25 | 4 |" in text
    assert "Batch form against the per-key form" not in text  # no per-key runs
