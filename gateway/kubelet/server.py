"""HTTP/1.1 over asyncio (TLS or plain), with connection hijack for protocol upgrades.

Why not an ASGI framework: exec/attach need the raw byte stream after a ``101 Switching
Protocols`` to speak SPDY/3.1 (which no Python server supports) or WebSocket on it.  h11 keeps
us honest about HTTP/1.1 framing (chunked streaming for ``logs -f``, keep-alive, upgrades)
while the socket stays ours.  TLS is started per connection with the *current* context from
``CertStore`` so certificate rotation needs no restart.

A ``Handler`` gets a ``Request`` and an ``Exchange``.  The exchange answers once
(``send``/``fail``), streams (``start``/``write``/``end``, awaiting the socket's drain between
chunks — back-pressure), or hands the socket over (``upgrade``).  ``Exchange.client_gone`` is
set when the peer closes its side while a response streams, so a ``follow`` ends promptly.

Errors are formatted for the caller: a ``metav1.Status`` JSON body for upgrade requests (the
SPDY and WebSocket clients in client-go decode it and show its message) and for clients that
accept JSON; ``text/plain`` otherwise (the API server's log proxy shows the body verbatim).
``Content-Type`` is always set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import h11

from gateway.errors import StartupError
from gateway.kubelet.auth import CertStore

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
MAX_HEADERS = 64 * 1024
KEEPALIVE_TIMEOUT = 120.0
HEADER_TIMEOUT = 30.0

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    422: "Invalid",
    500: "InternalError",
    501: "NotImplemented",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class HttpError(Exception):
    """Raised by handlers to end a request with an error status and a clear message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str = "",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason or REASONS.get(status, "")
        self.headers = list(headers)


def status_body(status: int, message: str, reason: str = "") -> dict[str, Any]:
    """A ``metav1.Status`` for an error response."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(status, ""),
        "code": status,
    }


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    #: (lowercase name, value) in arrival order.
    headers: list[tuple[str, str]]
    body: bytes = b""
    peer: str = ""
    peer_cert: Mapping[str, Any] | None = None
    #: Set by the server after authentication (``gateway.kubelet.auth.UserInfo``).
    user: Any = None
    started: float = field(default_factory=time.monotonic)

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def header_values(self, name: str) -> list[str]:
        """All values of a (possibly repeated, comma-separated) header."""
        name = name.lower()
        out: list[str] = []
        for k, v in self.headers:
            if k == name:
                out += [p.strip() for p in v.split(",") if p.strip()]
        return out

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def upgrade(self) -> str:
        """The requested upgrade protocol, lowercased ("" when none)."""
        values = self.header_values("upgrade")
        return values[0].lower() if values else ""

    def wants_json(self) -> bool:
        accept = self.header("accept") or ""
        return bool(self.upgrade) or "application/json" in accept


Handler = Callable[[Request, "Exchange"], Awaitable[None]]


class _Conn:
    """One TCP(+TLS) connection and its h11 state machine."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADERS)

    async def send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next_event(self, wait_s: float) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await asyncio.wait_for(self.reader.read(65536), wait_s)
            self.h11.receive_data(data)


class Exchange:
    """The response side of one request."""

    def __init__(self, conn: _Conn, request: Request) -> None:
        self._conn = conn
        self.request = request
        self.status: int | None = None
        self.bytes_sent = 0
        self.upgraded = False
        self.client_gone = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None

    @property
    def headers_sent(self) -> bool:
        return self.status is not None

    def _headers(
        self, content_type: str, extra: Iterable[tuple[str, str]], length: int | None
    ) -> list[tuple[str, str]]:
        hs = [("content-type", content_type)]
        if length is not None:
            hs.append(("content-length", str(length)))
        hs += [(k, v) for k, v in extra]
        return hs

    async def send(
        self,
        status: int,
        body: bytes | str,
        *,
        content_type: str = "text/plain; charset=utf-8",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.status = status
        await self._conn.send(
            h11.Response(
                status_code=status, headers=self._headers(content_type, headers, len(data))
            )
        )
        if data and self.request.method != "HEAD":
            await self._conn.send(h11.Data(data=data))
        self.bytes_sent += len(data)
        await self._conn.send(h11.EndOfMessage())

    async def send_json(self, status: int, obj: Any) -> None:
        await self.send(status, json.dumps(obj), content_type="application/json")

    async def fail(
        self,
        status: int,
        message: str,
        *,
        reason: str = "",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """An error answer, as Status JSON or plain text depending on the caller."""
        if self.headers_sent:
            raise RuntimeError("response already started")
        if self.request.wants_json():
            body = json.dumps(status_body(status, message, reason))
            await self.send(status, body, content_type="application/json", headers=headers)
        else:
            await self.send(status, message.rstrip("\n") + "\n", headers=headers)

    async def start(
        self,
        status: int = 200,
        *,
        content_type: str = "text/plain; charset=utf-8",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Begin a streamed (chunked) response; watch for the client going away."""
        self.status = status
        await self._conn.send(
            h11.Response(status_code=status, headers=self._headers(content_type, headers, None))
        )
        self._watch = asyncio.create_task(self._watch_eof())

    async def write(self, data: bytes) -> None:
        """One chunk; waits until the socket drained (back-pressure)."""
        if not data:
            return
        if self.client_gone.is_set():
            raise ConnectionResetError("client went away")
        await self._conn.send(h11.Data(data=data))
        self.bytes_sent += len(data)

    async def end(self) -> None:
        await self._stop_watch()
        await self._conn.send(h11.EndOfMessage())

    async def _watch_eof(self) -> None:
        try:
            while True:
                data = await self._conn.reader.read(65536)
                if not data:
                    break
                self._conn.h11.receive_data(data)  # pipelined next request: keep it
        except (ConnectionError, OSError, h11.RemoteProtocolError):
            pass
        self.client_gone.set()

    async def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    async def upgrade(
        self, headers: Iterable[tuple[str, str]]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
        """Answer ``101 Switching Protocols`` and take over the socket.

        Returns the reader, the writer and any bytes the client sent after the request."""
        self.status = 101
        self.upgraded = True
        await self._conn.send(h11.InformationalResponse(status_code=101, headers=list(headers)))
        trailing, _closed = self._conn.h11.trailing_data
        return self._conn.reader, self._conn.writer, bytes(trailing)


AccessLog = Callable[[Request, Exchange, float], None]


class HttpServer:
    """Serves ``handler`` on host:port, over TLS when ``certs`` is given."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        certs: CertStore | None = None,
        handshake_timeout: float = 10.0,
        access_log: AccessLog | None = None,
        name: str = "http",
    ) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._certs = certs
        self._handshake_timeout = handshake_timeout
        self._access_log = access_log
        self._name = name
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._on_connect, self._host, self._port)
        except OSError as exc:  # port in use, address not on this host, no permission
            raise StartupError(
                f"{self._name}: cannot listen on {self._host}:{self._port}: {exc.strerror or exc}"
            ) from exc
        log.info("%s: listening on %s:%d", self._name, self._host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: connection handler crashed", self._name)
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        peer_s = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        peer_cert: Mapping[str, Any] | None = None
        if self._certs is not None:
            try:
                await writer.start_tls(
                    self._certs.context(), ssl_handshake_timeout=self._handshake_timeout
                )
            except (ssl.SSLError, OSError, TimeoutError, ConnectionError) as exc:
                log.debug("%s: TLS handshake with %s failed: %s", self._name, peer_s, exc)
                return
            sslobj = writer.get_extra_info("ssl_object")
            if sslobj is not None:
                peer_cert = sslobj.getpeercert() or None
        conn = _Conn(reader, writer)
        while True:
            try:
                event = await conn.next_event(KEEPALIVE_TIMEOUT)
            except (TimeoutError, ConnectionError, OSError):
                return
            except h11.RemoteProtocolError as exc:
                await self._reject(conn, exc.error_status_hint, f"bad request: {exc}")
                return
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return
            if not isinstance(event, h11.Request):
                return
            request = await self._read_request(conn, event, peer_s, peer_cert)
            if request is None:
                return
            ex = Exchange(conn, request)
            await self._dispatch(request, ex)
            if ex.upgraded:
                return  # the upgrade handler owned the socket and is done with it
            if conn.h11.our_state is h11.MUST_CLOSE or conn.h11.their_state is h11.MUST_CLOSE:
                return
            try:
                # drain what is left of the request body before the next cycle
                while conn.h11.their_state is h11.SEND_BODY:
                    ev = await conn.next_event(HEADER_TIMEOUT)
                    if isinstance(ev, h11.ConnectionClosed):
                        return
                if conn.h11.their_state is not h11.DONE:
                    return
                conn.h11.start_next_cycle()
            except (h11.LocalProtocolError, h11.RemoteProtocolError, TimeoutError, OSError):
                return

    async def _read_request(
        self,
        conn: _Conn,
        event: h11.Request,
        peer: str,
        peer_cert: Mapping[str, Any] | None,
    ) -> Request | None:
        target = event.target.decode("latin-1")
        parsed = urllib.parse.urlsplit(target)
        body = bytearray()
        while True:
            try:
                ev = await conn.next_event(HEADER_TIMEOUT)
            except (TimeoutError, ConnectionError, OSError, h11.RemoteProtocolError):
                return None
            if isinstance(ev, h11.Data):
                body += ev.data
                if len(body) > MAX_BODY:
                    await self._reject(conn, 413, f"request body larger than {MAX_BODY} bytes")
                    return None
            elif isinstance(ev, h11.EndOfMessage) or ev is h11.PAUSED:
                break
            else:
                return None
        return Request(
            method=event.method.decode("ascii").upper(),
            target=target,
            path=urllib.parse.unquote(parsed.path) or "/",
            query=urllib.parse.parse_qs(parsed.query, keep_blank_values=True),
            headers=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers],
            body=bytes(body),
            peer=peer,
            peer_cert=peer_cert,
        )

    async def _dispatch(self, request: Request, ex: Exchange) -> None:
        try:
            await self._handler(request, ex)
            if ex.status is None:
                await ex.fail(500, "handler sent no response")
        except HttpError as exc:
            if not ex.headers_sent:
                with contextlib.suppress(ConnectionError, OSError, h11.LocalProtocolError):
                    await ex.fail(exc.status, exc.message, reason=exc.reason, headers=exc.headers)
        except (ConnectionError, OSError):
            log.debug("%s: client %s went away during %s", self._name, request.peer, request.path)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s: %s %s failed", self._name, request.method, request.path)
            if not ex.headers_sent:
                with contextlib.suppress(ConnectionError, OSError, h11.LocalProtocolError):
                    await ex.fail(500, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            await ex._stop_watch()
            if self._access_log is not None:
                self._access_log(request, ex, time.monotonic() - request.started)

    async def _reject(self, conn: _Conn, status: int, message: str) -> None:
        """Answer a request we could not even read, then the connection closes."""
        with contextlib.suppress(Exception):
            body = (message + "\n").encode()
            await conn.send(
                h11.Response(
                    status_code=status,
                    headers=[
                        ("content-type", "text/plain; charset=utf-8"),
                        ("content-length", str(len(body))),
                        ("connection", "close"),
                    ],
                )
            )
            await conn.send(h11.Data(data=body))
            await conn.send(h11.EndOfMessage())
