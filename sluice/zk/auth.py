"""Who may read and write a cluster's ZooKeeper nodes (docs/security.md, "ZooKeeper").

Every kazoo client of a cluster — JobManagers, TaskManagers following the
leader, clients looking for it — is made by :func:`make_client`, which
authenticates with the cluster's digest credentials (``user:password``, read
from the file ``high-availability.zookeeper.auth-file`` names) and, with
``high-availability.zookeeper.client.acl: creator`` (the default whenever an
auth file is given; Flink's name and values), creates every node with an ACL
giving all permissions to that digest identity only.  ``open`` creates nodes
world-readable and -writable, as ZooKeeper does by default.

The parents above ``/sluice/<cluster-id>`` that Sluice creates (``/sluice``)
hold no data: they give this identity all permissions and anyone CREATE
only, so that clusters with other credentials can share one ZooKeeper while
none of them can read, change or delete another's nodes.

:func:`secure_tree` re-applies the cluster's ACL to nodes created open (a
cluster that ran before it had credentials): each JobManager calls it on
start (``prepare_cluster_root``), so upgrading needs no manual step.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl

from sluice.config import ConfigError
from sluice.states import AclMode
from sluice.zk.paths import ROOT, ZkPaths

_log = logging.getLogger(__name__)

AUTH_FILE_NAME = "zookeeper-auth"  # in the cluster directory of `sluice cluster start`
DEFAULT_USER = "sluice"


class ZooKeeperAuthError(ConfigError):
    """Bad or missing ZooKeeper credentials; the message says what to fix."""


@dataclass(frozen=True)
class ZkAuth:
    """A cluster's ZooKeeper credentials and ACL mode; ``user is None``: no credentials."""

    user: str | None = None
    password: str | None = None
    acl_mode: AclMode = AclMode.OPEN
    source: str | None = None  # the auth file, for messages

    def __repr__(self) -> str:  # never the password
        return f"ZkAuth(user={self.user!r}, acl_mode={self.acl_mode.value!r}, source={self.source!r})"

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: the digest scheme's ``user:password``."""
        return [("digest", f"{self.user}:{self.password}")] if self.user else []

    @property
    def acl(self) -> list[ACL]:
        """The ACL of every node under the cluster root."""
        if self.acl_mode is AclMode.OPEN or not self.user or not self.password:
            return list(OPEN_ACL_UNSAFE)
        return [make_digest_acl(self.user, self.password, all=True)]

    @property
    def parent_acl(self) -> list[ACL]:
        """The ACL of ``/sluice`` when Sluice creates it: ours, and CREATE for any other cluster."""
        if self.acl_mode is AclMode.OPEN or not self.user:
            return list(OPEN_ACL_UNSAFE)
        return [*self.acl, ACL(Permissions.CREATE, Id("world", "anyone"))]

    @classmethod
    def resolve(cls, auth_file: str | None, acl_mode: str | None) -> ZkAuth:
        """From the two options: ``acl_mode`` None means creator with an auth file, else open."""
        mode = AclMode(acl_mode) if acl_mode else (AclMode.CREATOR if auth_file else AclMode.OPEN)
        if auth_file is None:
            if mode is AclMode.CREATOR:
                raise ZooKeeperAuthError(
                    "high-availability.zookeeper.client.acl is 'creator' but no credentials are given: "
                    "set high-availability.zookeeper.auth-file (--zk-auth-file) to a file holding user:password"
                )
            return cls(acl_mode=mode)
        user, password = read_auth_file(auth_file)
        return cls(user, password, mode, auth_file)


def parse_credentials(text: str, source: str) -> tuple[str, str]:
    """``user:password`` from the first line of an auth file that is not empty or a ``#`` comment."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password or any(c.isspace() for c in line):
            raise ZooKeeperAuthError(
                f"{source}: expected one line user:password (no spaces), e.g. written by `sluice cluster start`"
            )
        return user, password
    raise ZooKeeperAuthError(f"{source}: no credentials in the file; expected one line user:password")


def read_auth_file(path: str) -> tuple[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ZooKeeperAuthError(
            f"cannot read the ZooKeeper credentials file {path} "
            f"(high-availability.zookeeper.auth-file): {exc.strerror or exc}"
        ) from None
    if stat.S_ISREG(mode) and mode & 0o007:
        _log.warning("ZooKeeper credentials file %s is readable by anyone (mode %o); chmod 600 it", path, mode & 0o777)
    return parse_credentials(text, path)


def write_auth_file(path: str, user: str = DEFAULT_USER) -> str:
    """Create ``path`` (mode 0600) holding ``user:<random password>``, unless it exists:
    an existing file is kept, so a restarted cluster keeps access to its nodes."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        read_auth_file(path)  # a broken file is an error now, not in every process
        return path
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"{user}:{secrets.token_urlsafe(32)}\n")
    return path


def make_client(hosts: str | None, auth: ZkAuth | None = None, **kwargs: Any) -> KazooClient:
    """A KazooClient of the cluster: authenticated with its credentials, creating nodes with its ACL."""
    if not hosts:
        raise ConfigError("zookeeper.quorum is required: the ZooKeeper connect string host:port[,...]")
    auth = auth or ZkAuth()
    return KazooClient(hosts=hosts, auth_data=auth.auth_data or None, default_acl=auth.acl, **kwargs)


def cluster_client(zookeeper: str, auth_file: str | None, **kwargs: Any) -> KazooClient:
    """A client of the cluster cluster.json describes (its ``zookeeper`` and ``zookeeper_auth_file``)."""
    return make_client(zookeeper, ZkAuth.resolve(auth_file, None), **kwargs)


def prepare_cluster_root(client: KazooClient, paths: ZkPaths, auth: ZkAuth) -> None:
    """Create ``/sluice`` (parent ACL) and ``/sluice/<cluster-id>`` (the cluster's ACL) if missing,
    and with ACL mode creator re-apply the cluster's ACL to nodes created open before."""
    try:
        client.create(ROOT, b"", acl=auth.parent_acl)
    except NodeExistsError:
        pass
    try:
        client.create(paths.root, b"", acl=auth.acl)
    except NodeExistsError:
        pass
    except NoAuthError:
        raise ZooKeeperAuthError(
            f"ZooKeeper refuses to create {paths.root}: {ROOT} belongs to other credentials. Give this "
            f"cluster a chroot of its own (zookeeper.quorum host:port/<chroot>) or the credentials of {ROOT}"
        ) from None
    if auth.acl_mode is AclMode.CREATOR and auth.user:
        changed = secure_tree(client, paths.root, auth.acl)
        if changed:
            _log.warning(
                "[cluster %s] restricted %d ZooKeeper node(s) under %s created open to the cluster's credentials",
                paths.cluster_id,
                changed,
                paths.root,
            )


def secure_tree(client: KazooClient, root: str, acl: list[ACL]) -> int:
    """Set ``acl`` on ``root`` and every node below it whose ACL differs; how many were changed.
    A node this client may not read is reported, never skipped silently."""
    changed = 0
    pending = [root]
    while pending:
        path = pending.pop()
        try:
            current, node = client.get_acls(path)
            if sorted(current) != sorted(acl):
                client.set_acls(path, acl, version=node.aversion)
                changed += 1
            pending.extend(f"{path}/{child}" for child in client.get_children(path))
        except NoNodeError:
            continue  # deleted meanwhile (an ephemeral node of a stopped process)
        except NoAuthError:
            raise ZooKeeperAuthError(
                f"ZooKeeper node {path} belongs to other credentials than "
                "high-availability.zookeeper.auth-file: give the cluster its original credentials, "
                "or another cluster id"
            ) from None
    return changed


def describe_no_auth(path: str, auth: ZkAuth | None) -> str:
    """The message for a NoAuth answer on ``path``."""
    if auth is None or not auth.user:
        return (
            f"ZooKeeper refused to read {path}: the cluster's nodes need its credentials. Point at the "
            "cluster with --cluster-dir (cluster.json names its credentials file) or give the file with "
            "--zk-auth-file / SLUICE_HIGH_AVAILABILITY_ZOOKEEPER_AUTH_FILE"
        )
    return f"ZooKeeper refused to read {path} with the credentials of {auth.source}: they are not the cluster's"


def main(argv: list[str] | None = None) -> int:
    """``python -m sluice.zk.auth create PATH``: write a credentials file (0600) unless one exists
    (docker-compose.yml runs it once into the shared volume)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m sluice.zk.auth", description="ZooKeeper digest credentials")
    parser.add_argument("action", choices=["create"])
    parser.add_argument("path", help="the file to write (kept when it exists)")
    parser.add_argument("--user", default=DEFAULT_USER)
    args = parser.parse_args(argv)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.path)), exist_ok=True)
        write_auth_file(args.path, args.user)
    except (OSError, ZooKeeperAuthError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"ZooKeeper credentials in {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
