"""sluice.testing.LocalCluster's guarantees that need no cluster: `stop()` leaves no process of
its directory behind (a `cluster start` cut short before cluster.json was written) and names
what it had to end; a failing CLI command is a CliError with its output; `address_recorded`
reads a process's --address-file as the supervisor writes it."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from sluice.testing import CliError, LocalCluster, run_cli
from sluice.testing.local_cluster import address_recorded, kill_all


def _sleeper(*args: str) -> subprocess.Popen:
    """A process whose command line holds `args` (as a cluster's processes hold their directory)."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_stop_without_cluster_json_ends_the_processes_of_its_directory_and_names_them(tmp_path):
    directory = tmp_path / "cluster"
    stray = _sleeper("--log-file", str(directory / "log" / "zookeeper.log"))
    other = _sleeper("--log-file", str(tmp_path / "cluster-2" / "log" / "zookeeper.log"))  # another cluster's
    try:
        assert LocalCluster(directory).stop() == [stray.pid]
        assert stray.wait(5) is not None
        assert other.poll() is None  # a directory that only starts with the same name is not this one
    finally:
        for p in (stray, other):
            p.kill()
            p.wait()


def test_kill_all_kills_only_the_running_and_names_them():
    running, ended = _sleeper(), _sleeper()
    procs = [psutil.Process(running.pid), psutil.Process(ended.pid)]
    ended.kill()
    ended.wait()
    assert kill_all(procs) == [running.pid]
    assert running.wait(5) is not None
    assert kill_all(procs) == []  # nothing left to kill


def test_a_failing_command_is_a_cli_error_with_its_output():
    with pytest.raises(CliError, match=r"sluice status --cluster-dir .* exited [1-9]"):
        run_cli("status", "--cluster-dir", "/nonexistent/sluice-cluster", timeout=60)
    proc = run_cli("status", "--cluster-dir", "/nonexistent/sluice-cluster", timeout=60, check=False)
    assert proc.returncode != 0 and proc.stderr


def test_an_address_is_recorded_once_the_address_file_says_it(tmp_path):
    address_file = tmp_path / "taskmanager-0.address"
    entry = {"role": "taskmanager", "pid": 1, "address": "127.0.0.1:4000"}
    assert address_recorded(entry)  # started without --address-file: its address is known at start
    entry["command"] = ["python", "-m", "taskmanager", "--address-file", str(address_file)]
    assert not address_recorded(entry)  # restarted, not listening yet
    address_file.write_text("127.0.0.1:4001\n")
    assert not address_recorded(entry)  # listening at a new address the supervisor has not recorded
    address_file.write_text("127.0.0.1:4000\n")
    assert address_recorded(entry)
