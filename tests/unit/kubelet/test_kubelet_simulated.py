"""The simulated backend's kubelet capabilities the e2e tier relies on: log options honoured,
follow ending with the container, and the opt-in local-subprocess Executor."""

from __future__ import annotations

import asyncio
import datetime as _dt

import pytest

from translators.base import (
    BackendNotFound,
    ContainerUsage,
    EnvVar,
    Executor,
    LogOptions,
    LogReader,
    MetricsSource,
    ResolvedContainer,
    ResolvedPod,
    TranslatorContext,
    UnsupportedError,
)
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock


def sim_on(clock: FakeClock, **settings: object) -> SimulatedTranslator:
    """The simulated backend on ``clock`` (``TranslatorContext.clock``)."""
    return SimulatedTranslator(TranslatorContext("vkgate", {}, clock=clock), **settings)


def resolved(*, run_seconds: str | None = None, exit_code: str | None = None) -> ResolvedPod:
    ann = {}
    if run_seconds:
        ann["vkgate.io/sim-run-seconds"] = run_seconds
    if exit_code:
        ann["vkgate.io/sim-exit-code"] = exit_code
    return ResolvedPod(
        namespace="default",
        name="p",
        uid="uid-1",
        node_name="vk-1",
        pod={"metadata": {"annotations": ann}, "spec": {"restartPolicy": "Never"}},
        containers=(
            ResolvedContainer(
                name="app",
                image="busybox",
                command=("sh", "-c", "echo hi"),
                env=(EnvVar("A", "1"), EnvVar("B", "2")),
            ),
        ),
    )


async def collect(sim: SimulatedTranslator, options: LogOptions, container: str = "app") -> bytes:
    pod = resolved()
    return b"".join([c async for c in sim.logs(pod.ref, container, options)])


async def test_simulated_is_a_log_reader_and_executor() -> None:
    sim = sim_on(FakeClock(), start_delay=0)
    assert isinstance(sim, LogReader) and isinstance(sim, Executor)


async def test_log_options_are_honoured() -> None:
    clock = FakeClock()  # 2026-03-01T10:00:00Z
    sim = sim_on(clock, start_delay=0)
    await sim.create(resolved())
    full = await collect(sim, LogOptions())
    lines = full.splitlines(keepends=True)
    assert lines[0] == b"app: sh -c echo hi\n" and lines[1] == b"A=1\n"
    assert await collect(sim, LogOptions(tail_lines=1)) == lines[-1]
    assert await collect(sim, LogOptions(tail_lines=0)) == b""
    assert await collect(sim, LogOptions(limit_bytes=7)) == b"app: sh"
    stamped = (await collect(sim, LogOptions(timestamps=True))).splitlines()
    assert stamped[0] == b"2026-03-01T10:00:00.000000000Z app: sh -c echo hi"
    later = _dt.datetime(2026, 3, 1, 11, tzinfo=_dt.UTC)
    assert await collect(sim, LogOptions(since=later)) == b""
    with pytest.raises(BackendNotFound):
        await collect(sim, LogOptions(), container="nope")


async def test_follow_ends_when_the_container_terminates() -> None:
    clock = FakeClock()  # 2026-03-01T10:00:00Z
    sim = sim_on(clock, start_delay=0, notify_interval=0.01)
    await sim.create(resolved(run_seconds="5", exit_code="0"))
    got: list[bytes] = []

    async def follow() -> None:
        async for chunk in sim.logs(resolved().ref, "app", LogOptions(follow=True)):
            got.append(chunk)

    task = asyncio.create_task(follow())
    for _ in range(10):  # 0.1 s of fake time: ten follow rounds
        await clock.advance(0.01)
    assert not task.done() and got, "still following while the container runs"
    await clock.advance(6)
    await asyncio.wait_for(task, 2)
    await sim.close()


async def test_exec_is_refused_unless_exec_local() -> None:
    sim = sim_on(FakeClock(), start_delay=0)
    await sim.create(resolved())
    with pytest.raises(UnsupportedError, match="exec is disabled in the simulated backend"):
        await sim.exec(resolved().ref, "app", ["true"], tty=False, stdin=False)


async def test_local_exec_runs_with_stdin_output_and_exit_code() -> None:
    sim = sim_on(FakeClock(), start_delay=0, exec_local=True)
    await sim.create(resolved())
    ref = resolved().ref
    s = await sim.exec(ref, "app", ["sh", "-c", "cat; echo err >&2; exit 4"], tty=False, stdin=True)
    await s.write_stdin(b"hello")
    await s.close_stdin()
    out = [item async for item in s.output()]
    assert (1, b"hello") in out and (2, b"err\n") in out
    assert await s.wait() == 4
    with pytest.raises(BackendNotFound):
        await sim.exec(ref, "nope", ["true"], tty=False, stdin=False)
    long = await sim.exec(ref, "app", ["sleep", "30"], tty=False, stdin=False)
    await long.cancel()
    assert await long.wait() != 0


async def test_usage_only_when_configured_and_only_for_running_containers() -> None:
    clock = FakeClock()  # 2026-03-01T10:00:00Z
    quiet = sim_on(clock, start_delay=0)
    await quiet.create(resolved())
    u = await quiet.usage()
    assert [p.containers for p in u.pods] == [
        (ContainerUsage("app", started_at=u.pods[0].containers[0].started_at),)
    ]
    assert u.pods[0].containers[0].cpu_core_seconds is None  # unknown, never 0

    sim = sim_on(clock, start_delay=0, usage={"cpu": "250m", "memory": "64Mi"})
    assert isinstance(sim, MetricsSource)
    await sim.create(resolved(run_seconds="10", exit_code="0"))
    await clock.advance(4)
    (pod,) = (await sim.usage()).pods
    (c,) = pod.containers
    assert c.cpu_core_seconds == pytest.approx(1.0)
    assert c.cpu_nano_cores == 250_000_000 and c.memory_working_set_bytes == 64 * 2**20
    await clock.advance(10)  # the container has exited: no usage any more
    assert (await sim.usage()).pods[0].containers == ()
