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
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from fastapi import Request

from jobmanager.rest.errors import ApiError

HOW_TO_AUTHENTICATE = "send 'Authorization: Bearer <token>' with the token of the JobManager's security.token.file"


class WriteGuard:
    def __init__(self, token: bytes | None, secured: bool) -> None:
        self.token = token
        self.secured = secured or token is not None

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
        header = request.headers.get("authorization")
        challenge = {"WWW-Authenticate": 'Bearer realm="sluice"'}
        if not header:
            raise ApiError(401, "authentication required to change jobs: " + HOW_TO_AUTHENTICATE, challenge)
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), self.token):
            raise ApiError(401, "invalid bearer token: " + HOW_TO_AUTHENTICATE, challenge)
