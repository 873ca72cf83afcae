"""Leader election per virtual node (gateway.node.leader): takeover time, refusal without HA,
fencing of a deposed leader.  Fake clock, stateful fake API."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from node_fakes import FakeApi, advance, settle

from gateway.config import HaSettings
from gateway.errors import StartupError
from gateway.kube.client import KubeClient
from gateway.kube.errors import NotLeader
from gateway.node.leader import LeaderElector
from vkgate_core.clock import FakeClock

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/vkgate-leader-vk-test"
MakeClient = Callable[[FakeApi], KubeClient]


def elector(
    api: FakeApi, make_client: MakeClient, clock: FakeClock, who: str, *, ha: bool = True
) -> LeaderElector:
    client = make_client(api)
    e = LeaderElector(
        client,
        "vk-test",
        HaSettings(enabled=ha, identity=who),
        clock=clock,
        on_lost=lambda reason: lost.append((who, reason)),
    )
    client.fence = e.fence
    return e


lost: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    lost.clear()


async def test_first_instance_acquires_at_once(api, make_client, clock):
    a = elector(api, make_client, clock, "a")
    await asyncio.wait_for(a.acquire(), 1)
    spec = api.objects[LEASE]["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 10
    assert a.fence("POST", "/api/v1/nodes") is None


async def test_standby_takes_over_within_15_seconds_of_the_leader_dying(api, make_client, clock):
    a = elector(api, make_client, clock, "a")
    b = elector(api, make_client, clock, "b")
    await a.acquire()
    a.start()
    standby = asyncio.create_task(b.acquire())
    await advance(clock, 30)
    assert not standby.done(), "the standby must wait while the leader renews"
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "a"
    await a.stop(release=False)  # kill -9: no release, no more renewals
    died = clock.monotonic()
    while not standby.done():
        await advance(clock, 0.5)
        assert clock.monotonic() - died <= 15, "no takeover within 15 s"
    spec = api.objects[LEASE]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert clock.monotonic() - died >= 10 - 2, "took over before the lease could expire"


async def test_clean_stop_hands_over_without_waiting(api, make_client, clock):
    a = elector(api, make_client, clock, "a")
    b = elector(api, make_client, clock, "b")
    await a.acquire()
    a.start()
    standby = asyncio.create_task(b.acquire())
    await advance(clock, 4)
    await a.stop()
    await advance(clock, 2.5)
    assert standby.done() and api.objects[LEASE]["spec"]["holderIdentity"] == "b"


async def test_without_ha_a_second_instance_refuses_and_names_the_holder(api, make_client, clock):
    a = elector(api, make_client, clock, "pod-a_1234", ha=False)
    b = elector(api, make_client, clock, "pod-b_5678", ha=False)
    await a.acquire()
    a.start()
    second = asyncio.create_task(b.acquire())
    await advance(clock, 6)
    assert second.done()
    with pytest.raises(StartupError, match=r"already driven by pod-a_1234.*ha\.enabled"):
        second.result()
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "pod-a_1234"
    await a.stop()


async def test_without_ha_a_restart_after_a_crash_takes_the_dead_holders_lease(
    api, make_client, clock
):
    a = elector(api, make_client, clock, "a", ha=False)
    await a.acquire()
    await a.stop(release=False)  # crashed
    again = elector(api, make_client, clock, "a-restarted", ha=False)
    task = asyncio.create_task(again.acquire())
    await advance(clock, 13)
    assert task.done() and task.exception() is None
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "a-restarted"


async def test_a_deposed_leader_that_comes_back_does_not_write(api, make_client, clock):
    a = elector(api, make_client, clock, "a")
    b = elector(api, make_client, clock, "b")
    await a.acquire()
    a.start()
    await advance(clock, 3)
    await a.stop(release=False)  # paused: its renew loop is gone, its process is not
    await asyncio.wait_for(_acquire_with_time(b, clock), 5)
    # "a" resumes: its first write is refused before anything is sent ...
    sent = len(api.requests)
    with pytest.raises(NotLeader, match="a is not the leader of node vk-test"):
        await a.client.patch("/api/v1/nodes/vk-test/status", {"status": {}})
    assert len(api.requests) == sent
    # ... and its renew loop sees the new holder, gives up and reports the loss.
    a.renewed_at = clock.monotonic()  # even if it still believed it was fresh
    a.start()
    await advance(clock, 2.5)
    assert lost and lost[0][0] == "a" and "held by b" in lost[0][1]
    assert api.objects[LEASE]["spec"]["holderIdentity"] == "b"
    assert a.fence("PATCH", "/api/v1/nodes/vk-test") is not None


async def test_leader_that_cannot_renew_stops_writing_before_the_lease_expires(
    api, make_client, clock
):
    a = elector(api, make_client, clock, "a")
    await a.acquire()
    a.start()
    api.fail("*", "leases", None, times=1000)  # API server unreachable from a
    await advance(clock, 7.5)
    assert a.fence("POST", "/api/v1/namespaces/x/events") is not None  # fenced at the deadline
    await advance(clock, 1.0)
    assert lost and lost[0][0] == "a"  # and it gives up at its next round
    assert a.renew_failures >= 3
    # 7 s (renew deadline) < 10 s (lease duration): nobody else could have led yet.
    assert clock.monotonic() < 10


async def _acquire_with_time(e: LeaderElector, clock: FakeClock) -> None:
    task = asyncio.create_task(e.acquire())
    while not task.done():
        await advance(clock, 0.5)
    await settle()
    task.result()


async def test_an_identity_without_the_leader_lease_runs_unelected_unless_ha_is_asked(
    api, make_client, clock
):
    api.fail("*", "vkgate-leader", 403, times=1)
    a = elector(api, make_client, clock, "system:node:vk-test", ha=False)
    await asyncio.wait_for(a.acquire(), 1)
    assert a.unavailable and a.fence("PATCH", "/api/v1/nodes/vk-test/status") is None
    api.fail("*", "vkgate-leader", 403, times=1)
    b = elector(api, make_client, clock, "b")
    with pytest.raises(StartupError, match=r"ha\.enabled = true but this identity may not"):
        await asyncio.wait_for(b.acquire(), 1)
