"""Logging for Sluice processes: one line per event, with the process role
and the correlation ids (job, attempt, checkpoint) carried in the message."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence


def setup(role: str, level: str = "INFO", log_file: str | None = None) -> None:
    fmt = f"%(asctime)s %(levelname)-5s {role} %(name)s [%(threadName)s] %(message)s"
    handler: logging.Handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("kazoo", "py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def tail(path: str, lines: int = 15) -> str:
    """The last `lines` lines of a process's log file, for an error that names it: "(no log)"
    when it cannot be read, "(empty)" when it holds nothing yet."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]) or "(empty)"
    except OSError:
        return "(no log)"


PRIVATE_UMASK = 0o077  # what a process started in the background creates is its user's alone


def spawn_logged(args: Sequence[str], log_path: str) -> subprocess.Popen[bytes]:
    """Start `args` in the background, in a session of its own, its output appended to `log_path`
    (created readable by this user only) and no standard input, so it never holds the caller's
    pipes; it starts with PRIVATE_UMASK (a JobManager or TaskManager then applies process.umask)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log, open(os.devnull, "rb") as devnull:
        return subprocess.Popen(
            list(args),
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            umask=PRIVATE_UMASK,
        )
