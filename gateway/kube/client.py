"""The one HTTP client to the Kubernetes API: raw JSON dicts, no generated models (the shapes
the code reads are named in ``vkgate_core.kubetypes``).

Why not the ``kubernetes`` package's ApiClient: it is synchronous, and its typed models drop
fields they do not know on a round trip (a PUT of a pod read with an older client erases newer
fields).  We keep the objects as the JSON the server sent and borrow exactly one thing from the
``kubernetes`` package: loading kubeconfig / in-cluster credentials into a ``KubeConfig``.

Design decisions:

* **One pipeline over a sender seam.** Auth header, rate limit, retries, ``stats``, error
  mapping and watch decoding happen here, once; each attempt goes to a ``Sender``
  (gateway/kube/sender.py): the lean ``Http11Sender`` in production and in the unit tests
  (a loopback fake API server), ``HttpxSender`` when a proxy applies or a caller passes an
  httpx ``transport=`` (docs/design/kube-client.md, "HTTP path").
* **One error mapping.** Every failure goes through ``errors.error_from_status`` /
  ``errors.error_from_transport``.
* **Rate limit** is a token bucket (``kube.qps``/``kube.burst``) shared by every request,
  watches included (a watch costs one token when it opens).
* **Retries are data** (``KUBE_RETRY``, applied by the one retry loop
  ``vkgate_core.retry.retry_after_first``, docs/design/retry.md): idempotent reads are retried on
  5xx / 429 / connection errors with jittered backoff, honouring ``Retry-After``; writes only on
  429, which the server sends before doing anything (APF throttling), or when the connection was
  never made, so a retry can never apply a write twice.  Every attempt takes a rate-limit token
  and is counted in ``stats``.
* ``stats`` counts every write sent, keyed ``(verb, resource[/subresource])``, for tests and the
  benchmark (e.g. ``stats[("patch", "pods/status")]``).
* **The Lease lane** (``lease_lane()``): the node's heartbeat Lease and its leader Lease are
  renewed through a client of their own — no token bucket (their loops' periods bound them),
  and its own connections when the sender asks for them (``Sender.own_lease_lane``: the lean
  sender does) — so a burst of pod traffic saturating the shared bucket or connection pool
  cannot make the node's own Lease lapse (docs/design/kube-client.md, "The Lease lane").
* All waiting goes through ``vkgate_core.clock.Clock`` so timing is testable with a fake clock.
"""

from __future__ import annotations

import json as _json
import logging
import os
import random
import ssl
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import httpx

from gateway.config import KubeSettings
from gateway.errors import StartupError
from gateway.kube.errors import ApiError, NotLeader, error_from_status, error_from_transport
from gateway.kube.http11 import Http11Sender
from gateway.kube.sender import HttpxSender, Response, Sender
from vkgate_core.clock import Clock, SystemClock
from vkgate_core.ratelimit import TokenBucket
from vkgate_core.retry import MAYBE_RETRIED, NO_RETRY, RetryPolicy, retry_after_first

__all__ = [
    "KUBE_RETRY",
    "NO_RETRY",
    "KubeClient",
    "KubeConfig",
    "RetryPolicy",
    "Sender",
    "TokenBucket",
    "make_sender",
]

log = logging.getLogger("gateway.kube")

USER_AGENT = "vkgate/0.1.0"
PatchType = Literal["strategic", "merge", "json", "apply"]
PATCH_CONTENT_TYPES: dict[str, str] = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",  # JSON is valid YAML
}
_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to authenticate (client cert and/or bearer token).

    Exposed as ``KubeClient.config`` so the kubelet server can reuse the CA or client cert.
    """

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    #: Returns the ``Authorization`` header value ("Bearer …") or None; called per request so
    #: rotated tokens (projected service-account tokens, exec plugins) are picked up.
    token_source: Callable[[], str | None] | None = field(default=None, repr=False, compare=False)

    @property
    def token(self) -> str | None:
        return self.token_source() if self.token_source else None

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file or None)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        return ctx


def load_config(path: str = "", *, context: str = "") -> KubeConfig:
    """Load credentials with the ``kubernetes`` package: ``path``, else ``$KUBECONFIG``, else
    in-cluster (service account), else ``~/.kube/config``.  Raises ``StartupError``."""
    import yaml
    from kubernetes import client as kclient
    from kubernetes.config import incluster_config, kube_config
    from kubernetes.config.config_exception import ConfigException

    cfg = kclient.Configuration()
    in_cluster = (
        not path
        and not os.environ.get("KUBECONFIG")
        and bool(os.environ.get(incluster_config.SERVICE_HOST_ENV_NAME))
    )
    source = (
        "in-cluster service account"
        if in_cluster
        else (path or os.environ.get("KUBECONFIG") or "~/.kube/config")
    )
    try:
        if in_cluster:
            incluster_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path or os.environ.get("KUBECONFIG") or None,
                context=context or None,
                client_configuration=cfg,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as exc:
        # one line: YAML parser messages span several (mark, snippet, caret)
        reason = " ".join(str(exc).split())
        raise StartupError(f"cannot load Kubernetes credentials from {source}: {reason}") from exc

    def token_source() -> str | None:
        value: str | None = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if value and value.lower().startswith("bearer "):
            value = "Bearer " + value[7:]
        return value

    has_token = bool(cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization"))
    return KubeConfig(
        server=str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert or None,
        cert_file=cfg.cert_file or None,
        key_file=cfg.key_file or None,
        verify=bool(cfg.verify_ssl),
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
        token_source=token_source if has_token else None,
    )


# --------------------------------------------------------------------------- policies


#: The Kubernetes API's retry policy (docs/design/retry.md): reads on 5xx / 429 / connection
#: errors, writes only on 429 (APF throttles before doing anything) or a connection never made.
KUBE_RETRY = RetryPolicy(
    delays=(0.2, 0.5, 1.0, 2.0, 4.0),
    jitter=0.2,
    max_retry_after=30.0,
    idempotent=frozenset({"GET", "HEAD"}),
)


# --------------------------------------------------------------------------- the client


def resource_of(path: str) -> str:
    """``/api/v1/namespaces/ns/pods/p/status`` → ``pods/status`` (for ``stats``)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    if not parts:
        return ""
    return f"{parts[0]}/{parts[2]}" if len(parts) > 2 else parts[0]


#: Connections of the Lease lane (lean sender): a renewal never waits for a pod's request.
LEASE_CONNECTIONS = 2


class KubeClient:
    """Async Kubernetes API client over raw JSON.  Paths are raw API paths."""

    def __init__(
        self,
        config: KubeConfig,
        *,
        sender: Sender | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        qps: float = 50.0,
        burst: int = 100,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        max_connections: int = 100,
    ) -> None:
        self.config = config
        self.server = config.server.rstrip("/")
        self.timeout = timeout
        self.retry = retry or KUBE_RETRY
        self.clock: Clock = clock or SystemClock()
        self.stats: Counter[tuple[str, str]] = Counter()
        #: ``fence(method, path)`` → a reason to refuse a write before it is sent, or None.
        #: Leader election sets it so a deposed leader cannot write (docs/design/ha.md).
        self.fence: Callable[[str, str], str | None] | None = None
        self._rng = rng or random.Random()
        self._limiter = TokenBucket(qps, burst, clock=self.clock)
        self._headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        #: What carries each attempt (docs/design/kube-client.md, "HTTP path").
        self.sender: Sender = sender or make_sender(
            config, transport=transport, timeout=timeout, max_connections=max_connections
        )
        #: The client whose lane this is (``lease_lane()``), and this client's Lease lane.
        self._owner: KubeClient | None = None
        self._lease_lane: KubeClient | None = None

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_settings(cls, s: KubeSettings, **kwargs: Any) -> KubeClient:
        """From ``gateway.config.KubeSettings`` (kubeconfig, context, qps, burst, timeout)."""
        config = load_config(s.kubeconfig, context=s.context)
        return cls(config, qps=s.qps, burst=s.burst, timeout=s.timeout, **kwargs)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | Path,
        *,
        context: str = "",
        qps: float = 50.0,
        burst: int = 100,
        **kwargs: Any,
    ) -> KubeClient:
        return cls(load_config(str(path), context=context), qps=qps, burst=burst, **kwargs)

    def lease_lane(self) -> KubeClient:
        """The client the node's Leases are renewed with: the same server, credentials, retry
        policy, fence and ``stats``, but no token bucket (a renewal loop's period is its rate)
        and, on a sender that declares ``own_lease_lane`` (the lean one), ``LEASE_CONNECTIONS``
        connections of its own.  So a renewal never queues behind the pods' requests for a
        token or a connection (under a 1,000-pod burst the leader Lease lapsed and the node
        refused its own writes)."""
        if self._owner is not None:
            return self
        if self._lease_lane is None:
            sender = self.sender
            if sender.own_lease_lane:
                sender = make_sender(
                    self.config, timeout=self.timeout, max_connections=LEASE_CONNECTIONS
                )
            lane = KubeClient(
                self.config,
                sender=sender,
                qps=0,
                burst=1,
                timeout=self.timeout,
                retry=self.retry,
                clock=self.clock,
                rng=self._rng,
            )
            lane._owner = self
            lane.stats = self.stats
            self._lease_lane = lane
        return self._lease_lane

    async def aclose(self) -> None:
        lane, self._lease_lane = self._lease_lane, None
        if lane is not None and lane.sender is not self.sender:
            await lane.sender.aclose()
        await self.sender.aclose()

    @property
    def connections_opened(self) -> int | None:
        """Connections the lean path has opened (None when requests go through httpx)."""
        return self.sender.connections_opened

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- core --------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        content_type: str | None = None,
        retry: RetryPolicy | None = None,
        limiter: TokenBucket | None = None,
    ) -> dict[str, Any]:
        """Send one request (with rate limit and retries) and return the decoded JSON body.

        ``retry`` overrides the client's policy for this call (``NO_RETRY`` for callers that run
        their own retry loop and want to see every failure).  ``limiter`` replaces the shared
        token bucket for this call (the EventRecorder has its own budget, as the kubelet's
        eventRecordQPS/eventBurst, so Events never slow status writes).
        """
        method = method.upper()
        hdrs = dict(headers or {})
        content: bytes | None = None
        if json is not None:
            content = _json.dumps(json, separators=(",", ":")).encode()
            hdrs["Content-Type"] = content_type or "application/json"
        verb = _WRITE_VERBS.get(method)
        fence = self.fence if self._owner is None else self._owner.fence
        if verb and fence is not None:
            refused = fence(method, path)
            if refused:
                raise NotLeader(f"{method} {path} not sent: {refused}", reason="NotLeader")
        bucket = limiter or self._limiter
        await bucket.acquire()
        if verb:
            self.stats[(verb, resource_of(path))] += 1
        sender = self.sender
        target = _target(path, params)
        all_headers = {**self._headers, **hdrs}
        token = self.config.token
        if token:
            all_headers["Authorization"] = token

        def send() -> Awaitable[Response]:
            return sender.request(method, target, all_headers, content, time_limit=self.timeout)

        async def before_retry() -> None:
            await bucket.acquire()
            if verb:
                self.stats[(verb, resource_of(path))] += 1

        resp: Response | None = None
        error: httpx.TransportError | None = None
        try:
            try:
                resp = await send()
            except httpx.TransportError as exc:
                error = exc
            if error is not None or (resp is not None and resp.status_code in MAYBE_RETRIED):
                resp = await retry_after_first(
                    method,
                    send,
                    resp,
                    error,
                    policy=retry if retry is not None else self.retry,
                    sleep=self.clock.sleep,
                    rng=self._rng,
                    before_retry=before_retry,
                    what=f"{self.server}{path}",
                )
        except httpx.TransportError as exc:
            raise error_from_transport(exc, context=f"{method} {self.server}{path}") from exc
        assert resp is not None
        if resp.status_code < 400:
            return _decode(resp.content)
        raise error_from_status(
            resp.status_code, resp.content, retry_after=resp.headers.get("retry-after")
        )

    async def get(
        self,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> dict[str, Any]:
        return await self.request("GET", path, params=params, retry=retry)

    async def list(
        self, path: str, *, params: Mapping[str, Any] | None = None, limit: int = 500
    ) -> dict[str, Any]:
        """LIST in pages of ``limit``, following ``continue``; one merged list back."""
        query = dict(params or {})
        query.setdefault("limit", limit)
        items: list[dict[str, Any]] = []
        while True:
            page = await self.get(path, params=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return {
                    "kind": page.get("kind", ""),
                    "apiVersion": page.get("apiVersion", ""),
                    "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
                    "items": items,
                }
            query["continue"] = token

    async def create(
        self, path: str, body: Mapping[str, Any], *, limiter: TokenBucket | None = None
    ) -> dict[str, Any]:
        return await self.request("POST", path, json=body, limiter=limiter)

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, json=body)

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: PatchType = "strategic",
        field_manager: str | None = None,
        force: bool = False,
        limiter: TokenBucket | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if force:
            params["force"] = "true"
        return await self.request(
            "PATCH",
            path,
            params=params or None,
            json=body,
            content_type=PATCH_CONTENT_TYPES[patch_type],
            limiter=limiter,
        )

    async def delete(
        self, path: str, *, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """DELETE; the returned object/Status, or None for an empty body.  404 raises NotFound."""
        result = await self.request("DELETE", path, json=body)
        return result or None

    async def watch(
        self,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events ``{"type", "object"}`` (line-delimited JSON).

        HTTP 410 or an ``ERROR`` event with code 410 raise ``Gone``; other ``ERROR`` events
        raise their mapped ``ApiError``.  A clean server close just ends the iteration.
        ``read_timeout`` None = wait forever (the Reflector's inactivity watchdog bounds it).
        """
        query = dict(params or {})
        query["watch"] = "true"
        headers = dict(self._headers)
        token = self.config.token
        if token:
            headers["Authorization"] = token
        await self._limiter.acquire()
        try:
            async with self.sender.stream(
                "GET",
                _target(path, query),
                headers,
                head_limit=self.timeout,
                read_timeout=read_timeout,
            ) as resp:
                if resp.status_code >= 400:
                    body = await resp.aread()
                    raise error_from_status(
                        resp.status_code, body, retry_after=resp.headers.get("retry-after")
                    )
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    try:
                        event = _json.loads(line)
                    except ValueError as exc:
                        raise ApiError(f"malformed watch event on {path}: {line[:200]!r}") from exc
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise error_from_status(int(status.get("code") or 500), status)
                    yield event
        except httpx.TransportError as exc:
            raise error_from_transport(exc, context=f"watch {self.server}{path}") from exc


def make_sender(
    config: KubeConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: float = 30.0,
    max_connections: int = 100,
) -> Sender:
    """The lean HTTP/1.1 sender, or httpx where a test injects a ``transport`` or a proxy
    from the environment applies (docs/design/kube-client.md, "HTTP path")."""
    server = config.server.rstrip("/")
    if transport is not None:
        return HttpxSender(server, transport=transport, tls_server_name=config.tls_server_name)
    ssl_context = config.ssl_context() if server.startswith("https") else None
    if _proxied(server):
        return HttpxSender(server, ssl_context=ssl_context, tls_server_name=config.tls_server_name)
    return Http11Sender(
        server,
        ssl_context=ssl_context,
        server_hostname=config.tls_server_name,
        max_connections=max_connections,
        connect_timeout=timeout,
    )


def _proxied(server: str) -> bool:
    """True when the environment routes ``server`` through a proxy (then httpx sends)."""
    proxies = urllib.request.getproxies()
    scheme = urlsplit(server).scheme
    if not (proxies.get(scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(urlsplit(server).hostname or "")


def _target(path: str, params: Mapping[str, Any] | None) -> str:
    """``path`` with its query, percent-encoded once here for every sender."""
    query = _params(params)
    return f"{path}?{urlencode(query, quote_via=quote)}" if query else path


def _params(params: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not params:
        return None
    out: dict[str, str] = {}
    for k, v in params.items():
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _decode(content: bytes) -> dict[str, Any]:
    if not content:
        return {}
    try:
        data = _json.loads(content)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {"items": data}
