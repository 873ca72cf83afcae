"""A create that fails with a message quoting the pod's Secret value — a template whose output
is not JSON (the error quotes the rendered line), a backend refusal that echoes the spec —
leaves no encoding of the value in the Events, the pod status or the agent's log: the pod sync
masks the error with the one secret mask (translators/render/masking.py,
docs/design/secrets.md)."""

from __future__ import annotations

import base64
import json
import logging
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pods_fakes import FakeKube, Polled, run_for, settle, sim_context

from gateway.config import Settings
from gateway.kube.events import EventRecorder
from gateway.pods.controller import PodController
from translators.base import BackendError, ResolvedPod, UnsupportedError, WorkloadState
from translators.render.engine import Renderer
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock

NODE = "vk-test"
SECRET = "hunter\"2\\x\n's3cr3t"
#: A template whose output is not JSON, on the line that holds the Secret env value.
BROKEN = '{"env": {{ env | tojson }}, oops}'


class Failing(Polled):
    """Each create fails the way ``mode`` says, quoting the pod's secret."""

    def __init__(self, inner: SimulatedTranslator, mode: str) -> None:
        super().__init__(inner)
        self.mode = mode
        self.renderer = Renderer(overlay={"sim/pod.j2": BROKEN})

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        env = {e.name: e.value for c in pod.containers for e in c.env}
        if self.mode == "template":
            self.renderer.render("sim/pod.j2", {"env": env}, schema="")
        if self.mode == "unsupported":
            raise UnsupportedError(f"cannot place {env['PW']!r}", field="spec.containers[app]")
        raise BackendError(f"400: invalid job: Env {json.dumps(env)}", status=400)


class Harness:
    def __init__(self, tmp_path: Path, mode: str) -> None:
        self.clock = FakeClock()
        self.kube = FakeKube(self.clock)
        sim = SimulatedTranslator(
            sim_context(self.clock, NODE), state_file=str(tmp_path / "sim.json")
        )
        self.translator = Failing(sim, mode)
        self.ctl: PodController | None = None

    async def start(self) -> None:
        s = Settings()
        s.node.name = NODE
        events = EventRecorder(self.kube, host=NODE, clock=self.clock)  # type: ignore[arg-type]
        self.ctl = PodController(
            self.kube,  # type: ignore[arg-type]
            self.translator,
            events,
            s,
            clock=self.clock,
            host_ip=lambda: "127.0.0.9",
            rng=random.Random(7),
        )
        await self.ctl.start()
        await settle()
        await self.clock.advance(0)
        await settle()


@pytest.fixture(params=["template", "unsupported", "backend"])
async def h(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path, request.param)
    yield harness
    if harness.ctl is not None:
        await harness.ctl.stop()


def encodings(secret: str) -> list[str]:
    return [
        secret,
        json.dumps(secret)[1:-1],
        repr(secret)[1:-1],
        repr(json.dumps(secret)[1:-1])[1:-1],
        base64.b64encode(secret.encode()).decode(),
    ]


async def test_no_secret_in_events_status_or_log(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await h.start()
    h.kube.add(
        {
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"pw": base64.b64encode(SECRET.encode()).decode()},
        }
    )
    h.kube.add(
        {
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {
                        "name": "app",
                        "image": "nginx:1.27",
                        "env": [
                            {
                                "name": "PW",
                                "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}},
                            }
                        ],
                    }
                ],
            },
        }
    )
    await run_for(h.clock, 5)
    pod = h.kube.pod("web")
    assert pod is not None
    status: dict[str, Any] = pod["status"]
    events = [e["message"] for e in h.kube.events()]
    texts = [*events, json.dumps(status), caplog.text]
    assert "*****" in " ".join(events)  # the failure is reported, masked
    leaked = [e for e in encodings(SECRET) for t in texts if e in t]
    assert leaked == []
