"""The node's Leases renew on their own lane (``KubeClient.lease_lane``), not behind the pods'
token bucket or connections: under a 1,000-pod burst the single instance's leader Lease lapsed
and it refused its own writes (docs/design/kube-client.md, "The Lease lane")."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Mapping

import httpx
import pytest
from node_fakes import FakeApi, FakeTranslator

from gateway.kube.client import LEASE_CONNECTIONS, KubeClient, KubeConfig, RetryPolicy
from gateway.kube.http11 import Http11Sender
from gateway.kube.sender import HttpxSender, Response, StreamReply
from gateway.node.lease import LeaseKeeper
from tests.kube_loopback import LoopbackApi
from vkgate_core.clock import FakeClock

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_renewal_keeps_its_period_while_pod_requests_saturate_the_bucket(
    clock: FakeClock, api: FakeApi
) -> None:
    client = KubeClient(
        KubeConfig(server="https://kube.test"),
        transport=httpx.MockTransport(api.handler),
        clock=clock,
        qps=1,  # the pods' budget: 1 request per second, burst 1
        burst=1,
        retry=RetryPolicy(delays=()),
    )
    # the pod path: 1,000 status reads queued on the bucket (about 1,000 s of tokens)
    pods = [
        asyncio.ensure_future(client.get("/api/v1/namespaces/default/pods")) for _ in range(1000)
    ]
    await settle()
    keeper = LeaseKeeper(client.lease_lane(), "vk-1", renew_interval=10.0, clock=clock)
    renewals: list[float] = []
    task = asyncio.ensure_future(keeper.run())
    try:
        for _ in range(400):  # 40 s of fake time
            before = keeper.renewals
            await clock.advance(0.1)
            await settle()
            if keeper.renewals > before:
                renewals.append(clock.monotonic())
    finally:
        task.cancel()
        for p in pods:
            p.cancel()
        await asyncio.gather(task, *pods, return_exceptions=True)
    assert len(renewals) >= 4  # t = 0, 10, 20, 30 (40)
    assert all(b - a <= 10.0 + 0.2 for a, b in itertools.pairwise(renewals))
    assert sum(not p.cancelled() and p.done() for p in pods) <= 45  # the pods did wait
    assert client.stats[("update", "leases")] >= 3  # the lane counts in the same stats


async def test_renewal_does_not_wait_for_a_connection_the_pods_hold() -> None:
    """On the lean sender the lane has its own connections: every pod connection is busy."""
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith(LEASES):
            return httpx.Response(200, json={"metadata": {"name": "vk-1"}})
        await release.wait()  # a slow API server, for pods
        return httpx.Response(200, json={})

    async with LoopbackApi(handler) as server:
        client = KubeClient(KubeConfig(server=server.url), qps=0, max_connections=4)
        try:
            pods = [asyncio.ensure_future(client.get("/api/v1/pods")) for _ in range(20)]
            for _ in range(200):
                if len(server.requests) >= 4:
                    break
                await asyncio.sleep(0.01)
            assert len(server.requests) == 4  # the pods hold all 4 connections
            keeper = LeaseKeeper(client.lease_lane(), "vk-1")
            await asyncio.wait_for(keeper.renew_once(), 5)
            assert keeper.renewals == 1
        finally:
            release.set()
            await asyncio.gather(*pods, return_exceptions=True)
            await client.aclose()


async def test_the_node_and_its_leader_election_use_the_lane(clock: FakeClock) -> None:
    from gateway.app import App
    from gateway.config import Settings

    settings = Settings()
    settings.node.name = "vk-test"

    client = KubeClient(KubeConfig(server="https://kube.test"), qps=1, burst=1, clock=clock)
    lane = client.lease_lane()
    assert lane is client.lease_lane() and lane.lease_lane() is lane
    assert lane._limiter.qps <= 0  # no bucket: the renewal loops' periods bound it
    assert lane.sender is not client.sender  # its own connections on the lean sender
    app = App(settings, kube=client, translator=FakeTranslator(), clock=clock)
    assert app.node.lease.client is lane
    assert app.leader.client is lane
    await client.aclose()


class DeclaringSender:
    """A ``Sender`` that is not the lean one; ``own_lease_lane`` is what it declares."""

    def __init__(self, *, own_lease_lane: bool) -> None:
        self._own = own_lease_lane
        self.closed = False

    @property
    def own_lease_lane(self) -> bool:
        return self._own

    @property
    def connections_opened(self) -> int | None:
        return None

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        time_limit: float | None = None,
    ) -> Response:
        raise AssertionError("no request is sent")

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        head_limit: float | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[StreamReply]:
        raise AssertionError("no request is sent")
        yield  # pragma: no cover

    async def aclose(self) -> None:
        self.closed = True


async def test_the_lease_lane_is_what_the_sender_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the sender's class: a sender that declares ``own_lease_lane`` gets a lane of its
    own (the lean sender ``make_sender`` builds, ``LEASE_CONNECTIONS`` connections); one that
    does not, and httpx's (an injected transport), share theirs with the lane."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    config = KubeConfig(server="https://kube.test")

    declaring = DeclaringSender(own_lease_lane=True)
    client = KubeClient(config, sender=declaring)
    lane = client.lease_lane().sender
    assert lane is not declaring
    assert isinstance(lane, Http11Sender) and lane.max_connections == LEASE_CONNECTIONS
    await client.aclose()
    assert declaring.closed

    quiet = DeclaringSender(own_lease_lane=False)
    client = KubeClient(config, sender=quiet)
    assert client.lease_lane().sender is quiet
    await client.aclose()
    assert quiet.closed

    client = KubeClient(config, transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    assert isinstance(client.sender, HttpxSender) and not client.sender.own_lease_lane
    assert client.lease_lane().sender is client.sender
    await client.aclose()
