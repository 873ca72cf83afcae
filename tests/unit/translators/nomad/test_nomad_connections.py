"""At most ``max_connections`` (default 8) connections to Nomad per node, whatever the load:
a loopback HTTP/1.1 server counts the connections open at once under 200 concurrent calls.
The bound itself (1..99) is in test_nomad_config.py."""

from __future__ import annotations

import asyncio

from translators.nomad.client import NomadClient
from translators.nomad.config import NomadConfig


class CountingServer:
    """Answers every request with ``200 []`` after ``delay`` s, keeping connections alive."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.open = 0
        self.peak = 0
        self.accepted = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                self.requests += 1
                await asyncio.sleep(self.delay)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"X-Nomad-Index: 1\r\nContent-Length: 2\r\n\r\n[]"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


async def test_200_concurrent_calls_use_at_most_8_connections() -> None:
    server = CountingServer()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    config = NomadConfig(address=f"http://127.0.0.1:{port}")
    assert config.max_connections == 8
    client = NomadClient(config)
    try:
        results = await asyncio.gather(*(client.get("/jobs") for _ in range(200)))
    finally:
        await client.aclose()
        srv.close()
        await srv.wait_closed()
    assert results == [[]] * 200 and server.requests == 200
    assert 1 < server.peak <= 8  # concurrent, and bounded
    assert server.accepted <= 8  # kept alive and reused, not re-opened per call


def test_a_resource_usage_scrape_takes_at_most_half_the_connections() -> None:
    from translators.api import TranslatorContext
    from translators.nomad import NomadTranslator

    def made(**settings: object) -> NomadTranslator:
        ctx = TranslatorContext(node_name="vk", settings={"address": "http://n:4646", **settings})
        return NomadTranslator(ctx, environ={})

    assert made().metrics.concurrency == 4  # stats_concurrency 8, max_connections 8
    assert made(max_connections=32).metrics.concurrency == 8
    assert made(max_connections=2, stats_concurrency=8).metrics.concurrency == 1


class StreamingServer(CountingServer):
    """``/v1/client/fs/logs/…`` holds its response open (a followed log); the rest answers."""

    def __init__(self) -> None:
        super().__init__(delay=0.0)
        self.streams_open = 0
        self.release = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if b"/v1/client/fs/logs/" not in head.split(b"\r\n", 1)[0]:
            # an ordinary call on its own connection: hand the rest to the counting handler
            self.requests += 1
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"X-Nomad-Index: 1\r\nContent-Length: 2\r\n\r\n[]"
            )
            await writer.drain()
            await super().handle(reader, writer)
            return
        self.streams_open += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}")
        await writer.drain()
        try:
            await self.release.wait()
        finally:
            self.streams_open -= 1
            writer.close()


async def test_followed_logs_have_their_own_pool_and_never_starve_calls(
    monkeypatch: object,
) -> None:
    """``kubectl logs -f`` holds a connection while it follows: on the calls' pool, eight of
    them would stop creates.  Log streams have ``max_log_streams`` (here 4) of their own; calls
    still go through while they are all held; one more stream fails saying why."""
    import pytest

    from translators.base import BackendThrottled
    from translators.nomad import client as client_mod

    mp = pytest.MonkeyPatch()
    mp.setattr(client_mod, "LOG_STREAM_WAIT", 0.3)
    server = StreamingServer()
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    config = NomadConfig(address=f"http://127.0.0.1:{port}", max_connections=2, max_log_streams=4)
    assert NomadConfig().max_log_streams == 16
    client = NomadClient(config)
    held: list[asyncio.Task[None]] = []
    opened = asyncio.Event()

    async def follow(i: int) -> None:
        async with client.stream(f"/client/fs/logs/a{i}", params={"follow": True}, logs=True):
            if server.streams_open >= 4:
                opened.set()
            await server.release.wait()

    try:
        held = [asyncio.create_task(follow(i)) for i in range(4)]
        await asyncio.wait_for(opened.wait(), 5)
        # every log connection is held: 50 calls still complete on the calls' own pool
        results = await asyncio.wait_for(
            asyncio.gather(*(client.get("/jobs") for _ in range(50))), 5
        )
        assert results == [[]] * 50
        with pytest.raises(BackendThrottled, match=r"4 log streams of this node are open"):
            async with client.stream("/client/fs/logs/a9", params={"follow": True}, logs=True):
                pass
    finally:
        server.release.set()
        await asyncio.gather(*held, return_exceptions=True)
        await client.aclose()
        srv.close()
        await srv.wait_closed()
        mp.undo()
