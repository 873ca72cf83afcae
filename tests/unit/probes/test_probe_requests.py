"""What the probe client writes and where it dials (gateway/probes/handlers.py over
gateway/probes/wire.py; docs/design/probes.md, "What a probe may send, and where"): a CR/LF in
a path or a header never reaches a socket, a host other than the pod's is not dialled unless the
node allows it, and a failure carries the status code or the error kind, never the target's
bytes — in the attempt's message and so in the ``Unhealthy`` Event."""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import Mapping
from typing import Any, cast

import pytest

from gateway.kube.events import EventRecorder
from gateway.probes.handlers import Handlers, Target
from gateway.probes.manager import Prober
from translators.base import ContainerState, Phase, PodRef, WorkloadState
from vkgate_core.clock import FakeClock
from vkgate_core.kubetypes import Pod

SMUGGLED = "DELETE /v1/job/victim HTTP/1.1\r\nX-Nomad-Token: s3cr3t\r\n\r\n"


class Listener:
    """A loopback server that records every byte it is sent and answers ``reply``."""

    def __init__(self, reply: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") -> None:
        self.reply = reply
        self.received: list[bytes] = []
        self.connections = 0
        self.port = 0
        self.handlers: list[asyncio.Task[Any]] = []

    async def __aenter__(self) -> Listener:
        async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.connections += 1
            task = asyncio.current_task()
            assert task is not None
            self.handlers.append(task)
            got = bytearray()
            try:
                async with asyncio.timeout(5):
                    got += await r.readuntil(b"\r\n\r\n")
                    w.write(self.reply)
                    await w.drain()
                    if self.reply:
                        got += await r.read()  # whatever follows the head, until the client closes
            except (TimeoutError, asyncio.IncompleteReadError, OSError):
                pass
            self.received.append(bytes(got))
            w.close()

        self.server = await asyncio.start_server(answer, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*self.handlers)  # each bounded by its own timeout
        self.server.close()
        await self.server.wait_closed()


def target(port: int = 8080, pod_ip: str = "127.0.0.1") -> Target:
    return Target(ref=PodRef("ns", "p", "u1"), container="app", pod_ip=pod_ip, ports={"http": port})


@pytest.mark.parametrize(
    "action",
    [
        {"path": "/ready HTTP/1.1\r\nHost: x\r\n\r\n" + SMUGGLED + "GET /"},
        {"httpHeaders": [{"name": "X-Probe", "value": "yes\r\n\r\n" + SMUGGLED}]},
        {"httpHeaders": [{"name": "X-Probe: yes\r\n\r\n" + SMUGGLED + "X", "value": "v"}]},
        {"httpHeaders": [{"name": "X-Probe", "value": "a\nX-Nomad-Token: s3cr3t"}]},
        {"httpHeaders": [{"name": "X-Probe", "value": "nul\x00byte"}]},
        {"path": "/ready\n"},
    ],
    ids=["path", "header-value", "header-name", "bare-lf", "nul", "path-lf"],
)
async def test_a_smuggling_attempt_is_never_written_to_the_socket(action: dict[str, Any]) -> None:
    async with Listener() as srv:
        res = await Handlers(executor=None).run(
            "httpGet", {**action, "port": srv.port}, target(), 5.0
        )
        await asyncio.sleep(0.05)
    assert not res.ok
    assert "the request was not sent" in res.output
    assert srv.connections == 0 and srv.received == []  # not one byte reached the listener
    assert "\r" not in res.output and "\n" not in res.output and "s3cr3t" not in res.output


async def test_a_valid_request_is_one_request_with_the_headers_as_given() -> None:
    async with Listener() as srv:
        action = {
            "path": "/ready?x=1",
            "port": "http",
            "httpHeaders": [{"name": "X-Probe", "value": " tab\there "}],
        }
        res = await Handlers(executor=None).run("httpGet", action, target(srv.port), 5.0)
        await asyncio.sleep(0.05)
    assert res.ok
    (sent,) = srv.received
    head, rest = sent.split(b"\r\n\r\n", 1)
    assert rest == b""  # nothing after the one request
    lines = head.decode().split("\r\n")
    assert lines[0] == "GET /ready?x=1 HTTP/1.1"
    assert "X-Probe: tab\there" in lines  # Go trims the blanks around a value, keeps a tab in it


REPLIES = {
    "not-http": b"SSH-2.0-OpenSSH_9.6 s3cr3t-banner\r\n",
    "bad-status": b"HTTP/1.1 2000000 s3cr3t\r\n\r\n",
    "no-newline": b"s3cr3t" * 20000,  # longer than the reader's line limit, never a newline
    "body": b"HTTP/1.1 500 Internal\r\nContent-Length: 12\r\n\r\ns3cr3t-body!",
}


@pytest.mark.parametrize("reply", list(REPLIES), ids=list(REPLIES))
async def test_a_failure_never_carries_the_targets_bytes(reply: str) -> None:
    async with Listener(REPLIES[reply]) as srv:
        res = await Handlers(executor=None).run("httpGet", {"port": srv.port}, target(), 5.0)
    assert not res.ok
    assert "s3cr3t" not in res.output and "SSH" not in res.output
    url = f"http://127.0.0.1:{srv.port}/"
    if reply == "body":
        assert res.output == "HTTP probe failed with statuscode: 500"  # the kubelet's words
    else:
        assert res.output == (
            f'Get "{url}": net/http: HTTP/1.x transport connection broken: malformed HTTP response'
        )


async def test_a_closed_connection_without_a_reply_is_eof() -> None:
    async with Listener(b"") as srv:
        res = await Handlers(executor=None).run("httpGet", {"port": srv.port}, target(), 5.0)
    assert res.output == f'Get "http://127.0.0.1:{srv.port}/": EOF'


@pytest.mark.parametrize("handler", ["httpGet", "tcpSocket"])
async def test_a_host_other_than_the_pods_is_not_dialled(handler: str) -> None:
    """``localhost`` is the agent itself (its API, the backend's token) — not the pod at
    127.0.0.1 the target names, so it is not dialled without ``probes.allow_host``."""
    async with Listener() as srv:
        action = {"host": "localhost", "port": srv.port}
        res = await Handlers(executor=None).run(handler, action, target(), 5.0)
        await asyncio.sleep(0.05)
        assert not res.ok and srv.connections == 0
        assert res.output.startswith(f"{handler}.host: not the pod's address")
        assert "probes.allow_host" in res.output
        allowed = await Handlers(executor=None, allow_host=True).run(handler, action, target(), 5.0)
        assert allowed.ok
        # the pod's own address, named explicitly, needs no setting
        own = await Handlers(executor=None).run(
            handler, {**action, "host": "127.0.0.1"}, target(), 5.0
        )
        assert own.ok


async def test_a_host_that_is_not_a_name_is_never_dialled() -> None:
    h = Handlers(executor=None, allow_host=True)
    res = await h.run("httpGet", {"host": "evil\r\nX: y", "port": 80}, target(), 5.0)
    assert not res.ok and res.output == "httpGet.host: not an IP address or a DNS name"


# -- the Unhealthy Event ------------------------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []

    async def record(
        self, obj: Mapping[str, Any], *, type: str, reason: str, message: str, **_: Any
    ) -> None:
        self.got.append((reason, message))


async def test_the_unhealthy_event_carries_no_byte_of_the_reply() -> None:
    """Row 4 of the issue: the first bytes of whatever answered came back in the Event."""
    clock = FakeClock()
    events = Events()
    async with Listener(b"+OK s3cr3t-redis-banner\r\n") as srv:
        prober = Prober(
            Handlers(executor=None),
            cast(EventRecorder, events),
            clock=clock,
            set_readiness=lambda uid, c, ok: False,
            queue=lambda key: None,
        )
        pod = cast(
            Pod,
            {
                "metadata": {"namespace": "ns", "name": "web", "uid": "u1"},
                "spec": {
                    "containers": [
                        {"name": "app", "readinessProbe": {"httpGet": {"port": srv.port}}}
                    ]
                },
            },
        )
        state = WorkloadState(
            ref=PodRef("ns", "web", "u1"),
            backend_id="b1",
            phase=Phase.RUNNING,
            pod_ip="127.0.0.1",
            containers=(
                ContainerState(
                    "app", state="running", started_at=clock.now() - _dt.timedelta(seconds=1)
                ),
            ),
        )
        prober.sync(pod, state)
        for _ in range(3):
            await asyncio.sleep(0)  # the worker starts and waits for its first attempt
        await clock.advance(0)  # which is due at once
        for _ in range(200):
            await asyncio.sleep(0.01)
            if events.got:
                break
        prober.stop()
    ((reason, message),) = events.got[:1]
    assert reason == "Unhealthy"
    assert message == (
        f'Readiness probe failed: Get "http://127.0.0.1:{srv.port}/": net/http: HTTP/1.x '
        "transport connection broken: malformed HTTP response"
    )
