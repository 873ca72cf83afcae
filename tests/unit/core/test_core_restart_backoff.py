"""The kubelet's container restart backoff (vkgate_core.backoff.RestartBackoff; docs/design/
probes.md, "Restart backoff") on fake time: a crash loop driven by a FakeClock restarts at
0, 10, 30, 70, 150, 310, 610 s; the message's delay doubles 10 s → 5 min; a container that ran
10 minutes starts over; Go's duration words."""

from __future__ import annotations

import asyncio

import pytest

from vkgate_core.backoff import (
    RESTART_BACKOFF,
    RestartBackoff,
    go_duration,
    restart_reset,
)
from vkgate_core.clock import FakeClock


async def _crash_loop(
    clock: FakeClock,
    backoff: RestartBackoff,
    run_for: float,
    restarts: list[float],
    delays: list[float],
) -> None:
    """A kubelet's view of one container that exits ``run_for`` seconds after each start."""
    while True:
        await clock.sleep(run_for)
        finished = clock.monotonic()
        while (left := backoff.wait("app", finished, clock.monotonic())) > 0:
            delays.append(backoff.delay("app"))  # "back-off <delay> restarting failed …"
            await clock.sleep(left)
        restarts.append(clock.monotonic())


async def _run(run_for: float, seconds: float) -> tuple[list[float], list[float]]:
    clock, backoff = FakeClock(), RestartBackoff()
    restarts: list[float] = []
    delays: list[float] = []
    task = asyncio.create_task(_crash_loop(clock, backoff, run_for, restarts, delays))
    await asyncio.sleep(0)  # the container starts at 0
    for _ in range(int(seconds)):
        await clock.advance(1.0)
    task.cancel()
    return restarts, delays


async def test_a_container_crashing_at_once_restarts_like_the_kubelets() -> None:
    restarts, delays = await _run(run_for=0.0, seconds=1300)
    # first exit: restarted at once; then 10 s doubling to the 5 min cap
    assert restarts == [0.0, 10.0, 30.0, 70.0, 150.0, 310.0, 610.0, 910.0, 1210.0]
    assert delays == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0, 300.0]  # last: running
    assert [go_duration(d) for d in delays[:6]] == ["10s", "20s", "40s", "1m20s", "2m40s", "5m0s"]


async def test_ten_minutes_of_running_start_the_backoff_over() -> None:
    restarts, delays = await _run(run_for=601.0, seconds=601 * 4 + 30)
    # every exit comes more than restart_reset after the last restart: never a back-off
    assert restarts == [601.0, 1202.0, 1803.0, 2404.0] and delays == []


async def test_nine_minutes_of_running_keep_doubling() -> None:
    restarts, delays = await _run(run_for=540.0, seconds=3000)
    assert delays[:3] == [10.0, 20.0, 40.0]
    assert restarts[:4] == [540.0, 1090.0, 1650.0, 2230.0]


def test_the_armed_delay_and_its_reset() -> None:
    b = RestartBackoff()
    assert b.delay("app") == 0.0 and not b.in_backoff_since("app", 0.0, 0.0)
    assert b.wait("app", 0.0, 0.0) == 0.0  # first exit: restart now, arm 10 s
    assert b.delay("app") == 10.0
    assert b.wait("app", 5.0, 6.0) == pytest.approx(9.0)  # exited at 5: 10 s from then
    assert b.wait("app", 5.0, 15.0) == 0.0 and b.delay("app") == 20.0
    for _ in range(10):
        b.next("app", 15.0)
    assert b.delay("app") == RESTART_BACKOFF.cap
    # an exit more than restart_reset after the last restart: not in back-off, starts over
    late = 15.0 + restart_reset() + 1
    assert not b.in_backoff_since("app", late, late)
    assert b.wait("app", late, late) == 0.0 and b.delay("app") == RESTART_BACKOFF.base
    b.gc(late + restart_reset() + 1)
    assert b.delay("app") == 0.0
    b.next("other", 0.0)
    b.forget("other")
    assert b.delay("other") == 0.0


def test_reset_is_twice_the_cap() -> None:
    assert restart_reset() == 600.0


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0s"),
        (2.9, "2s"),
        (10, "10s"),
        (80, "1m20s"),
        (300, "5m0s"),
        (289.7, "4m49s"),
        (3600, "1h0m0s"),
        (-1, "0s"),
    ],
)
def test_go_duration(seconds: float, words: str) -> None:
    assert go_duration(seconds) == words
