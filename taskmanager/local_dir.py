"""The TaskManager's working directory: local files that live as long as the process.

One fresh directory per process, `<system temp dir>/sluice-tm-<resource id>-<random>` (the
system temp dir honours TMPDIR), holding a `pid` file (the pid, then the host name).
Blocking result partitions (BATCH) keep their files under it (`partitions/`,
taskmanager/network/blocking_partition.py), and its Spark driver its scratch files
(`spark/`: the block manager's, pyspark's and the artifact directories;
SparkEngine.start). The process removes it when it stops; a process that could
not (kill -9, a crash) leaves it behind, and the next TaskManager to start on the machine
(its supervisor restarts it, or any other) removes every such directory of the same user and
host whose pid no longer runs (a directory of another host, seen through a shared temp dir,
is left alone: its pid means nothing here), and every one without a pid file for longer than
NO_PID_GRACE (a dead TaskManager's Spark JVM can re-create `spark/` after the removal)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import tempfile
import time

log = logging.getLogger("sluice.taskmanager")

PID_FILE = "pid"
SPARK_DIR = "spark"  # Spark's scratch space (spark.local.dir, the JVM's java.io.tmpdir)
NO_PID_GRACE = 60.0  # seconds after which a directory without a pid file is no TaskManager's start
PREFIX = "sluice-tm-"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def create(resource_id: str, base: str | None = None) -> str:
    """A new working directory for this process (under `base`, default the system temp dir),
    after removing those that dead TaskManagers left there."""
    base = base or tempfile.gettempdir()
    _remove_stale(base)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{_UNSAFE.sub('_', resource_id)[:64]}-", dir=base)
    with open(os.path.join(path, PID_FILE), "w") as f:
        f.write(f"{os.getpid()}\n{socket.gethostname()}\n")
    return path


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _remove_stale(base: str) -> None:
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        try:
            if not os.path.isdir(path) or os.path.islink(path) or os.stat(path).st_uid != os.getuid():
                continue
            if not os.path.exists(os.path.join(path, PID_FILE)):
                # being created (the pid file follows within microseconds), or re-created without
                # one by a killed TaskManager's Spark JVM that outlived its removal: gone when old
                if time.time() - os.stat(path).st_mtime > NO_PID_GRACE:
                    log.info("removing the working directory %s, which has no pid file", path)
                    shutil.rmtree(path, ignore_errors=True)
                continue
            with open(os.path.join(path, PID_FILE)) as f:
                fields = f.read().split()
            pid, host = int(fields[0]), fields[1] if len(fields) > 1 else socket.gethostname()
        except (OSError, ValueError, IndexError):
            continue  # not ours, or unreadable: leave it
        if host == socket.gethostname() and pid > 0 and pid != os.getpid() and not _alive(pid):
            log.info("removing the working directory %s left by an earlier TaskManager (pid %d)", path, pid)
            shutil.rmtree(path, ignore_errors=True)
