"""Where Sluice keeps its pointers in ZooKeeper (docs/protocols.md, "ZooKeeper layout").

Everything lives under ``/sluice/<cluster-id>``::

    leader/latch/<...>                      ephemeral sequential election nodes
    leader/connection_info                  ephemeral JSON {"address", "session_id"}
    jobgraphs/<job-id>                      pointer to the job graph in storage
    jobs/<job-id>/checkpoint_id_counter     checkpoint id counter
    jobs/<job-id>/checkpoints/<%019d>       pointers to chk-<n>/_metadata

ZooKeeper holds pointers; storage holds data.  This module only builds
strings, so any component (and any test) can use it without a connection.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "/sluice"


def _check_segment(kind: str, value: str) -> str:
    if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid {kind} {value!r}: must be a non-empty string without '/'")
    return value


@dataclass(frozen=True)
class ZkPaths:
    """ZooKeeper node paths of one Sluice cluster."""

    cluster_id: str

    def __post_init__(self) -> None:
        _check_segment("cluster id", self.cluster_id)

    @property
    def root(self) -> str:
        return f"{ROOT}/{self.cluster_id}"

    @property
    def leader(self) -> str:
        return f"{self.root}/leader"

    @property
    def leader_latch(self) -> str:
        return f"{self.leader}/latch"

    @property
    def leader_connection_info(self) -> str:
        return f"{self.leader}/connection_info"

    @property
    def jobgraphs(self) -> str:
        return f"{self.root}/jobgraphs"

    def jobgraph(self, job_id: str) -> str:
        return f"{self.jobgraphs}/{_check_segment('job id', job_id)}"

    @property
    def jobs(self) -> str:
        return f"{self.root}/jobs"

    def job(self, job_id: str) -> str:
        return f"{self.jobs}/{_check_segment('job id', job_id)}"

    def checkpoint_id_counter(self, job_id: str) -> str:
        return f"{self.job(job_id)}/checkpoint_id_counter"

    def checkpoints(self, job_id: str) -> str:
        return f"{self.job(job_id)}/checkpoints"

    def checkpoint(self, job_id: str, checkpoint_id: int) -> str:
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int) or checkpoint_id < 0:
            raise ValueError(f"invalid checkpoint id {checkpoint_id!r}: must be an int >= 0")
        return f"{self.checkpoints(job_id)}/{checkpoint_id:019d}"
