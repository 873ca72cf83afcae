"""``/attach`` on a backend without ``Attacher``: the container's output from the attach point
(log follows with ``tail_lines=0``, stdout and stderr apart), Success when the container ends,
a refusal naming the backend for ``-i``; a backend's own ``Attacher`` still gets everything.
The kubelet API runs on a plain loopback socket (authentication is tested elsewhere)."""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubelet_helpers import DictPods, ScriptedExec, SpdyTestClient, cat, pod
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from gateway.kubelet.api.attach import LogAttachSession
from gateway.kubelet.api.routes import KubeletAPI
from gateway.kubelet.server import HttpServer
from translators.base import BackendNotFound, LogOptions, PodRef
from vkgate_core.clock import SystemClock

BACKLOG = b"written before the attach\n"


@dataclass
class FollowTranslator:
    """Logs: the backlog unless ``tail_lines=0``, then what the test puts on the queue of the
    requested stream (``None`` ends it: the container ended)."""

    kind: str = "follower"
    queues: dict[str, asyncio.Queue[bytes | BaseException | None]] = field(default_factory=dict)
    calls: list[LogOptions] = field(default_factory=list)
    closed: int = 0

    def queue(self, stream: str) -> asyncio.Queue[bytes | BaseException | None]:
        return self.queues.setdefault(stream, asyncio.Queue())

    async def logs(self, ref: PodRef, container: str, options: LogOptions) -> AsyncIterator[bytes]:
        self.calls.append(options)
        try:
            if options.tail_lines != 0:
                yield BACKLOG
            q = self.queue(options.stream)
            while (item := await q.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed += 1


@dataclass
class Env:
    api: KubeletAPI
    server: HttpServer
    translator: Any

    async def spdy(self, query: str) -> tuple[SpdyTestClient, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        lines = [
            f"POST /attach/default/p/app?{query} HTTP/1.1",
            "Host: 127.0.0.1",
            "Connection: Upgrade",
            "Upgrade: SPDY/3.1",
            "X-Stream-Protocol-Version: v4.channel.k8s.io",
            "Content-Length: 0",
            "",
            "",
        ]
        writer.write("\r\n".join(lines).encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        return SpdyTestClient(reader, writer), head

    def ws(self, query: str) -> Any:
        url = f"ws://127.0.0.1:{self.server.port}/attach/default/p/app?{query}"
        v5 = Subprotocol("v5.channel.k8s.io")
        return ws_connect(url, subprotocols=[v5], proxy=None, compression=None, open_timeout=5)


async def start(translator: Any) -> Env:
    api = KubeletAPI(
        node_name="vk-1",
        pods=DictPods(pod()),
        translator=translator,
        clock=SystemClock(),
        started=_dt.datetime.now(_dt.UTC),
    )
    server = HttpServer(api.handle, host="127.0.0.1", port=0)
    await server.start()
    return Env(api, server, translator)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    e = await start(FollowTranslator())
    yield e
    await e.server.stop()


async def until(what: str, pred: Any) -> None:
    for _ in range(250):
        if pred():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never: {what}")


async def test_attach_streams_new_output_per_stream_and_ends_with_success(env: Env) -> None:
    tr: FollowTranslator = env.translator
    client, head = await env.spdy("output=1&error=1")
    assert head.startswith(b"HTTP/1.1 101")
    err = await client.open("error")
    out = await client.open("stdout")
    errs = await client.open("stderr")
    await until("both follows", lambda: len(tr.calls) == 2)
    assert tr.calls == [
        LogOptions(follow=True, tail_lines=0, stream="Stdout"),
        LogOptions(follow=True, tail_lines=0, stream="Stderr"),
    ]
    await tr.queue("Stdout").put(b"out \x00\xff 1\n")
    await tr.queue("Stderr").put(b"err 1\n")
    await client.until(lambda: bytes(client.data[out]) == b"out \x00\xff 1\n")
    await tr.queue("Stdout").put(b"out 2\n")
    await tr.queue("Stdout").put(None)  # the container ended
    await tr.queue("Stderr").put(None)
    await client.until(lambda: err in client.fin)
    assert bytes(client.data[out]) == b"out \x00\xff 1\nout 2\n"  # byte for byte, no backlog
    assert bytes(client.data[errs]) == b"err 1\n"
    assert json.loads(client.data[err]) == {"metadata": {}, "status": "Success"}
    client.writer.close()


async def test_attach_with_a_tty_follows_both_streams_to_stdout(env: Env) -> None:
    tr: FollowTranslator = env.translator
    frames: list[bytes] = []
    async with env.ws("output=1&tty=1") as ws:
        await until("the follow", lambda: len(tr.calls) == 1)
        assert tr.calls == [LogOptions(follow=True, tail_lines=0, stream="All")]
        await tr.queue("All").put(b"prompt$ ")
        await tr.queue("All").put(None)
        async for msg in ws:
            assert isinstance(msg, bytes)
            frames.append(msg)
    assert b"\x01prompt$ " in frames
    (status,) = [f for f in frames if f[:1] == b"\x03" and len(f) > 1]
    assert json.loads(status[1:])["status"] == "Success"


async def test_attach_with_stdin_is_refused_naming_the_backend_and_exec(env: Env) -> None:
    client, head = await env.spdy("input=1&output=1&error=1")
    assert head.startswith(b"HTTP/1.1 501")
    body = json.loads(await asyncio.wait_for(client.reader.read(4096), 5))
    assert body["message"] == (
        "attach with stdin (-i) is not supported by the follower backend: it cannot deliver "
        "input to the container's main process. Use kubectl exec -i to run a command that "
        "reads stdin, or kubectl attach without -i to follow the main process's output"
    )
    assert env.translator.calls == []
    client.writer.close()


async def test_attach_backend_failure_is_a_failure_status(env: Env) -> None:
    tr: FollowTranslator = env.translator
    client, _ = await env.spdy("output=1")
    err = await client.open("error")
    await client.open("stdout")
    await until("the follow", lambda: len(tr.calls) == 1)
    await tr.queue("Stdout").put(BackendNotFound("allocation abc is gone"))
    await client.until(lambda: err in client.fin)
    status = json.loads(client.data[err])
    assert status["status"] == "Failure"
    assert status["message"] == "error attaching to container: allocation abc is gone"
    client.writer.close()


async def test_attach_client_leaving_closes_the_follows(env: Env) -> None:
    tr: FollowTranslator = env.translator
    client, _ = await env.spdy("output=1&error=1")
    await client.open("error")
    await client.open("stdout")
    await client.open("stderr")
    await until("both follows", lambda: len(tr.calls) == 2)
    client.writer.close()
    await until("both follows closed", lambda: tr.closed == 2)


@dataclass
class NothingTranslator:
    kind: str = "bare"


async def test_a_backend_with_neither_logs_nor_attach_is_refused() -> None:
    e = await start(NothingTranslator())
    try:
        with pytest.raises(InvalidStatus) as caught:
            async with e.ws("output=1"):
                pass
        assert caught.value.response.status_code == 501
        message = json.loads(caught.value.response.body)["message"]
        assert message.startswith("attach is not supported by the bare backend: it can neither")
    finally:
        await e.server.stop()


@dataclass
class AttachingTranslator(FollowTranslator):
    """A backend that can join the main process, stdin included."""

    kind: str = "joins"
    attached: list[tuple[str, bool, bool]] = field(default_factory=list)

    async def attach(self, ref: PodRef, container: str, *, tty: bool, stdin: bool) -> ScriptedExec:
        self.attached.append((container, tty, stdin))
        return ScriptedExec(cat)


async def test_a_backends_own_attach_gets_stdin() -> None:
    e = await start(AttachingTranslator())
    try:
        got = bytearray()
        async with e.ws("input=1&output=1") as ws:
            await ws.send(b"\x00typed")
            await ws.send(bytes([255, 0]))  # v5: stdin closed
            async for msg in ws:
                assert isinstance(msg, bytes)
                if msg[:1] == b"\x01":
                    got += msg[1:]
        assert bytes(got) == b"typed"
        assert e.translator.attached == [("app", False, True)]
        assert e.translator.calls == []  # its logs were not used for the attach
    finally:
        await e.server.stop()


async def test_cancelling_an_attach_whose_client_stopped_reading_ends_at_once() -> None:
    """A fast log and a client that reads nothing fill the session's queue; the client
    leaving must still end the follows (nothing waits to queue an end marker nobody reads)."""
    closed: list[str] = []

    @dataclass
    class Firehose:
        kind: str = "firehose"

        async def logs(
            self, ref: PodRef, container: str, options: LogOptions
        ) -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"x" * 1024
                    await asyncio.sleep(0)
            finally:
                closed.append(options.stream)

    session = LogAttachSession(
        Firehose(), PodRef("default", "p", "uid-1"), "app", (("Stdout", 1), ("Stderr", 2))
    )
    await asyncio.sleep(0.1)  # the queue is full by now: nobody reads the output
    canceller = asyncio.create_task(session.cancel())
    done, _ = await asyncio.wait({canceller}, timeout=2)
    assert canceller in done, "cancel() hangs"
    assert sorted(closed) == ["Stderr", "Stdout"]
