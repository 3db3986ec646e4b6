"""bench/bench_common.py: how every script ends its section and publishes it."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import bench_common


def test_publish_starts_a_new_results_file_with_its_header_and_appends_after(tmp_path, capsys):
    out = str(tmp_path / "RESULTS.md")
    said: list[str] = []
    bench_common.publish("## first\n", out, said.append)
    bench_common.publish("## second\n", out, said.append)
    text = open(out).read()
    assert text.startswith(bench_common.RESULTS_HEADER)
    assert text.index("## first") < text.index("## second")
    assert said == [f"appended to {out}"] * 2
    assert "## second" in capsys.readouterr().out
