"""The kube client's lean HTTP/1.1 path against real sockets on 127.0.0.1.

Each test runs a small asyncio server that answers with exactly the bytes a case needs
(Content-Length, chunked, close, a stale keep-alive connection, silence), so the parser,
the pool and the error mapping are exercised on the wire, not mocked; closing over TLS runs
against a self-signed 127.0.0.1 server.  The real API server is the e2e tier's (every e2e
test talks to kube-apiserver through this path).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_fakes import SleepRecorder

from gateway.kube import http11
from gateway.kube.client import KubeClient, KubeConfig
from gateway.kube.errors import ApiError, ApiUnavailable, Conflict
from gateway.kube.http11 import Http11Sender
from tests.unit.kubelet.kubelet_helpers import make_ca

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def read_request(reader: asyncio.StreamReader, server: Server) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    body = await reader.readexactly(length) if length else b""
    server.requests.append(head + body)
    return head + body


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[Server]:
    server = Server(handler)
    srv = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    server.port = srv.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        srv.close()


@asynccontextmanager
async def keep_alive_server(body: bytes, status: str = "200 OK") -> AsyncIterator[Server]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while await read_request(reader, server) is not None:
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()

    async with serving(handler) as server:
        yield server


async def test_keep_alive_reuses_one_connection_and_sends_exact_bytes() -> None:
    async with keep_alive_server(b'{"ok":true}') as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        for _ in range(5):
            resp = await pool.request(
                "PATCH", "/x?a=%20b", {"Content-Type": "t/j"}, b'{"v":"${X}"}'
            )
            assert (resp.status_code, resp.content) == (200, b'{"ok":true}')
            assert resp.headers["content-type"] == "application/json"
        await pool.aclose()
    assert server.connections == 1 and pool.opened == 1
    assert (
        server.requests[0]
        == (
            f"PATCH /x?a=%20b HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: t/j\r\n"
            'Content-Length: 12\r\n\r\n{"v":"${X}"}'
        ).encode()
    )


async def test_concurrent_requests_each_hold_their_own_connection_up_to_the_limit() -> None:
    gate = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while await read_request(reader, server) is not None:
            await gate.wait()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async with serving(slow) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}", max_connections=3)
        tasks = [asyncio.create_task(pool.request("GET", "/", {})) for _ in range(6)]
        await asyncio.sleep(0.2)
        assert server.connections == 3  # the other three wait for a slot
        gate.set()
        assert [r.status_code for r in await asyncio.gather(*tasks)] == [200] * 6
        assert server.connections == 3
        await pool.aclose()


async def test_chunked_bodies_and_streamed_lines_split_anywhere() -> None:
    lines = [json.dumps({"type": "ADDED", "object": {"n": i, "s": "é" * i}}) for i in range(4)]
    payload = ("\n".join(lines) + "\n").encode()
    pieces = [payload[:7], payload[7:8], payload[8:60], payload[60:]]

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while await read_request(reader, server) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for piece in pieces:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")

    async with serving(chunked) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        whole = await pool.request("GET", "/list", {})
        assert whole.content == payload
        async with pool.stream("GET", "/watch", {}) as resp:
            got = [line async for line in resp.aiter_lines()]
        assert got == lines
        await pool.request("GET", "/again", {})
        assert server.connections == 1  # both fully read bodies gave the connection back
        await pool.aclose()


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def one_then_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int
    ) -> None:
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    async with serving(one_then_close) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        await pool.request("GET", "/", {})
        await asyncio.sleep(0.1)  # the server's FIN arrives while the connection is idle
        resp = await pool.request("POST", "/", {}, b"{}")
        assert resp.status_code == 200
        assert server.connections == 2
        await pool.aclose()


async def test_get_is_resent_once_when_a_reused_connection_dies_unanswered_post_is_not() -> None:
    async def drop_second(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
    ) -> None:
        first = True
        while await read_request(reader, server) is not None:
            if n == 1 and not first:
                writer.transport.abort()  # the race: closed as the request arrives
                return
            first = False
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    async with serving(drop_second) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        await pool.request("GET", "/", {})
        assert (await pool.request("GET", "/", {})).status_code == 200
        assert server.connections == 2
        await pool.aclose()

    async with serving(drop_second) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        await pool.request("GET", "/", {})
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await pool.request("POST", "/", {}, b"{}")
        assert server.connections == 1  # a write is never re-sent by the transport
        await pool.aclose()


async def test_failures_map_to_httpx_transport_errors() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader, server)
        await asyncio.sleep(5)

    async with serving(silent) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        with pytest.raises(httpx.ReadTimeout):
            await pool.request("GET", "/", {}, time_limit=0.2)
        await pool.aclose()
    refused = Http11Sender("http://127.0.0.1:9")
    with pytest.raises(httpx.ConnectError):
        await refused.request("GET", "/", {})

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader, server)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")

    async with serving(garbage) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        with pytest.raises(httpx.RemoteProtocolError, match="not an HTTP"):
            await pool.request("GET", "/", {})
    with pytest.raises(httpx.LocalProtocolError):
        await Http11Sender("http://127.0.0.1:9").request("GET", "/", {"X": "a\r\nInjected: 1"})


async def test_a_stream_that_stops_early_closes_its_connection() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while await read_request(reader, server) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(1000):
                line = b'{"type":"ADDED","object":{}}\n'
                writer.write(b"%x\r\n%s\r\n" % (len(line), line))
                await writer.drain()
                await asyncio.sleep(0.01 if i < 2 else 1)

    async with serving(endless) as server:
        pool = Http11Sender(f"http://127.0.0.1:{server.port}")
        async with pool.stream("GET", "/w", {}, read_timeout=5) as resp:
            async for _ in resp.aiter_lines():
                break
        async with pool.stream("GET", "/w", {}, read_timeout=0.3) as resp:
            with pytest.raises(httpx.ReadTimeout):
                async for _ in resp.aiter_lines():
                    pass
        assert server.connections == 2 and not pool._idle
        await pool.aclose()


def client_for(port: int) -> KubeClient:
    config = KubeConfig(server=f"http://127.0.0.1:{port}", token_source=lambda: "Bearer t0k")
    # fake time for the retry loop's waits (a refused POST is repeated: nothing was sent)
    return KubeClient(config, qps=0, burst=1, timeout=2, clock=SleepRecorder())


async def test_kube_client_uses_the_lean_path_with_auth_query_and_error_mapping() -> None:
    async with (
        keep_alive_server(
            b'{"kind":"Status","reason":"Conflict","code":409}', "409 Conflict"
        ) as server,
        client_for(server.port) as client,
    ):
        assert client.connections_opened == 0
        with pytest.raises(Conflict):
            await client.patch(
                "/api/v1/namespaces/n/pods/p/status",
                {"status": {"message": "${HOME} %{x}"}},
                patch_type="merge",
                field_manager="vk gate",
            )
        assert client.connections_opened == 1
    sent = server.requests[0]
    assert sent.startswith(
        b"PATCH /api/v1/namespaces/n/pods/p/status?fieldManager=vk%20gate HTTP/1.1\r\n"
    )
    assert b"\r\nAuthorization: Bearer t0k\r\n" in sent
    assert b"\r\nContent-Type: application/merge-patch+json\r\n" in sent
    assert sent.endswith(b'{"status":{"message":"${HOME} %{x}"}}')
    async with client_for(9) as client:
        with pytest.raises(ApiUnavailable, match="ConnectError"):
            await client.request("POST", "/api/v1/namespaces", json={})


async def test_kube_client_watch_streams_events_over_the_lean_path() -> None:
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}} for i in range(3)]

    async def watch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in events:
            line = json.dumps(event).encode() + b"\n"
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with serving(watch) as server, client_for(server.port) as client:
        got = [e async for e in client.watch("/api/v1/pods", params={"fieldSelector": "a=b"})]
    assert got == events
    assert server.requests[0].startswith(
        b"GET /api/v1/pods?fieldSelector=a%3Db&watch=true HTTP/1.1"
    )


def test_a_proxy_in_the_environment_sends_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    proxied = KubeClient(KubeConfig(server="https://10.0.0.1:6443", verify=False))
    assert proxied.connections_opened is None
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    assert (
        KubeClient(KubeConfig(server="https://10.0.0.1:6443", verify=False)).connections_opened == 0
    )


async def test_the_lean_path_retries_through_the_one_retry_loop() -> None:
    """503 on a GET is repeated (Retry-After honoured), a 500 on a POST is not; each repeated
    attempt takes a token and is counted like the first."""
    answers = [
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}",
        b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"ok":true}',
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}",
    ]

    async def scripted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while await read_request(reader, server) is not None:
            writer.write(answers.pop(0))
            await writer.drain()

    clock = SleepRecorder()
    async with serving(scripted) as server:
        config = KubeConfig(server=f"http://127.0.0.1:{server.port}")
        async with KubeClient(config, qps=0, burst=1, clock=clock) as client:
            assert await client.get("/api/v1/pods") == {"ok": True}
            assert clock.slept == [3.0]
            with pytest.raises(ApiError) as failed:
                await client.create("/api/v1/namespaces", {})
            assert failed.value.status == 500
            await client.create("/api/v1/namespaces", {})  # 429, then 201
            assert client.stats[("create", "namespaces")] == 3
    assert len(server.requests) == 5 and clock.slept[1] >= 1.0


# -- closing over TLS ------------------------------------------------------------------------


def _tls_contexts(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A certificate for 127.0.0.1 from a test CA: (server context, client context)."""
    ca = make_ca()
    cert, key = ca.issue("127.0.0.1", server_hosts=["127.0.0.1"])
    (tmp / "tls.crt").write_bytes(cert)
    (tmp / "tls.key").write_bytes(key)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    return server, client


@asynccontextmanager
async def tls_pool(tmp: Path) -> AsyncIterator[Http11Sender]:
    """A pool on an asyncio TLS server that answers every request with ``{}``."""
    server_ctx, client_ctx = _tls_contexts(tmp)
    server = Server(lambda r, w, _: _answer_forever(r, w, server))
    srv = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=server_ctx)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield Http11Sender(f"https://127.0.0.1:{port}", ssl_context=client_ctx)
    finally:
        srv.close()


def _sockets(pool: Http11Sender) -> list[Any]:
    return [c.writer.get_extra_info("socket") for c in pool._idle]


async def test_aclose_returns_only_when_every_tls_socket_is_closed(tmp_path: Path) -> None:
    # Over TLS a close is an exchange (close_notify): a client whose loop ends right after
    # aclose() left the sockets open and a ResourceWarning for the garbage collector.
    async with tls_pool(tmp_path) as pool:
        replies = await asyncio.gather(*(pool.request("GET", "/", {}) for _ in range(4)))
        assert [r.status_code for r in replies] == [200] * 4
        socks = _sockets(pool)
        assert len(socks) == 4 and all(s.fileno() != -1 for s in socks)
        await pool.aclose()
        assert [s.fileno() for s in socks] == [-1] * 4


async def test_a_tls_connection_discarded_twice_is_still_closed_cleanly(tmp_path: Path) -> None:
    # a failed request discards its connection twice (the retry path, then the outer handler);
    # a TLS transport closed twice forgets its protocol, and asking it for its socket raised
    # AttributeError in the benchmark's client after a 1,000-pod burst
    async with tls_pool(tmp_path) as pool:
        assert (await pool.request("GET", "/", {})).status_code == 200
        (sock,) = _sockets(pool)
        conn = pool._idle.pop()
        pool._discard(conn)
        pool._discard(conn)
        await asyncio.sleep(0.05)
        pool._discard(conn)  # after the close finished, too
        await pool.aclose()
        assert sock.fileno() == -1


async def test_aclose_aborts_a_tls_peer_that_never_answers_close_notify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http11, "CLOSE_WAIT", 0.2)
    server_ctx, client_ctx = _tls_contexts(tmp_path)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    release = threading.Event()

    def silent_peer() -> None:  # answers one request, then never reads again
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            release.wait(10)

    peer = threading.Thread(target=silent_peer, daemon=True)
    peer.start()
    try:
        pool = Http11Sender(f"https://127.0.0.1:{port}", ssl_context=client_ctx)
        assert (await pool.request("GET", "/", {})).status_code == 200
        (sock,) = _sockets(pool)
        t0 = time.monotonic()
        await pool.aclose()
        assert sock.fileno() == -1
        assert 0.15 < time.monotonic() - t0 < 2
    finally:
        release.set()
        peer.join(5)
        listener.close()


async def _answer_forever(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> None:
    while await read_request(reader, server) is not None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
