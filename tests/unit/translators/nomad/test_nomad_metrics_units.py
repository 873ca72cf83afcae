"""Pure parts of the Nomad stats mapping: what counts as measured, the working-set choice, the
priming rule for CPU, and the core-seconds integrator (fake clock)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import pytest

from translators.nomad.metrics import (
    PRIMING_SECONDS,
    START_CORE_SECONDS,
    CpuIntegrator,
    cpu_percent,
    memory_usage,
)
from vkgate_core.clock import FakeClock

F = START_CORE_SECONDS

MiB = 1 << 20
CG1 = ["RSS", "Cache", "Swap", "Usage", "Max Usage", "Kernel Usage", "Kernel Max Usage"]
PROC = ["RSS", "Swap"]


def mem(measured: list[str] | None, **values: int) -> dict[str, Any]:
    out: dict[str, Any] = {"RSS": 0, "Cache": 0, "Swap": 0, "Usage": 0, **values}
    if measured is not None:
        out["Measured"] = measured
    return out


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        # cgroup stats: working set = Usage - Cache
        (mem(CG1, RSS=80 * MiB, Cache=30 * MiB, Usage=130 * MiB), (100 * MiB, 80 * MiB)),
        # process-based stats (raw_exec without cgroup stats): only RSS is measured
        (mem(PROC, RSS=3 * MiB), (3 * MiB, 3 * MiB)),
        # a zero-filled field that is not in Measured is not a measurement
        (mem(["Swap"], RSS=0), (None, None)),
        # a zero for a running task is never real
        (mem(PROC, RSS=0), (None, None)),
        # Usage listed but 0: fall back to RSS
        (mem(CG1, RSS=5 * MiB, Usage=0), (5 * MiB, 5 * MiB)),
        # all cache: nothing left is not "0 bytes in use"
        (mem(CG1, RSS=1 * MiB, Cache=40 * MiB, Usage=40 * MiB), (None, 1 * MiB)),
        # an old agent without Measured: non-zero values count
        (mem(None, RSS=7 * MiB), (7 * MiB, 7 * MiB)),
        ({}, (None, None)),
        ({"RSS": "lots", "Measured": ["RSS"]}, (None, None)),
    ],
    ids=[
        "cgroup",
        "process",
        "unmeasured",
        "zero-rss",
        "usage-zero",
        "all-cache",
        "no-measured-list",
        "empty",
        "garbage",
    ],
)
def test_memory_usage(stats: dict[str, Any], expected: tuple[int | None, int | None]) -> None:
    assert memory_usage(stats) == expected


@pytest.mark.parametrize(
    ("percent", "age", "expected"),
    [
        (99.5, 3.0, 99.5),  # busy right away: measured
        (0.0, 3.0, None),  # Nomad's tracker is still priming
        (0.0, PRIMING_SECONDS - 0.1, None),
        (0.0, PRIMING_SECONDS, 0.0),  # idle, for real
        (0.0, None, None),  # unknown start: cannot tell
        (250.0, 60.0, 250.0),  # 2.5 cores
        (-1.0, 60.0, None),
    ],
)
def test_cpu_percent(percent: float, age: float | None, expected: float | None) -> None:
    stats = {"Percent": percent, "TotalTicks": 1234.0, "Measured": ["Percent"]}
    assert cpu_percent(stats, age=age) == expected


def test_cpu_percent_not_in_measured_is_unknown() -> None:
    assert cpu_percent({"Percent": 12.0, "Measured": ["System Mode"]}, age=60) is None


START = _dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=_dt.UTC)


async def test_integrator_seeds_from_the_start_then_adds_rate_times_interval() -> None:
    clock = FakeClock(START + _dt.timedelta(seconds=40))
    cpu = CpuIntegrator(clock)
    key = ("alloc", "app")
    assert cpu.sample(key, 50.0, started_at=START) == pytest.approx(F + 20.0)
    await clock.advance(10)
    assert cpu.sample(key, 200.0, started_at=START) == pytest.approx(F + 40.0)
    await clock.advance(5)
    # an unknown sample holds the counter; the next known one covers the gap
    assert cpu.sample(key, None, started_at=START) == pytest.approx(F + 40.0)
    await clock.advance(5)
    assert cpu.sample(key, 100.0, started_at=START) == pytest.approx(F + 50.0)


async def test_the_counter_exists_from_the_first_read_and_is_never_zero() -> None:
    """Nomad reads 0 / unmeasured for the first seconds and for idle tasks; a kubelet's counter
    exists from the start and is > 0 (metrics-server drops a pod whose CPU counter is 0)."""
    clock = FakeClock(START + _dt.timedelta(seconds=2))
    cpu = CpuIntegrator(clock)
    key = ("alloc", "idle")
    assert cpu.total() is None
    first = cpu.sample(
        key, cpu_percent({"Percent": 0.0, "Measured": ["Percent"]}, age=2), started_at=START
    )
    assert first == pytest.approx(F) and first > 0
    assert cpu.total() == pytest.approx(F)
    await clock.advance(20)  # priming over: a real idle reading of 0 keeps the counter
    assert cpu.sample(key, 0.0, started_at=START) == pytest.approx(F)
    await clock.advance(10)
    assert cpu.sample(key, 50.0, started_at=START) == pytest.approx(F + 5.0)


async def test_a_task_first_measured_after_priming_is_seeded_from_its_start() -> None:
    clock = FakeClock(START + _dt.timedelta(seconds=1))
    cpu = CpuIntegrator(clock)
    key = ("alloc", "busy")
    assert cpu.sample(key, None, started_at=START) == pytest.approx(F)
    await clock.advance(11)  # 12 s after start, Nomad reports one busy core
    assert cpu.sample(key, 100.0, started_at=START) == pytest.approx(F + 12.0)


async def test_integrator_starts_over_when_the_task_restarts() -> None:
    clock = FakeClock(START + _dt.timedelta(seconds=100))
    cpu = CpuIntegrator(clock)
    key = ("alloc", "app")
    assert cpu.sample(key, 100.0, started_at=START) == pytest.approx(F + 100.0)
    await clock.advance(10)
    restarted = START + _dt.timedelta(seconds=106)
    assert cpu.sample(key, 100.0, started_at=restarted) == pytest.approx(F + 4.0)


async def test_integrator_without_a_start_time_counts_from_the_first_sample() -> None:
    clock = FakeClock(START)
    cpu = CpuIntegrator(clock)
    key = ("alloc", "app")
    assert cpu.sample(key, None, started_at=None) is None  # nothing known at all
    assert cpu.sample(key, 100.0, started_at=None) == pytest.approx(F)
    await clock.advance(3)
    assert cpu.sample(key, 100.0, started_at=None) == pytest.approx(F + 3.0)


def test_integrator_forgets_tasks_that_stopped_running() -> None:
    cpu = CpuIntegrator(FakeClock(START))
    cpu.sample(("a1", "app"), 10.0, started_at=START)
    cpu.sample(("a2", "app"), 10.0, started_at=START)
    cpu.keep([("a2", "app")])
    assert len(cpu) == 1


async def test_node_total_never_goes_backwards() -> None:
    """Node counter = every task's core-seconds, ended and restarted tasks included."""
    clock = FakeClock(START + _dt.timedelta(seconds=10))
    cpu = CpuIntegrator(clock)
    assert cpu.total() is None  # nothing measured yet: unknown, not 0
    cpu.sample(("a1", "app"), 100.0, started_at=START)  # 10
    cpu.sample(("a2", "app"), 50.0, started_at=START)  # 5
    assert cpu.total() == pytest.approx(15.0 + 2 * F)
    await clock.advance(10)
    # a1's task restarted: its new counter starts near 0, the node keeps the old 10 + 0
    cpu.sample(("a1", "app"), 100.0, started_at=START + _dt.timedelta(seconds=18))
    assert cpu.total() == pytest.approx(10.0 + 2.0 + 5.0 + 3 * F)
    # a2 ended: its 5 core-seconds stay in the node's total
    cpu.keep([("a1", "app")])
    assert cpu.total() == pytest.approx(17.0 + 3 * F)
