"""A small server-side SPDY/3.1 implementation: frame codec, header compression, sessions.

Why it exists: the kube-apiserver talks to a kubelet's exec/attach/port-forward endpoints in
SPDY/3.1 (it even *translates* kubectl's WebSocket v5 into SPDY), and Python has no
server-side SPDY library.  SPDY is only the multiplexing layer here — the Kubernetes stream
protocols (``v4.channel.k8s.io`` …) sit on top, in ``gateway.kubelet.streams.session``.

Layers, each testable alone:

* ``encode_frame`` / ``FrameDecoder`` — bytes ⇄ frame dataclasses (all SPDY/3 frame types;
  unknown control frames are skipped as the spec asks).
* ``HeaderCompressor`` / ``HeaderDecompressor`` — name/value blocks compressed with zlib and the
  SPDY/3 dictionary, **one zlib context per direction for the whole connection** (every block
  ends in a sync flush, so contexts must see blocks in wire order).
* ``SpdySession`` / ``SpdyStream`` — one connection: accepts client streams (odd ids), answers
  each SYN_STREAM with an empty SYN_REPLY (what Go's spdystream waits for), echoes PINGs,
  honours GOAWAY and RST_STREAM, half-closes with DATA+FIN.

Flow control.  Received data is acknowledged with WINDOW_UPDATE (stream and session level) as
the application consumes it, and a stream's unread backlog above a high-water mark pauses
socket reads (TCP back-pressure).  On the send side the peer's windows are tracked always but
*enforced only once the peer shows it does flow control* (it sent a WINDOW_UPDATE or a
SETTINGS INITIAL_WINDOW_SIZE).  Go's spdystream — the client of every real kubelet, used by
kubectl and by the API server — never sends either, and a server that blindly waited for its
64 KiB window to reopen would stall every exec after 64 KiB of output.

Wire formats (big-endian)::

    control: |1|version(15)=3|type(16)|  flags(8) length(24)  | payload
    data:    |0|stream-id(31)         |  flags(8) length(24)  | payload
    SYN_STREAM  stream-id(31) assoc-id(31) pri(3)+unused(5) slot(8) header-block
    SYN_REPLY   stream-id(31) header-block          HEADERS  stream-id(31) header-block
    RST_STREAM  stream-id(31) status(32)            PING     id(32)
    SETTINGS    count(32) {flags(8) id(24) value(32)}*
    GOAWAY      last-good-stream-id(31) status(32)  WINDOW_UPDATE stream-id(31) delta(31)
    header-block (zlib): count(32) {len(32) name len(32) value}*  (values NUL-joined)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import struct
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

log = logging.getLogger(__name__)

VERSION = 3
MAX_FRAME_LENGTH = (1 << 24) - 1
#: Largest DATA payload we send in one frame.
MAX_DATA_CHUNK = 32 * 1024
DEFAULT_WINDOW = 64 * 1024
#: Unread bytes buffered per stream before the session stops reading the socket.
HIGH_WATER = 1024 * 1024
#: Largest decompressed header block we accept (zlib bomb guard).
MAX_HEADER_BLOCK = 256 * 1024

FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02
FLAG_SETTINGS_CLEAR = 0x01
SETTINGS_INITIAL_WINDOW_SIZE = 7

#: name -> values (names lowercase, as SPDY/3 requires).
Headers: TypeAlias = dict[str, list[str]]


class FrameType(enum.IntEnum):
    SYN_STREAM = 1
    SYN_REPLY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PING = 6
    GOAWAY = 7
    HEADERS = 8
    WINDOW_UPDATE = 9


class RstStatus(enum.IntEnum):
    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    UNSUPPORTED_VERSION = 4
    CANCEL = 5
    INTERNAL_ERROR = 6
    FLOW_CONTROL_ERROR = 7
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9
    FRAME_TOO_LARGE = 11


class GoAwayStatus(enum.IntEnum):
    OK = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


class SpdyProtocolError(Exception):
    """The peer sent bytes that are not valid SPDY/3; the session answers with GOAWAY."""


def _build_dictionary() -> bytes:
    """The SPDY/3 header-compression dictionary (draft 3, §2.6.10.1), 1423 bytes.

    Built from its parts to keep it reviewable: length-prefixed common header names and
    values, then a run of status codes, reason phrases, dates and common values."""
    names = (
        "options head post put delete trace accept accept-charset accept-encoding "
        "accept-language accept-ranges age allow authorization cache-control connection "
        "content-base content-encoding content-language content-length content-location "
        "content-md5 content-range content-type date etag expect expires from host if-match "
        "if-modified-since if-none-match if-range if-unmodified-since last-modified location "
        "max-forwards pragma proxy-authenticate proxy-authorization range referer retry-after "
        "server te trailer transfer-encoding upgrade user-agent vary via warning "
        "www-authenticate method get status"
    )
    out = b"".join(struct.pack("!I", len(w)) + w.encode() for w in names.split())
    out += struct.pack("!I", 6) + b"200 OK"
    for w in ("version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"):
        out += struct.pack("!I", len(w)) + w.encode()
    out += (
        b"100101201202205206300302303304305306307402405406407408409410411412413414415416417"
        b"502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
        b"400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
        b"501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
        b"Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
        b"image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
        b"text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8"
        b"charset=iso-8859-1,utf-,*,enq=0."
    )
    return out


DICTIONARY = _build_dictionary()


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class DataFrame:
    stream_id: int
    data: bytes = b""
    fin: bool = False


@dataclass(frozen=True, slots=True)
class SynStream:
    stream_id: int
    headers: Headers = field(default_factory=dict)
    associated_to: int = 0
    priority: int = 0
    slot: int = 0
    fin: bool = False
    unidirectional: bool = False


@dataclass(frozen=True, slots=True)
class SynReply:
    stream_id: int
    headers: Headers = field(default_factory=dict)
    fin: bool = False


@dataclass(frozen=True, slots=True)
class HeadersFrame:
    stream_id: int
    headers: Headers = field(default_factory=dict)
    fin: bool = False


@dataclass(frozen=True, slots=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class Settings:
    #: (flags, id, value) triples.
    entries: tuple[tuple[int, int, int], ...] = ()
    clear: bool = False


@dataclass(frozen=True, slots=True)
class Ping:
    id: int


@dataclass(frozen=True, slots=True)
class GoAway:
    last_good_stream_id: int
    status: int = GoAwayStatus.OK


@dataclass(frozen=True, slots=True)
class WindowUpdate:
    stream_id: int
    delta: int


Frame: TypeAlias = (
    DataFrame
    | SynStream
    | SynReply
    | HeadersFrame
    | RstStream
    | Settings
    | Ping
    | GoAway
    | WindowUpdate
)


# --------------------------------------------------------------------------- headers


def encode_header_block(headers: Mapping[str, Sequence[str]]) -> bytes:
    """The uncompressed name/value block.  Names are lowercased; values NUL-joined."""
    parts = [struct.pack("!I", len(headers))]
    for name, values in headers.items():
        n = name.lower().encode()
        v = "\x00".join(values).encode()
        parts += [struct.pack("!I", len(n)), n, struct.pack("!I", len(v)), v]
    return b"".join(parts)


def decode_header_block(block: bytes) -> Headers:
    def take(pos: int, size: int) -> tuple[bytes, int]:
        if pos + size > len(block):
            raise SpdyProtocolError("truncated header block")
        return block[pos : pos + size], pos + size

    raw, pos = take(0, 4)
    (count,) = struct.unpack("!I", raw)
    out: Headers = {}
    for _ in range(count):
        raw, pos = take(pos, 4)
        name_b, pos = take(pos, struct.unpack("!I", raw)[0])
        raw, pos = take(pos, 4)
        value_b, pos = take(pos, struct.unpack("!I", raw)[0])
        try:
            name, value = name_b.decode(), value_b.decode()
        except UnicodeDecodeError as exc:
            raise SpdyProtocolError("header is not UTF-8") from exc
        if not name or name != name.lower():
            raise SpdyProtocolError(f"invalid header name {name!r}")
        if name in out:
            raise SpdyProtocolError(f"duplicate header {name!r}")
        out[name] = value.split("\x00")
    return out


class HeaderCompressor:
    """Compresses the header blocks of ONE direction of a connection, in wire order."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zlib.DEFLATED, 15, 8, zdict=DICTIONARY)

    def compress(self, headers: Mapping[str, Sequence[str]]) -> bytes:
        return self._z.compress(encode_header_block(headers)) + self._z.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """Decompresses the header blocks of the other direction, in wire order."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(15, zdict=DICTIONARY)

    def decompress(self, data: bytes) -> Headers:
        try:
            block = self._z.decompress(data, MAX_HEADER_BLOCK)
        except zlib.error as exc:
            raise SpdyProtocolError(f"header decompression failed: {exc}") from exc
        if self._z.unconsumed_tail:
            raise SpdyProtocolError("header block too large")
        return decode_header_block(block)


# --------------------------------------------------------------------------- codec


def _control(ftype: int, flags: int, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_LENGTH:
        raise ValueError("frame too large")
    return struct.pack("!HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + payload


def encode_frame(frame: Frame, compressor: HeaderCompressor) -> bytes:
    """Serialize one frame.  Frames with headers advance ``compressor``: encode them in the
    order they go on the wire."""
    sid_mask = 0x7FFFFFFF
    match frame:
        case DataFrame(stream_id=sid, data=data, fin=fin):
            if len(data) > MAX_FRAME_LENGTH:
                raise ValueError("frame too large")
            flags = FLAG_FIN if fin else 0
            return struct.pack("!II", sid & sid_mask, (flags << 24) | len(data)) + data
        case SynStream():
            flags = (FLAG_FIN if frame.fin else 0) | (
                FLAG_UNIDIRECTIONAL if frame.unidirectional else 0
            )
            head = struct.pack(
                "!IIBB",
                frame.stream_id & sid_mask,
                frame.associated_to & sid_mask,
                (frame.priority & 0x7) << 5,
                frame.slot & 0xFF,
            )
            return _control(FrameType.SYN_STREAM, flags, head + compressor.compress(frame.headers))
        case SynReply(stream_id=sid, headers=headers, fin=fin):
            body = struct.pack("!I", sid & sid_mask) + compressor.compress(headers)
            return _control(FrameType.SYN_REPLY, FLAG_FIN if fin else 0, body)
        case HeadersFrame(stream_id=sid, headers=headers, fin=fin):
            body = struct.pack("!I", sid & sid_mask) + compressor.compress(headers)
            return _control(FrameType.HEADERS, FLAG_FIN if fin else 0, body)
        case RstStream(stream_id=sid, status=status):
            return _control(FrameType.RST_STREAM, 0, struct.pack("!II", sid & sid_mask, status))
        case Settings(entries=entries, clear=clear):
            body = struct.pack("!I", len(entries)) + b"".join(
                struct.pack("!II", ((fl & 0xFF) << 24) | (i & 0xFFFFFF), v) for fl, i, v in entries
            )
            return _control(FrameType.SETTINGS, FLAG_SETTINGS_CLEAR if clear else 0, body)
        case Ping(id=pid):
            return _control(FrameType.PING, 0, struct.pack("!I", pid))
        case GoAway(last_good_stream_id=sid, status=status):
            return _control(FrameType.GOAWAY, 0, struct.pack("!II", sid & sid_mask, status))
        case WindowUpdate(stream_id=sid, delta=delta):
            body = struct.pack("!II", sid & sid_mask, delta & 0x7FFFFFFF)
            return _control(FrameType.WINDOW_UPDATE, 0, body)
    raise TypeError(f"not a SPDY frame: {frame!r}")


class FrameDecoder:
    """Incremental parser: ``feed`` bytes, get whole frames.  Owns the inbound header
    decompressor, so one decoder per connection direction."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._headers = HeaderDecompressor()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= 8:
            word, flags_len = struct.unpack_from("!II", self._buf)
            length = flags_len & 0xFFFFFF
            if len(self._buf) < 8 + length:
                break
            flags = flags_len >> 24
            payload = bytes(self._buf[8 : 8 + length])
            del self._buf[: 8 + length]
            if word & 0x80000000:
                version = (word >> 16) & 0x7FFF
                if version != VERSION:
                    raise SpdyProtocolError(f"unsupported SPDY version {version}")
                frame = self._control(word & 0xFFFF, flags, payload)
                if frame is not None:
                    frames.append(frame)
            else:
                frames.append(DataFrame(word & 0x7FFFFFFF, payload, bool(flags & FLAG_FIN)))
        return frames

    def _need(self, payload: bytes, size: int, what: str) -> None:
        if len(payload) < size:
            raise SpdyProtocolError(f"{what} frame too short ({len(payload)} bytes)")

    def _control(self, ftype: int, flags: int, p: bytes) -> Frame | None:
        fin = bool(flags & FLAG_FIN)
        if ftype == FrameType.SYN_STREAM:
            self._need(p, 10, "SYN_STREAM")
            sid, assoc, pri, slot = struct.unpack_from("!IIBB", p)
            return SynStream(
                sid & 0x7FFFFFFF,
                self._headers.decompress(p[10:]),
                associated_to=assoc & 0x7FFFFFFF,
                priority=pri >> 5,
                slot=slot,
                fin=fin,
                unidirectional=bool(flags & FLAG_UNIDIRECTIONAL),
            )
        if ftype in (FrameType.SYN_REPLY, FrameType.HEADERS):
            self._need(p, 4, FrameType(ftype).name)
            (sid,) = struct.unpack_from("!I", p)
            cls = SynReply if ftype == FrameType.SYN_REPLY else HeadersFrame
            return cls(sid & 0x7FFFFFFF, self._headers.decompress(p[4:]), fin=fin)
        if ftype == FrameType.RST_STREAM:
            self._need(p, 8, "RST_STREAM")
            sid, status = struct.unpack_from("!II", p)
            return RstStream(sid & 0x7FFFFFFF, status)
        if ftype == FrameType.SETTINGS:
            self._need(p, 4, "SETTINGS")
            (count,) = struct.unpack_from("!I", p)
            self._need(p, 4 + 8 * count, "SETTINGS")
            entries = []
            for i in range(count):
                fid, value = struct.unpack_from("!II", p, 4 + 8 * i)
                entries.append((fid >> 24, fid & 0xFFFFFF, value))
            return Settings(tuple(entries), clear=bool(flags & FLAG_SETTINGS_CLEAR))
        if ftype == FrameType.PING:
            self._need(p, 4, "PING")
            return Ping(struct.unpack_from("!I", p)[0])
        if ftype == FrameType.GOAWAY:
            self._need(p, 4, "GOAWAY")
            sid = struct.unpack_from("!I", p)[0] & 0x7FFFFFFF
            status = struct.unpack_from("!I", p, 4)[0] if len(p) >= 8 else 0
            return GoAway(sid, status)
        if ftype == FrameType.WINDOW_UPDATE:
            self._need(p, 8, "WINDOW_UPDATE")
            sid, delta = struct.unpack_from("!II", p)
            return WindowUpdate(sid & 0x7FFFFFFF, delta & 0x7FFFFFFF)
        return None  # NOOP, CREDENTIAL, unknown: ignored, as the spec asks


# --------------------------------------------------------------------------- session


class StreamReset(ConnectionError):
    """The stream was reset (by the peer or because the session ended)."""


class SpdyStream:
    """One client-initiated stream: read its data until FIN, write data, half-close."""

    def __init__(self, session: SpdySession, stream_id: int, headers: Headers) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._readable = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.remote_closed = False
        self.local_closed = False
        self.reset_status: int | None = None
        self.send_window = session.peer_initial_window
        self._window_open = asyncio.Event()
        self._window_open.set()
        self._unacked = 0
        #: Data that still arrives is dropped (``discard``).
        self.discarding = False

    def header(self, name: str, default: str = "") -> str:
        values = self.headers.get(name.lower())
        return values[0] if values else default

    # -- inbound ---------------------------------------------------------------------

    def discard(self) -> None:
        """Nobody reads this stream any more: drop what is buffered and what still arrives
        (acknowledged, so a peer doing flow control is not stalled), instead of letting it
        pile up and pause the whole session."""
        self.discarding = True
        self._chunks.clear()
        self._buffered = 0
        self._drained.set()

    def _feed(self, data: bytes) -> None:
        if data and not self.discarding:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered > HIGH_WATER:
                self._drained.clear()
        self._readable.set()

    def _remote_fin(self) -> None:
        self.remote_closed = True
        self._readable.set()

    def _reset(self, status: int) -> None:
        self.reset_status = status
        self.remote_closed = self.local_closed = True
        self._chunks.clear()
        self._buffered = 0
        self._readable.set()
        self._drained.set()
        self._window_open.set()

    async def read(self) -> bytes:
        """The next chunk of data; ``b""`` once the peer half-closed or the stream was reset."""
        while not self._chunks:
            if self.remote_closed:
                return b""
            self._readable.clear()
            await self._readable.wait()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._buffered <= HIGH_WATER:
            self._drained.set()
        self._unacked += len(chunk)
        if self._unacked >= DEFAULT_WINDOW // 2 and not self.remote_closed:
            delta, self._unacked = self._unacked, 0
            await self.session._ack(self.id, delta)
        return chunk

    # -- outbound --------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Send data (split into frames; waits for flow-control window when the peer uses
        flow control).  Raises ``StreamReset`` when the stream or session is gone."""
        view = memoryview(data)
        while view:
            if self.reset_status is not None or self.session.closed.is_set():
                raise StreamReset(f"stream {self.id} is closed")
            if self.local_closed:
                raise StreamReset(f"stream {self.id} was half-closed by us")
            n = await self.session._reserve(self, min(len(view), MAX_DATA_CHUNK))
            await self.session._send(DataFrame(self.id, bytes(view[:n])))
            view = view[n:]

    async def close(self) -> None:
        """Half-close: DATA with FIN.  Idempotent; a no-op on a reset stream."""
        if self.local_closed or self.reset_status is not None:
            return
        self.local_closed = True
        with contextlib.suppress(ConnectionError):
            await self.session._send(DataFrame(self.id, b"", fin=True))
        self.session._maybe_forget(self)

    async def reset(self, status: int = RstStatus.CANCEL) -> None:
        if self.reset_status is not None:
            return
        self._reset(status)
        with contextlib.suppress(ConnectionError):
            await self.session._send(RstStream(self.id, status))
        self.session._maybe_forget(self)


class SpdySession:
    """The server side of one SPDY/3.1 connection.

    ``run()`` reads frames until the peer disconnects or either side sends GOAWAY; new
    streams arrive through ``accept()``.  Writes are serialized (one header compressor).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        initial_data: bytes = b"",
        idle_timeout: float | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._initial = initial_data
        self._idle_timeout = idle_timeout
        self._decoder = FrameDecoder()
        self._compressor = HeaderCompressor()
        self._write_lock = asyncio.Lock()
        self._streams: dict[int, SpdyStream] = {}
        self._incoming: asyncio.Queue[SpdyStream | None] = asyncio.Queue()
        self._last_peer_stream = 0
        self.closed = asyncio.Event()
        self.going_away = False
        #: True once the peer has shown it does flow control; only then we wait for windows.
        self.peer_flow_control = False
        self.peer_initial_window = DEFAULT_WINDOW
        self.session_send_window = DEFAULT_WINDOW
        self._session_window_open = asyncio.Event()
        self._session_window_open.set()
        self._session_unacked = 0
        self.frames_in = 0
        self.frames_out = 0

    # -- public ----------------------------------------------------------------------

    async def accept(self) -> SpdyStream | None:
        """The next stream the client opened; ``None`` once the session ended."""
        if self.closed.is_set() and self._incoming.empty():
            return None
        return await self._incoming.get()

    async def run(self) -> None:
        """Read and dispatch frames until the connection ends.  Never raises for peer
        misbehaviour: a protocol error is answered with GOAWAY and ends the session."""
        try:
            if self._initial:
                await self._dispatch_all(self._decoder.feed(self._initial))
            while not self.closed.is_set():
                try:
                    if self._idle_timeout:
                        data = await asyncio.wait_for(self._reader.read(65536), self._idle_timeout)
                    else:
                        data = await self._reader.read(65536)
                except TimeoutError:
                    log.info("spdy: connection idle for %ss, closing", self._idle_timeout)
                    await self.goaway()
                    break
                if not data:
                    break
                await self._dispatch_all(self._decoder.feed(data))
        except SpdyProtocolError as exc:
            log.warning("spdy: protocol error from peer: %s", exc)
            await self.goaway(GoAwayStatus.PROTOCOL_ERROR)
        except (ConnectionError, OSError) as exc:
            log.debug("spdy: connection lost: %s", exc)
        finally:
            self._terminate()

    async def goaway(self, status: int = GoAwayStatus.OK) -> None:
        """Tell the peer we accept no more streams (existing ones may finish)."""
        if self.going_away:
            return
        self.going_away = True
        with contextlib.suppress(ConnectionError, OSError):
            await self._send(GoAway(self._last_peer_stream, status))

    async def close(self) -> None:
        """GOAWAY, then close the transport."""
        await self.goaway()
        self._terminate()
        with contextlib.suppress(ConnectionError, OSError):
            self._writer.close()
            await self._writer.wait_closed()

    async def ping(self, ping_id: int) -> None:
        await self._send(Ping(ping_id))

    # -- internals -------------------------------------------------------------------

    def _terminate(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for st in list(self._streams.values()):
            if not st.remote_closed:
                st._reset(RstStatus.CANCEL)
        self._streams.clear()
        self._session_window_open.set()
        self._incoming.put_nowait(None)

    async def _send(self, frame: Frame) -> None:
        async with self._write_lock:
            if self._writer.is_closing():
                raise ConnectionResetError("spdy connection closed")
            self._writer.write(encode_frame(frame, self._compressor))
            self.frames_out += 1
            await self._writer.drain()

    async def _ack(self, stream_id: int, delta: int) -> None:
        self._session_unacked += delta
        with contextlib.suppress(ConnectionError, OSError):
            await self._send(WindowUpdate(stream_id, delta))
            if self._session_unacked >= DEFAULT_WINDOW // 2:
                d, self._session_unacked = self._session_unacked, 0
                await self._send(WindowUpdate(0, d))

    async def _reserve(self, stream: SpdyStream, want: int) -> int:
        """How many bytes may go out now (all of ``want`` unless the peer does flow control)."""
        while self.peer_flow_control:
            if stream.reset_status is not None or self.closed.is_set():
                raise StreamReset(f"stream {stream.id} is closed")
            if stream.send_window <= 0:
                stream._window_open.clear()
                await stream._window_open.wait()
                continue
            if self.session_send_window <= 0:
                self._session_window_open.clear()
                await self._session_window_open.wait()
                continue
            n = min(want, stream.send_window, self.session_send_window)
            stream.send_window -= n
            self.session_send_window -= n
            return n
        stream.send_window -= want
        self.session_send_window -= want
        return want

    def _maybe_forget(self, stream: SpdyStream) -> None:
        if stream.remote_closed and (stream.local_closed or stream.reset_status is not None):
            self._streams.pop(stream.id, None)

    async def _dispatch_all(self, frames: list[Frame]) -> None:
        for frame in frames:
            self.frames_in += 1
            await self._dispatch(frame)

    async def _dispatch(self, frame: Frame) -> None:
        match frame:
            case SynStream():
                await self._on_syn_stream(frame)
            case DataFrame(stream_id=sid, data=data, fin=fin):
                st = self._streams.get(sid)
                if st is None:
                    if sid > self._last_peer_stream or sid % 2 == 0:
                        await self._send(RstStream(sid, RstStatus.INVALID_STREAM))
                    return  # data for a stream we already forgot: drop quietly
                if st.remote_closed:
                    if st.reset_status is None:
                        await self._send(RstStream(sid, RstStatus.STREAM_ALREADY_CLOSED))
                    return
                st._feed(data)
                if st.discarding and data and not fin:
                    await self._ack(sid, len(data))
                if fin:
                    st._remote_fin()
                    self._maybe_forget(st)
                if not st._drained.is_set():
                    await st._drained.wait()
            case RstStream(stream_id=sid, status=status):
                st = self._streams.pop(sid, None)
                if st is not None:
                    st._reset(status)
            case Ping(id=pid):
                if pid % 2 == 1:  # client-initiated (odd): echo; ours are even
                    await self._send(frame)
            case GoAway():
                self.going_away = True
                self._incoming.put_nowait(None)
            case Settings(entries=entries):
                for _flags, sid_, value in entries:
                    if sid_ == SETTINGS_INITIAL_WINDOW_SIZE:
                        self.peer_flow_control = True
                        delta = value - self.peer_initial_window
                        self.peer_initial_window = value
                        for st in self._streams.values():
                            st.send_window += delta
                            if st.send_window > 0:
                                st._window_open.set()
            case WindowUpdate(stream_id=sid, delta=delta):
                self.peer_flow_control = True
                if sid == 0:
                    self.session_send_window += delta
                    if self.session_send_window > 0:
                        self._session_window_open.set()
                elif (st := self._streams.get(sid)) is not None:
                    st.send_window += delta
                    if st.send_window > 0:
                        st._window_open.set()
            case HeadersFrame(stream_id=sid, fin=fin):
                st = self._streams.get(sid)
                if st is not None and fin:
                    st._remote_fin()
                    self._maybe_forget(st)
            case SynReply():
                pass  # we never open streams, so there is nothing to reply to

    async def _on_syn_stream(self, frame: SynStream) -> None:
        sid = frame.stream_id
        if sid == 0 or sid % 2 == 0 or sid <= self._last_peer_stream:
            await self._send(RstStream(sid, RstStatus.PROTOCOL_ERROR))
            return
        self._last_peer_stream = sid
        if self.going_away:
            await self._send(RstStream(sid, RstStatus.REFUSED_STREAM))
            return
        st = SpdyStream(self, sid, frame.headers)
        if frame.fin:
            st.remote_closed = True
        if frame.unidirectional:
            st.local_closed = True
        self._streams[sid] = st
        if not frame.unidirectional:
            await self._send(SynReply(sid, {}))
        self._incoming.put_nowait(st)
