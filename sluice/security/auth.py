"""Who may call which gRPC method: the role table every secured server enforces.

A secured server (TLS files configured, sluice/rpc.py) requires a client
certificate from the cluster's CA on its main port; the certificate's common
name `<role>/<name>` is the caller's identity (sluice/security/identity.py).
:class:`Authorizer`, a grpc server interceptor, checks each call against
:data:`RULES`, keyed by full method name (`/sluice.v1.JobManager/SubmitJob`):

| service | who may call |
|---|---|
| `sluice.v1.JobManager` (the client API) | client and jobmanager certificates, or a bearer token |
| `sluice.v1.ResourceManager` | taskmanager certificates |
| `sluice.v1.TaskExecutor` | jobmanager certificates |
| `sluice.v1.DataExchange` | taskmanager certificates |
| `grpc.health.v1.Health`, server reflection | any verified peer |

Any other method is denied. A denied call ends PERMISSION_DENIED with a
message naming the role it needs.

Bearer tokens: gRPC Python either requires a client certificate or does not
ask for one at all (``require_client_auth=False`` never requests it), so a
JobManager with a token file opens a second TLS port that asks for none
(security.token.port). Calls arriving without a certificate — only that port
lets them through the handshake — must carry ``authorization: Bearer
<token>`` (compared in constant time) and may call the client API and health
only. On a plaintext server (``--insecure``) nothing is installed and every
call passes. See docs/security.md.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from sluice.security.identity import Identity, Role, peer_identity

log = logging.getLogger("sluice.security")

ANY_PEER = frozenset(Role)
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = ("grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")


@dataclasses.dataclass(frozen=True)
class Rule:
    roles: frozenset[Role]  # certificate roles allowed
    token: bool = False  # a bearer token (without certificate) is allowed too

    def describe(self) -> str:
        if self.roles == ANY_PEER:
            return "any verified peer"
        names = "a " + " or ".join(sorted(self.roles)) + " certificate"
        return names + (", or a bearer token" if self.token else "")


SERVICE_RULES: dict[str, Rule] = {
    "sluice.v1.JobManager": Rule(frozenset({Role.CLIENT, Role.JOBMANAGER}), token=True),
    "sluice.v1.ResourceManager": Rule(frozenset({Role.TASKMANAGER})),
    "sluice.v1.TaskExecutor": Rule(frozenset({Role.JOBMANAGER})),
    "sluice.v1.DataExchange": Rule(frozenset({Role.TASKMANAGER})),
    HEALTH_SERVICE: Rule(ANY_PEER, token=True),
    **{name: Rule(ANY_PEER) for name in REFLECTION_SERVICES},
}


def _method_table() -> dict[str, Rule]:
    """Every method of the services above, by full method name, from the generated descriptors."""
    from grpc_health.v1 import health_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    from sluice.v1 import dataexchange_pb2, jobmanager_pb2, taskmanager_pb2

    table: dict[str, Rule] = {}
    for module in (jobmanager_pb2, taskmanager_pb2, dataexchange_pb2, health_pb2, reflection_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            rule = SERVICE_RULES.get(service.full_name)
            if rule is None:
                continue
            for method in service.methods:
                table[f"/{service.full_name}/{method.name}"] = rule
    # grpc.reflection.v1 (newer clients) has the same method as v1alpha
    table["/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"] = SERVICE_RULES[REFLECTION_SERVICES[1]]
    return table


RULES: Mapping[str, Rule] = _method_table()


@dataclasses.dataclass(frozen=True)
class Denied:
    code: grpc.StatusCode
    message: str


def decide(method: str, identity: Identity | None, token: str | None, expected_token: bytes | None) -> Denied | None:
    """None when the call may proceed, else why not. `identity`: the verified client
    certificate's (None without one); `token`: the bearer token the call carries."""
    rule = RULES.get(method)
    if rule is None:
        return Denied(grpc.StatusCode.PERMISSION_DENIED, f"{method} may not be called on this server")
    if identity is not None:
        if identity.role in rule.roles:
            return None
        return Denied(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method} needs {rule.describe()}; the caller presented a {identity.role} certificate ({identity})",
        )
    # no certificate: the bearer-token port
    if not rule.token:
        return Denied(grpc.StatusCode.PERMISSION_DENIED, f"{method} needs {rule.describe()}")
    if expected_token is None:
        return Denied(grpc.StatusCode.UNAUTHENTICATED, f"{method} needs {rule.describe()}")
    if token is None:
        return Denied(
            grpc.StatusCode.UNAUTHENTICATED,
            f"{method} needs {rule.describe()}: send the metadata 'authorization: Bearer <token>'",
        )
    if not hmac.compare_digest(token.encode(), expected_token):
        return Denied(grpc.StatusCode.UNAUTHENTICATED, "the bearer token was not accepted")
    return None


def bearer_token(metadata: Any) -> str | None:
    """The token of an `authorization: Bearer <token>` metadata entry, or None."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def read_token(path: str) -> bytes:
    """The bearer token held in `path` (surrounding whitespace stripped); ValueError naming the file."""
    try:
        with open(path, "rb") as f:
            token = f.read().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if len(token) < 16:
        raise ValueError(f"the token in {path} is shorter than 16 bytes; use a long random one")
    return token


class Authorizer(grpc.ServerInterceptor):
    """Wraps every handler so that it checks the caller (whose certificate is known only inside
    the call, from its auth context) against RULES before running."""

    def __init__(self, expected_token: bytes | None = None):
        self._token = expected_token

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        token = bearer_token(details.invocation_metadata)

        def check(context: grpc.ServicerContext) -> None:
            denied = decide(method, peer_identity(context), token, self._token)
            if denied is not None:
                log.warning("denied %s from %s: %s", method, context.peer(), denied.message)
                context.abort(denied.code, denied.message)

        return _guarded(handler, check)


def _guarded(handler: Any, check: Callable[[Any], None]) -> Any:
    """`handler` with `check(context)` run before its behaviour."""

    def wrap(behaviour: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def guarded(request: Any, context: Any) -> Any:
            check(context)
            return behaviour(request, context)

        return guarded

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary), **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream), **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(wrap(handler.stream_unary), **kwargs)
    return grpc.stream_stream_rpc_method_handler(wrap(handler.stream_stream), **kwargs)
