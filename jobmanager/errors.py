"""Expected failures of the JobManager's dispatcher, by name.

The servicers (jobmanager/servicers.py) turn each into one gRPC status code,
so callers can tell them apart without reading messages:

  NotLeader           UNAVAILABLE (the message names the leader, if known)
  JobNotFound         NOT_FOUND
  StaleLeaderSession  FAILED_PRECONDITION
  InvalidRequest      INVALID_ARGUMENT (the message names the field)
  NotOwner            PERMISSION_DENIED
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
        # No session id in the text: error texts reach any caller (docs/protocols.md, "Fencing").
        super().__init__("the call's leader session is not the current one: the caller follows an earlier leader")
        self.session_id = session_id


class InvalidRequest(ValueError):
    """A request field is malformed or out of its bounds; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotOwner(Exception):
    """The caller is not the TaskManager that owns the resource id or execution it speaks for
    (its certificate's identity differs from the one bound at registration, or the execution
    was deployed to another TaskManager)."""
