"""``/portForward`` over a real loopback socket: the kubelet API (plain HTTP, no auth — that
is tested elsewhere) in front of small TCP servers on 127.0.0.1 that stand in for a pod's
processes (the pod's ``status.podIP`` is 127.0.0.1).  SPDY with our own client (what
spdystream sends: a data and an error stream per ``requestID``), WebSocket with the
``websockets`` library (what the Python client sends).  Bytes are checked byte for byte."""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from kubelet_helpers import DictPods, SpdyTestClient, pod
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from gateway.kubelet.api import portforward
from gateway.kubelet.api.dial import dial
from gateway.kubelet.api.routes import KubeletAPI
from gateway.kubelet.server import HttpServer
from gateway.kubelet.streams import spdy
from gateway.metrics import Metrics
from translators.base import BackendUnavailable, Features, PodRef, PortForwarder, WorkloadState
from vkgate_core.clock import SystemClock

MIB = 1024 * 1024


@dataclass
class RoutableTranslator:
    """A backend whose pod IPs vkgate can dial (as Nomad's and Zun's)."""

    kind: str = "routable"
    features: Features = field(default_factory=lambda: Features(routable_pod_ip=True))


@dataclass
class ClosedTranslator:
    """A backend with neither a tunnel nor routable pod IPs (as Batch)."""

    kind: str = "closed"
    features: Features = field(default_factory=Features)


# --------------------------------------------------------------------------- the "pod"


class PodServers:
    """TCP servers on 127.0.0.1, one per behaviour; ``accepted`` counts connections."""

    def __init__(self) -> None:
        self.servers: list[asyncio.Server] = []
        self.accepted = 0
        self.closed = asyncio.Event()

    async def serve(
        self, handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
    ) -> int:
        async def wrapped(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.accepted += 1
            try:
                await handle(r, w)
            finally:
                w.close()
                self.closed.set()

        server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        for s in self.servers:
            s.close()


async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while data := await r.read(65536):
        w.write(data)
        await w.drain()


async def digest(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """Reads until the client half-closed, then answers ``<sha256> <length>``."""
    h, n = hashlib.sha256(), 0
    while data := await r.read(65536):
        h.update(data)
        n += len(data)
    w.write(f"{h.hexdigest()} {n}\n".encode())
    await w.drain()


BLOB = os.urandom(MIB)


async def blob(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """Sends 1 MiB and closes (an HTTP/1.0 download)."""
    w.write(BLOB)
    await w.drain()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the kubelet


@dataclass
class Env:
    api: KubeletAPI
    server: HttpServer
    pods: PodServers
    metrics: Metrics

    async def spdy(
        self, path: str = "/portForward/default/p", protocol: str = "portforward.k8s.io"
    ) -> tuple[SpdyTestClient, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        lines = [
            f"POST {path} HTTP/1.1",
            "Host: 127.0.0.1",
            "Connection: Upgrade",
            "Upgrade: SPDY/3.1",
            f"X-Stream-Protocol-Version: {protocol}",
            "Content-Length: 0",
            "",
            "",
        ]
        writer.write("\r\n".join(lines).encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        return SpdyTestClient(reader, writer), head

    def ws(self, query: str, protocols: list[str] | None = None) -> Any:
        url = f"ws://127.0.0.1:{self.server.port}/portForward/default/p?{query}"
        subprotocols = [Subprotocol(p) for p in protocols or ["v4.channel.k8s.io"]]
        return ws_connect(
            url, subprotocols=subprotocols, proxy=None, compression=None, open_timeout=5
        )


def own_namespace(pod_ip: str) -> WorkloadState:
    """The workload of a pod with a network namespace of its own (every port is the pod's)."""
    return WorkloadState(ref=PodRef("default", "p", "uid-1"), backend_id="w", pod_ip=pod_ip)


async def start(
    translator: Any,
    *,
    pod_ip: str = "127.0.0.1",
    timeout: float = 5.0,
    state: WorkloadState | Literal["own"] | None = "own",
    ports: Sequence[int] = (),
) -> Env:
    """The kubelet API in front of pod ``default/p``, whose workload is ``state`` (``own``:
    a network namespace of its own, at ``pod_ip``); ``ports`` are its declared
    ``containerPort``s (container ``app``)."""
    p = pod()
    if pod_ip:
        p["status"]["podIP"] = pod_ip
    p["spec"]["containers"][0]["ports"] = [{"containerPort": n} for n in ports]
    pods = DictPods(p)
    if state == "own":
        state = own_namespace(pod_ip)
    if state is not None:
        pods.states["uid-1"] = state
    metrics = Metrics(process=False)
    api = KubeletAPI(
        node_name="vk-1",
        pods=pods,
        translator=translator,
        clock=SystemClock(),
        started=_dt.datetime.now(_dt.UTC),
        metrics=metrics,
        creation_timeout=timeout,
    )
    server = HttpServer(api.handle, host="127.0.0.1", port=0)
    await server.start()
    return Env(api, server, PodServers(), metrics)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    e = await start(RoutableTranslator())
    yield e
    await e.server.stop()
    await e.pods.close()


async def open_pair(client: SpdyTestClient, port: int, request_id: str | None) -> tuple[int, int]:
    """What client-go does per connection: the error stream (half-closed at once: the
    client never writes on it), then the data stream."""
    extra = {} if request_id is None else {"requestID": request_id}
    err = await client.open("error", fin=True, port=str(port), **extra)
    data = await client.open("data", port=str(port), **extra)
    return err, data


# --------------------------------------------------------------------------- SPDY


async def test_spdy_moves_a_mebibyte_each_way_on_two_ports(env: Env) -> None:
    up_port = await env.pods.serve(digest)
    down_port = await env.pods.serve(blob)
    client, head = await env.spdy()
    assert head.startswith(b"HTTP/1.1 101")
    assert b"x-stream-protocol-version: portforward.k8s.io" in head.lower()
    up_err, up = await open_pair(client, up_port, "0")
    down_err, down = await open_pair(client, down_port, "1")
    payload = os.urandom(MIB)

    async def send() -> None:
        for i in range(0, MIB, 50_000):  # in frames of odd sizes, as a socket reads them
            await client.write(up, payload[i : i + 50_000])
        await client.write(up, b"", fin=True)  # the local client half-closed

    # reading while writing, as spdystream does (its reader never waits for its writers)
    await asyncio.gather(
        send(), client.until(lambda: {up, down, up_err, down_err} <= client.fin, wait_s=20)
    )
    assert bytes(client.data[up]) == f"{hashlib.sha256(payload).hexdigest()} {MIB}\n".encode()
    assert hashlib.sha256(client.data[down]).digest() == hashlib.sha256(BLOB).digest()
    assert len(client.data[down]) == MIB
    assert client.data[up_err] == b"" and client.data[down_err] == b""
    assert not client.resets
    client.writer.close()


async def test_spdy_runs_many_connections_at_once(env: Env) -> None:
    port = await env.pods.serve(echo)
    client, _ = await env.spdy()
    pairs = {rid: await open_pair(client, port, str(rid)) for rid in range(8)}
    payloads = {rid: bytes([rid]) * 1000 + os.urandom(100_000) for rid in pairs}

    async def send() -> None:
        for offset in range(0, 101_000, 10_100):  # interleaved: all connections open at once
            for rid, (_, data) in pairs.items():
                await client.write(data, payloads[rid][offset : offset + 10_100])

    await asyncio.gather(
        send(),
        client.until(
            lambda: all(len(client.data[d]) == len(payloads[r]) for r, (_, d) in pairs.items()),
            wait_s=20,
        ),
    )
    gauge = env.metrics.portforward_connections
    assert gauge._value.get() == 8
    assert env.pods.accepted == 8
    for rid, (_, data) in pairs.items():
        assert bytes(client.data[data]) == payloads[rid]
        await client.write(data, b"", fin=True)
    await client.until(lambda: all({e, d} <= client.fin for e, d in pairs.values()), wait_s=10)
    assert all(client.data[e] == b"" for e, _ in pairs.values())
    for _ in range(50):
        if gauge._value.get() == 0:
            break
        await asyncio.sleep(0.02)
    assert gauge._value.get() == 0
    client.writer.close()


async def test_spdy_connection_refused_is_the_kubelets_error_text(env: Env) -> None:
    port = free_port()
    client, _ = await env.spdy()
    err, data = await open_pair(client, port, "0")
    await client.until(lambda: {err, data} <= client.fin)
    assert bytes(client.data[err]).decode() == (
        f"error forwarding port {port} to pod default/p, uid uid-1: "
        f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    )
    # the session goes on: the next connection works
    good = await env.pods.serve(echo)
    err2, data2 = await open_pair(client, good, "1")
    await client.write(data2, b"still here", fin=True)
    await client.until(lambda: {err2, data2} <= client.fin)
    assert bytes(client.data[data2]) == b"still here"
    client.writer.close()


async def test_spdy_pod_resetting_the_connection_is_reported(env: Env) -> None:
    async def reset(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read(10)
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    port = await env.pods.serve(reset)
    client, _ = await env.spdy()
    err, data = await open_pair(client, port, "0")
    await client.write(data, b"hello")
    await client.until(lambda: err in client.fin)
    text = bytes(client.data[err]).decode()
    assert text.startswith(f"error forwarding port {port} to pod default/p, uid uid-1: read tcp ")
    assert text.endswith(f"->127.0.0.1:{port}: read: connection reset by peer")
    client.writer.close()


async def test_spdy_incomplete_pair_times_out_with_an_error(env: Env) -> None:
    env.api.creation_timeout = 0.2
    port = await env.pods.serve(echo)
    client, _ = await env.spdy()
    err = await client.open("error", fin=True, port=str(port), requestID="7")
    await client.until(lambda: err in client.fin, wait_s=5)
    assert bytes(client.data[err]) == b"(request=7) timed out waiting for streams"
    assert env.pods.accepted == 0
    client.writer.close()


@pytest.mark.parametrize(
    "headers",
    [
        {"streamType": "data"},  # no port
        {"streamType": "data", "port": "http"},
        {"streamType": "data", "port": "0"},
        {"streamType": "stdout", "port": "80"},
        {"port": "80"},
    ],
)
async def test_spdy_streams_the_kubelet_would_refuse_are_reset(
    env: Env, headers: dict[str, str]
) -> None:
    client, _ = await env.spdy()
    sid = client.next_id
    client.next_id += 2
    hs = {k.lower(): [v] for k, v in headers.items()}
    await client.send(spdy.SynStream(sid, hs))
    await client.until(lambda: sid in client.resets)
    assert client.resets[sid] == spdy.RstStatus.CANCEL
    client.writer.close()


async def test_spdy_a_second_stream_of_a_kind_for_a_request_is_an_error(env: Env) -> None:
    port = await env.pods.serve(echo)
    client, _ = await env.spdy()
    first = await client.open("error", fin=True, port=str(port), requestID="3")
    await client.open("error", fin=True, port=str(port), requestID="3")
    await client.until(lambda: client.data[first] != b"")
    assert bytes(client.data[first]) == (
        b"error processing stream for request 3: error stream already assigned"
    )
    assert env.pods.accepted == 0
    client.writer.close()


async def test_spdy_streams_without_request_id_pair_by_stream_id(env: Env) -> None:
    port = await env.pods.serve(echo)
    client, _ = await env.spdy()
    err, data = await open_pair(client, port, None)  # ids 1 and 3: the kubelet pairs them
    await client.write(data, b"old client", fin=True)
    await client.until(lambda: {err, data} <= client.fin)
    assert bytes(client.data[data]) == b"old client"
    client.writer.close()


async def test_spdy_other_protocol_is_refused_with_ours_named(env: Env) -> None:
    client, head = await env.spdy(protocol="v4.channel.k8s.io")
    assert head.startswith(b"HTTP/1.1 403")
    assert b"x-accepted-stream-protocol-versions: portforward.k8s.io" in head.lower()
    client.writer.close()


async def test_spdy_client_leaving_closes_the_pod_connection(env: Env) -> None:
    port = await env.pods.serve(echo)
    client, _ = await env.spdy()
    _, data = await open_pair(client, port, "0")
    await client.write(data, b"ping")
    await client.until(lambda: bytes(client.data[data]) == b"ping")
    client.writer.close()
    await asyncio.wait_for(env.pods.closed.wait(), 5)


# --------------------------------------------------------------------------- where to


@dataclass
class MemoryStream:
    """A ``PortStream`` that answers one request: what a backend tunnel would carry."""

    sent: bytearray = field(default_factory=bytearray)
    answer: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    closed: bool = False

    async def read(self) -> bytes:
        return await self.answer.get()

    async def write(self, data: bytes) -> None:
        self.sent += data

    async def close_write(self) -> None:
        await self.answer.put(b"tunnelled:" + bytes(self.sent))
        await self.answer.put(b"")

    async def close(self) -> None:
        self.closed = True


@dataclass
class TunnelTranslator:
    """A backend with a tunnel of its own (no routable pod IPs)."""

    kind: str = "tunnel"
    features: Features = field(default_factory=Features)
    calls: list[tuple[PodRef, int]] = field(default_factory=list)
    streams: list[MemoryStream] = field(default_factory=list)

    async def port_forward(self, ref: PodRef, port: int) -> MemoryStream:
        self.calls.append((ref, port))
        if port == 9:
            raise BackendUnavailable("the tunnel is down")
        self.streams.append(MemoryStream())
        return self.streams[-1]


async def test_a_backend_tunnel_is_used_instead_of_the_pod_ip() -> None:
    tr = TunnelTranslator()
    assert isinstance(tr, PortForwarder)
    e = await start(tr, pod_ip="")  # no address needed
    try:
        client, _ = await e.spdy()
        err, data = await open_pair(client, 8080, "0")
        await client.write(data, b"GET /", fin=True)
        bad_err, bad = await open_pair(client, 9, "1")
        await client.until(lambda: {err, data, bad_err, bad} <= client.fin)
        assert bytes(client.data[data]) == b"tunnelled:GET /"
        assert tr.calls == [
            (PodRef("default", "p", "uid-1"), 8080),
            (PodRef("default", "p", "uid-1"), 9),
        ]
        assert tr.streams[0].closed
        assert bytes(client.data[bad_err]) == (
            b"error forwarding port 9 to pod default/p, uid uid-1: the tunnel is down"
        )
        client.writer.close()
    finally:
        await e.server.stop()


async def test_a_backend_without_a_way_is_refused_naming_it() -> None:
    e = await start(ClosedTranslator())
    try:
        client, head = await e.spdy()
        assert head.startswith(b"HTTP/1.1 501")
        body = await asyncio.wait_for(client.reader.read(4096), 5)
        assert b"port-forward is not supported by the closed backend" in body
        assert b"not reachable from vkgate" in body
        client.writer.close()
        assert portforward.refusal(RoutableTranslator()) == ""  # type: ignore[arg-type]
    finally:
        await e.server.stop()


async def test_a_pod_without_an_address_is_refused_before_the_upgrade() -> None:
    e = await start(RoutableTranslator(), pod_ip="")
    try:
        client, head = await e.spdy()
        assert head.startswith(b"HTTP/1.1 500")
        body = await asyncio.wait_for(client.reader.read(4096), 5)
        assert b'pod \\"default/p\\" has no IP address yet (phase Running)' in body
        client.writer.close()
    finally:
        await e.server.stop()


async def test_unknown_pod_or_uid_is_404(env: Env) -> None:
    for path in ("/portForward/default/nope", "/portForward/default/p/other-uid"):
        client, head = await env.spdy(path)
        assert head.startswith(b"HTTP/1.1 404"), head
        client.writer.close()


# --------------------------------------------------------------------------- host network


HOST_NETWORK = (
    "host network: its address is its host's, and port-forward reaches only its declared "
    "containerPorts and the ports reserved for it"
)


def host_network(*reserved: int) -> WorkloadState:
    """Nomad's ``network_mode = "host"``: the pod's address is its client's."""
    return WorkloadState(
        ref=PodRef("default", "p", "uid-1"),
        backend_id="w",
        pod_ip="127.0.0.1",
        host_ip="127.0.0.1",
        host_network=True,
        host_ports=tuple(sorted(reserved)),
    )


@dataclass
class HostNetwork:
    """A host-network pod at 127.0.0.1: its declared port, a port reserved for it, and a
    listener of its host's that is not the pod's (a Nomad agent's API)."""

    env: Env
    host: PodServers
    app: int
    reserved: int
    agent: int

    def refused(self, port: int) -> str:
        allowed = ", ".join(str(p) for p in sorted((self.app, self.reserved)))
        return (
            f"error forwarding port {port} to pod default/p, uid uid-1: port {port} is not "
            f"declared by the pod ({HOST_NETWORK}: {allowed})"
        )


@pytest.fixture
async def hostnet() -> AsyncIterator[HostNetwork]:
    pods, host = PodServers(), PodServers()
    app, reserved = await pods.serve(echo), await pods.serve(echo)
    agent = await host.serve(echo)
    e = await start(RoutableTranslator(), state=host_network(reserved), ports=[app])
    await e.pods.close()
    e.pods = pods
    yield HostNetwork(e, host, app, reserved, agent)
    await e.server.stop()
    await pods.close()
    await host.close()


async def test_spdy_host_network_reaches_the_pods_ports_and_refuses_its_hosts(
    hostnet: HostNetwork,
) -> None:
    client, _ = await hostnet.env.spdy()
    app_err, app = await open_pair(client, hostnet.app, "0")
    res_err, res = await open_pair(client, hostnet.reserved, "1")
    agent_err, agent = await open_pair(client, hostnet.agent, "2")
    await client.write(app, b"to the app", fin=True)
    await client.write(res, b"to a reserved port", fin=True)
    await client.until(lambda: {app_err, app, res_err, res, agent_err, agent} <= client.fin)
    assert bytes(client.data[app]) == b"to the app" and client.data[app_err] == b""
    assert bytes(client.data[res]) == b"to a reserved port" and client.data[res_err] == b""
    assert bytes(client.data[agent_err]).decode() == hostnet.refused(hostnet.agent)
    assert client.data[agent] == b""
    assert hostnet.host.accepted == 0  # never dialled
    assert hostnet.env.pods.accepted == 2
    client.writer.close()


async def test_websocket_host_network_reaches_the_pods_ports_and_refuses_its_hosts(
    hostnet: HostNetwork,
) -> None:
    got: dict[int, bytearray] = {c: bytearray() for c in range(4)}
    async with hostnet.env.ws(f"port={hostnet.app},{hostnet.agent}") as ws:
        await ws.send(b"\x00to the app")
        while len(got[0]) < 2 + len(b"to the app") or len(got[3]) <= 2:
            msg = await asyncio.wait_for(ws.recv(), 10)
            assert isinstance(msg, bytes)
            got[msg[0]] += msg[1:]
    assert bytes(got[0][2:]) == b"to the app"
    assert bytes(got[3][2:]).decode() == hostnet.refused(hostnet.agent)
    assert bytes(got[2]) == struct.pack("<H", hostnet.agent)
    assert hostnet.host.accepted == 0


async def test_a_workload_not_known_yet_gets_only_its_declared_ports() -> None:
    """After a restart, before the backend's first list: the address may be the host's."""
    pods, host = PodServers(), PodServers()
    app, other = await pods.serve(echo), await host.serve(echo)
    e = await start(RoutableTranslator(), state=None, ports=[app])
    try:
        client, _ = await e.spdy()
        app_err, app_data = await open_pair(client, app, "0")
        other_err, other_data = await open_pair(client, other, "1")
        await client.write(app_data, b"declared", fin=True)
        await client.until(lambda: {app_err, app_data, other_err, other_data} <= client.fin)
        assert bytes(client.data[app_data]) == b"declared"
        assert bytes(client.data[other_err]).decode() == (
            f"error forwarding port {other} to pod default/p, uid uid-1: port {other} is not "
            "declared by the pod (its network is not known: until the backend reports the "
            f"address it runs at, port-forward reaches only its declared containerPorts: {app})"
        )
        assert host.accepted == 0
        client.writer.close()
    finally:
        await e.server.stop()
        await pods.close()
        await host.close()


async def test_a_backend_tunnel_is_not_asked_for_a_port_of_the_host() -> None:
    tr = TunnelTranslator()
    e = await start(tr, state=host_network(), ports=[8080])
    try:
        client, _ = await e.spdy()
        err, data = await open_pair(client, 8080, "0")
        await client.write(data, b"GET /", fin=True)
        agent_err, _agent = await open_pair(client, 4646, "1")
        await client.until(lambda: {err, data, agent_err} <= client.fin)
        assert bytes(client.data[data]) == b"tunnelled:GET /"
        assert (
            bytes(client.data[agent_err])
            .decode()
            .endswith(f"port 4646 is not declared by the pod ({HOST_NETWORK}: 8080)")
        )
        assert tr.calls == [(PodRef("default", "p", "uid-1"), 8080)]
        client.writer.close()
    finally:
        await e.server.stop()


# --------------------------------------------------------------------------- WebSocket


async def test_websocket_ports_get_their_channels_and_prefixes(env: Env) -> None:
    echo_port = await env.pods.serve(echo)
    blob_port = await env.pods.serve(blob)
    dead = free_port()
    got: dict[int, bytearray] = {c: bytearray() for c in range(6)}
    query = f"port={echo_port}&port={blob_port},{dead}"
    async with env.ws(query) as ws:
        assert ws.subprotocol == "v4.channel.k8s.io"
        payload = os.urandom(300_000)
        for i in range(0, len(payload), 70_000):
            await ws.send(b"\x00" + payload[i : i + 70_000])
        while len(got[0]) < 2 + len(payload) or len(got[2]) < 2 + MIB or len(got[5]) <= 2:
            msg = await asyncio.wait_for(ws.recv(), 10)
            assert isinstance(msg, bytes)
            got[msg[0]] += msg[1:]
    for channel, port in ((0, echo_port), (1, echo_port), (2, blob_port), (3, blob_port)):
        assert got[channel][:2] == struct.pack("<H", port), channel
    assert bytes(got[0][2:]) == payload
    assert bytes(got[2][2:]) == BLOB
    assert got[1] == struct.pack("<H", echo_port) and got[3] == struct.pack("<H", blob_port)
    assert got[4] == struct.pack("<H", dead)
    assert bytes(got[5][2:]).decode() == (
        f"error forwarding port {dead} to pod default/p, uid uid-1: "
        f"dial tcp 127.0.0.1:{dead}: connect: connection refused"
    )


async def test_websocket_ends_when_every_port_connection_ended(env: Env) -> None:
    port = await env.pods.serve(blob)
    received = bytearray()
    async with env.ws(f"port={port}", ["v4.channel.k8s.io"]) as ws:
        async for msg in ws:  # ends: the server closes once the pod closed its side
            assert isinstance(msg, bytes)
            if msg[0] == 0:
                received += msg[1:]
    assert bytes(received[2:]) == BLOB


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("", 'query parameter \\"port\\" is required'),
        ("port=", 'query parameter \\"port\\" cannot be empty'),
        ("port=http", "unable to parse 'http' as a port"),
        ("port=0", "must be > 0"),
    ],
)
async def test_websocket_bad_ports_are_400_before_the_upgrade(
    env: Env, query: str, fragment: str
) -> None:
    with pytest.raises(InvalidStatus) as caught:
        async with env.ws(query):
            pass
    assert caught.value.response.status_code == 400
    assert fragment in caught.value.response.body.decode()


async def test_spdy_data_sent_after_the_pod_closed_does_not_stall_the_session(env: Env) -> None:
    closing = await env.pods.serve(blob)
    port = await env.pods.serve(echo)
    client, _ = await env.spdy()
    err, data = await open_pair(client, closing, "0")
    await client.until(lambda: {err, data} <= client.fin)
    # the client keeps writing to the finished connection (more than a stream may buffer)
    junk = os.urandom(64 * 1024)

    async def send() -> None:
        for _ in range(48):  # 3 MiB
            await client.write(data, junk)

    await asyncio.gather(send(), client.until(lambda: len(client.data[data]) == MIB))
    # ... and another connection of the same session still flows
    err2, data2 = await open_pair(client, port, "1")
    await client.write(data2, b"after", fin=True)
    await client.until(lambda: {err2, data2} <= client.fin)
    assert bytes(client.data[data2]) == b"after"
    client.writer.close()


async def test_a_dial_that_hangs_ends_in_an_io_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(0)  # one connection waits in the backlog; the next SYN is dropped
        port = int(s.getsockname()[1])
        first = await dial("127.0.0.1", port, within=2)
        try:
            with pytest.raises(BackendUnavailable) as caught:
                await dial("127.0.0.1", port, within=0.3)
        finally:
            await first.close()
    assert str(caught.value) == f"dial tcp 127.0.0.1:{port}: i/o timeout"
