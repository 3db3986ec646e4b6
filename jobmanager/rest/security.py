"""Who may change jobs through the REST API (docs/monitoring.md, "Security").

GET requests are open: they read what `sluice status` shows, and the REST port binds to
127.0.0.1 unless rest.address says otherwise. Requests that change a job (PATCH, POST) are
checked here:

- on a secured cluster (TLS, or a bearer token configured) they need `Authorization: Bearer
  <token>` with the token of security.token.file, compared in constant time: 401 without it or
  with another one; 403 when the JobManager has no token file (then only the gRPC API, with a
  client certificate, can change jobs);
- on every cluster, a browser request from another origin (an `Origin` header naming another
  host:port than the request's `Host`) is refused (403), and a body must be JSON
  (`Content-Type: application/json`, else 415): together they keep a web page from making a
  visitor's browser cancel jobs (a cross-site request cannot send JSON without a CORS
  preflight, which this API never grants);
- on a plaintext `--insecure` cluster anything else is allowed, as on its gRPC port.

TaskManager logs hold what jobs print: on a secured cluster they need the same bearer token
unless rest.logs.public is set. Every request's `Host` must be one the API answers to
(`HostGuard`, rest.allowed-hosts): while the API binds a loopback address, only localhost and
loopback addresses, so that a page whose DNS name was rebound to 127.0.0.1 cannot make a
visitor's browser read or change jobs (421 otherwise).
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from fastapi import Request

from jobmanager.rest.errors import ApiError

HOW_TO_AUTHENTICATE = "send 'Authorization: Bearer <token>' with the token of the JobManager's security.token.file"


class TokenGuard:
    """What needs the bearer token on a secured cluster: changes to jobs, and TaskManager logs."""

    def __init__(self, token: bytes | None, secured: bool, logs_public: bool = False) -> None:
        self.token = token
        self.secured = secured or token is not None
        self.logs_public = logs_public

    def check_logs(self, request: Request) -> None:
        """Raise ApiError unless `request` may read TaskManager logs."""
        if not self.secured or self.logs_public:
            return
        if self.token is None:
            raise ApiError(
                403,
                "this cluster is secured and its JobManager has no bearer token (security.token.file): TaskManager "
                "logs are not served through REST; read its log.file (a local cluster's DIR/log/), start the "
                "JobManager with --token-file FILE, or set rest.logs.public",
            )
        self._check_token(request, "to read TaskManager logs")

    def check(self, request: Request) -> None:
        """Raise ApiError unless `request` may change a job."""
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            host = request.headers.get("host", "")
            if urlsplit(origin).netloc.lower() != host.lower():
                raise ApiError(403, "cross-origin requests may not change jobs: call the REST API directly")
        elif origin == "null":
            raise ApiError(403, "requests from an opaque origin may not change jobs")
        if not self.secured:
            return
        if self.token is None:
            raise ApiError(
                403,
                "this cluster is secured and its JobManager has no bearer token (security.token.file): "
                "the REST API cannot change jobs; start the JobManager with --token-file FILE and "
                + HOW_TO_AUTHENTICATE
                + ", or use the gRPC API with a client certificate (sluice cancel, sluice savepoint)",
            )
        self._check_token(request, "to change jobs")

    def _check_token(self, request: Request, purpose: str) -> None:
        assert self.token is not None
        header = request.headers.get("authorization")
        challenge = {"WWW-Authenticate": 'Bearer realm="sluice"'}
        if not header:
            raise ApiError(401, f"authentication required {purpose}: " + HOW_TO_AUTHENTICATE, challenge)
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), self.token):
            raise ApiError(401, "invalid bearer token: " + HOW_TO_AUTHENTICATE, challenge)


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostGuard:
    """Which `Host` headers the API answers to (rest.allowed-hosts; module docstring)."""

    def __init__(self, bind_address: str, allowed: str | None) -> None:
        self.any = allowed == "*" or (allowed is None and not _is_loopback(bind_address))
        self.names = frozenset() if allowed in (None, "*") else frozenset(allowed.split(","))  # beside loopback

    def check(self, host_header: str | None) -> None:
        if self.any:
            return
        host = _host_of(host_header or "")
        if host in self.names or _is_loopback(host):
            return
        raise ApiError(
            421,
            f"this API does not answer to the host {host[:64]!r}: use localhost or 127.0.0.1, or add the name "
            "to rest.allowed-hosts (a page whose DNS name points at this machine must not reach the API)",
        )


def _host_of(header: str) -> str:
    """The host part of a Host header, lower case: `Example.com:8081` -> `example.com`, `[::1]:80` -> `[::1]`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
