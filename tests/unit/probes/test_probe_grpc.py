"""``grpc`` probes (gateway/probes/grpc.py) against a real gRPC health server on loopback
(grpcio's ``grpc.aio`` server with grpcio-health-checking's servicer, test extra): the
kubelet's verdicts and messages (pkg/probe/grpc/grpc.go)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gateway.probes import grpc as grpcmod
from gateway.probes.handlers import USER_AGENT, Handlers, Target
from translators.base import PodRef

REF = PodRef("ns", "p", "u1")


class RecordingHealth(health.HealthServicer):  # type: ignore[misc]
    """The standard servicer, remembering each call's metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.metadata: list[dict[str, str]] = []

    def Check(self, request: Any, context: Any) -> Any:
        self.metadata.append({k: v for k, v in context.invocation_metadata()})
        return super().Check(request, context)


class HealthServer:
    def __init__(self, *, with_health: bool = True) -> None:
        self.with_health = with_health
        self.servicer = RecordingHealth()
        self.port = 0

    async def __aenter__(self) -> HealthServer:
        self.server = grpc.aio.server()
        if self.with_health:
            health_pb2_grpc.add_HealthServicer_to_server(self.servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(None)

    def set(self, service: str, status: int) -> None:
        self.servicer.set(service, status)


def target(port: int) -> Target:
    return Target(ref=REF, container="app", pod_ip="127.0.0.1", ports={"grpc": port})


async def probe(port: int, service: str = "", *, limit: float = 2.0, named: bool = False) -> Any:
    action: dict[str, Any] = {"port": "grpc" if named else port}
    if service:
        action["service"] = service
    return await Handlers(executor=None).run("grpc", action, target(port), limit)


@pytest.fixture
async def server() -> AsyncIterator[HealthServer]:
    async with HealthServer() as srv:
        yield srv


async def test_serving_succeeds_with_the_kubelets_user_agent(server: HealthServer) -> None:
    res = await probe(server.port, named=True)  # the overall health ("") is SERVING by default
    assert res.ok and res.output == "service healthy"
    assert server.servicer.metadata[0]["user-agent"].startswith(USER_AGENT)


async def test_the_service_field_is_sent_and_its_status_decides(server: HealthServer) -> None:
    server.set("shop.Cart", health_pb2.HealthCheckResponse.NOT_SERVING)
    server.set("shop.Pay", health_pb2.HealthCheckResponse.SERVING)
    res = await probe(server.port, "shop.Cart")
    assert not res.ok
    assert res.output == 'service unhealthy (responded with "NOT_SERVING")'
    assert (await probe(server.port, "shop.Pay")).ok
    server.set("shop.Pay", health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
    res = await probe(server.port, "shop.Pay")
    assert res.output == 'service unhealthy (responded with "SERVICE_UNKNOWN")'
    server.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert not (await probe(server.port)).ok


async def test_an_unknown_service_is_the_servers_not_found(server: HealthServer) -> None:
    res = await probe(server.port, "nope")
    assert not res.ok
    assert res.output.startswith("error: health rpc probe failed: rpc error: code = NotFound")


async def test_a_server_without_the_health_service() -> None:
    async with HealthServer(with_health=False) as srv:
        res = await probe(srv.port)
    assert not res.ok
    assert res.output.startswith(
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"
    )


async def test_nothing_listening_fails_to_connect() -> None:
    async with HealthServer() as srv:
        port = srv.port
    res = await probe(port)
    assert not res.ok
    assert res.output.startswith(f'error: failed to connect service at "127.0.0.1:{port}"')
    assert "refused" in res.output


async def test_a_server_that_never_answers_times_out() -> None:
    accepted = asyncio.Event()
    done = asyncio.Event()

    async def mute(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.set()
        await r.read()  # read the request and say nothing, until the prober hangs up
        w.close()
        await w.wait_closed()
        done.set()

    srv = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        res = await probe(port, limit=0.3)
        await asyncio.wait_for(done.wait(), 5)
    finally:
        srv.close()
        await srv.wait_closed()
    assert accepted.is_set()
    assert not res.ok and res.output == "timeout: health rpc did not complete within 0.3s"


async def test_an_unknown_named_port() -> None:
    res = await Handlers(executor=None).run("grpc", {"port": "other"}, target(1), 1.0)
    assert not res.ok and res.output == "unknown port 'other'"


def test_the_protobuf_messages() -> None:
    assert grpcmod.encode_request("") == b"\x00\x00\x00\x00\x00"
    req = health_pb2.HealthCheckRequest(service="a.b" * 100)
    assert grpcmod.encode_request("a.b" * 100)[5:] == req.SerializeToString()
    for status in (0, 1, 2, 3):
        resp = health_pb2.HealthCheckResponse(status=status)  # type: ignore[arg-type]
        assert grpcmod.decode_status(resp.SerializeToString()) == status
    # unknown fields are skipped (a newer server's message)
    assert grpcmod.decode_status(b"\x12\x02hi\x08\x01\x1d\x00\x00\x00\x00") == 1
    with pytest.raises(ValueError):
        grpcmod.decode_status(b"\x08")


def test_hpack_integers_and_the_request_frames() -> None:
    # RFC 7541, C.1.1 and C.1.2
    assert grpcmod._hpack_int(10, 5) == b"\x0a"
    assert grpcmod._hpack_int(1337, 5) == b"\x1f\x9a\x0a"
    raw = grpcmod.request_bytes("10.0.0.1:9090", "svc", 1.0, "kube-probe/1.31")
    assert raw.startswith(grpcmod.PREFACE)
    # the header block decodes to the kubelet's request (grpc-go's, as the kubelet sends it)
    import hpack

    frames = raw[len(grpcmod.PREFACE) :]
    kinds = []
    while frames:
        size = int.from_bytes(frames[:3], "big")
        kinds.append((frames[3], frames[4], frames[9 : 9 + size]))
        frames = frames[9 + size :]
    assert [(k, f) for k, f, _ in kinds] == [(4, 0), (1, 4), (0, 1)]
    assert hpack.Decoder().decode(kinds[1][2]) == [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/grpc.health.v1.Health/Check"),
        (":authority", "10.0.0.1:9090"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("user-agent", "kube-probe/1.31"),
        ("grpc-timeout", "1000m"),
    ]


async def test_a_long_service_name(server: HealthServer) -> None:
    name = "x" * 300  # lengths past the one-byte HPACK and protobuf forms
    server.set(name, health_pb2.HealthCheckResponse.SERVING)
    assert (await probe(server.port, name)).ok
