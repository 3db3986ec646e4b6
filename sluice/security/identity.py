"""The authenticated identity of a gRPC peer.

Every certificate a Sluice cluster issues names its holder in the subject's
common name as `<role>/<name>`: `jobmanager/jm-0`, `taskmanager/tm-1`,
`client/admin`. A server reads the peer's verified certificate through the
call's auth context; a plaintext server (`--insecure`) has no identities and
gets None.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Role(enum.StrEnum):
    JOBMANAGER = "jobmanager"
    TASKMANAGER = "taskmanager"
    CLIENT = "client"


@dataclasses.dataclass(frozen=True)
class Identity:
    role: Role
    name: str

    @property
    def common_name(self) -> str:
        return f"{self.role}/{self.name}"

    @classmethod
    def parse(cls, common_name: str) -> Identity | None:
        """The identity a certificate's common name carries; None when it is not one of ours."""
        role, sep, name = common_name.partition("/")
        if not sep or not name or role not in Role.__members__.values():
            return None
        return cls(Role(role), name)

    def __str__(self) -> str:
        return self.common_name


def peer_identity(context: Any) -> Identity | None:
    """The verified identity of the caller of a grpc.ServicerContext, or None when the
    connection carries no verified client certificate (plaintext, or TLS without one)."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    if len(names) != 1:
        return None
    raw = names[0]
    return Identity.parse(raw.decode() if isinstance(raw, bytes) else str(raw))
