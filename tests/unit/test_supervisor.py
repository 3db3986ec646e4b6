"""The local cluster's supervisor (sluice/cli/supervisor.py) against real processes: a process
that dies before it is ready backs off further each time, one that was ready and then died
starts again after the first backoff."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from helpers import wait_until

from sluice.cli import supervisor
from sluice.cli.supervisor import COMMAND, Supervisor
from sluice.cluster_file import ClusterFile, ProcessEntry

# a stand-in TaskManager: writes its address file (ready) unless told not to, then waits
STAND_IN = (
    "import sys, time\n"
    "if sys.argv[1] == 'ready':\n"
    "    open(sys.argv[sys.argv.index('--address-file') + 1], 'w').write('127.0.0.1:1\\n')\n"
    "time.sleep(600)\n"
)


def _pid(cluster_dir: str) -> int:
    return ClusterFile.read(cluster_dir).of_role("taskmanager")[0].pid


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def supervised(tmp_path, monkeypatch):
    """A cluster.json with one stand-in TaskManager (dead: its first process is killed at once)
    and a Supervisor running on it, fast: `make(ready)` returns (cluster dir, supervisor)."""
    monkeypatch.setattr(supervisor, "POLL", 0.05)
    monkeypatch.setattr(supervisor, "FIRST_BACKOFF", 0.1)
    running: list[tuple[Supervisor, threading.Thread]] = []

    def make(ready: bool) -> tuple[str, Supervisor]:
        address_file = str(tmp_path / "tm.addr")
        command = [sys.executable, "-c", STAND_IN, "ready" if ready else "never", "--address-file", address_file]
        first = subprocess.Popen(command, start_new_session=True)
        entry = ProcessEntry("taskmanager", first.pid, "127.0.0.1:1", str(tmp_path / "tm.log"), {COMMAND: command})
        ClusterFile("c-1", "127.0.0.1:2181", [entry], dir=str(tmp_path)).write(str(tmp_path))
        first.kill()
        first.wait()
        s = Supervisor(str(tmp_path))
        t = threading.Thread(target=s.run, daemon=True)
        t.start()
        running.append((s, t))
        return str(tmp_path), s

    yield make
    for s, t in running:
        s.stopped.set()
        t.join(10)
        _kill(_pid(s.cluster_dir))


def _restarts(cluster_dir: str, count: int):
    """The next `count` pids the supervisor starts, each yielded once it is recorded."""
    seen = [_pid(cluster_dir)]
    for _ in range(count):
        pid = wait_until(lambda: (p := _pid(cluster_dir)) not in seen and p, timeout=10, message="a restart")
        seen.append(pid)
        yield pid


def test_a_ready_process_that_dies_comes_back_after_the_first_backoff(supervised):
    cluster_dir, s = supervised(ready=True)
    for pid in _restarts(cluster_dir, 4):  # killed again and again once ready: never more than the first backoff
        (state,) = wait_until(
            lambda: list(s._state.values()) if all(not r.awaiting_address for r in s._state.values()) else [],
            timeout=10,
        )
        assert state.backoff == supervisor.FIRST_BACKOFF
        _kill(pid)


def test_a_process_that_dies_before_it_is_ready_backs_off_further(supervised):
    cluster_dir, s = supervised(ready=False)
    backoffs = []
    for pid in _restarts(cluster_dir, 3):
        backoffs.append(next(iter(s._state.values())).backoff)
        _kill(pid)
    assert backoffs == sorted(backoffs) and backoffs[-1] >= 4 * backoffs[0], backoffs
