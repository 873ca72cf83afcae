"""One ``grpc`` probe attempt: ``grpc.health.v1.Health/Check`` over a plain-text HTTP/2
connection of its own, as the kubelet's ``pkg/probe/grpc`` does (a new connection per attempt,
no TLS, ``User-Agent: kube-probe/…``); ``SERVING`` succeeds, anything else fails with the
kubelet's message.

A small client on ``h2`` (the HTTP/2 state machine; HPACK through ``hpack``) and asyncio
streams, not grpcio: one attempt costs about a third of grpcio's per-attempt channel
(bench/probes.py, docs/design/probes.md, "Cost"), and grpcio would bring its own threads and a
C core into the agent.  The two protobuf messages are tiny and hand-coded:
``HealthCheckRequest {string service = 1}``, ``HealthCheckResponse {ServingStatus status = 1}``.
"""

from __future__ import annotations

import asyncio
import os
import struct
import urllib.parse

import h2.config
import h2.connection
import h2.events
import h2.exceptions

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
    except (h2.exceptions.H2Error, ValueError) as exc:
        return False, f"error: health rpc probe failed: {type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.close()
    if status != SERVING:
        name = SERVING_STATUS.get(status, str(status))
        return False, f'service unhealthy (responded with "{name}")'
    return True, "service healthy"


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    authority: str,
    service: str,
    limit: float,
    user_agent: str,
) -> int:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(
        stream,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", user_agent),
            ("grpc-timeout", f"{max(1, int(limit * 1000))}m"),
        ],
    )
    conn.send_data(stream, encode_request(service), end_stream=True)
    writer.write(conn.data_to_send())
    await writer.drain()
    body = bytearray()
    headers: dict[bytes, bytes] = {}
    while True:
        data = await reader.read(65536)
        if not data:
            raise _CallError(14, "connection closed before the response ended")  # Unavailable
        done = False
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                headers.update((bytes(k), bytes(v)) for k, v in event.headers)
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, stream)
            elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                raise _CallError(13, f"stream reset by the server (error code {event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise _CallError(14, f"connection closed by the server ({event.error_code})")
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                done = True
        pending = conn.data_to_send()
        if pending:
            writer.write(pending)
        if done:
            break
    http_status = headers.get(b":status", b"")
    if http_status != b"200":
        raise _CallError(2, f"unexpected HTTP status code received from server: {http_status!r}")
    code = headers.get(b"grpc-status")
    if code is None:
        raise _CallError(2, "server closed the stream without sending trailers")
    if int(code) != 0:
        message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode("latin-1"))
        raise _CallError(int(code), message)
    if len(body) < 5:
        raise _CallError(13, "response carries no message")
    if body[0] != 0:
        raise _CallError(13, "compressed response message not supported")
    (size,) = struct.unpack(">I", body[1:5])
    return decode_status(bytes(body[5 : 5 + size]))
