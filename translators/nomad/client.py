"""Async HTTP client for the Nomad API: TLS, auth, namespaces, retries, blocking queries, streams.

Why not python-nomad: it is synchronous, defaults to ``verify=False``, has no blocking queries,
buffers ``follow`` logs and has no exec.  This client is a thin layer over ``httpx`` that
owns exactly four concerns:

* **connection policy** — one ``httpx.AsyncClient`` with TLS verified by default (CA bundle or
  directory, mTLS client cert, server name, explicit ``skip_verify``: the ``NOMAD_*`` variables of
  a ``nomad`` shell), connect/read timeouts and a pool below Nomad's 100-connections-per-IP
  limit.  The exec WebSocket uses the same ``ssl`` context and server name (``exec.py``); a TLS
  failure is never retried (``TLSGuard``: it cannot heal by itself) and reads as one line;
* **the endpoint table** — every path is looked up in ``acl.ENDPOINTS`` before it is sent (an
  unlisted call fails), a ``Permission denied`` names what the endpoint needs, and refusals are
  remembered until a call that needs the same grant succeeds (``acl.Refusals``);
* **identity** — ``X-Nomad-Token`` and the ``namespace``/``region`` query parameters on every
  call;
* **retries as data** — the one retry layer (``vkgate_core.retry.RetryTransport``,
  docs/design/retry.md) with ``retry_policy(config.retry_backoff)``: reads are retried on
  429/5xx/connection errors, writes only on 429 or a connection never made; ``Retry-After`` is
  honoured (the longer of the two wins, capped).  Sleeping goes through an injectable ``sleep``
  so tests never wait;
* **errors** — every failure passes through ``errors.error_for_status`` /
  ``error_for_transport`` (the one mapping).

The transport is a seam: pass ``transport=`` (respx, ``httpx.MockTransport``, a fake) and the
same code runs without a network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from translators.base import BackendAuthError, BackendError, BackendThrottled, BackendUnavailable
from translators.nomad.acl import Endpoint, Refusals, endpoint_for
from translators.nomad.config import NomadConfig
from translators.nomad.errors import error_for_status, error_for_transport, tls_problem
from vkgate_core.retry import NO_RETRY, RETRY, RetryPolicy, RetryTransport
from vkgate_core.settings import SettingsError

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
#: How long one more log stream waits for one of ``max_log_streams`` to end (seconds).
LOG_STREAM_WAIT = 5.0
Params = Mapping[str, str | int | bool | list[str] | None]
Query = list[tuple[str, str | int | float | bool | None]]


def retry_policy(backoff: tuple[float, ...], *, max_retry_after: float = 60.0) -> RetryPolicy:
    """Nomad's policy on the one retry layer: ``backoff`` is the tuple of delays."""
    return RetryPolicy(delays=backoff, max_retry_after=max_retry_after)


@dataclass(frozen=True)
class Reply:
    """A decoded answer: JSON body plus Nomad's ``X-Nomad-Index`` (0 when absent)."""

    data: Any
    index: int
    headers: httpx.Headers


def _pem_dir(directory: str) -> str:
    """Every certificate in a directory tree (``NOMAD_CAPATH``): like Nomad's client
    (go-rootcerts ``LoadCAPath``), each regular file must be PEM; hidden files count too."""
    pems: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = Path(root, name)
            text = path.read_text(encoding="ascii", errors="replace")
            if "-----BEGIN CERTIFICATE-----" not in text:
                raise SettingsError("backend.nomad.ca_path", f"no PEM certificate in {path}")
            pems.append(text)
    if not pems:
        raise SettingsError("backend.nomad.ca_path", f"no certificate files in {directory}")
    return "\n".join(pems)


def ssl_context(config: NomadConfig) -> ssl.SSLContext | bool:
    """TLS settings for every connection (httpx and the exec WebSocket).  Verified unless
    ``skip_verify``; ``ca_cert`` wins over ``ca_path`` (as in Nomad's CLI); either replaces
    the system roots.  A file that cannot be loaded is a ``SettingsError`` naming its key."""
    if not config.address.startswith("https://") and not (config.ca_cert or config.ca_path):
        return True
    key = "ca_cert"
    try:
        if config.skip_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif config.ca_cert:
            ctx = ssl.create_default_context(cafile=config.ca_cert)
        elif config.ca_path:
            key = "ca_path"
            ctx = ssl.create_default_context(cadata=_pem_dir(config.ca_path))
        else:
            ctx = ssl.create_default_context()
        if config.client_cert:
            key = "client_cert"
            ctx.load_cert_chain(config.client_cert, config.client_key or None)
    except SettingsError:
        raise
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise SettingsError(f"backend.nomad.{key}", f"cannot load: {exc}") from exc
    return ctx


class TLSFailure(httpx.HTTPError):
    """A TLS handshake that failed (wrong CA, no client certificate, name mismatch).  Not an
    ``httpx.TransportError``, so the retry layer does not repeat what cannot heal by itself."""


class TLSGuard(httpx.AsyncBaseTransport):
    """Turns every TLS error of the inner transport into ``TLSFailure`` — also the raw
    ``ssl.SSLError`` httpcore lets through when the server's alert (e.g. "certificate
    required") arrives with the response instead of during the handshake."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    @staticmethod
    def _failure(exc: BaseException, request: httpx.Request) -> TLSFailure | None:
        problem = tls_problem(exc)
        if problem is None:
            return None
        failure = TLSFailure(problem)
        failure.request = request
        return failure

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx.TransportError, ssl.SSLError) as exc:
            failure = self._failure(exc, request)
            if failure is None:
                raise
            raise failure from exc
        if not isinstance(response.stream, httpx.AsyncByteStream):
            return response
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_GuardedStream(response.stream, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _GuardedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request) -> None:
        self.inner = inner
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.inner:
                yield chunk
        except ssl.SSLError as exc:
            failure = TLSGuard._failure(exc, self.request)
            raise (failure or exc) from exc

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts every request sent to Nomad (each retry too) by ``(method, endpoint path)``, the
    path in the endpoint table's notation (``/job/:job_id``): bounded labels, never an ID."""

    def __init__(self, inner: httpx.AsyncBaseTransport, counts: Counter[tuple[str, str]]) -> None:
        self.inner = inner
        self.counts = counts

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        at = path.find("/v1/")
        try:
            endpoint = endpoint_for(request.method, path[at + 3 :] if at >= 0 else path).path
        except LookupError:
            endpoint = "other"
        self.counts[(request.method, endpoint)] += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class NomadClient:
    """One connection pool to one Nomad address.  Close with ``aclose()``."""

    def __init__(
        self,
        config: NomadConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.config = config
        self.retry = retry or retry_policy(config.retry_backoff)
        self._sleep = sleep
        self.ssl: ssl.SSLContext | bool = True if transport is not None else ssl_context(config)
        #: Requests sent, by (method, endpoint path of ``acl.ENDPOINTS``), retries included;
        #: exec WebSockets are not HTTP pool requests and are not counted here.
        self.requests: Counter[tuple[str, str]] = Counter()
        headers = {"User-Agent": "vkgate"}
        if config.token:
            headers["X-Nomad-Token"] = config.token
        limits = httpx.Limits(
            max_connections=config.max_connections,
            max_keepalive_connections=min(10, config.max_connections),
        )
        timeout = httpx.Timeout(config.timeout, connect=config.connect_timeout)
        injected = transport is not None
        if transport is None:
            transport = httpx.AsyncHTTPTransport(verify=self.ssl, limits=limits, trust_env=False)
        self.http = httpx.AsyncClient(
            base_url=config.address,
            headers=headers,
            timeout=timeout,
            transport=RetryTransport(
                CountingTransport(TLSGuard(transport), self.requests),
                policy=self.retry,
                sleep=sleep,
            ),
            trust_env=False,
        )
        #: Log streams on a pool of their own (``max_log_streams``): a followed stream holds
        #: its connection while it follows (docs/design/nomad.md, "Connections").  An injected
        #: transport (tests) serves both.
        self.logs_http = self.http
        if not injected:
            log_limits = httpx.Limits(
                max_connections=config.max_log_streams,
                max_keepalive_connections=config.max_log_streams,
            )
            self.logs_http = httpx.AsyncClient(
                base_url=config.address,
                headers=headers,
                timeout=timeout,
                transport=CountingTransport(
                    TLSGuard(
                        httpx.AsyncHTTPTransport(
                            verify=self.ssl, limits=log_limits, trust_env=False
                        )
                    ),
                    self.requests,
                ),
                trust_env=False,
            )
        #: httpcore sends ``sni_hostname`` as the TLS server name: SNI and the name verified.
        self._extensions: dict[str, Any] = (
            {"sni_hostname": config.tls_server_name} if config.tls_server_name else {}
        )
        #: ACL refusals seen, until a call that needs the same grant succeeds.
        self.refusals = Refusals()
        #: region param → the highest X-Nomad-Index seen (``newest_index``)
        self._newest: dict[str, int] = {}

    async def aclose(self) -> None:
        await self.http.aclose()
        if self.logs_http is not self.http:
            await self.logs_http.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    def params(
        self,
        params: Params | None = None,
        *,
        namespace: str | None = None,
        region: str | None = None,
    ) -> Query:
        """Query parameters with namespace/region added (lists repeat the key)."""
        out: Query = []
        ns = self.config.namespace if namespace is None else namespace
        reg = self.config.region if region is None else region
        if ns:
            out.append(("namespace", ns))
        if reg:
            out.append(("region", reg))
        for k, v in (params or {}).items():
            if v is None:
                continue
            if isinstance(v, bool):
                out.append((k, "true" if v else "false"))
            elif isinstance(v, list):
                out.extend((k, str(item)) for item in v)
            else:
                out.append((k, str(v)))
        return out

    def namespace_of(self, params: Query) -> str:
        """The namespace a request acts in (Nomad's default when the query names none)."""
        return next((str(v) for k, v in params if k == "namespace" and v), "default")

    def endpoint(self, method: str, path: str) -> Endpoint:
        """The table entry of a call (``acl.ENDPOINTS``); raises for an unlisted one."""
        return endpoint_for(method, path)

    def refused(self, exc: BackendError, endpoint: Endpoint, namespace: str) -> BackendError:
        """Note an ACL refusal (``exc`` is what ``error_for_status`` made of the answer)."""
        if isinstance(exc, BackendAuthError):
            self.refusals.refused(endpoint, namespace, str(exc))
        return exc

    def url(self, path: str, params: Query) -> str:
        """Absolute URL of a GET (the exec WebSocket, which does not go through httpx)."""
        self.endpoint("GET", path)
        query = urllib.parse.urlencode(params)
        return f"{self.config.address}/v1{path}" + (f"?{query}" if query else "")

    async def _once(
        self,
        method: str,
        path: str,
        params: Query,
        body: Any,
        read_timeout: float | None,
        *,
        retry: RetryPolicy | None,
    ) -> Reply:
        what = f"{method} /v1{path}"
        endpoint = self.endpoint(method, path)
        namespace = self.namespace_of(params)
        try:
            resp = await self.http.request(
                method,
                "/v1" + path,
                params=params,
                json=body,
                timeout=(
                    httpx.USE_CLIENT_DEFAULT
                    if read_timeout is None
                    else httpx.Timeout(read_timeout, connect=self.config.connect_timeout)
                ),
                extensions=self._extensions
                if retry is None
                else {**self._extensions, RETRY: retry},
            )
        except httpx.HTTPError as exc:
            raise error_for_transport(exc, what=what, address=self.config.address) from exc
        if resp.status_code >= 300:
            raise self.refused(
                error_for_status(
                    resp.status_code,
                    resp.text,
                    what=what,
                    retry_after=resp.headers.get("Retry-After"),
                    needs=endpoint.refusal(namespace),
                ),
                endpoint,
                namespace,
            )
        self.refusals.allowed(endpoint, namespace)
        data: Any = None
        if resp.content:
            try:
                data = resp.json()
            except ValueError as exc:
                raise BackendUnavailable(f"nomad {what}: invalid JSON in response") from exc
        try:
            index = int(resp.headers.get("X-Nomad-Index", "0"))
        except ValueError:
            index = 0
        if index:
            region = self._region_of(params)
            if index > self._newest.get(region, 0):
                self._newest[region] = index
        return Reply(data=data, index=index, headers=resp.headers)

    @staticmethod
    def _region_of(params: Query) -> str:
        return next((str(v) for k, v in params if k == "region" and v), "")

    def newest_index(self, region: str | None = None) -> int:
        """The highest ``X-Nomad-Index`` any answer of ``region`` carried (0: none yet)."""
        return self._newest.get(self._region_of(self.params(None, namespace="", region=region)), 0)

    # -- calls ---------------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        namespace: str | None = None,
        region: str | None = None,
        read_timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Reply:
        """One API call with retries (``retry`` overrides the client's policy, e.g. none for a
        periodic scrape); ``path`` is relative to ``/v1``."""
        q = self.params(params, namespace=namespace, region=region)
        return await self._once(method, path, q, body, read_timeout, retry=retry)

    async def get(self, path: str, **kw: Any) -> Any:
        return (await self.call("GET", path, **kw)).data

    async def blocking_get(
        self, path: str, *, index: int, wait: float, params: Params | None = None, **kw: Any
    ) -> Reply:
        """A blocking query: returns when ``X-Nomad-Index`` passes ``index`` or ``wait`` ends."""
        p = dict(params or {})
        if index > 0:
            p["index"] = index
            p["wait"] = f"{int(wait * 1000)}ms"
        # the read timeout must outlast the server's wait (+ its jitter of up to wait/16)
        return await self.call("GET", path, params=p, read_timeout=wait + wait / 16 + 10, **kw)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Params | None = None,
        namespace: str | None = None,
        region: str | None = None,
        read_timeout: float | None = None,
        logs: bool = False,
    ) -> AsyncIterator[httpx.Response]:
        """Open a long-lived GET (event stream, logs); errors on open are mapped, not retried.
        ``logs``: on the log streams' own pool (``max_log_streams``)."""
        what = f"GET /v1{path}"
        endpoint = self.endpoint("GET", path)
        q = self.params(params, namespace=namespace, region=region)
        ns = self.namespace_of(q)
        timeout = httpx.Timeout(
            self.config.timeout if read_timeout is None else read_timeout,
            connect=self.config.connect_timeout,
            pool=LOG_STREAM_WAIT if logs else None,
        )
        http = self.logs_http if logs else self.http
        req = http.build_request(
            "GET",
            "/v1" + path,
            params=q,
            timeout=timeout,
            extensions={**self._extensions, RETRY: NO_RETRY},
        )
        try:
            resp = await http.send(req, stream=True)
        except httpx.PoolTimeout as exc:
            if not logs:
                raise error_for_transport(exc, what=what, address=self.config.address) from exc
            raise BackendThrottled(
                f"{self.config.max_log_streams} log streams of this node are open already "
                f"(backend.nomad.max_log_streams); none ended within {LOG_STREAM_WAIT:g}s",
                status=None,
            ) from exc
        except httpx.HTTPError as exc:
            raise error_for_transport(exc, what=what, address=self.config.address) from exc
        try:
            if resp.status_code >= 300:
                text = (await resp.aread()).decode("utf-8", errors="replace")
                raise self.refused(
                    error_for_status(
                        resp.status_code,
                        text,
                        what=what,
                        retry_after=resp.headers.get("Retry-After"),
                        needs=endpoint.refusal(ns),
                    ),
                    endpoint,
                    ns,
                )
            self.refusals.allowed(endpoint, ns)
            yield resp
        finally:
            await resp.aclose()
