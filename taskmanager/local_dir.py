"""The TaskManager's working directory: local files that live as long as the process.

One fresh directory per process, `<system temp dir>/sluice-tm-<resource id>-<random>`
(the system temp dir honours TMPDIR), holding a `pid` file. Blocking result
partitions (BATCH) keep their files under it (`partitions/`,
taskmanager/network/blocking_partition.py). The process removes it when it
stops; a process that could not (kill -9, a crash) leaves it behind, and the
next TaskManager of the same resource id (its supervisor restarts it with the
same id) removes it when it starts, once the pid in it is no longer running.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile

log = logging.getLogger("sluice.taskmanager")

PID_FILE = "pid"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _prefix(resource_id: str) -> str:
    return f"sluice-tm-{_UNSAFE.sub('_', resource_id)[:64]}-"


def create(resource_id: str, base: str | None = None) -> str:
    """A new working directory for this process (under `base`, default the system temp dir),
    after removing those that dead processes of the same resource id left."""
    base = base or tempfile.gettempdir()
    prefix = _prefix(resource_id)
    _remove_stale(base, prefix)
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    with open(os.path.join(path, PID_FILE), "w") as f:
        f.write(str(os.getpid()))
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


def _remove_stale(base: str, prefix: str) -> None:
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        try:
            if not os.path.isdir(path) or os.path.islink(path) or os.stat(path).st_uid != os.getuid():
                continue
            with open(os.path.join(path, PID_FILE)) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue  # not ours, or being created: leave it
        if pid != os.getpid() and not _alive(pid):
            log.info("removing the working directory %s left by an earlier TaskManager (pid %d)", path, pid)
            shutil.rmtree(path, ignore_errors=True)
