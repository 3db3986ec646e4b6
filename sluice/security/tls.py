"""Certificates for mutual TLS between a cluster's processes and its clients.

A Sluice cluster has its own certificate authority. Every certificate it
issues names its holder in the subject's common name as `<role>/<name>`
(sluice/security/identity.py), which is what servers authorize on
(sluice/security/auth.py); see docs/security.md.

    sluice certs create DIR --jobmanagers 2 --taskmanagers 3 --dns-name jobmanager.sluice.svc

writes DIR/ca.pem and DIR/ca.key, and `<stem>.pem` / `<stem>.key` for each
process (`jobmanager-0`, `taskmanager-0`, ...) and for one client (`client`).
Keys are written 0600. `sluice cluster start` does the same in `<dir>/tls/`.

Server certificates (JobManagers, TaskManagers) carry the subject alternative
names localhost, 127.0.0.1, ::1, this host's name, any extra DNS names, and
:data:`SERVER_NAME`: the name every Sluice channel verifies
(``grpc.ssl_target_name_override``), because processes dial each other by
addresses no certificate made in advance can list (a pod's IP). Client
certificates carry no names and may only authenticate clients (extended key
usage clientAuth), so a client certificate cannot pose as a server.

This module imports only the standard library at the top: `cryptography`
and `grpc` are loaded by the functions that need them, so cluster.json's
reader stays light.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import ipaddress
import os
import socket
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from sluice.security.identity import Identity, Role

# The DNS name every server certificate carries and every channel checks.
SERVER_NAME = "sluice"
CA_FILE, CA_KEY_FILE = "ca.pem", "ca.key"
DEFAULT_DAYS = 365
CLIENT_STEM = "client"


class TlsError(ValueError):
    """A certificate or key file is missing, unreadable or malformed; the message names it."""


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """PEM files: the cluster's CA certificate, and this party's certificate and key.

    A client that authenticates with a bearer token instead has a CA only
    (cert and key None)."""

    ca: str
    cert: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise TlsError("a certificate needs its key and a key its certificate: give both or neither")

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any, where: str) -> TlsFiles:
        if not isinstance(data, dict) or not isinstance(data.get("ca"), str):
            raise TlsError(f"{where}: tls must be an object with ca, cert and key file names, got {data!r}")
        cert, key = data.get("cert"), data.get("key")
        if not isinstance(cert, (str, type(None))) or not isinstance(key, (str, type(None))):
            raise TlsError(f"{where}: tls.cert and tls.key must be file names, got {data!r}")
        return cls(data["ca"], cert, key)

    def read(self) -> tuple[bytes, bytes | None, bytes | None]:
        """(ca, cert, key) bytes; TlsError naming a file that cannot be read."""
        return _read(self.ca, "CA certificate"), _read_opt(self.cert, "certificate"), _read_opt(self.key, "key")


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TlsError(f"{what} file {path} does not exist") from None
    except OSError as exc:
        raise TlsError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"{what} file {path} is not PEM (no -----BEGIN line)")
    return data


def _read_opt(path: str | None, what: str) -> bytes | None:
    return None if path is None else _read(path, what)


# -- gRPC credentials ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def server_credentials(files: TlsFiles, require_client_auth: bool = True) -> Any:
    """grpc.ServerCredentials: this server's certificate, verifying clients against the CA.
    `require_client_auth=False` does not even request a client certificate (gRPC Python):
    only for the bearer-token port (sluice/security/auth.py)."""
    import grpc

    ca, cert, key = files.read()
    if cert is None or key is None:
        raise TlsError("a server needs a certificate and a key (security.ssl.cert, security.ssl.key)")
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=require_client_auth)


def channel_credentials(files: TlsFiles) -> Any:
    """grpc.ChannelCredentials: verify servers against the CA, present this certificate if any.
    Cached per file contents (path, size, mtime): certificates rewritten in place, e.g. by a
    cluster restarted in the same directory, are read again."""
    return _channel_credentials(files, _stamp(files))


def _stamp(files: TlsFiles) -> tuple[tuple[int, int] | None, ...]:
    out = []
    for path in (files.ca, files.cert, files.key):
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        out.append(None if st is None else (st.st_size, st.st_mtime_ns))
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _channel_credentials(files: TlsFiles, stamp: tuple[tuple[int, int] | None, ...]) -> Any:
    del stamp  # part of the cache key only
    import grpc

    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


# -- issuing ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CertificateAuthority:
    cert: Any  # cryptography.x509.Certificate
    key: Any  # its private key
    path: str  # the CA certificate's file

    @classmethod
    def create(cls, directory: str, name: str = "Sluice cluster CA", days: int = DEFAULT_DAYS) -> CertificateAuthority:
        """A new CA, written to DIR/ca.pem and DIR/ca.key (0600)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        _private_dir(directory)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        path = os.path.join(directory, CA_FILE)
        _write(path, _cert_pem(cert), 0o644)
        _write(os.path.join(directory, CA_KEY_FILE), _key_pem(key), 0o600)
        return cls(cert, key, path)

    @classmethod
    def load(cls, directory: str) -> CertificateAuthority:
        """The CA of DIR (ca.pem and ca.key), to issue more certificates from it."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        path = os.path.join(directory, CA_FILE)
        cert = x509.load_pem_x509_certificate(_read(path, "CA certificate"))
        key = serialization.load_pem_private_key(_read(os.path.join(directory, CA_KEY_FILE), "CA key"), None)
        return cls(cert, key, path)

    def issue(
        self,
        identity: Identity,
        directory: str,
        stem: str,
        dns_names: Iterable[str] = (),
        days: int = DEFAULT_DAYS,
    ) -> TlsFiles:
        """A certificate for `identity` (subject CN `<role>/<name>`), written to DIR/<stem>.pem
        and DIR/<stem>.key (0600). JobManagers and TaskManagers get server certificates (the
        names of the module docstring plus `dns_names`); clients get client-only ones."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        _private_dir(directory)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        server = identity.role != Role.CLIENT
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.cert.public_key()), critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(dns_names)), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = os.path.join(directory, f"{stem}.pem"), os.path.join(directory, f"{stem}.key")
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, _cert_pem(cert), 0o644)
        return TlsFiles(self.path, cert_path, key_path)


def _alt_names(dns_names: Iterable[str]) -> list[Any]:
    from cryptography import x509

    names = [SERVER_NAME, "localhost", *dns_names]
    try:
        names.append(socket.gethostname())
    except OSError:
        pass
    unique = list(dict.fromkeys(n.strip() for n in names if n and n.strip()))
    out: list[Any] = []
    for name in unique:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out + [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("::1"))]


@dataclasses.dataclass(frozen=True)
class ClusterCertificates:
    """What :func:`create_cluster` wrote: the CA, and each party's files by file stem."""

    directory: str
    ca: str
    parties: dict[str, TlsFiles]

    @property
    def client(self) -> TlsFiles:
        return self.parties[CLIENT_STEM]


def create_cluster(
    directory: str,
    jobmanagers: int = 1,
    taskmanagers: int = 1,
    dns_names: Sequence[str] = (),
    days: int = DEFAULT_DAYS,
) -> ClusterCertificates:
    """A new CA in DIR and certificates for `jobmanagers` JobManagers (`jobmanager/jobmanager-<i>`),
    `taskmanagers` TaskManagers (`taskmanager/taskmanager-<i>`) and one client (`client/client`)."""
    if jobmanagers < 0 or taskmanagers < 0:
        raise TlsError("the number of JobManagers and TaskManagers cannot be negative")
    ca = CertificateAuthority.create(directory, days=days)
    return _issue_cluster(ca, directory, jobmanagers, taskmanagers, dns_names, days)


def reissue_cluster(
    directory: str,
    jobmanagers: int = 1,
    taskmanagers: int = 1,
    dns_names: Sequence[str] = (),
    days: int = DEFAULT_DAYS,
) -> ClusterCertificates:
    """Like `create_cluster`, but from the CA already in DIR (a cluster restarted after a crash):
    clients that trust that CA keep working."""
    return _issue_cluster(CertificateAuthority.load(directory), directory, jobmanagers, taskmanagers, dns_names, days)


def _issue_cluster(
    ca: CertificateAuthority,
    directory: str,
    jobmanagers: int,
    taskmanagers: int,
    dns_names: Sequence[str],
    days: int,
) -> ClusterCertificates:
    if jobmanagers < 0 or taskmanagers < 0:
        raise TlsError("the number of JobManagers and TaskManagers cannot be negative")
    parties: dict[str, TlsFiles] = {}
    for role, count in ((Role.JOBMANAGER, jobmanagers), (Role.TASKMANAGER, taskmanagers)):
        for i in range(count):
            stem = f"{role}-{i}"
            parties[stem] = ca.issue(Identity(role, stem), directory, stem, dns_names, days)
    parties[CLIENT_STEM] = ca.issue(Identity(Role.CLIENT, CLIENT_STEM), directory, CLIENT_STEM, days=days)
    return ClusterCertificates(directory, ca.path, parties)


def issue_from(directory: str, role: Role, name: str, dns_names: Sequence[str] = ()) -> TlsFiles:
    """One more certificate from the CA in DIR (e.g. for a TaskManager added later), written there as <name>."""
    return CertificateAuthority.load(directory).issue(Identity(role, name), directory, name, dns_names)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _private_dir(directory: str) -> None:
    os.makedirs(directory, mode=0o700, exist_ok=True)


def _write(path: str, data: bytes, mode: int) -> None:
    """Write `data` to `path` created with `mode` (a key is never readable by others, not even briefly)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)  # O_CREAT's mode is masked by the umask
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _cert_pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    data: bytes = cert.public_bytes(serialization.Encoding.PEM)
    return data


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    data: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return data


# -- `sluice certs` -----------------------------------------------------------------------------
def add_certs_command(subparsers: Any) -> None:
    """`sluice certs create DIR ...` and `sluice certs issue DIR ROLE NAME`."""
    p = subparsers.add_parser(
        "certs",
        help="create a cluster's CA and certificates (for compose, Kubernetes, or your own processes)",
        description="Create a certificate authority and the certificates of a Sluice cluster's processes "
        "and clients (see docs/security.md). Keys are written 0600.",
    )
    sub = p.add_subparsers(dest="certs_action", required=True)
    c = sub.add_parser("create", help="a new CA and certificates for JobManagers, TaskManagers and a client")
    c.add_argument("dir", metavar="DIR", help="directory to write ca.pem, ca.key, <name>.pem and <name>.key to")
    c.add_argument("--jobmanagers", type=int, default=1, help="JobManager certificates jobmanager-0.. (default 1)")
    c.add_argument("--taskmanagers", type=int, default=1, help="TaskManager certificates taskmanager-0.. (default 1)")
    c.add_argument(
        "--dns-name",
        action="append",
        default=[],
        metavar="NAME",
        help="an extra DNS name or IP for the server certificates (repeatable), e.g. jobmanager.sluice.svc",
    )
    c.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"validity in days (default {DEFAULT_DAYS})")
    keep = c.add_mutually_exclusive_group()
    keep.add_argument("--force", action="store_true", help="replace an existing CA in DIR")
    keep.add_argument(
        "--if-missing", action="store_true", help="do nothing (exit 0) when DIR already holds a CA, e.g. in a container"
    )
    c.set_defaults(handler=_cmd_create)
    i = sub.add_parser("issue", help="one more certificate from the CA in DIR")
    i.add_argument("dir", metavar="DIR", help="directory holding ca.pem and ca.key")
    i.add_argument("role", choices=[r.value for r in Role])
    i.add_argument("name", help="the holder's name: the certificate says <role>/<name>; files <name>.pem/.key")
    i.add_argument("--dns-name", action="append", default=[], metavar="NAME", help="an extra DNS name or IP")
    i.set_defaults(handler=_cmd_issue)


def _cmd_create(args: argparse.Namespace) -> int:
    if os.path.exists(os.path.join(args.dir, CA_FILE)) and args.if_missing:
        print(f"{args.dir} already holds a CA ({CA_FILE}): left as it is")
        return 0
    if os.path.exists(os.path.join(args.dir, CA_FILE)) and not args.force:
        print(f"sluice certs: {args.dir} already holds a CA ({CA_FILE}); pass --force to replace it", file=sys.stderr)
        return 2
    if args.days < 1:
        print(f"sluice certs: --days must be at least 1, got {args.days}", file=sys.stderr)
        return 2
    try:
        made = create_cluster(args.dir, args.jobmanagers, args.taskmanagers, args.dns_name, args.days)
    except TlsError as exc:
        print(f"sluice certs: {exc}", file=sys.stderr)
        return 2
    print(f"CA: {made.ca}")
    for stem, files in made.parties.items():
        print(f"{stem}: {files.cert} {files.key}")
    return 0


def _cmd_issue(args: argparse.Namespace) -> int:
    try:
        Identity(Role(args.role), args.name)
        if not args.name or "/" in args.name:
            raise TlsError(f"a name without '/', got {args.name!r}")
        files = issue_from(args.dir, Role(args.role), args.name, args.dns_name)
    except TlsError as exc:
        print(f"sluice certs: {exc}", file=sys.stderr)
        return 2
    print(f"{args.role}/{args.name}: {files.cert} {files.key}")
    return 0
