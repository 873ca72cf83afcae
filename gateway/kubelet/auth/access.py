"""Who is calling the kubelet API, and may they?

(docs/design/kubelet-contract.md, "Authentication and authorization".)

Authentication, in the kubelet's order: a TLS client certificate verified against the client
CA (user = CN, groups = O), else a bearer token checked with a ``TokenReview``, else — only
if explicitly enabled — ``system:anonymous``.  Authorization asks the API server with a
``SubjectAccessReview`` on ``nodes/<subresource>`` of this node, the verb derived from the
HTTP method (a WebSocket upgrade is a GET → ``get``; SPDY is a POST → ``create``).

The path → subresource table is the kubelet's fine-grained one (GA in 1.36): ``/stats``,
``/metrics``, ``/logs``, ``/spec``, ``/checkpoint`` are checked on their own subresource only;
``/pods``, ``/runningpods``, ``/healthz``, ``/configz`` on their own subresource first and on
``proxy`` as fallback; everything else (logs of containers, exec, attach, port-forward, run)
on ``proxy``.

Caches keep an exec storm from becoming an API storm: TokenReview results 2 min (failures
30 s), SAR allows 5 min and denies 30 s.  Errors talking to the API server are never cached.
Tokens are cached under their SHA-256, never in clear.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from vkgate_core.clock import Clock, SystemClock

log = logging.getLogger(__name__)

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewClient(Protocol):
    """The one API call auth needs (``gateway.kube.client.KubeClient`` satisfies it)."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: How the user was authenticated: "x509", "token" or "anonymous".
    method: str = ""

    def extra_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.extra}


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",), method="anonymous")


class AuthError(Exception):
    """Ends a request with ``status`` (401, 403 or 500) and a message that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# --------------------------------------------------------------------------- cache

K = TypeVar("K")
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """A small LRU with a per-entry expiry on an injectable clock."""

    def __init__(self, clock: Clock, *, max_entries: int = 4096) -> None:
        self._clock = clock
        self._max = max_entries
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K) -> V | None:
        item = self._data.get(key)
        if item is None or item[0] <= self._clock.monotonic():
            if item is not None:
                del self._data[key]
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return item[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        self._data[key] = (self._clock.monotonic() + ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


# --------------------------------------------------------------------------- path mapping

_VERBS = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}

#: first path segment -> (fine-grained subresource, falls back to proxy?)
_SUBRESOURCES: Mapping[str, tuple[str, bool]] = {
    "stats": ("stats", False),
    "metrics": ("metrics", False),
    "logs": ("log", False),
    "spec": ("spec", False),
    "checkpoint": ("checkpoint", False),
    "pods": ("pods", True),
    "runningpods": ("pods", True),
    "healthz": ("healthz", True),
    "configz": ("configz", True),
}


def verb_for(method: str) -> str:
    return _VERBS.get(method.upper(), method.lower())


def subresources_for(path: str) -> tuple[str, ...]:
    """Subresources to check for ``path``, in order; the first allowed one wins."""
    first = path.lstrip("/").split("/", 1)[0]
    sub = _SUBRESOURCES.get(first)
    if sub is None:
        return ("proxy",)
    name, fallback = sub
    return (name, "proxy") if fallback else (name,)


# --------------------------------------------------------------------------- authn


def user_from_cert(cert: Mapping[str, Any] | None) -> UserInfo | None:
    """User from a *verified* peer certificate (``ssl.SSLSocket.getpeercert()`` shape)."""
    if not cert:
        return None
    cn = ""
    groups: list[str] = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and not cn:
                cn = value
            elif key == "organizationName":
                groups.append(value)
    if not cn:
        return None
    return UserInfo(cn, groups=tuple(groups), method="x509")


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class Authenticator:
    def __init__(
        self,
        *,
        client: ReviewClient | None,
        anonymous: bool = False,
        clock: Clock | None = None,
        token_ttl: float = 120.0,
        failure_ttl: float = 30.0,
    ) -> None:
        self._client = client
        self._anonymous = anonymous
        self._token_ttl = token_ttl
        self._failure_ttl = failure_ttl
        self.cache: TTLCache[str, UserInfo | str] = TTLCache(clock or SystemClock())
        self.reviews = 0

    async def authenticate(
        self, *, peer_cert: Mapping[str, Any] | None, authorization: str | None
    ) -> UserInfo:
        user = user_from_cert(peer_cert)
        if user is not None:
            return user
        token = bearer_token(authorization)
        if token is not None:
            return await self._token(token)
        if self._anonymous:
            return ANONYMOUS
        raise AuthError(
            401,
            "Unauthorized: no client certificate signed by the kubelet client CA and no "
            "bearer token (anonymous access is disabled)",
        )

    async def _token(self, token: str) -> UserInfo:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self.cache.get(key)
        if isinstance(cached, UserInfo):
            return cached
        if isinstance(cached, str):
            raise AuthError(401, cached)
        if self._client is None:
            raise AuthError(401, "Unauthorized: bearer tokens are not accepted (no API client)")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        self.reviews += 1
        try:
            result = await self._client.create(TOKEN_REVIEW_PATH, body)
        except Exception as exc:
            log.warning("kubelet authn: TokenReview failed: %s", type(exc).__name__)
            raise AuthError(
                401, f"Unauthorized: the token could not be verified (TokenReview failed: {exc})"
            ) from exc
        status = result.get("status") or {}
        if not status.get("authenticated"):
            why = status.get("error") or "token not authenticated"
            msg = f"Unauthorized: {why}"
            self.cache.put(key, msg, self._failure_ttl)
            raise AuthError(401, msg)
        u = status.get("user") or {}
        extra = u.get("extra") or {}
        user = UserInfo(
            str(u.get("username", "")),
            uid=str(u.get("uid", "")),
            groups=tuple(u.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(v or ())) for k, v in extra.items())),
            method="token",
        )
        self.cache.put(key, user, self._token_ttl)
        return user


# --------------------------------------------------------------------------- authz


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    subresource: str = ""


@dataclass
class Authorizer:
    """SubjectAccessReview on ``nodes/<subresource>`` of ``node_name`` (or always-allow)."""

    client: ReviewClient | None
    node_name: str
    mode: str = "webhook"
    clock: Clock = field(default_factory=SystemClock)
    allow_ttl: float = 300.0
    deny_ttl: float = 30.0

    def __post_init__(self) -> None:
        self.cache: TTLCache[tuple[Any, ...], Decision] = TTLCache(self.clock)
        self.reviews = 0

    async def authorize(self, user: UserInfo, *, method: str, path: str) -> Decision:
        """Raise ``AuthError(403)`` unless one of the path's subresources is allowed."""
        verb = verb_for(method)
        subs = subresources_for(path)
        if self.mode == "always-allow":
            return Decision(True, "always-allow", subs[0])
        reasons: list[str] = []
        for sub in subs:
            d = await self._check(user, verb, sub)
            if d.allowed:
                return d
            if d.reason:
                reasons.append(d.reason)
        why = f": {'; '.join(reasons)}" if reasons else ""
        raise AuthError(
            403,
            f"Forbidden (user={user.name}, verb={verb}, resource=nodes, "
            f"subresource(s)=[{', '.join(subs)}]){why}",
        )

    async def _check(self, user: UserInfo, verb: str, sub: str) -> Decision:
        key = (user.name, user.uid, tuple(sorted(user.groups)), user.extra, verb, sub)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        if self.client is None:
            raise AuthError(500, "Authorization error: no API client for SubjectAccessReview")
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": {
                "verb": verb,
                "resource": "nodes",
                "subresource": sub,
                "name": self.node_name,
                "group": "",
                "version": "v1",
            },
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra_dict()
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        self.reviews += 1
        try:
            result = await self.client.create(SAR_PATH, body)
        except Exception as exc:
            log.warning("kubelet authz: SubjectAccessReview failed: %s", exc)
            raise AuthError(
                500,
                f"Authorization error (user={user.name}, verb={verb}, resource=nodes, "
                f"subresource={sub}): SubjectAccessReview failed: {exc}",
            ) from exc
        status = result.get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        d = Decision(allowed, str(status.get("reason") or ""), sub)
        self.cache.put(key, d, self.allow_ttl if allowed else self.deny_ttl)
        return d
