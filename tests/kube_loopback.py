"""A fake Kubernetes API server on 127.0.0.1, so the kube client's unit tests run the lean
HTTP/1.1 path (``Http11Sender``) that production runs (docs/design/kube-client.md, "HTTP path").

It speaks HTTP/1.1 on a real socket (an asyncio server on port 0, keep-alive) and answers with
a handler of the shape ``httpx.MockTransport`` takes — ``handler(httpx.Request) ->
httpx.Response``, plain or ``async`` — so a test states its canned or stateful answers as
httpx objects and reads what the client sent as an ``httpx.Request`` (method, ``url.params``,
headers, ``content``):

* a response built from bytes or ``json=`` goes out with ``Content-Length``;
* a response whose content is an async iterator (a watch) goes out ``chunked``, one chunk per
  piece as the iterator yields it, ended when it ends; a test holds a watch open by not
  yielding;
* a handler that raises aborts the connection (no response), and the error is raised again
  by ``aclose`` unless it is an ``httpx.TransportError`` (a test's deliberate "no answer").

Transport failures on cue (a refused connection, a read timeout) are ``HttpxSender`` tests
with a ``MockTransport`` that raises them; ``tests/unit/kube/test_kube_http11.py`` covers the
lean path's own socket behaviour byte by byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]

#: The ``loopback`` fixture of tests/unit/kube/conftest.py: ``await loopback(handler)``.
StartApi = Callable[[Handler], Awaitable["LoopbackApi"]]

_SKIP = frozenset({"content-length", "transfer-encoding", "connection"})


class LoopbackApi:
    """``async with LoopbackApi(handler) as api:`` then ``KubeConfig(server=api.url)``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.url = ""
        #: Every request received, in order.
        self.requests: list[httpx.Request] = []
        #: Connections accepted so far.
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failures: list[BaseException] = []

    async def start(self) -> LoopbackApi:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        bugs = [f for f in self._failures if not isinstance(f, httpx.TransportError)]
        if bugs:
            raise bugs[0]

    async def __aenter__(self) -> LoopbackApi:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- one connection ------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            while (request := await self._read(reader)) is not None:
                self.requests.append(request)
                try:
                    answer = self.handler(request)
                    response = await answer if inspect.isawaitable(answer) else answer
                except Exception as exc:  # the test's handler: no answer on this connection
                    self._failures.append(exc)
                    writer.transport.abort()
                    return
                await self._write(writer, request.method, response)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _read(self, reader: asyncio.StreamReader) -> httpx.Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = [tuple(line.split(":", 1)) for line in lines if line]
        pairs = [(name.strip(), value.strip()) for name, value in headers]
        length = next((int(v) for k, v in pairs if k.lower() == "content-length"), 0)
        body = await reader.readexactly(length) if length else b""
        return httpx.Request(method, self.url + target, headers=pairs, content=body)

    async def _write(
        self, writer: asyncio.StreamWriter, method: str, response: httpx.Response
    ) -> None:
        head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"]
        head += [
            f"{name}: {value}\r\n"
            for name, value in response.headers.multi_items()
            if name.lower() not in _SKIP
        ]
        try:
            body = response.content
        except httpx.ResponseNotRead:
            writer.write("".join([*head, "Transfer-Encoding: chunked\r\n\r\n"]).encode("latin-1"))
            await writer.drain()
            async for piece in response.aiter_raw():
                if piece:
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        head.append(f"Content-Length: {len(body)}\r\n\r\n")
        writer.write("".join(head).encode("latin-1") + (b"" if method == "HEAD" else body))
        await writer.drain()
