"""One probe attempt per handler kind (gateway/probes/handlers.py): httpGet against a local
HTTP server, tcpSocket against a local listener, exec through a fake ``Executor``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from gateway.probes.handlers import Handlers, Target
from translators.base import ExecSession, PodRef

TARGET = Target(
    ref=PodRef("ns", "p", "u1"), container="app", pod_ip="127.0.0.1", ports={"http": 8080}
)


class Server:
    """A local HTTP server answering ``status``; records each request's head."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.heads: list[str] = []
        self.port = 0

    async def __aenter__(self) -> Server:
        async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.heads.append((await r.readuntil(b"\r\n\r\n")).decode())
            w.write(f"HTTP/1.1 {self.status} X\r\nContent-Length: 0\r\n\r\n".encode())
            await w.drain()
            w.close()

        self.server = await asyncio.start_server(answer, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()


def target(port: int) -> Target:
    return Target(ref=TARGET.ref, container="app", pod_ip="127.0.0.1", ports={"http": port})


async def test_http_get_named_port_host_path_headers() -> None:
    async with Server() as srv:
        action = {
            "host": "127.0.0.1",
            "path": "healthz",
            "port": "http",
            "httpHeaders": [{"name": "X-Probe", "value": "yes"}, {"name": "host", "value": "web"}],
        }
        res = await Handlers(executor=None).run("httpGet", action, target(srv.port), 1.0)
    assert res.ok
    lines = srv.heads[0].split("\r\n")
    assert lines[0] == "GET /healthz HTTP/1.1"
    assert "X-Probe: yes" in lines and "host: web" in lines
    assert not any(h.startswith("Host:") for h in lines)  # the probe's Host header wins
    assert any(h.startswith("User-Agent: kube-probe/") for h in lines)


@pytest.mark.parametrize(
    ("status", "ok"), [(200, True), (302, True), (399, True), (400, False), (500, False)]
)
async def test_http_status_ranges(status: int, ok: bool) -> None:
    async with Server(status) as srv:
        res = await Handlers(executor=None).run("httpGet", {"port": srv.port}, TARGET, 1.0)
    assert res.ok is ok
    assert f"Host: 127.0.0.1:{srv.port}" in srv.heads[0]  # host defaults to the pod IP
    if not ok:
        assert res.output == f"HTTP probe failed with statuscode: {status}"


async def test_http_get_refused_and_timeout() -> None:
    async with Server() as srv:
        port = srv.port
    res = await Handlers(executor=None).run("httpGet", {"port": port}, TARGET, 1.0)
    assert not res.ok and res.output.startswith(f'Get "http://127.0.0.1:{port}/": ')
    held: list[asyncio.StreamWriter] = []

    async def hold(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)  # accepts and never answers

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    res = await Handlers(executor=None).run("httpGet", {"port": port}, TARGET, 0.05)
    assert not res.ok and "context deadline exceeded" in res.output
    for w in held:
        w.close()
    silent.close()
    await silent.wait_closed()


async def test_http_unknown_named_port_fails_naming_it() -> None:
    res = await Handlers(executor=None).run("httpGet", {"port": "metrics"}, TARGET, 1.0)
    assert not res.ok and "metrics" in res.output


async def test_tcp_socket_open_and_refused() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    h = Handlers(executor=None)
    assert (await h.run("tcpSocket", {"port": port}, TARGET, 1.0)).ok
    server.close()
    await server.wait_closed()
    res = await h.run("tcpSocket", {"port": port}, TARGET, 1.0)
    assert not res.ok and res.output.startswith(f"dial tcp 127.0.0.1:{port}: connect:")
    await h.aclose()


class Session:
    def __init__(self, code: int, out: bytes, hang: bool) -> None:
        self.code, self.out, self.hang = code, out, hang
        self.cancelled = False

    async def write_stdin(self, data: bytes) -> None: ...
    async def close_stdin(self) -> None: ...
    async def resize(self, width: int, height: int) -> None: ...

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        yield (1, self.out)
        if self.hang:
            await asyncio.Event().wait()

    async def wait(self) -> int:
        return self.code

    async def cancel(self) -> None:
        self.cancelled = True


class Executor:
    def __init__(self, code: int, out: bytes = b"", hang: bool = False) -> None:
        self.session = Session(code, out, hang)
        self.commands: list[list[str]] = []

    async def exec(
        self, ref: PodRef, container: str, command: Sequence[str], *, tty: bool, stdin: bool
    ) -> ExecSession:
        assert container == "app" and not tty and not stdin
        self.commands.append(list(command))
        return self.session


async def test_exec_exit_code_and_output() -> None:
    ex = Executor(0, b"ok\n")
    res = await Handlers(executor=ex).run("exec", {"command": ["cat", "/ready"]}, TARGET, 1.0)
    assert res.ok and res.output == "ok\n" and ex.commands == [["cat", "/ready"]]
    res = await Handlers(executor=Executor(1, b"no such file\n")).run(
        "exec", {"command": ["cat", "/ready"]}, TARGET, 1.0
    )
    assert not res.ok and res.output == "no such file\n"


async def test_exec_timeout_cancels_the_command() -> None:
    ex = Executor(0, b"", hang=True)
    res = await Handlers(executor=ex).run("exec", {"command": ["sleep", "9"]}, TARGET, 0.05)
    assert not res.ok and "timed out" in res.output
    assert ex.session.cancelled


async def test_exec_without_an_executor_fails_saying_why() -> None:
    res = await Handlers(executor=None).run("exec", {"command": ["true"]}, TARGET, 1.0)
    assert not res.ok and "exec probes need a backend" in res.output
