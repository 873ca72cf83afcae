"""The seam under the kube client: a ``Sender`` sends one request and returns what came back.

``KubeClient`` (gateway/kube/client.py) runs one pipeline for every request — auth header,
rate limit, the one retry loop, ``stats``, error mapping, watch decoding — and hands each
attempt to a ``Sender`` (docs/design/kube-client.md, "HTTP path").  Two implement it:

* ``Http11Sender`` (gateway/kube/http11.py), the lean HTTP/1.1 path: the production sender.
* ``HttpxSender`` (here): httpx, for a proxy from the environment (httpx honours
  ``HTTPS_PROXY`` and friends) and for callers that inject an ``httpx`` transport.

A sender does no retries, no auth and no error mapping: it raises httpx's transport errors
(``ConnectError``, ``ReadTimeout``, …) and returns every status as it is, so what the client
does with an answer cannot depend on which sender carried it.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from vkgate_core import ndjson

__all__ = ["HttpxSender", "Response", "Sender", "StreamReply"]


@dataclass(slots=True)
class Response:
    """A whole response."""

    status_code: int
    #: Header names in lower case on the lean path; case-insensitive on httpx's.
    headers: Mapping[str, str]
    content: bytes


class StreamReply(Protocol):
    """A response whose body is read as it arrives (watches)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...

    def aiter_lines(self) -> AsyncIterator[str]: ...


class Sender(Protocol):
    """Sends one request to the API server; ``target`` is the path with its encoded query."""

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        time_limit: float | None = None,
    ) -> Response:
        """One exchange, bounded as a whole (connect included) by ``time_limit``."""
        ...

    def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        head_limit: float | None = None,
        read_timeout: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[StreamReply]:
        """A streamed response: ``head_limit`` bounds the head, ``read_timeout`` each wait for
        more body (None: wait forever)."""
        ...

    @property
    def connections_opened(self) -> int | None:
        """Connections opened so far, where the sender counts them (None: it does not)."""
        ...

    @property
    def own_lease_lane(self) -> bool:
        """True: the node's Leases must not share this sender's connections (a bounded pool
        the pods' requests can fill), so ``KubeClient.lease_lane()`` renews them through a
        sender of their own (``make_sender`` with ``LEASE_CONNECTIONS`` connections).  False:
        the Lease lane sends through this sender too (docs/design/kube-client.md, "The Lease
        lane")."""
        ...

    async def aclose(self) -> None: ...


class HttpxSender:
    """A ``Sender`` on ``httpx.AsyncClient``: with ``transport`` (a test's ``MockTransport``,
    the benchmark's plain ``AsyncHTTPTransport``), or without, when a proxy applies (httpx
    builds the proxy transports from the environment)."""

    def __init__(
        self,
        server: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        ssl_context: ssl.SSLContext | None = None,
        tls_server_name: str | None = None,
    ) -> None:
        verify: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._client = httpx.AsyncClient(base_url=server, transport=transport, verify=verify)
        self._extensions: dict[str, Any] = (
            {"sni_hostname": tls_server_name} if tls_server_name else {}
        )

    @property
    def connections_opened(self) -> int | None:
        return None

    @property
    def own_lease_lane(self) -> bool:
        """False: the Lease lane shares this client (an injected transport, or a proxy)."""
        return False

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        time_limit: float | None = None,
    ) -> Response:
        resp = await self._client.request(
            method,
            target,
            content=body,
            headers=headers,
            timeout=httpx.Timeout(time_limit),
            extensions=self._extensions,
        )
        return Response(resp.status_code, resp.headers, resp.content)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        head_limit: float | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[StreamReply]:
        async with self._client.stream(
            method,
            target,
            headers=headers,
            timeout=httpx.Timeout(head_limit, read=read_timeout),
            extensions=self._extensions,
        ) as resp:
            yield _Lines(resp)

    async def aclose(self) -> None:
        await self._client.aclose()


class _Lines:
    """An httpx streamed response whose lines end at "\n" only (``vkgate_core.ndjson``), as
    on the lean path: httpx's own ``aiter_lines`` also breaks at U+0085/U+2028/U+2029 inside
    a watch event's strings."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp

    @property
    def status_code(self) -> int:
        return self._resp.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    async def aread(self) -> bytes:
        return await self._resp.aread()

    async def aiter_lines(self) -> AsyncIterator[str]:
        async for line in ndjson.lines(self._resp.aiter_bytes()):
            yield line.rstrip(b"\r").decode()
