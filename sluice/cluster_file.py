"""``cluster.json``: what ``sluice cluster start`` wrote about the cluster in its
directory, read and written here alone (sluice/cli/cluster.py writes it, the
client and `cluster stop|status` read it; tests and benchmarks read it as JSON).

The format is a contract:

    {"cluster_id": "cluster-1a2b3c4d",
     "zookeeper": "127.0.0.1:2181",              # the connect string
     "dir": "/abs/path/.sluice",
     "processes": [{"role": "zookeeper" | "jobmanager" | "taskmanager",
                    "pid": 4242, "address": "host:port", "log": "/abs/path/.sluice/log/x.log"}, ...]}

``dir`` and ``log`` are written by ``cluster start`` and optional on read; keys
this class does not know are kept and written back unchanged.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

FILE_NAME = "cluster.json"
ROLES = ("zookeeper", "jobmanager", "taskmanager")


class ClusterFileError(ValueError):
    """cluster.json is missing or malformed; the message names the file."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path


class ClusterFileNotFound(ClusterFileError):
    pass


@dataclass
class ProcessEntry:
    role: str  # one of ROLES
    pid: int
    address: str  # host:port; for ZooKeeper its connect string
    log: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of the file this class does not know

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "pid": self.pid, "address": self.address}
        if self.log is not None:
            out["log"] = self.log
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: Any, path: str) -> ProcessEntry:
        if not isinstance(data, dict):
            raise ClusterFileError(f"{path}: a process must be an object, got {data!r}", path)
        role, pid, address = data.get("role"), data.get("pid"), data.get("address")
        if role not in ROLES or isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(address, str):
            raise ClusterFileError(
                f"{path}: a process needs role ({'|'.join(ROLES)}), an integer pid and an address, got {data!r}", path
            )
        log = data.get("log")
        extra = {k: v for k, v in data.items() if k not in ("role", "pid", "address", "log")}
        return cls(role, pid, address, log if isinstance(log, str) else None, extra)


@dataclass
class ClusterFile:
    cluster_id: str
    zookeeper: str  # ZooKeeper connect string
    processes: list[ProcessEntry]
    dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of the file this class does not know

    def of_role(self, role: str) -> list[ProcessEntry]:
        return [p for p in self.processes if p.role == role]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cluster_id": self.cluster_id, "zookeeper": self.zookeeper}
        if self.dir is not None:
            out["dir"] = self.dir
        out["processes"] = [p.to_json() for p in self.processes]
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: Any, path: str) -> ClusterFile:
        if not isinstance(data, dict):
            raise ClusterFileError(f"{path}: expected a JSON object, got {type(data).__name__}", path)
        cluster_id, zookeeper, processes = data.get("cluster_id"), data.get("zookeeper"), data.get("processes")
        if not isinstance(cluster_id, str) or not isinstance(zookeeper, str) or not isinstance(processes, list):
            raise ClusterFileError(f"{path}: expected cluster_id, zookeeper (strings) and processes (a list)", path)
        directory = data.get("dir")
        extra = {k: v for k, v in data.items() if k not in ("cluster_id", "zookeeper", "dir", "processes")}
        return cls(
            cluster_id,
            zookeeper,
            [ProcessEntry.from_json(p, path) for p in processes],
            directory if isinstance(directory, str) else None,
            extra,
        )

    @staticmethod
    def path(cluster_dir: str) -> str:
        return os.path.join(cluster_dir, FILE_NAME)

    @classmethod
    def read(cls, cluster_dir: str) -> ClusterFile:
        """The cluster.json of `cluster_dir`; ClusterFileNotFound when there is none."""
        path = cls.path(cluster_dir)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ClusterFileNotFound(f"{path} does not exist", path) from None
        except (OSError, ValueError) as exc:
            raise ClusterFileError(f"cannot read {path}: {exc}", path) from None
        return cls.from_json(data, path)

    def write(self, cluster_dir: str) -> str:
        """Write (atomically) the cluster.json of `cluster_dir`; its path."""
        from sluice.storage import write_text_atomic  # here: it imports pyarrow, which readers do not need

        path = self.path(cluster_dir)
        write_text_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")
        return path
