"""bench/procstat.py: a system's CPU seconds and peak RSS over a window, and what is left over
for foreign processes, measured on real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import procstat

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_a_busy_child_is_charged_to_its_system_and_not_to_foreign_processes():
    hold = "ballast = bytearray(32 << 20)\n"  # above procstat.SMALL_PROCESS_RSS: listed by name
    child = subprocess.Popen([sys.executable, "-c", hold + BURN.format(s=0.6) + "time.sleep(30)"])
    try:
        with procstat.ResourceMeter({"burner": lambda: [child.pid]}, interval=0.05) as meter:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 20.0:  # the child burns 0.6 s of CPU, then sleeps
                if sum(child_cpu(child.pid)) >= 0.6:
                    break
                time.sleep(0.05)
        usage = meter.usage
        assert usage is not None
        assert usage.cpu_s["burner"] == pytest.approx(0.6, abs=0.25)
        labels = list(usage.peak_rss["burner"])
        assert len(labels) == 1 and labels[0].endswith(f" {child.pid}")
        assert usage.peak_rss["burner"][labels[0]] > 32 << 20
        assert usage.cpu_per_million("burner", 2_000_000) == pytest.approx(usage.cpu_s["burner"] / 2)
    finally:
        child.kill()
        child.wait()


def test_cpu_of_a_short_lived_child_is_charged_to_its_parents_system():
    """A JVM forks helpers (chmod, readlink) that exit between samples: their CPU reaches the
    parent's reaped-children time, which counts for the parent's system, not as foreign."""
    inner = BURN.format(s=0.5)
    parent_code = f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {inner!r}])\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        with procstat.ResourceMeter({"jvm": lambda: [parent.pid]}, interval=5.0) as meter:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 20.0:  # until the child exited and was reaped
                t = psutil.Process(parent.pid).cpu_times()
                if t.children_user + t.children_system >= 0.5:
                    break
                time.sleep(0.05)
        assert meter.usage is not None
        assert meter.usage.cpu_s["jvm"] >= 0.4
    finally:
        parent.kill()
        parent.wait()


def child_cpu(pid: int) -> tuple[float, float]:
    t = psutil.Process(pid).cpu_times()
    return t.user, t.system


def test_the_load_rule_excludes_by_foreign_cores_only():
    busy = procstat.Usage(10.0, {"s": 15.0}, {}, foreign_cpu_s=4.0, steal_s=0.0)
    calm = procstat.Usage(10.0, {"s": 15.0}, {}, foreign_cpu_s=1.0, steal_s=0.0)
    assert busy.foreign_cores() == pytest.approx(0.4)
    assert procstat.excluded(busy) and not procstat.excluded(calm)
    assert not procstat.excluded(busy, limit=None) and not procstat.excluded(None)


def test_rss_is_printed_in_mib_or_gib():
    assert procstat.fmt_rss(300 * 2**20) == "300 MiB"
    assert procstat.fmt_rss(3 * 2**30) == "3.00 GiB"
    assert procstat.fmt_rss(None) == "—"


def test_the_harness_name_is_reserved():
    with pytest.raises(ValueError, match="harness"):
        procstat.ResourceMeter({"harness": list})
