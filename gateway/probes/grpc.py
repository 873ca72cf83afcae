"""One ``grpc`` probe attempt: ``grpc.health.v1.Health/Check`` over a plain-text HTTP/2
connection of its own, as the kubelet's ``pkg/probe/grpc`` does (a new connection per attempt,
no TLS, ``User-Agent: kube-probe/…``); ``SERVING`` succeeds, anything else fails with the
kubelet's message.

A small HTTP/2 client of its own on asyncio streams, not grpcio and not ``h2``'s state machine:
the request (preface, SETTINGS, HEADERS, DATA) is the same bytes for every attempt on a target
and is built once; the response's frames are read here and its header blocks decoded by
``hpack`` (Huffman codes, the server's dynamic table).  Per attempt, with the health server in
another process: this ~0.65 ms of CPU, a first version on ``h2`` ~1.0 ms, grpcio's client (a
channel per attempt) ~1.4 ms (bench/probes.py, docs/design/probes.md, "Cost").  The two protobuf
messages are tiny and hand-coded: ``HealthCheckRequest {string service = 1}``,
``HealthCheckResponse {ServingStatus status = 1}``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import struct
import urllib.parse

import hpack

#: ``HealthCheckResponse.ServingStatus`` as grpc-go's ``String()`` names it.
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
SERVING = 1
#: grpc status codes as grpc-go's ``codes.Code.String()`` names them.
CODES = (
    *("OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound"),
    *("AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition"),
    *("Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss"),
    "Unauthenticated",
)
UNIMPLEMENTED = 12
DEADLINE_EXCEEDED = 4
PATH = "/grpc.health.v1.Health/Check"


class _CallError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        name = CODES[self.code] if 0 <= self.code < len(CODES) else f"Code({self.code})"
        return f"rpc error: code = {name} desc = {self.message}"


def encode_request(service: str) -> bytes:
    """The length-prefixed ``HealthCheckRequest`` (field 1 omitted when empty, as proto3)."""
    raw = service.encode()
    body = b""
    if raw:
        body = b"\x0a" + _varint(len(raw)) + raw
    return b"\x00" + struct.pack(">I", len(body)) + body


def decode_status(message: bytes) -> int:
    """``HealthCheckResponse.status`` from its protobuf bytes (absent: 0, UNKNOWN); fields
    this client does not know are skipped."""
    i = 0
    status = 0
    while i < len(message):
        key, i = _read_varint(message, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(message, i)
            if number == 1:
                status = value
        elif wire == 2:
            size, i = _read_varint(message, i)
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    if i > len(message):
        raise ValueError("truncated protobuf message")
    return status


def _why(exc: OSError) -> str:
    """``connection refused``, as Go words it, where asyncio says "Connect call failed"."""
    if exc.errno:
        return os.strerror(exc.errno).lower()
    return str(exc)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


async def check(
    host: str, port: int, service: str, limit: float, *, user_agent: str
) -> tuple[bool, str]:
    """(success, message) of one Health/Check, with the kubelet's texts (pkg/probe/grpc)."""
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    writer: asyncio.StreamWriter | None = None
    connected = False
    try:
        async with asyncio.timeout(limit):
            reader, writer = await asyncio.open_connection(host, port)
            connected = True
            status = await _call(
                reader, writer, authority=addr, service=service, limit=limit, user_agent=user_agent
            )
    except TimeoutError:
        if not connected:
            return False, f'timeout: failed to connect service "{addr}" within {limit:g}s'
        return False, f"timeout: health rpc did not complete within {limit:g}s"
    except OSError as exc:
        if not connected:
            return False, (
                f'error: failed to connect service at "{addr}": '
                f"dial tcp {addr}: connect: {_why(exc)}"
            )
        return False, f"error: health rpc probe failed: {_why(exc)}"
    except _CallError as exc:
        if exc.code == UNIMPLEMENTED:
            return False, (
                "error: this server does not implement the grpc health protocol "
                f"(grpc.health.v1.Health): {exc.message}"
            )
        if exc.code == DEADLINE_EXCEEDED:
            return False, f"timeout: health rpc did not complete within {limit:g}s"
        return False, f"error: health rpc probe failed: {exc}"
    except asyncio.IncompleteReadError:
        return False, "error: health rpc probe failed: connection closed before the response ended"
    except (hpack.HPACKError, ValueError) as exc:
        return False, f"error: health rpc probe failed: {type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.close()
    if status != SERVING:
        name = SERVING_STATUS.get(status, str(status))
        return False, f'service unhealthy (responded with "{name}")'
    return True, "service healthy"


#: HTTP/2 frame types and flags (RFC 9113, section 6).
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, CONTINUATION = 0, 1, 3, 4, 6, 7, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: The stream of the one call.
STREAM = 1


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream)
        + payload
    )


def _hpack_int(value: int, prefix: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541, 5.1) with a ``prefix``-bit prefix, ``first`` its high bits."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: str | int, value: str) -> bytes:
    """A header field "literal without indexing" (RFC 7541, 6.2.2), no Huffman: the request
    adds nothing to the server's dynamic table, so it needs no state of ours."""
    head = _hpack_int(name, 4) if isinstance(name, int) else b"\x00" + _string(name)
    return head + _string(value)


def _string(text: str) -> bytes:
    raw = text.encode()
    return _hpack_int(len(raw), 7) + raw


@functools.lru_cache(maxsize=4096)
def request_bytes(authority: str, service: str, limit: float, user_agent: str) -> bytes:
    """Everything the client sends, in one write: preface, SETTINGS, the call's HEADERS (static
    table: 3 ``:method POST``, 6 ``:scheme http``; names 4 ``:path``, 1 ``:authority``) and its
    DATA, which ends the stream."""
    block = (
        b"\x83\x86"
        + _literal(4, PATH)
        + _literal(1, authority)
        + _literal("content-type", "application/grpc")
        + _literal("te", "trailers")
        + _literal("user-agent", user_agent)
        + _literal("grpc-timeout", f"{max(1, int(limit * 1000))}m")
    )
    return (
        PREFACE
        + _frame(SETTINGS, 0, 0, struct.pack(">HI", 2, 0))  # SETTINGS_ENABLE_PUSH = 0
        + _frame(HEADERS, END_HEADERS, STREAM, block)
        + _frame(DATA, END_STREAM, STREAM, encode_request(service))
    )


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    authority: str,
    service: str,
    limit: float,
    user_agent: str,
) -> int:
    """One unary call on stream 1; frames parsed here, header blocks by ``hpack`` (the
    server's encoder may use Huffman codes and its dynamic table)."""
    writer.write(request_bytes(authority, service, limit, user_agent))
    decoder = hpack.Decoder()
    headers: dict[bytes, bytes] = {}
    body = bytearray()
    block = bytearray()
    block_ends_stream = False
    while True:
        head = await reader.readexactly(9)
        size = int.from_bytes(head[:3], "big")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = await reader.readexactly(size) if size else b""
        if kind in (DATA, HEADERS) and flags & PADDED:
            payload = payload[1 : len(payload) - payload[0]]
        if kind == SETTINGS and not flags & ACK:
            writer.write(_frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            writer.write(_frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if last < STREAM:
                code = int.from_bytes(payload[4:8], "big")
                raise _CallError(14, f"connection closed by the server (GOAWAY {code})")
        elif stream != STREAM:
            continue
        elif kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            raise _CallError(13, f"stream reset by the server (error code {code})")
        elif kind == DATA:
            body += payload
            if flags & END_STREAM:
                break
        elif kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                if flags & PRIORITY:
                    payload = payload[5:]
                block_ends_stream = bool(flags & END_STREAM)
            block += payload
            if flags & END_HEADERS:
                for name, value in decoder.decode(bytes(block), raw=True):
                    headers[bytes(name)] = bytes(value)
                block.clear()
                if block_ends_stream:
                    break
    http_status = headers.get(b":status", b"")
    if http_status != b"200":
        raise _CallError(2, f"unexpected HTTP status code received from server: {http_status!r}")
    grpc_status = headers.get(b"grpc-status")
    if grpc_status is None:
        raise _CallError(2, "server closed the stream without sending trailers")
    if int(grpc_status) != 0:
        message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode("latin-1"))
        raise _CallError(int(grpc_status), message)
    if len(body) < 5:
        raise _CallError(13, "response carries no message")
    if body[0] != 0:
        raise _CallError(13, "compressed response message not supported")
    (size,) = struct.unpack(">I", body[1:5])
    return decode_status(bytes(body[5 : 5 + size]))
