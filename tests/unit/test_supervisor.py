"""The local cluster's supervisor (sluice/cli/supervisor.py) against real processes: a process
that dies before it is ready backs off further each time, one that was ready and then died
starts again after the first backoff."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from helpers import wait_until

from sluice.cli import supervisor
from sluice.cli.supervisor import COMMAND, Supervisor
from sluice.cluster_file import ClusterFile, ProcessEntry

# a stand-in TaskManager: writes its address file (ready) unless told not to, then waits
STAND_IN = (
    "import sys, time\n"
    "if sys.argv[1] == 'ready':\n"
    "    open(sys.argv[3], 'w').write('127.0.0.1:1\\n')\n"
    "time.sleep(600)\n"
)


def _cluster(tmp_path, ready: bool) -> tuple[str, list[str]]:
    address_file = str(tmp_path / "tm.addr")
    command = [sys.executable, "-c", STAND_IN, "ready" if ready else "never", "--address-file", address_file]
    first = subprocess.Popen(command, start_new_session=True)
    log = str(tmp_path / "tm.log")
    entry = ProcessEntry("taskmanager", first.pid, "127.0.0.1:1", log, {COMMAND: command})
    ClusterFile("c-1", "127.0.0.1:2181", [entry], dir=str(tmp_path)).write(str(tmp_path))
    first.kill()
    first.wait()
    return str(tmp_path), command


def _pid(cluster_dir: str) -> int:
    return ClusterFile.read(cluster_dir).of_role("taskmanager")[0].pid


def _run(cluster_dir: str) -> tuple[Supervisor, threading.Thread]:
    s = Supervisor(cluster_dir)
    t = threading.Thread(target=s.run, daemon=True)
    t.start()
    return s, t


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def test_a_ready_process_that_dies_comes_back_after_the_first_backoff(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "POLL", 0.05)
    monkeypatch.setattr(supervisor, "FIRST_BACKOFF", 0.1)
    cluster_dir, _ = _cluster(tmp_path, ready=True)
    s, t = _run(cluster_dir)
    try:
        seen = [_pid(cluster_dir)]
        for _ in range(4):  # killed again and again once ready: never more than the first backoff
            pid = wait_until(lambda: (p := _pid(cluster_dir)) not in seen and p, timeout=10, message="a restart")
            seen.append(pid)
            wait_until(lambda: not s._state or all(not r.awaiting_address for r in s._state.values()), timeout=10)
            state = next(iter(s._state.values()))
            assert state.backoff == supervisor.FIRST_BACKOFF
            _kill(pid)
    finally:
        s.stopped.set()
        t.join(10)
        _kill_quietly(_pid(cluster_dir))


def test_a_process_that_dies_before_it_is_ready_backs_off_further(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "POLL", 0.05)
    monkeypatch.setattr(supervisor, "FIRST_BACKOFF", 0.1)
    cluster_dir, _ = _cluster(tmp_path, ready=False)
    s, t = _run(cluster_dir)
    try:
        seen = [_pid(cluster_dir)]
        backoffs = []
        for _ in range(3):
            pid = wait_until(lambda: (p := _pid(cluster_dir)) not in seen and p, timeout=10, message="a restart")
            seen.append(pid)
            backoffs.append(next(iter(s._state.values())).backoff)
            _kill(pid)
        assert backoffs == sorted(backoffs) and backoffs[-1] >= 4 * backoffs[0], backoffs
    finally:
        s.stopped.set()
        t.join(10)
        _kill_quietly(_pid(cluster_dir))


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
