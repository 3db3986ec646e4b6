"""The I/O the built-in split enumerators ask for (sluice/connectors/enumerators.py), run by
the JobMaster on the dispatcher's I/O pool, off its lock: listing a directory, scanning a
Redis server for stream keys. Plain data in, names out; bounded in time and count."""

from __future__ import annotations

from typing import Any

from sluice.storage import list_files

MAX_FOUND = 10_000  # names one lookup may return
REDIS_TIMEOUT_S = 5.0


class LookupError_(ValueError):
    """A lookup that cannot be answered (too many names, an unknown kind)."""


def run(what: dict[str, Any]) -> list[str]:
    if "list" in what:
        found = list_files(str(what["list"]), str(what.get("suffix", "")))
    elif "redis_streams" in what:
        found = _redis_streams(str(what["redis_streams"]), str(what["pattern"]))
    else:
        raise LookupError_(f"unknown lookup {sorted(what)}")
    if len(found) > MAX_FOUND:
        raise LookupError_(f"the lookup found {len(found)} names, more than {MAX_FOUND}")
    return found


def _redis_streams(url: str, pattern: str) -> list[str]:
    import redis  # local: only JobManagers running Redis enumerators need it

    client = redis.Redis.from_url(
        url, decode_responses=True, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )
    try:
        found: list[str] = []
        for key in client.scan_iter(match=pattern, count=1000, _type="STREAM"):
            found.append(key)
            if len(found) > MAX_FOUND:
                break
        return sorted(found)
    finally:
        client.close()
