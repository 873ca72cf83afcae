"""The kube client's HTTP/1.1 path: keep-alive connections on asyncio streams, nothing else.

``Http11Sender`` is the production ``Sender`` under ``KubeClient`` (gateway/kube/sender.py):
it sends one request and returns what came back; auth, rate limits, retries and error mapping
are the client's, the same whichever sender carries a request.

Why not httpx here (it stays for the backends and for tests that mock the API server): measured
on one real kube-apiserver, a merge PATCH through ``httpx.AsyncClient`` cost 1.6 to 1.7 ms of client
CPU, through aiohttp 0.5 ms, and through this module 0.23 ms (docs/design/kube-client.md, "HTTP path").
At thousands of pods the client's CPU is the agent's CPU: every pod costs about eight requests.
httpx spends it on request/URL models, the auth flow, anyio cancel scopes and a connection pool
that scans every connection per request; here a request is one ``write`` of prebuilt bytes and
a header parse, and the pool is a LIFO stack of idle connections.

Scope, deliberately small (the Kubernetes API is the only peer):

* HTTP/1.1 with ``Content-Length`` or ``chunked`` responses (the API server sends both), no
  compression (we never send ``Accept-Encoding``), no redirects, no cookies, no proxies
  (``KubeClient`` sends through ``HttpxSender`` when a proxy applies,
  docs/design/kube-client.md).
* At most ``max_connections`` requests in flight; each holds one connection.  An idle
  connection the server has closed is noticed before reuse (EOF already read) and dropped.
* A GET on a reused connection that ends without one byte of response (the server closed it
  while we were sending) is sent once more on a new connection, as Go's net/http does.  Writes
  are never re-sent here; the client's retry policy decides.
* Failures raise httpx's exception types (``ConnectError``, ``ConnectTimeout``,
  ``ReadTimeout``, ``WriteError``, ``RemoteProtocolError``), as ``HttpxSender`` does, so one
  retry rule and one error mapping (``gateway.kube.errors``) serve both senders.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httpx

from gateway.kube.sender import Response

__all__ = ["Http11Sender", "Response", "StreamResponse"]

_MAX_HEAD = 64 * 1024
#: How long a closed connection may take to finish closing (over TLS the close_notify
#: exchange) before ``aclose`` aborts it: without the wait a client whose event loop ends
#: right after ``aclose`` left the socket open and a ResourceWarning for the garbage collector
#: (docs/design/kube-client.md, "HTTP path").
CLOSE_WAIT = 1.0


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        # once only: a TLS transport closed twice forgets its protocol, and every later
        # get_extra_info() on it raises AttributeError
        if self.writer.is_closing():
            return
        with contextlib.suppress(Exception):
            self.writer.close()

    async def closed(self, limit: float) -> None:
        """Wait until the transport has finished closing; abort it after ``limit`` seconds
        (a TLS peer that never answers close_notify) or when cancelled."""
        try:
            async with asyncio.timeout(limit):
                await self.writer.wait_closed()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.writer.transport.abort()
            if not isinstance(exc, Exception):
                raise


class StreamResponse:
    """A response whose body is read as it arrives (watches)."""

    def __init__(
        self,
        pool: Http11Sender,
        conn: _Conn,
        status: int,
        headers: dict[str, str],
        idle: float | None,
    ) -> None:
        self.status_code = status
        self.headers = headers
        self._pool = pool
        self._conn: _Conn | None = conn
        self._idle = idle
        self._body = _Body(conn.reader, headers)

    async def aread(self) -> bytes:
        parts = [part async for part in self.aiter_bytes()]
        return b"".join(parts)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        while True:
            try:
                if self._idle is None:
                    part = await self._body.next()
                else:
                    async with asyncio.timeout(self._idle):
                        part = await self._body.next()
            except TimeoutError:
                raise httpx.ReadTimeout(f"no data for {self._idle} s") from None
            if not part:
                return
            yield part

    async def aiter_lines(self) -> AsyncIterator[str]:
        pending = b""
        async for part in self.aiter_bytes():
            pending += part
            if b"\n" not in part:
                continue
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.rstrip(b"\r").decode()
        if pending:
            yield pending.decode()

    def release(self) -> None:
        """Give the connection back when the body was read to its end, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._body.done and self._body.keep_alive:
            self._pool._put(conn)
        else:
            self._pool._discard(conn)


class _Body:
    """Reads one response body: ``Content-Length``, ``chunked`` or until the server closes."""

    __slots__ = ("_chunked", "_left", "_reader", "done", "keep_alive")

    def __init__(self, reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
        self._reader = reader
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: int | None = None if self._chunked or length is None else int(length)
        self.keep_alive = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._left is not None
        )
        self.done = self._left == 0

    async def next(self) -> bytes:
        """The next piece of the body, or b"" at its end."""
        if self.done:
            return b""
        try:
            if self._chunked:
                size_line = await self._reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    # trailers (none in practice) end with an empty line
                    while await self._reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    self.done = True
                    return b""
                data = await self._reader.readexactly(size + 2)
                return data[:-2]
            if self._left is None:
                data = await self._reader.read(65536)
                if not data:
                    self.done = True
                return data
            data = await self._reader.read(min(self._left, 262144))
            if not data:
                raise httpx.RemoteProtocolError("peer closed connection in the middle of a body")
            self._left -= len(data)
            self.done = self._left == 0
            return data
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise httpx.RemoteProtocolError(f"malformed or incomplete body: {exc}") from exc
        except (ConnectionError, OSError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc


class Http11Sender:
    """Keep-alive HTTP/1.1 connections to one origin (``https://host:port`` or ``http://…``).

    Response header names are lower case; a repeated header keeps its last value."""

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        max_connections: int = 100,
        connect_timeout: float = 30.0,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) origin: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if url.scheme == "https" else None
        self._server_hostname = server_hostname if self._ssl is not None else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = self.port == (443 if self._ssl is not None else 80)
        self._host_line = f"Host: {host}{'' if default_port else f':{self.port}'}\r\n"
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: deque[_Conn] = deque()
        #: Connections opened so far (tests and the benchmark read it).
        self.opened = 0
        self._closed = False
        #: Connections closed but maybe not yet finished closing (``aclose`` waits for them).
        self._closing: set[_Conn] = set()

    @property
    def connections_opened(self) -> int:
        return self.opened

    @property
    def own_lease_lane(self) -> bool:
        """True: at most ``max_connections`` connections, which the pods' requests can all
        hold, so the Lease lane gets a sender of its own."""
        return True

    # -- connections -------------------------------------------------------------------

    async def _connect(self) -> _Conn:
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                    limit=_MAX_HEAD,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"no connection to {self.host}:{self.port} in {self.connect_timeout} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        self.opened += 1
        return _Conn(reader, writer)

    async def _take(self) -> tuple[_Conn, bool]:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn, True
            self._discard(conn)
        return await self._connect(), False

    def _put(self, conn: _Conn) -> None:
        if self._closed or not conn.usable():
            self._discard(conn)
        else:
            self._idle.append(conn)

    def _discard(self, conn: _Conn) -> None:
        """Close ``conn``; it stays in ``_closing`` until its transport has closed."""
        conn.close()
        if _socket_closed(conn):
            return
        self._closing.add(conn)
        self._prune()

    def _prune(self) -> None:
        if len(self._closing) > 2 * self.max_connections:
            self._closing = {c for c in self._closing if not _socket_closed(c)}

    # -- requests ----------------------------------------------------------------------

    def _head(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        lines = [f"{method} {target} HTTP/1.1\r\n", self._host_line]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise httpx.LocalProtocolError(f"header {name} contains a line break")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    async def _exchange(
        self, conn: _Conn, head: bytes, body: bytes | None
    ) -> tuple[int, dict[str, str]]:
        """Send one request, read the response head.  Raises ``_NothingBack`` when the server
        closed the connection before sending a byte."""
        try:
            conn.writer.write(head + body if body else head)
            await conn.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise _NothingBack(httpx.WriteError(str(exc) or type(exc).__name__)) from exc
        try:
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            err = httpx.RemoteProtocolError("Server disconnected without sending a response.")
            if not exc.partial:
                raise _NothingBack(err) from exc
            raise err from exc
        except asyncio.LimitOverrunError as exc:
            raise httpx.RemoteProtocolError("response head over 64 KiB") from exc
        except (ConnectionError, OSError) as exc:
            raise _NothingBack(httpx.ReadError(str(exc) or type(exc).__name__)) from exc
        return _parse_head(raw)

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        time_limit: float | None = None,
    ) -> Response:
        """One request; the whole exchange (connect included) is bounded by ``time_limit``."""
        head = self._head(method, target, headers, body)
        async with self._slots:
            try:
                async with asyncio.timeout(time_limit):
                    return await self._request(method, head, body)
            except TimeoutError:
                raise httpx.ReadTimeout(
                    f"{method} {target}: no response in {time_limit} s"
                ) from None

    async def _request(self, method: str, head: bytes, body: bytes | None) -> Response:
        conn, reused = await self._take()
        try:
            try:
                status, headers = await self._exchange(conn, head, body)
            except _NothingBack as nothing:
                self._discard(conn)
                if not (reused and method in ("GET", "HEAD")):
                    raise nothing.error from None
                conn = await self._connect()
                try:
                    status, headers = await self._exchange(conn, head, body)
                except _NothingBack as again:
                    raise again.error from None
            reader = _Body(conn.reader, headers)
            if method == "HEAD" or status in (204, 304):
                reader.done = True
            parts = []
            while part := await reader.next():
                parts.append(part)
        except BaseException:
            self._discard(conn)
            raise
        if reader.keep_alive:
            self._put(conn)
        else:
            self._discard(conn)
        return Response(status, headers, parts[0] if len(parts) == 1 else b"".join(parts))

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        head_limit: float | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[StreamResponse]:
        """A response whose body the caller reads as it comes; ``head_limit`` bounds the head,
        ``read_timeout`` each wait for more body (None: wait forever)."""
        head = self._head(method, target, headers, None)
        async with self._slots:
            conn, _ = await self._take()
            try:
                try:
                    async with asyncio.timeout(head_limit):
                        status, resp_headers = await self._exchange(conn, head, None)
                except TimeoutError:
                    raise httpx.ReadTimeout(f"{method} {target}: no response head") from None
                except _NothingBack as nothing:
                    raise nothing.error from None
            except BaseException:
                self._discard(conn)
                raise
            resp = StreamResponse(self, conn, status, resp_headers, read_timeout)
            try:
                yield resp
            finally:
                resp.release()

    async def aclose(self) -> None:
        """Close every idle connection and wait (at most ``CLOSE_WAIT``) until each connection
        this sender closed has closed its socket."""
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop())
        closing, self._closing = self._closing, set()
        await asyncio.gather(*(c.closed(CLOSE_WAIT) for c in closing if not _socket_closed(c)))


def _socket_closed(conn: _Conn) -> bool:
    """True once the connection's socket is closed.  A TLS transport whose connection was
    lost has no protocol left to ask (``get_extra_info`` raises AttributeError then)."""
    try:
        sock = conn.writer.transport.get_extra_info("socket")
    except AttributeError:
        return True
    return sock is None or sock.fileno() == -1


class _NothingBack(Exception):
    def __init__(self, error: httpx.TransportError) -> None:
        super().__init__(str(error))
        self.error = error


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    text = raw.decode("latin-1")
    status_line, _, rest = text.partition("\r\n")
    if not status_line.startswith("HTTP/1.") or len(status_line) < 12:
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    try:
        status = int(status_line[9:12])
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad status line: {status_line[:80]!r}") from None
    headers: dict[str, str] = {}
    for line in rest.split("\r\n"):
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise httpx.RemoteProtocolError(f"bad header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
    return status, headers
