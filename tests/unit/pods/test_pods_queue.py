"""WorkQueue semantics with a fake clock: de-dup, serialization, re-run, backoff, rate limit."""

from __future__ import annotations

import asyncio
import random

import pytest

from gateway.pods.queue import ShutDown, WorkQueue
from vkgate_core.backoff import Backoff
from vkgate_core.clock import FakeClock


def make(clock: FakeClock, **kw: object) -> WorkQueue:
    return WorkQueue(clock=clock, rng=random.Random(1), **kw)  # type: ignore[arg-type]


async def take(q: WorkQueue) -> str:
    return await asyncio.wait_for(q.get(), 1)


async def test_dedup_and_fifo_by_due_time() -> None:
    clock = FakeClock()
    q = make(clock)
    q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert await take(q) == "a"
    assert await take(q) == "b"
    assert len(q) == 0


async def test_add_can_only_make_earlier() -> None:
    clock = FakeClock()
    q = make(clock)
    q.add("k", delay=10)
    q.add("k", delay=30)  # must not postpone
    assert q.due_in("k") == pytest.approx(10)
    q.add("k", delay=2)  # moves earlier
    assert q.due_in("k") == pytest.approx(2)
    getter = asyncio.ensure_future(q.get())
    await clock.advance(1)
    assert not getter.done()
    await clock.advance(1.5)
    assert await asyncio.wait_for(getter, 1) == "k"


async def test_key_in_flight_is_never_given_to_a_second_worker_and_reruns() -> None:
    clock = FakeClock()
    q = make(clock)
    q.add("k")
    assert await take(q) == "k"
    q.add("k")  # touched while in flight
    assert len(q) == 0  # not handed out again while processing
    second = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    assert not second.done()
    q.done("k")
    assert await asyncio.wait_for(second, 1) == "k"
    q.done("k")
    assert len(q) == 0  # no extra re-run


async def test_workers_never_process_the_same_key_concurrently() -> None:
    clock = FakeClock()
    q = make(clock)
    active: set[str] = set()
    overlaps: list[str] = []
    runs: dict[str, int] = {}

    async def worker() -> None:
        while True:
            key = await q.get()
            if key in active:
                overlaps.append(key)
            active.add(key)
            runs[key] = runs.get(key, 0) + 1
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            active.discard(key)
            q.done(key)

    tasks = [asyncio.create_task(worker()) for _ in range(8)]
    for _ in range(50):
        for k in ("a", "b", "c"):
            q.add(k)
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert overlaps == []
    assert set(runs) == {"a", "b", "c"}
    # far fewer runs than adds: adds during a run collapse into one re-run
    assert all(n < 50 for n in runs.values())


async def test_dirty_readd_keeps_its_delay() -> None:
    clock = FakeClock()
    q = make(clock)
    q.add("k")
    await take(q)
    q.add("k", delay=5)
    q.done("k")
    assert q.due_in("k") == pytest.approx(5)


async def test_retry_backoff_grows_caps_and_resets() -> None:
    clock = FakeClock()
    q = make(clock, backoff=Backoff(base=1, cap=8, jitter=0, jitter_up=True), retry_qps=0)
    delays = []
    for _ in range(6):
        delays.append(q.retry("k"))
    assert delays == [1, 2, 4, 8, 8, 8]
    q.forget("k")
    assert q.retry("k") == 1


async def test_retry_jitter_never_exceeds_cap() -> None:
    clock = FakeClock()
    q = WorkQueue(
        clock=clock,
        rng=random.Random(7),
        backoff=Backoff(base=1, cap=4, jitter=0.5, jitter_up=True),
    )
    seen = [q.backoff.delay(n, random.Random(n)) for n in range(1, 30)]
    assert max(seen) <= 4
    assert len({round(d, 6) for d in seen[:2]}) == 2  # jitter varies


async def test_retry_after_is_honoured() -> None:
    clock = FakeClock()
    q = make(clock, backoff=Backoff(base=1, cap=8, jitter=0, jitter_up=True), retry_qps=0)
    assert q.retry("k", retry_after=20) == 20


async def test_rate_limit_throttles_retries_but_never_first_attempts() -> None:
    clock = FakeClock()
    q = make(
        clock,
        backoff=Backoff(base=0.001, cap=0.001, jitter=0, jitter_up=True),
        retry_qps=1,
        retry_burst=2,
    )
    delays = [q.retry(f"r{i}") for i in range(5)]
    # burst of 2 passes, then one per second
    assert delays[:2] == [pytest.approx(0.001)] * 2
    assert delays[2:] == [pytest.approx(1), pytest.approx(2), pytest.approx(3)]
    for i in range(100):
        q.add(f"new{i}")
    assert all(q.due_in(f"new{i}") == 0 for i in range(100))


async def test_backoff_waits_on_the_fake_clock() -> None:
    clock = FakeClock()
    q = make(clock, backoff=Backoff(base=2, cap=60, jitter=0, jitter_up=True), retry_qps=0)
    q.retry("k")
    getter = asyncio.ensure_future(q.get())
    await clock.advance(1.9)
    assert not getter.done()
    await clock.advance(0.2)
    assert await asyncio.wait_for(getter, 1) == "k"


async def test_add_wakes_a_waiting_getter() -> None:
    clock = FakeClock()
    q = make(clock)
    getter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.add("x")
    assert await asyncio.wait_for(getter, 1) == "x"


async def test_shutdown_releases_getters() -> None:
    clock = FakeClock()
    q = make(clock)
    getter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(getter, 1)


def test_the_one_backoff_jitters_down_by_default_and_up_as_a_floor() -> None:
    """vkgate_core.backoff.Backoff: down (cap a hard bound) for reconnect loops; up (base a
    floor, cap still a bound) for the work queue and the translation backstop."""
    down = Backoff(base=10, cap=40, jitter=0.5)
    up = Backoff(base=10, cap=40, jitter=0.5, jitter_up=True)
    rng = random.Random(3)
    d = [down.delay(n, rng) for n in (1, 2, 3, 4, 5) for _ in range(50)]
    u = [up.delay(n, rng) for n in (1, 2, 3, 4, 5) for _ in range(50)]
    assert min(d) >= 5 and max(d) <= 40 and min(d) < 10  # shortened, never above cap
    assert min(u) >= 10 and max(u) <= 40 and max(u[:50]) > 10  # lengthened, never above cap


async def test_busy_means_work_due_or_in_progress_not_work_scheduled_later() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    assert not q.busy()
    q.add("later", delay=5)
    assert not q.busy()  # queued for later: nothing to do now
    q.add("now")
    assert q.busy()
    key = await q.get()
    assert key == "now" and q.busy()  # in progress
    q.done(key)
    assert not q.busy()
    await clock.advance(5)
    assert q.busy()
