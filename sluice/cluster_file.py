"""``cluster.json``: what ``sluice cluster start`` wrote about the cluster in its
directory, read and written here alone (sluice/cli/cluster.py writes it, the
client and `cluster stop|status` read it; tests and benchmarks read it as JSON).

The format is a contract:

    {"cluster_id": "cluster-1a2b3c4d",
     "zookeeper": "127.0.0.1:2181",              # the connect string
     "dir": "/abs/path/.sluice",
     "zookeeper_auth_file": "/abs/path/.sluice/zookeeper-auth",  # digest credentials user:password (0600)
     "processes": [{"role": "zookeeper" | "jobmanager" | "taskmanager" | "supervisor",
                    "pid": 4242, "address": "host:port", "log": "/abs/path/.sluice/log/x.log",
                    "command": [...]}, ...],   # a taskmanager's argv: the supervisor restarts it with it
     "tls": {"ca": "/abs/path/.sluice/tls/ca.pem",        # the cluster's CA certificate, and a client
             "cert": "/abs/path/.sluice/tls/client.pem",  # certificate (common name client/client)
             "key": "/abs/path/.sluice/tls/client.key"}}  # and its key (0600): see docs/security.md

``tls`` is written by a secured ``cluster start`` (the default) and absent for
``--insecure`` (plaintext) clusters: clients connect with TLS exactly when it is
there (e.g. ``grpcurl -cacert CA -cert CERT -key KEY``).

The ``supervisor`` process (sluice/cli/supervisor.py) serves nothing: its
address is empty. It rewrites a ``taskmanager`` entry's ``pid`` (and then its
``address``) when it restarted that TaskManager.

The ``spark-master``, ``spark-worker`` and ``spark-connect`` processes are the
Spark that ``cluster start --spark standalone|connect`` started beside the
cluster (sluice/cli/spark_cluster.py); each has a ``url`` (``spark://...`` or
``sc://...``), master and worker a ``ui`` (host:port), and the file a ``spark``
object ``{"mode": ..., "url": ...}``.

``dir``, ``zookeeper_auth_file`` and ``log`` are written by ``cluster start`` and
optional on read (a cluster without ZooKeeper credentials has no ``zookeeper_auth_file``); keys
this class does not know are kept and written back unchanged.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from sluice.security.tls import TlsError, TlsFiles

FILE_NAME = "cluster.json"
ROLES = ("zookeeper", "jobmanager", "taskmanager", "supervisor", "spark-master", "spark-worker", "spark-connect")


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
    zookeeper_auth_file: str | None = None  # the ZooKeeper credentials every client of the cluster uses
    tls: TlsFiles | None = None  # the CA and a client certificate; None: a plaintext (--insecure) cluster

    def of_role(self, role: str) -> list[ProcessEntry]:
        return [p for p in self.processes if p.role == role]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cluster_id": self.cluster_id, "zookeeper": self.zookeeper}
        if self.dir is not None:
            out["dir"] = self.dir
        if self.zookeeper_auth_file is not None:
            out["zookeeper_auth_file"] = self.zookeeper_auth_file
        out["processes"] = [p.to_json() for p in self.processes]
        if self.tls is not None:
            out["tls"] = self.tls.to_json()
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: Any, path: str) -> ClusterFile:
        if not isinstance(data, dict):
            raise ClusterFileError(f"{path}: expected a JSON object, got {type(data).__name__}", path)
        cluster_id, zookeeper, processes = data.get("cluster_id"), data.get("zookeeper"), data.get("processes")
        if not isinstance(cluster_id, str) or not isinstance(zookeeper, str) or not isinstance(processes, list):
            raise ClusterFileError(f"{path}: expected cluster_id, zookeeper (strings) and processes (a list)", path)
        directory = data.get("dir")
        auth_file = data.get("zookeeper_auth_file")
        if auth_file is not None and not isinstance(auth_file, str):
            raise ClusterFileError(f"{path}: zookeeper_auth_file must be a path (a string), got {auth_file!r}", path)
        known = ("cluster_id", "zookeeper", "dir", "processes", "zookeeper_auth_file", "tls")
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(
            cluster_id,
            zookeeper,
            [ProcessEntry.from_json(p, path) for p in processes],
            directory if isinstance(directory, str) else None,
            extra,
            auth_file,
            _tls(data.get("tls"), path),
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


def _tls(data: Any, path: str) -> TlsFiles | None:
    if data is None:
        return None
    try:
        return TlsFiles.from_json(data, path)
    except TlsError as exc:
        raise ClusterFileError(str(exc), path) from None


def read_address_file(path: str) -> tuple[str, dict[str, str]]:
    """What a process wrote to its --address-file (sluice/rpc.py): its gRPC address on the
    first line, then `name=host:port` lines of its other endpoints (`rest`, `metrics`),
    which cluster.json lists beside `address`."""
    with open(path) as f:
        lines = [line.strip() for line in f.read().splitlines() if line.strip()]
    if not lines:
        return "", {}
    extra = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    return lines[0], extra
