"""Expected failures of the JobManager's dispatcher, by name.

The servicers (jobmanager/servicers.py) turn each into one gRPC status code,
so callers can tell them apart without reading messages:

  NotLeader           UNAVAILABLE (the message names the leader, if known)
  JobNotFound         NOT_FOUND
  StaleLeaderSession  FAILED_PRECONDITION
"""

from __future__ import annotations


class NotLeader(Exception):
    """This JobManager holds no leader session: a standby, or leadership was just revoked."""


class JobNotFound(KeyError):
    """No job with this id, running or ended (args[0] is the id)."""


class StaleLeaderSession(Exception):
    """A TaskManager spoke under a leader session that is not the current one (fencing):
    it still follows an earlier leader, or this JobManager's session changed."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"leader session {session_id!r} is not the current one")
        self.session_id = session_id
