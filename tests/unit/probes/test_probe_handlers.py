"""One probe attempt per handler kind (gateway/probes/handlers.py): httpGet through an httpx
transport seam, tcpSocket against a local listener, exec through a fake ``Executor``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest

from gateway.probes.handlers import Handlers, Target
from translators.base import ExecSession, PodRef

TARGET = Target(
    ref=PodRef("ns", "p", "u1"), container="app", pod_ip="127.0.0.1", ports={"http": 8080}
)


def http_handlers(seen: list[httpx.Request], status: int = 200) -> Handlers:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, text="fine")

    return Handlers(executor=None, client=httpx.AsyncClient(transport=httpx.MockTransport(answer)))


async def test_http_get_named_port_scheme_host_path_headers() -> None:
    seen: list[httpx.Request] = []
    h = http_handlers(seen)
    action = {
        "scheme": "HTTPS",
        "host": "10.1.2.3",
        "path": "healthz",
        "port": "http",
        "httpHeaders": [{"name": "X-Probe", "value": "yes"}, {"name": "Host", "value": "web"}],
    }
    res = await h.run("httpGet", action, TARGET, 1.0)
    assert res.ok
    assert str(seen[0].url) == "https://10.1.2.3:8080/healthz"
    assert seen[0].headers["x-probe"] == "yes"
    assert seen[0].headers["host"] == "web"
    assert seen[0].headers["user-agent"].startswith("kube-probe/")


@pytest.mark.parametrize(
    ("status", "ok"), [(200, True), (302, True), (399, True), (400, False), (500, False)]
)
async def test_http_status_ranges(status: int, ok: bool) -> None:
    seen: list[httpx.Request] = []
    res = await http_handlers(seen, status).run("httpGet", {"port": 80}, TARGET, 1.0)
    assert res.ok is ok
    assert str(seen[0].url) == "http://127.0.0.1/"  # host defaults to the pod IP
    if not ok:
        assert res.output == f"HTTP probe failed with statuscode: {status}"


async def test_http_unknown_named_port_fails_naming_it() -> None:
    res = await http_handlers([]).run("httpGet", {"port": "metrics"}, TARGET, 1.0)
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
