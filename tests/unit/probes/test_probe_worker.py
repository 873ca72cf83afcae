"""The prober worker's timing and thresholds (gateway/probes/worker.py), on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from gateway.probes.handlers import Result, Target
from gateway.probes.spec import Kind, ProbeSpec
from gateway.probes.worker import Worker
from translators.base import PodRef
from vkgate_core.clock import FakeClock

TARGET = Target(ref=PodRef("ns", "p", "u1"), container="app", pod_ip="10.0.0.5", ports={})


class Script:
    """Probe answers in order (the last one repeats); records when each attempt ran."""

    def __init__(self, clock: FakeClock, answers: list[bool]) -> None:
        self.clock = clock
        self.answers = answers
        self.times: list[float] = []

    async def __call__(
        self, handler: str, action: Mapping[str, Any], target: Target, limit: float
    ) -> Result:
        self.times.append(self.clock.monotonic())
        ok = self.answers[min(len(self.times) - 1, len(self.answers) - 1)]
        return Result(ok, "" if ok else f"attempt {len(self.times)} failed")


async def start(w: Worker) -> None:
    """Start the worker and let it reach its first sleep (before the test moves time)."""
    w.start()
    for _ in range(3):
        await asyncio.sleep(0)


def make(
    clock: FakeClock, kind: Kind, probe: dict[str, Any], answers: list[bool], *, delay: float = 0
) -> tuple[Worker, Script, list[tuple[float, bool]], list[str]]:
    spec = ProbeSpec.of(kind, {"exec": {"command": ["true"]}, **probe})
    assert spec is not None
    script = Script(clock, answers)
    results: list[tuple[float, bool]] = []
    failures: list[str] = []

    async def on_result(w: Worker, ok: bool) -> None:
        results.append((clock.monotonic(), ok))

    async def on_failure(w: Worker, res: Result) -> None:
        failures.append(res.output)

    w = Worker(
        spec,
        TARGET,
        run=script,
        clock=clock,
        on_result=on_result,
        on_failure=on_failure,
        delay=delay,
    )
    return w, script, results, failures


async def test_readiness_starts_unready_and_waits_for_the_initial_delay() -> None:
    clock = FakeClock()
    w, script, results, _ = make(
        clock, Kind.READINESS, {"initialDelaySeconds": 20, "periodSeconds": 5}, [True], delay=20
    )
    assert w.result is False
    await start(w)
    await clock.advance(19)
    assert script.times == [] and results == []
    await clock.advance(1)
    assert script.times == [20.0]
    assert results == [(20.0, True)]
    await clock.advance(10)
    assert script.times == [20.0, 25.0, 30.0]
    assert results == [(20.0, True)]  # reported once, on the change
    w.stop()


async def test_success_threshold_needs_consecutive_successes() -> None:
    clock = FakeClock()
    w, _, results, _ = make(
        clock,
        Kind.READINESS,
        {"periodSeconds": 10, "successThreshold": 3},
        [True, True, False, True, True, True],
    )
    await start(w)
    await clock.advance(45)
    assert results == []  # the failure at 20 s started the run over
    await clock.advance(5)
    assert results == [(50.0, True)]
    w.stop()


async def test_failure_threshold_then_back_to_ready() -> None:
    clock = FakeClock()
    answers = [True, False, False, True, False, False, False, True]
    w, _, results, failures = make(
        clock, Kind.READINESS, {"periodSeconds": 1, "failureThreshold": 3}, answers
    )
    await start(w)
    await clock.advance(8)
    # ready at 0; two failures are not three; three failures from 4 s make it unready at 6 s
    assert results == [(0.0, True), (6.0, False), (7.0, True)]
    assert failures == [f"attempt {n} failed" for n in (2, 3, 5, 6, 7)]
    w.stop()


async def test_liveness_starts_healthy_and_holds_after_its_threshold() -> None:
    clock = FakeClock()
    w, script, results, _ = make(
        clock, Kind.LIVENESS, {"periodSeconds": 10, "failureThreshold": 2}, [False]
    )
    assert w.result is True
    await start(w)
    await clock.advance(100)
    assert results == [(10.0, False)]
    assert script.times == [0.0, 10.0]  # on hold: the container is restarted
    assert w.on_hold


async def test_startup_probe_stops_after_success() -> None:
    clock = FakeClock()
    w, script, results, _ = make(
        clock, Kind.STARTUP, {"periodSeconds": 2, "failureThreshold": 30}, [False, False, True]
    )
    assert w.result is None
    await start(w)
    await clock.advance(60)
    assert results == [(4.0, True)]
    assert script.times == [0.0, 2.0, 4.0]


async def test_gate_holds_attempts_until_started() -> None:
    clock = FakeClock()
    started = False
    w, script, _, _ = make(clock, Kind.READINESS, {"periodSeconds": 1}, [True])
    w._gate = lambda: started
    await start(w)
    await clock.advance(3.5)
    assert script.times == []
    started = True
    await clock.advance(1)
    assert script.times == [4.0]
    w.stop()


@pytest.mark.parametrize(
    ("kind", "probe", "expected"),
    [
        (Kind.READINESS, {}, (0.0, 10.0, 1.0, 1, 3)),
        (
            Kind.READINESS,
            {
                "initialDelaySeconds": 5,
                "periodSeconds": 2,
                "timeoutSeconds": 3,
                "successThreshold": 2,
                "failureThreshold": 7,
            },
            (5.0, 2.0, 3.0, 2, 7),
        ),
        (Kind.LIVENESS, {"successThreshold": 4}, (0.0, 10.0, 1.0, 1, 3)),
    ],
)
def test_spec_defaults(kind: Kind, probe: dict[str, Any], expected: tuple[Any, ...]) -> None:
    spec = ProbeSpec.of(kind, {"tcpSocket": {"port": 80}, **probe})
    assert spec is not None and spec.handler == "tcpSocket"
    got = (
        spec.initial_delay,
        spec.period,
        spec.timeout,
        spec.success_threshold,
        spec.failure_threshold,
    )
    assert got == expected
