"""An azure-core async transport over httpx.

azure-core ships no httpx transport and its default async transport needs aiohttp, which vkgate
does not depend on.  This small adapter lets the Batch SDK (``azure.batch.aio.BatchClient``) run
over an ``httpx.AsyncClient`` we own: production gets connection pooling and timeouts from httpx,
and tests pass ``httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))`` so the *same*
SDK pipeline (SharedKey signing, api-version, error policy) runs against the stateful fake
without any monkeypatching.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

import httpx
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import AsyncHttpTransport
from azure.core.rest import AsyncHttpResponse, HttpRequest
from azure.core.rest._http_response_impl_async import AsyncHttpResponseImpl


def _stream_download(
    response: _HttpxResponse, pipeline: Any = None, *, decompress: bool = True
) -> AsyncIterator[bytes]:
    raw: httpx.Response = response.internal_response
    return raw.aiter_bytes() if decompress else raw.aiter_raw()


class _HttpxResponse(AsyncHttpResponseImpl):
    """A ``azure.core.rest.AsyncHttpResponse`` backed by an ``httpx.Response``."""

    def __init__(self, *, request: HttpRequest, internal_response: httpx.Response) -> None:
        super().__init__(
            request=request,
            internal_response=internal_response,
            status_code=internal_response.status_code,
            reason=internal_response.reason_phrase,
            content_type=internal_response.headers.get("content-type", ""),
            headers=internal_response.headers,
            stream_download_generator=_stream_download,
        )

    @property
    def internal_response(self) -> httpx.Response:
        raw: httpx.Response = self._internal_response
        return raw

    async def close(self) -> None:
        if not self.is_closed:
            self._is_closed = True
            await self._internal_response.aclose()


class HttpxTransport(AsyncHttpTransport[HttpRequest, AsyncHttpResponse]):
    """Send azure-core ``HttpRequest``s through an ``httpx.AsyncClient``.

    The client is owned (and closed) by this transport unless ``owns_client=False``.
    """

    def __init__(self, client: httpx.AsyncClient, *, owns_client: bool = True) -> None:
        self.client = client
        self._owns = owns_client

    async def __aenter__(self) -> HttpxTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()  # BatchClient.close() exits the pipeline, which exits us

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        if self._owns:
            await self.client.aclose()

    async def send(self, request: HttpRequest, **kwargs: Any) -> AsyncHttpResponse:
        stream = bool(kwargs.get("stream", False))
        content = request.content
        if isinstance(content, Mapping):
            # A form (``HttpRequest(data=…)``): azure-identity's token requests are
            # application/x-www-form-urlencoded; azure-core leaves the encoding to the transport.
            content = urlencode(content, doseq=True)
        if isinstance(content, str):
            content = content.encode("utf-8")
        headers = httpx.Headers(dict(request.headers))
        if (
            not content
            and request.method not in ("GET", "HEAD")
            and "content-length" not in headers
        ):
            # What the SharedKey policy signed for a body-less write (requests sends it too).
            headers["Content-Length"] = "0"
        built = self.client.build_request(
            request.method, request.url, headers=headers, content=content if content else None
        )
        try:
            raw = await self.client.send(built, stream=True)
        except httpx.TimeoutException as exc:
            raise ServiceResponseError(str(exc), error=exc) from exc
        except httpx.TransportError as exc:
            raise ServiceRequestError(str(exc), error=exc) from exc
        response = _HttpxResponse(request=request, internal_response=raw)
        if not stream:
            try:
                await response.read()
            finally:
                await response.close()
        return response
