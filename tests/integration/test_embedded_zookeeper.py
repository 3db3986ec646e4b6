"""EmbeddedZooKeeper: a real server process that starts, restarts and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from helpers import wait_until
from kazoo.client import KazooClient

from sluice.zk.server import (
    EmbeddedZooKeeper,
    ZooKeeperNotInstalledError,
    ZooKeeperStartError,
    find_zookeeper_classpath,
    four_letter_word,
    port_is_free,
)

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kazoo(connect_string: str) -> KazooClient:
    client = KazooClient(hosts=connect_string)
    client.start(timeout=15)
    return client


def test_start_and_stop_leave_no_process_and_free_the_port(tmp_path):
    zk = EmbeddedZooKeeper(tmp_path / "zk")
    with zk:
        pid, port = zk.pid, zk.port
        assert pid is not None and pid_alive(pid) and zk.running
        assert zk.connect_string == f"127.0.0.1:{port}"
        assert four_letter_word("127.0.0.1", port, "ruok") == "imok"
        client = kazoo(zk.connect_string)
        client.create("/hello", b"world")
        client.stop()
        client.close()
    assert zk.pid is None and not zk.running
    assert not pid_alive(pid)
    assert port_is_free(port)
    for name in ("zoo.cfg", "zookeeper.log", "data"):
        assert (tmp_path / "zk" / name).exists()
    assert "4lw.commands.whitelist=ruok,stat,srvr" in (tmp_path / "zk" / "zoo.cfg").read_text()
    zk.stop()  # idempotent


def test_restart_keeps_data_and_port(tmp_path):
    with EmbeddedZooKeeper(tmp_path / "zk") as zk:
        port, first_pid = zk.port, zk.pid
        client = kazoo(zk.connect_string)
        client.create("/sluice/c1/jobgraphs/j1", b"pointer", makepath=True)
        zk.restart()
        assert first_pid is not None
        assert zk.port == port and zk.pid != first_pid and not pid_alive(first_pid)
        # The same client reconnects to the restarted server on the same port.
        wait_until(lambda: client.connected, 20, "the client to reconnect")
        assert client.get("/sluice/c1/jobgraphs/j1")[0] == b"pointer"
        client.stop()
        client.close()


def test_configuration_allows_long_sessions(tmp_path):
    with EmbeddedZooKeeper(tmp_path / "zk", tick_time_ms=500) as zk:
        # Sessions may last up to maxSessionTimeout (ZooKeeper's default is only 20 ticks).
        assert "tickTime 500 ms minSessionTimeout 1000 ms maxSessionTimeout 60000 ms" in zk.log_path.read_text()


def test_a_port_in_use_fails_fast_with_a_clear_error(tmp_path, zookeeper):
    other = EmbeddedZooKeeper(tmp_path / "other", port=zookeeper.port)
    with pytest.raises(ZooKeeperStartError, match="in use"):
        other.start(timeout=10)
    assert other.pid is None
    assert zookeeper.is_serving()


def test_a_server_that_dies_reports_its_log(tmp_path):
    zk = EmbeddedZooKeeper(tmp_path / "zk", heap_mb=1)  # the JVM refuses to start
    with pytest.raises(ZooKeeperStartError) as info:
        zk.start(timeout=20)
    assert "exited" in str(info.value) and "zookeeper.log" in str(info.value)
    assert not zk.running


def test_missing_jar_gives_an_actionable_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SLUICE_ZOOKEEPER_CLASSPATH", raising=False)
    with pytest.raises(ZooKeeperNotInstalledError, match="make system-deps"):
        find_zookeeper_classpath(tmp_path)


def test_detached_server_outlives_the_interpreter(tmp_path):
    code = (
        "import sys; from sluice.zk.server import EmbeddedZooKeeper\n"
        f"zk = EmbeddedZooKeeper({str(tmp_path / 'zk')!r}).start(); zk.detach(); print(zk.pid, zk.port)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    pid, port = map(int, out.stdout.split())
    try:
        assert pid_alive(pid)
        assert four_letter_word("127.0.0.1", port, "ruok") == "imok"
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not pid_alive(pid) or _zombie(pid), 10, "the detached server to exit")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_undetached_server_dies_with_the_interpreter(tmp_path):
    code = (
        "from sluice.zk.server import EmbeddedZooKeeper\n"
        f"zk = EmbeddedZooKeeper({str(tmp_path / 'zk')!r}).start(); print(zk.pid)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert not pid_alive(int(out.stdout))


def test_debian_classpath():
    classpath = find_zookeeper_classpath().split(os.pathsep)
    assert classpath[0] == "/usr/share/java/zookeeper.jar"


def test_foreground_runner_stops_on_sigterm(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.zk.server", "--dir", str(tmp_path / "zk")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    server_pid = None
    try:
        lines: list[str] = []
        while not lines or "ZooKeeper serving on" not in lines[-1]:
            lines.append(proc.stdout.readline())
            assert lines[-1], "".join(lines)
        line = lines[-1]
        assert "ZooKeeper serving on 127.0.0.1:" in line, line
        server_pid = int(line.split("(pid ")[1].split(",")[0])
        assert pid_alive(server_pid)
        proc.terminate()
        assert proc.wait(20) == 0
        assert not pid_alive(server_pid)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if server_pid and pid_alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)
        proc.stdout.close()
