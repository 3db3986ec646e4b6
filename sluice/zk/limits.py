"""How much Sluice writes to ZooKeeper at once (docs/security.md, "ZooKeeper").

ZooKeeper closes the connection of a client whose request is larger than its
``jute.maxbuffer`` (about 1 MB by default).  For a JobManager that is not an
error of one write but the loss of its session — and so of its leadership,
again and again if the write is retried by the next leader.  So every write
of the leader is checked before it is sent: a value, or a transaction, above
``MAX_WRITE_BYTES`` raises :class:`ZNodeTooLargeError` (a ``ValueError``) and
fails that one operation; the session is never at stake.

Sluice keeps what it stores small in the first place — pointers to storage,
and job results whose texts are cut by :func:`truncate` — so the check is
the backstop, not the rule.  Pure functions: no kazoo, no I/O.
"""

from __future__ import annotations

MAX_WRITE_BYTES = 256 * 1024  # a quarter of ZooKeeper's default jute.maxbuffer (0xfffff bytes)


class ZNodeTooLargeError(ValueError):
    """A ZooKeeper write above MAX_WRITE_BYTES; nothing was sent."""

    def __init__(self, what: str, size: int, limit: int = MAX_WRITE_BYTES) -> None:
        super().__init__(
            f"{what} is {size} bytes, above the {limit} bytes Sluice writes to ZooKeeper at once "
            "(ZooKeeper drops the session of a client that sends more than its jute.maxbuffer); "
            "nothing was written"
        )
        self.what, self.size, self.limit = what, size, limit


def check_size(what: str, size: int, limit: int = MAX_WRITE_BYTES) -> None:
    if size > limit:
        raise ZNodeTooLargeError(what, size, limit)


def truncate(text: str, limit: int, where: str | None = None) -> str:
    """``text`` if it has at most ``limit`` characters; otherwise its first ``limit`` characters
    and a line saying how much was cut and, when given, ``where`` the full text is."""
    if len(text) <= limit:
        return text
    rest = f"full text in {where}" if where else "not kept"
    return f"{text[:limit]}\n... ({len(text) - limit} more characters; {rest})"
