"""A pod is as ready as its readiness probe says (gateway/probes wired into the pod sync): the
backend's "running" no longer makes a probed container Ready, on the simulated backend and a
fake clock, with the probe attempts scripted through the prober's handler seam."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from controller_harness import ControllerHarness
from pods_fakes import run_for

from gateway.probes.handlers import Result, Target

NODE = "vk-test"


class Answers:
    def __init__(self) -> None:
        self.ok = False
        self.attempts: list[Target] = []

    async def run(
        self, handler: str, action: Mapping[str, Any], target: Target, limit: float
    ) -> Result:
        self.attempts.append(target)
        return Result(self.ok, "" if self.ok else "connection refused")


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    harness = ControllerHarness(tmp_path, node=NODE)
    await harness.start()
    yield harness
    await harness.stop()


def conditions(p: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in p["status"].get("conditions", [])}


async def test_ready_follows_the_readiness_probe(h: ControllerHarness) -> None:
    assert h.ctl is not None
    answers = Answers()
    h.ctl.prober.handlers = answers  # type: ignore[assignment]
    h.ctl.actor.resolver.can_exec = True  # the harness's wrapper hides the simulated exec
    probe = {"exec": {"command": ["ready"]}, "periodSeconds": 5}
    h.kube.add(
        {
            "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "app", "readinessProbe": probe}, {"name": "side"}],
            },
        }
    )
    await run_for(h.clock, 20)
    p = h.kube.pod("web")
    assert p is not None and p["status"]["phase"] == "Running"
    assert conditions(p)["ContainersReady"] == "False"
    assert conditions(p)["Ready"] == "False"
    ready = {c["name"]: c["ready"] for c in p["status"]["containerStatuses"]}
    assert ready == {"app": False, "side": True}
    assert answers.attempts and answers.attempts[0].container == "app"
    unhealthy = h.kube.events("Unhealthy")
    assert unhealthy and unhealthy[0]["message"] == "Readiness probe failed: connection refused"
    assert unhealthy[0]["type"] == "Warning"
    assert unhealthy[0]["count"] > 1  # repeats aggregate into one Event

    answers.ok = True
    await run_for(h.clock, 5.25)  # within one period (+ the write)
    p = h.kube.pod("web")
    assert p is not None
    assert conditions(p)["ContainersReady"] == "True" and conditions(p)["Ready"] == "True"

    answers.ok = False
    await run_for(h.clock, 10)  # two failures are not three (failureThreshold)
    assert conditions(h.kube.pod("web") or {})["Ready"] == "True"
    await run_for(h.clock, 5.25)
    assert conditions(h.kube.pod("web") or {})["Ready"] == "False"


async def test_a_pod_without_probes_is_ready_when_running(h: ControllerHarness) -> None:
    assert h.ctl is not None
    h.kube.add(
        {
            "kind": "Pod",
            "metadata": {"name": "plain"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app"}]},
        }
    )
    await run_for(h.clock, 8)
    assert conditions(h.kube.pod("plain") or {})["Ready"] == "True"
    assert h.ctl.prober.workers == 0


async def test_started_and_ready_wait_for_the_startup_probe(h: ControllerHarness) -> None:
    assert h.ctl is not None
    answers = Answers()
    h.ctl.prober.handlers = answers  # type: ignore[assignment]
    h.ctl.actor.resolver.can_exec = True  # the harness's wrapper hides the simulated exec
    probe = {"exec": {"command": ["started"]}, "periodSeconds": 2, "failureThreshold": 30}
    h.kube.add(
        {
            "kind": "Pod",
            "metadata": {"name": "slow"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "startupProbe": probe}]},
        }
    )
    await run_for(h.clock, 10)
    p = h.kube.pod("slow")
    assert p is not None and p["status"]["phase"] == "Running"
    (cs,) = p["status"]["containerStatuses"]
    assert "running" in cs["state"] and cs["started"] is False and cs["ready"] is False
    assert conditions(p)["Ready"] == "False"
    answers.ok = True
    await run_for(h.clock, 2.25)
    p = h.kube.pod("slow")
    assert p is not None
    (cs,) = p["status"]["containerStatuses"]
    assert cs["started"] is True and cs["ready"] is True
    assert conditions(p)["Ready"] == "True"


async def test_a_probe_vkgate_cannot_run_refuses_the_pod_naming_the_field(
    h: ControllerHarness,
) -> None:
    """The harness's backend has no exec and no routable pod address: every probe kind and
    every lifecycle hook is refused, naming the first field."""
    cases = {
        "p-exec": ("readinessProbe", {"exec": {"command": ["true"]}}),
        "p-http": ("livenessProbe", {"httpGet": {"port": 80}}),
        "p-grpc": ("startupProbe", {"grpc": {"port": 9090}}),
    }
    for name, (kind, probe) in cases.items():
        h.kube.add(
            {
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", kind: probe}]},
            }
        )
    h.kube.add(
        {
            "kind": "Pod",
            "metadata": {"name": "p-hook"},
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {"name": "app", "lifecycle": {"preStop": {"sleep": {"seconds": 1}}}}
                ],
            },
        }
    )
    await run_for(h.clock, 3)
    want = {
        "p-exec": "spec.containers[app].readinessProbe.exec: exec probes need exec",
        "p-http": "spec.containers[app].livenessProbe.httpGet: the simulated backend gives pods "
        "no address vkgate can probe",
        "p-grpc": "spec.containers[app].startupProbe.grpc: the simulated backend gives pods "
        "no address vkgate can probe",
        "p-hook": "spec.containers[app].lifecycle.preStop: lifecycle hooks are not run",
    }
    for name, start in want.items():
        p = h.kube.pod(name)
        assert p is not None and p["status"]["phase"] == "Failed", name
        assert p["status"]["reason"] == "UnsupportedPodFeature"
        assert p["status"]["message"].startswith(start), p["status"]["message"]
    assert h.sim is not None and h.sim.calls.get("create", 0) == 0
