"""Names of the shared state files incremental checkpoints upload to `<job dir>/shared/<operator>/`
(rocksdb's SST files, a keyed aggregate's memory chain): `<checkpoint id>-<32 hex digits><suffix>`.

The checkpoint id is the one the file was uploaded for. A JobManager starting an attempt from a
restored checkpoint deletes every shared file of an id handed out before that attempt that the
restored checkpoint does not reference (`orphaned`, jobmanager/checkpoint/shared_registry.py):
uploads of tasks that never acknowledged, or whose checkpoint never completed. A file whose name
does not have this form (written before names carried the id) is never deleted that way. Pure:
no I/O."""

from __future__ import annotations

import re
import uuid

_NAME = re.compile(r"^(\d{1,18})-[0-9a-f]{32}\.[a-z]+$")


def new_shared_name(checkpoint_id: int, suffix: str) -> str:
    """A fresh, unique name for a shared file uploaded for `checkpoint_id` (`suffix`: ".sst", ".arrow")."""
    return f"{int(checkpoint_id)}-{uuid.uuid4().hex}{suffix}"


def checkpoint_of(path: str) -> int | None:
    """The checkpoint id a shared file's name carries, or None for a name without one."""
    m = _NAME.match(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None
