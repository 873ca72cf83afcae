"""Kubernetes channel protocols over WebSocket (the kubelet side of ``wsstream``).

Every message carries one channel: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize.

===========================  ======================================================
``v5.channel.k8s.io``        binary; first byte = channel; ``[255, ch]`` half-closes
                             the client's channel ``ch`` (stdin EOF)
``v4.channel.k8s.io``        binary; Status JSON on the error channel
``v4.base64.channel.k8s.io`` text; first char ``'0'+ch``, then base64 of the data
``channel.k8s.io``           binary (also when the client asks for no subprotocol)
``base64.channel.k8s.io``    text, base64
===========================  ======================================================

The API server forwards WebSocket v4 clients (Python ``kubernetes`` and kr8s) unchanged, so
this path is what they use.  Framing is wsproto's; the handshake response is ours because the
HTTP request was already parsed by the server.  As the kubelet does, an empty message on the
lowest writable channel tells the client an exec is up.  Port-forward numbers its channels
per port (data 2i, error 2i+1) on the same codec (``gateway.kubelet.api.portforward``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
from collections.abc import Sequence

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Message, Ping, TextMessage
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from gateway.kubelet.server import Exchange, HttpError, Request

log = logging.getLogger(__name__)

PROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "base64.channel.k8s.io",
    "channel.k8s.io",
)
BASE64 = {"v4.base64.channel.k8s.io", "base64.channel.k8s.io"}
STREAM_CLOSE = 255
ERROR_CHANNEL = 3
RESIZE_CHANNEL = 4
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
LINGER = 5.0


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


def negotiate(offered: list[str], protocols: Sequence[str] = PROTOCOLS) -> str | None:
    """The first offered protocol of ``protocols``; "" when none was offered; None when no
    match."""
    if not offered:
        return ""
    return next((p for p in offered if p in protocols), None)


def encode_message(protocol: str, channel: int, data: bytes) -> bytes | str:
    if protocol in BASE64:
        return chr(ord("0") + channel) + base64.b64encode(data).decode()
    return bytes([channel]) + data


def decode_message(protocol: str, payload: bytes | str) -> tuple[int, bytes]:
    """(channel, data).  A v5 close signal comes back as (255, bytes([ch]))."""
    if isinstance(payload, str):
        if not payload:
            raise ValueError("empty message")
        ch = ord(payload[0]) - ord("0")
        try:
            return ch, base64.b64decode(payload[1:], validate=True)
        except ValueError as exc:
            raise ValueError(f"bad base64 on channel {ch}") from exc
    if not payload:
        raise ValueError("empty message")
    if protocol in BASE64:
        ch = payload[0] - ord("0")
        return ch, base64.b64decode(payload[1:])
    return payload[0], bytes(payload[1:])


class WebSocketChannels:
    """Numbered channels over one WebSocket connection (implements ``streams.Channels``)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        protocol: str,
        readable: set[int],
        writable: set[int],
        initial_data: bytes = b"",
        idle_timeout: float | None = None,
    ) -> None:
        self.protocol = protocol
        self.gone = asyncio.Event()
        self._reader = reader
        self._writer = writer
        self._ws = Connection(ConnectionType.SERVER, trailing_data=initial_data)
        self._readable = readable
        self._writable = writable | {ERROR_CHANNEL}
        self._inbox: dict[int, asyncio.Queue[bytes]] = {
            ch: asyncio.Queue(maxsize=64) for ch in readable
        }
        self._closed_in: set[int] = set()
        self._idle_timeout = idle_timeout
        self._write_lock = asyncio.Lock()
        self._fragments: list[bytes | str] = []
        self._runner = asyncio.create_task(self._run())

    def has(self, channel: int) -> bool:
        return channel in self._readable or channel in self._writable

    def stop_reading(self, channel: int) -> None:
        """Drop what the client still sends on ``channel`` (its reader is done): unread
        messages must not fill its queue and stall the other channels."""
        self._inbox.pop(channel, None)
        self._readable.discard(channel)

    async def read(self, channel: int) -> bytes:
        inbox = self._inbox.get(channel)
        if inbox is None or (channel in self._closed_in and inbox.empty()):
            return b""
        data = await inbox.get()
        if not data:
            self._closed_in.add(channel)
        return data

    async def write(self, channel: int, data: bytes) -> None:
        if channel not in self._writable:
            return
        payload = encode_message(self.protocol, channel, data)
        event: Event = (
            TextMessage(data=payload) if isinstance(payload, str) else BytesMessage(data=payload)
        )
        await self._send(event)

    async def close_channel(self, channel: int) -> None:
        return None  # the connection close ends every channel; v5 clients need no signal

    async def close(self) -> None:
        if self._ws.state is ConnectionState.OPEN:
            with contextlib.suppress(ConnectionError, OSError, LocalProtocolError):
                await self._send(CloseConnection(code=1000, reason=""))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.gone.wait(), LINGER)
        self._runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._runner
        with contextlib.suppress(ConnectionError, OSError):
            self._writer.close()
            await self._writer.wait_closed()

    async def _send(self, event: Event) -> None:
        async with self._write_lock:
            if self._writer.is_closing():
                raise ConnectionResetError("websocket closed")
            self._writer.write(self._ws.send(event))
            await self._writer.drain()

    async def _deliver(self, payload: bytes | str) -> None:
        try:
            ch, data = decode_message(self.protocol, payload)
        except ValueError as exc:
            log.debug("websocket: dropping bad message: %s", exc)
            return
        if ch == STREAM_CLOSE and self.protocol == "v5.channel.k8s.io":
            target = data[0] if data else -1
            if target in self._inbox:
                await self._inbox[target].put(b"")
            return
        inbox = self._inbox.get(ch)
        if inbox is not None and data:
            await inbox.put(data)

    async def _run(self) -> None:
        try:
            await self._handle_events()
            while self._ws.state is not ConnectionState.CLOSED:
                if self._idle_timeout:
                    data = await asyncio.wait_for(self._reader.read(65536), self._idle_timeout)
                else:
                    data = await self._reader.read(65536)
                self._ws.receive_data(data or None)
                await self._handle_events()
                if not data:
                    break
        except (TimeoutError, ConnectionError, OSError, RemoteProtocolError) as exc:
            log.debug("websocket: connection ended: %s", exc)
        finally:
            self.gone.set()
            for q in self._inbox.values():
                with contextlib.suppress(asyncio.QueueFull):
                    q.put_nowait(b"")

    async def _handle_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, Message):
                self._fragments.append(event.data)
                if event.message_finished:
                    parts, self._fragments = self._fragments, []
                    if isinstance(parts[0], str):
                        payload: bytes | str = "".join(str(p) for p in parts)
                    else:
                        payload = b"".join(p for p in parts if isinstance(p, bytes))
                    await self._deliver(payload)
            elif isinstance(event, Ping):
                with contextlib.suppress(ConnectionError, OSError):
                    await self._send(event.response())
            elif isinstance(event, CloseConnection):
                with contextlib.suppress(ConnectionError, OSError, LocalProtocolError):
                    await self._send(event.response())
                self.gone.set()


async def accept(
    req: Request, ex: Exchange, protocols: Sequence[str]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes, str]:
    """Answer the WebSocket handshake with the first offered subprotocol of ``protocols`` (""
    when the client offered none) and hand over the socket: reader, writer, the bytes that
    came after the request, the protocol.  Raises ``HttpError`` before the upgrade when the
    request cannot be served."""
    key = req.header("sec-websocket-key")
    if not key or (req.header("sec-websocket-version") or "13") != "13":
        raise HttpError(400, "invalid WebSocket handshake: Sec-WebSocket-Key/Version 13 required")
    offered = req.header_values("sec-websocket-protocol")
    protocol = negotiate(offered, protocols)
    if protocol is None:
        raise HttpError(
            400,
            f"unable to upgrade: no supported WebSocket subprotocol in {offered}; "
            f"supported: {', '.join(protocols)}",
        )
    headers = [
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        ("sec-websocket-accept", accept_key(key)),
    ]
    if protocol:
        headers.append(("sec-websocket-protocol", protocol))
    reader, writer, trailing = await ex.upgrade(headers)
    return reader, writer, trailing, protocol


async def upgrade(
    req: Request,
    ex: Exchange,
    *,
    readable: set[int],
    writable: set[int],
    resize: bool,
    idle_timeout: float | None = None,
) -> WebSocketChannels:
    """The exec/attach channels: handshake, then an empty message on the lowest writable
    channel (raises ``HttpError`` before the upgrade when the request cannot be served)."""
    reader, writer, trailing, protocol = await accept(req, ex, PROTOCOLS)
    effective = protocol or "channel.k8s.io"
    rd = set(readable)
    if resize and effective in {
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "v4.base64.channel.k8s.io",
    }:
        rd.add(RESIZE_CHANNEL)
    ch = WebSocketChannels(
        reader,
        writer,
        protocol=effective,
        readable=rd,
        writable=writable,
        initial_data=trailing,
        idle_timeout=idle_timeout,
    )
    lowest = min(writable) if writable else ERROR_CHANNEL
    with contextlib.suppress(ConnectionError, OSError):
        await ch.write(lowest, b"")
    return ch
