"""The Node is not Ready while its start-up gate is closed (gateway.inputs,
docs/design/startup.md): registered ``Ready=False`` with reason ``InputsNotSynced`` naming the
input, ``Ready=True`` as soon as the input loads (the gate wakes the status loop: no wait for the
next status interval), and a down backend still reported as such first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from node_fakes import FakeApi, FakeTranslator, advance, settle

from gateway.config import Settings
from gateway.inputs import Input, InputsGate
from gateway.kube.client import KubeClient
from gateway.node.controller import NodeController
from vkgate_core.clock import FakeClock


def ready(api: FakeApi) -> dict[str, Any]:
    return next(c for c in api.node()["status"]["conditions"] if c["type"] == "Ready")


def make(
    api: FakeApi,
    backend: FakeTranslator,
    clock: FakeClock,
    make_client: Callable[[FakeApi], KubeClient],
    gate: InputsGate,
) -> NodeController:
    s = Settings()
    s.node.name = "vk-test"
    s.node.status_interval = 600.0  # a forced write would hide a missing wake-up
    return NodeController(make_client(api), backend, s, clock=clock, inputs=gate)


async def test_ready_waits_for_the_gate_and_follows_it_at_once(
    api: FakeApi, clock: FakeClock, make_client: Callable[[FakeApi], KubeClient]
) -> None:
    problem = {"text": "list failed: 403 Forbidden: configmaps is forbidden"}
    templates = Input("template ConfigMaps in vkgate-system", problem=lambda: problem["text"])
    gate = InputsGate([templates], clock=clock, timeout=30, node="vk-test")
    nc = make(api, FakeTranslator(), clock, make_client, gate)
    await gate.start()
    try:
        await nc.start()
        cond = ready(api)
        assert (cond["status"], cond["reason"]) == ("False", "InputsNotSynced")
        assert cond["message"] == (
            "pod syncs wait for template ConfigMaps in vkgate-system "
            "(list failed: 403 Forbidden: configmaps is forbidden)"
        )
        await advance(clock, 40)  # past the bound: the message names the error
        assert ready(api)["message"].startswith(
            "InputsNotSynced: not loaded after 30s: template ConfigMaps in vkgate-system"
        )
        problem["text"] = ""
        templates.loaded.set()
        await advance(clock, 1.0)  # < the 10 s status check: the gate woke the loop
        cond = ready(api)
        assert (cond["status"], cond["reason"]) == ("True", "KubeletReady")
    finally:
        await nc.stop()
        await gate.stop()
        await nc.client.aclose()


async def test_a_down_backend_is_reported_before_the_inputs(
    api: FakeApi, clock: FakeClock, make_client: Callable[[FakeApi], KubeClient]
) -> None:
    backend = FakeTranslator()
    backend.down = "connection refused"
    gate = InputsGate([Input("namespace team labels")], clock=clock, timeout=30)
    nc = make(api, backend, clock, make_client, gate)
    try:
        await nc.start()
        await settle()
        cond = ready(api)
        assert (cond["status"], cond["reason"]) == ("False", "BackendUnreachable")
    finally:
        await nc.stop()
        await nc.client.aclose()
