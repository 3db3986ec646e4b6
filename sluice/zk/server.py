"""An embedded, standalone ZooKeeper server for tests and the local launcher.

Runs Debian's ZooKeeper 3.8 (``apt-get install zookeeper``) as a child process:

    java -cp <zookeeper.jar:slf4j-log4j12.jar:log4j-1.2.jar> \\
        org.apache.zookeeper.server.quorum.QuorumPeerMain <data_dir>/zoo.cfg

``zookeeper.jar``'s manifest ``Class-Path`` already names its dependencies
(jute, netty, slf4j-api, jetty, ...) under ``/usr/share/java``; Debian's own
scripts use ``/etc/zookeeper/conf:/usr/share/java/zookeeper.jar``.  We add the
slf4j→log4j 1.2 binding so the server logs (to ``<data_dir>/zookeeper.log``)
instead of silently using slf4j's no-op logger.

Layout of ``data_dir``: ``zoo.cfg``, ``log4j.properties``, ``zookeeper.log``
and ``data/`` (ZooKeeper's snapshots and transaction log).  The process gets
its own session (so a Ctrl-C on the terminal does not hit it), stdin from
/dev/null and its output in the log file: it never holds the caller's pipes.

    python -m sluice.zk.server --dir DIR [--port N]

runs one in the foreground until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

_log = logging.getLogger(__name__)

JAVA_DIR = Path("/usr/share/java")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
CLASSPATH_ENV = "SLUICE_ZOOKEEPER_CLASSPATH"  # overrides the Debian lookup (e.g. "$ZK_HOME/lib/*")
_LOGGING_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")

_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ZooKeeperNotInstalledError(RuntimeError):
    """Java or Debian's ZooKeeper jars are missing."""


class ZooKeeperStartError(RuntimeError):
    """The server process exited or did not start serving in time."""


def find_zookeeper_classpath(java_dir: str | os.PathLike = JAVA_DIR) -> str:
    """The classpath that runs Debian's ZooKeeper server, or an actionable error."""
    override = os.environ.get(CLASSPATH_ENV)
    if override:
        return override
    java_dir = Path(java_dir)
    jar = java_dir / "zookeeper.jar"
    if not jar.is_file():
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper not found: {jar} is missing. Install Debian's zookeeper package: "
            f"`make system-deps` (or `apt-get install -y zookeeper`), or set {CLASSPATH_ENV}."
        )
    missing = [p for p in _manifest_class_path(jar) if not Path(p).exists()]
    if missing:
        # jline (the CLI's line editor) is not needed by the server.
        _log.debug("jars named by %s's manifest are missing: %s", jar, " ".join(missing))
    extra = [str(java_dir / name) for name in _LOGGING_JARS if (java_dir / name).is_file()]
    return os.pathsep.join([str(jar), *extra])


def _manifest_class_path(jar: Path) -> list[str]:
    try:
        with zipfile.ZipFile(jar) as zf:
            text = zf.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return []
    text = text.replace("\r\n", "\n").replace("\n ", "")  # unfold continuation lines
    for line in text.splitlines():
        if line.startswith("Class-Path:"):
            return line.split(":", 1)[1].split()
    return []


def find_java() -> str:
    java = os.environ.get("JAVA_HOME") and Path(os.environ["JAVA_HOME"], "bin", "java")
    if java and java.is_file():
        return str(java)
    found = shutil.which("java")
    if not found:
        raise ZooKeeperNotInstalledError(
            "java not found on PATH: install Java 17 and ZooKeeper with `make system-deps`"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``port`` now (SO_REUSEADDR, as ZooKeeper's own socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (ruok, srvr, stat) and return the reply."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class EmbeddedZooKeeper:
    """A standalone ZooKeeper child process; see the module docstring."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        port: int = 0,
        tick_time_ms: int = 500,
        *,
        host: str = "127.0.0.1",
        max_session_timeout_ms: int = 60_000,
        heap_mb: int = 256,
        force_sync: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap_mb = heap_mb
        # fsync per write only matters if the *machine* crashes; a killed
        # process loses nothing, and skipping it makes tests much faster.
        self.force_sync = force_sync
        self._requested_port = port
        self._port: int | None = port or None
        self._proc: subprocess.Popen | None = None
        self._detached = False

    # -- properties ---------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("port is chosen on start(); the server has not been started")
        return self._port

    @property
    def connect_string(self) -> str:
        return f"{self._probe_host}:{self.port}"

    @property
    def _probe_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    # -- lifecycle ----------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> EmbeddedZooKeeper:
        """Start the server; returns once it serves requests on ``port``."""
        if self.running:
            return self
        classpath = find_zookeeper_classpath()
        java = find_java()
        # A port we picked ourselves may be taken by someone else before
        # ZooKeeper binds it; then pick another.  A requested port is kept.
        attempts = 1 if self._requested_port or self._port else 3
        for attempt in range(attempts):
            if self._port is None:
                self._port = free_port(self._probe_host)
            elif not port_is_free(self._port, self.host or "0.0.0.0"):
                # Checked first: otherwise whatever serves there would answer our readiness probe.
                raise ZooKeeperStartError(
                    f"cannot start ZooKeeper on {self.connect_string}: the port is in use "
                    f"(another ZooKeeper still running? pass port=0 to pick a free one)"
                )
            try:
                self._spawn(java, classpath)
                self._wait_serving(timeout)
                return self
            except ZooKeeperStartError as exc:
                self._kill()
                if attempt + 1 < attempts and "Address already in use" in self.log_tail():
                    _log.warning("port %s was taken, retrying on another port", self._port)
                    self._port = None
                    continue
                raise exc
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; waits for the process to exit."""
        if self._proc is None:
            return
        atexit.unregister(self._kill)
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _log.warning("ZooKeeper pid %s ignored SIGTERM for %.1fs; killing it", proc.pid, timeout)
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        else:
            _signal_group(proc, signal.SIGKILL)  # stray children of the group, if any

    def detach(self) -> None:
        """Let the server outlive this Python process (it is killed at interpreter exit
        otherwise).  ``pid`` stays known; ``stop()`` still works."""
        self._detached = True
        atexit.unregister(self._kill)

    def restart(self, timeout: float = 30.0) -> EmbeddedZooKeeper:
        """Stop and start again with the same data directory and port."""
        self.stop()
        return self.start(timeout)

    def is_serving(self) -> bool:
        try:
            reply = four_letter_word(self._probe_host, self.port, "srvr", timeout=1.0)
        except OSError:
            return False
        return reply.startswith("Zookeeper version:")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedZooKeeper(data_dir={str(self.data_dir)!r}, port={self._port}, pid={self.pid})"

    # -- internals ----------------------------------------------------------------

    def _write_config(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = {
            "dataDir": self.data_dir / "data",
            "clientPort": self._port,
            "clientPortAddress": self.host,
            "tickTime": self.tick_time_ms,
            "maxSessionTimeout": max(self.max_session_timeout_ms, 2 * self.tick_time_ms),
            "maxClientCnxns": 0,
            "4lw.commands.whitelist": "ruok,stat,srvr",
            "admin.enableServer": "false",
            "forceSync": "yes" if self.force_sync else "no",
            "preAllocSize": 4096,  # KiB per transaction log file instead of 64 MiB
            "autopurge.snapRetainCount": 3,
            "autopurge.purgeInterval": 1,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
        (self.data_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES)

    def _spawn(self, java: str, classpath: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        cmd = [
            java,
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log, open(os.devnull, "rb") as devnull:
            log.write(f"\n=== sluice: starting ZooKeeper on port {self._port}: {' '.join(cmd)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                stdin=devnull,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
                close_fds=True,
            )
        if not self._detached:
            atexit.register(self._kill)  # never leave a server behind an interpreter exit
        _log.info("started ZooKeeper pid %s on %s (log %s)", self._proc.pid, self.connect_string, self.log_path)

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with code {code} before serving on {self.connect_string}; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            if self.is_serving():
                return
            if time.monotonic() > deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper did not serve on {self.connect_string} within {timeout:.0f}s; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            atexit.unregister(self._kill)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    # The server leads its own process group (start_new_session), so this
    # reaches only it and anything it started.
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sluice.zk.server", description="Run an embedded ZooKeeper in the foreground."
    )
    parser.add_argument("--dir", required=True, help="data directory (config, data, zookeeper.log)")
    parser.add_argument("--port", type=int, default=0, help="client port (default: a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--tick-time-ms", type=int, default=500)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    zk = EmbeddedZooKeeper(args.dir, port=args.port, tick_time_ms=args.tick_time_ms, host=args.host)
    try:
        zk.start()
    except (ZooKeeperNotInstalledError, ZooKeeperStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"ZooKeeper serving on {zk.connect_string} (pid {zk.pid}, log {zk.log_path})", flush=True)
    try:
        while not stop.wait(1.0):
            if not zk.running:
                print(f"error: ZooKeeper exited; last lines of {zk.log_path}:\n{zk.log_tail()}", file=sys.stderr)
                return 1
    finally:
        zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
