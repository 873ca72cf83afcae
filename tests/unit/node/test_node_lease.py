"""Lease heartbeats: cadence, conflict retry, create on 404, backoff bounds (fake clock)."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator, Callable

import pytest
from node_fakes import FakeApi, advance

from gateway.kube.client import KubeClient
from gateway.kube.errors import Conflict
from gateway.node.lease import LeaseKeeper, micro_time
from vkgate_core.backoff import Backoff
from vkgate_core.clock import FakeClock

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
async def keeper(
    api: FakeApi, clock: FakeClock, make_client: Callable[[FakeApi], KubeClient]
) -> AsyncIterator[LeaseKeeper]:
    client = make_client(api)
    k = LeaseKeeper(client, "vk-test", clock=clock, rng=random.Random(1))
    k.set_owner("node-uid-1")
    yield k
    await client.aclose()


async def test_creates_lease_with_owner_and_micro_time(keeper: LeaseKeeper, api: FakeApi):
    await keeper.renew_once()
    lease = api.lease()
    assert lease["spec"]["holderIdentity"] == "vk-test"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert MICRO.match(lease["spec"]["renewTime"])
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "vk-test", "uid": "node-uid-1"}
    ]
    assert [r[0] for r in api.requests] == ["GET", "POST"]


def test_micro_time_format():
    import datetime as dt

    t = dt.datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    assert micro_time(t) == "2026-03-01T10:00:00.123456Z"


async def test_renews_every_interval_with_one_put_from_cache(
    keeper: LeaseKeeper, api: FakeApi, clock: FakeClock
):
    task = asyncio.create_task(keeper.run())
    try:
        await advance(clock, 0.1)
        assert keeper.renewals == 1
        first = api.lease()["spec"]["renewTime"]
        api.requests.clear()
        await advance(clock, 35)
        # renewals at 10, 20, 30: exactly one PUT each, no GETs (updated from our copy)
        assert keeper.renewals == 4
        assert [r[0] for r in api.requests] == ["PUT", "PUT", "PUT"]
        assert api.lease()["spec"]["renewTime"] > first
        assert api.lease()["spec"]["renewTime"].startswith("2026-03-01T10:00:30.")
    finally:
        task.cancel()


async def test_conflict_rereads_and_retries(keeper: LeaseKeeper, api: FakeApi):
    await keeper.renew_once()
    api.fail("PUT", "leases", 409, times=2)
    api.requests.clear()
    await keeper.renew_once()
    assert [r[0] for r in api.requests] == ["PUT", "GET", "PUT", "GET", "PUT"]
    assert keeper.renewals == 2


async def test_gives_up_after_five_conflicts(keeper: LeaseKeeper, api: FakeApi):
    await keeper.renew_once()
    api.fail("PUT", "leases", 409, times=5)
    with pytest.raises(Conflict):
        await keeper.renew_once()
    assert len(api.writes("PUT")) == 5


async def test_recreates_deleted_lease(keeper: LeaseKeeper, api: FakeApi):
    await keeper.renew_once()
    del api.objects[f"{LEASES}/vk-test"]
    await keeper.renew_once()
    assert api.lease()["spec"]["holderIdentity"] == "vk-test"
    assert len(api.writes("POST")) == 2


async def test_owner_reference_follows_new_node_uid(keeper: LeaseKeeper, api: FakeApi):
    await keeper.renew_once()
    keeper.set_owner("node-uid-2")
    await keeper.renew_once()
    assert api.lease()["metadata"]["ownerReferences"][0]["uid"] == "node-uid-2"


async def test_errors_back_off_with_jitter_and_recover(
    keeper: LeaseKeeper, api: FakeApi, clock: FakeClock
):
    await keeper.renew_once()
    api.fail("*", "leases", 500, times=3)
    task = asyncio.create_task(keeper.run())
    try:
        await advance(clock, 0.05, step=0.05)
        assert keeper.failures == 1
        # backoff 0.2 → 0.4 → 0.8 (jitter only shortens): 3 failures within 1.4 s
        await advance(clock, 1.4, step=0.05)
        assert keeper.failures == 0
        assert keeper.renewals == 2
    finally:
        task.cancel()


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [
        (1, 0.16, 0.2),
        (2, 0.32, 0.4),
        (3, 0.64, 0.8),
        (5, 2.56, 3.2),
        (6, 5.12, 6.4),
        (7, 5.6, 7.0),
        (50, 5.6, 7.0),
    ],
)
def test_lease_backoff_bounds(failures: int, low: float, high: float):
    b = Backoff(base=0.2, factor=2.0, cap=7.0, jitter=0.2)
    rng = random.Random(failures)
    delays = [b.delay(failures, rng) for _ in range(200)]
    assert min(delays) >= low - 1e-9
    assert max(delays) <= high + 1e-9
    assert max(delays) - min(delays) > 0  # jittered, not a fixed value
