"""Who may report about what (docs/protocols.md, "Fencing"): a TaskManager's calls are bound
to who it is. Its registration binds the resource id to the caller's identity (the
certificate's common name; none on a plaintext cluster), and a report about an execution is
taken only from the TaskManager it was deployed to. Pure functions over the slot pool.
"""

from __future__ import annotations

import logging

from jobmanager.errors import NotOwner
from jobmanager.master.ports import JobHandle
from jobmanager.scheduler import slot_pool as sp
from sluice.security.identity import Identity, Role

log = logging.getLogger("sluice.jobmanager")


def bound_name(identity: Identity | None) -> str | None:
    """What the slot pool binds a resource id to: the identity's common name, None on plaintext."""
    return identity.common_name if identity is not None else None


def check_caller_role(identity: Identity | None) -> None:
    """Only TaskManager certificates register TaskManagers (plaintext: nobody is checked)."""
    if identity is not None and identity.role != Role.TASKMANAGER:
        raise NotOwner(f"{identity} is not a TaskManager identity")


def owned(
    pool: sp.SlotPool, job: JobHandle, execution_id: str, identity: Identity | None, resource_id: str = ""
) -> bool:
    """Whether a report about `execution_id` of `job` may be taken from the caller: True for
    an execution this JobManager deployed to a living TaskManager whose bound identity is
    the caller's (and whose resource id is `resource_id`, when the report names one);
    False for one not or no longer deployed there (a late report); NotOwner when another
    TaskManager owns it."""
    ex = job.graph.executions.get(execution_id)
    if ex is None or ex.slot is None:
        return False
    tm = pool.registered(ex.slot.resource_id)
    if tm is None:
        return False  # its TaskManager was lost meanwhile
    if tm.identity != bound_name(identity) or (resource_id and resource_id != tm.resource_id):
        log.warning(
            "[job %s] refused a report about %s from %s: it runs on TaskManager %s",
            job.job_id,
            execution_id,
            identity or f"a caller naming {resource_id!r}",
            tm.resource_id,
        )
        raise NotOwner("the execution runs on another TaskManager: only it reports about it")
    return True
