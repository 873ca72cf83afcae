"""The one token bucket (vkgate_core/ratelimit.py): a burst, then paced at qps, refilled over
time; ``reserve`` tells how long a token is away without waiting for it."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.kube.kube_fakes import SleepRecorder
from vkgate_core.clock import FakeClock
from vkgate_core.ratelimit import TokenBucket


async def test_token_bucket_allows_burst_then_paces_at_qps():
    clock = SleepRecorder()
    bucket = TokenBucket(qps=10, burst=5, clock=clock)
    for _ in range(5):
        await bucket.acquire()
    assert clock.slept == []
    for _ in range(3):
        await bucket.acquire()
    assert clock.slept == pytest.approx([0.1, 0.1, 0.1])


async def test_token_bucket_refills_over_time():
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=2, clock=clock)
    await bucket.acquire()
    await bucket.acquire()
    await clock.advance(1.0)  # two tokens back
    await asyncio.wait_for(bucket.acquire(), 0.5)
    await asyncio.wait_for(bucket.acquire(), 0.5)
    blocked = asyncio.create_task(bucket.acquire())
    await asyncio.sleep(0)
    assert not blocked.done()
    await clock.advance(0.5)
    await asyncio.wait_for(blocked, 0.5)


def test_reserve_takes_a_token_and_says_how_long_it_is_away() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=4, burst=2, clock=clock)
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.25, 0.5]
    off = TokenBucket(qps=0, burst=1, clock=clock)
    assert [off.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
