"""Logging for Sluice processes: one line per event, with the process role
and the correlation ids (job, attempt, checkpoint) carried in the message."""

from __future__ import annotations

import logging
import sys


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
