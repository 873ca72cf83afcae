"""The prober keeps workers in step with the pods and hands verdicts to the status manager
(gateway/probes/manager.py), on a fake clock with scripted probe answers."""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import Mapping
from typing import Any, cast

from gateway.kube.events import EventRecorder
from gateway.probes.handlers import Handlers, Result, Target
from gateway.probes.manager import Prober
from translators.base import ContainerState, Phase, PodRef, WorkloadState
from vkgate_core.clock import FakeClock
from vkgate_core.kubetypes import Pod


class Events:
    def __init__(self) -> None:
        self.got: list[tuple[str, str, str, str]] = []

    async def record(
        self, obj: Mapping[str, Any], *, type: str, reason: str, message: str, field_path: str = ""
    ) -> None:
        self.got.append((type, reason, message, field_path))


class Answers:
    """A ``Handlers`` whose answer per (handler) the test sets."""

    def __init__(self) -> None:
        self.ok: dict[str, bool] = {}
        self.targets: list[Target] = []

    async def run(
        self, handler: str, action: Mapping[str, Any], target: Target, limit: float
    ) -> Result:
        self.targets.append(target)
        ok = self.ok.get(handler, False)
        return Result(ok, "" if ok else f"{handler} says no")


def pod(probes: dict[str, Any]) -> Pod:
    return cast(
        Pod,
        {
            "metadata": {"namespace": "ns", "name": "web", "uid": "u1"},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "ports": [{"name": "http", "containerPort": 8080}],
                        **probes,
                    },
                    {"name": "plain"},
                ]
            },
        },
    )


def state(clock: FakeClock, *, started: float = 0.0, container_id: str = "c1") -> WorkloadState:
    at = clock.now() - _dt.timedelta(seconds=started)
    return WorkloadState(
        ref=PodRef("ns", "web", "u1"),
        backend_id="b1",
        phase=Phase.RUNNING,
        pod_ip="10.0.0.5",
        containers=(
            ContainerState(
                "app", state="running", started_at=at, ready=True, container_id=container_id
            ),
            ContainerState("plain", state="running", started_at=at, ready=True),
        ),
    )


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.events = Events()
        self.answers = Answers()
        self.readiness: dict[tuple[str, str], bool] = {}
        self.queued: list[tuple[float, str]] = []
        self.prober = Prober(
            cast(Handlers, self.answers),
            cast(EventRecorder, self.events),
            clock=self.clock,
            set_readiness=self.set_readiness,
            queue=lambda key: self.queued.append((self.clock.monotonic(), key)),
        )

    def set_readiness(self, uid: str, container: str, ready: bool) -> bool:
        changed = self.readiness.get((uid, container)) != ready
        self.readiness[(uid, container)] = ready
        return changed

    async def sync(self, p: Pod, s: WorkloadState | None) -> None:
        self.prober.sync(p, s)
        for _ in range(3):
            await asyncio.sleep(0)


READY_HTTP = {"readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5}}


async def test_unready_at_once_then_ready_when_the_probe_passes() -> None:
    h = Harness()
    p = pod(
        {
            **READY_HTTP,
            "readinessProbe": {**READY_HTTP["readinessProbe"], "initialDelaySeconds": 20},
        }
    )
    await h.sync(p, None)
    assert h.readiness == {("u1", "app"): False}  # before any workload: never Ready first
    h.answers.ok["httpGet"] = True
    await h.sync(p, state(h.clock, started=0))
    await h.clock.advance(19)
    assert h.queued == [] and h.readiness[("u1", "app")] is False
    await h.clock.advance(1)
    assert h.queued == [(20.0, "ns/web")]
    assert h.readiness[("u1", "app")] is True
    assert h.answers.targets[0].pod_ip == "10.0.0.5"
    assert h.answers.targets[0].ports == {"http": 8080}
    assert h.prober.workers == 1  # "plain" has no probe
    h.prober.stop()


async def test_initial_delay_counts_from_the_container_start() -> None:
    h = Harness()
    h.answers.ok["httpGet"] = True
    probe = {"readinessProbe": {**READY_HTTP["readinessProbe"], "initialDelaySeconds": 20}}
    await h.sync(pod(probe), state(h.clock, started=15))
    await h.clock.advance(5)
    assert h.queued == [(5.0, "ns/web")]
    h.prober.stop()


async def test_failing_readiness_probe_stays_unready_with_unhealthy_events() -> None:
    h = Harness()
    await h.sync(pod(READY_HTTP), state(h.clock))
    await h.clock.advance(60)
    assert h.readiness[("u1", "app")] is False
    assert h.queued == []
    assert len(h.events.got) == 13  # one attempt at 0 s, then every 5 s
    assert set(h.events.got) == {
        ("Warning", "Unhealthy", "Readiness probe failed: httpGet says no", "spec.containers{app}")
    }
    h.prober.stop()


async def test_a_new_container_instance_is_unready_until_probed_again() -> None:
    h = Harness()
    h.answers.ok["httpGet"] = True
    p = pod(READY_HTTP)
    await h.sync(p, state(h.clock))
    await h.clock.advance(0)
    assert h.readiness[("u1", "app")] is True
    h.answers.ok["httpGet"] = False
    await h.sync(p, state(h.clock, container_id="c2"))
    assert h.readiness[("u1", "app")] is False
    assert h.prober.workers == 1
    await h.sync(p, None)  # not running any more: no workers
    assert h.prober.workers == 0
    h.prober.forget("u1")


async def test_liveness_waits_for_the_startup_probe_and_failure_is_an_event() -> None:
    h = Harness()
    probes = {
        "startupProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "failureThreshold": 30},
        "livenessProbe": {
            "exec": {"command": ["check"]},
            "periodSeconds": 2,
            "failureThreshold": 2,
        },
    }
    await h.sync(pod(probes), state(h.clock))
    await h.clock.advance(5)
    assert [t.container for t in h.answers.targets] == ["app"] * 6  # startup only
    h.answers.ok["tcpSocket"] = True
    await h.clock.advance(1)
    assert h.queued == [(6.0, "ns/web")]  # started
    await h.clock.advance(10)
    assert (
        "Normal",
        "Killing",
        "Container app failed liveness probe, will be restarted",
        "spec.containers{app}",
    ) in h.events.got
    h.prober.stop()


async def test_a_failed_liveness_probe_restarts_the_container_once_per_instance() -> None:
    h = Harness()
    restarts: list[tuple[str, str]] = []

    async def restart(p: Pod, container: str, why: str) -> None:
        restarts.append((container, why))

    h.prober.restart = restart
    probes = {"livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 3}}
    p = pod(probes)
    await h.sync(p, state(h.clock))
    await h.clock.advance(5.9)
    assert restarts == []  # two failures, threshold three
    await h.clock.advance(0.1)
    assert restarts == [("app", "Container app failed liveness probe, will be restarted")]
    await h.clock.advance(30)
    assert len(restarts) == 1  # on hold until the backend shows the restarted instance
    await h.sync(p, state(h.clock, container_id="c2"))
    await h.clock.advance(6)
    assert len(restarts) == 2
    h.prober.stop()


async def test_a_liveness_kill_runs_the_pre_stop_hook_before_the_restart() -> None:
    """The kubelet's killContainer runs the container's preStop hook before it stops the
    container, a liveness kill included (``pre_kill``: gateway.probes.hooks)."""
    h = Harness()
    order: list[tuple[float, str]] = []

    async def pre_kill(p: Pod, container: str) -> None:
        order.append((h.clock.monotonic(), f"preStop {container}"))
        await h.clock.sleep(4)

    async def restart(p: Pod, container: str, why: str) -> None:
        order.append((h.clock.monotonic(), f"restart {container}"))

    h.prober.pre_kill = pre_kill
    h.prober.restart = restart
    probes = {
        "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 3, "failureThreshold": 1}
    }
    await h.sync(pod(probes), state(h.clock))
    await h.clock.advance(0.1)
    assert order == [(0.0, "preStop app")]
    await h.clock.advance(4)
    assert order == [(0.0, "preStop app"), (4.0, "restart app")]
    assert ("Normal", "Killing") in {(t, r) for t, r, _, _ in h.events.got}
    h.prober.stop()


async def test_a_liveness_kill_of_a_never_restarted_pod_does_not_say_it_will_be_restarted() -> None:
    h = Harness()
    kills: list[str] = []

    async def restart(p: Pod, container: str, why: str) -> None:
        kills.append(why)

    h.prober.restart = restart
    p = pod({"livenessProbe": {"tcpSocket": {"port": 8080}, "failureThreshold": 1}})
    p["spec"]["restartPolicy"] = "Never"  # type: ignore[index]
    await h.sync(p, state(h.clock))
    await h.clock.advance(0.1)
    assert kills == ["Container app failed liveness probe"]
    killing = [m for _, r, m, _ in h.events.got if r == "Killing"]
    assert killing == ["Container app failed liveness probe"]
    h.prober.stop()
