"""The App's start-up gate (docs/design/startup.md): while the template ConfigMaps cannot be
listed, ``/readyz`` names them and every Node is ``Ready=False`` (``InputsNotSynced``); once they
load, both turn ready — with one node, with several (the inputs are shared, the gates per node),
and after a standby took over from a leader that died.  Fake clock, stateful fake API; the pod
controllers are stand-ins (their own gate tests: tests/unit/pods/test_pods_startup_inputs.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from node_fakes import Component, FakeApi, FakeTranslator, advance, settle

from gateway import config as cfg
from gateway.app import App
from gateway.kube.events import rfc3339
from gateway.node.leader import LEASES
from vkgate_core.clock import FakeClock

CONFIGMAPS = r"^/api/v1/namespaces/vkgate-system/configmaps$"
WAITING = "pod syncs wait for template ConfigMaps in vkgate-system (list failed: 403 Injected"

ONE = """
[node]
name = "vk-test"
[kubelet]
enabled = false
[templates]
configmap_namespace = "vkgate-system"
"""
TWO = """
[kubelet]
enabled = false
[templates]
configmap_namespace = "vkgate-system"
[[nodes]]
name = "vk-a"
[[nodes]]
name = "vk-b"
"""


def make_app(
    tmp_path: Path, text: str, api: FakeApi, clock: FakeClock, make_client: Callable[..., Any]
) -> tuple[App, list[str]]:
    path = tmp_path / "vkgate.toml"
    path.write_text(text)
    settings = cfg.load(path, environ={})
    names = [n.node.name for n in settings.units()]
    app = App(
        settings,
        kube=make_client(api),
        translators={n: FakeTranslator() for n in names},
        clock=clock,
    )
    log: list[str] = []
    for unit in app.units:
        unit.pods = cast(Any, Component(f"{unit.name}.pods", log))
    return app, names


def ready(api: FakeApi, name: str) -> tuple[str, str, str]:
    c = next(c for c in api.node(name)["status"]["conditions"] if c["type"] == "Ready")
    return c["status"], c["reason"], c["message"]


async def grant_and_wait(api: FakeApi, clock: FakeClock, app: App) -> None:
    api.failures.clear()  # the Role is bound: the reflector's next list succeeds
    for _ in range(120):
        await advance(clock, 0.5)
        if app.readiness() is None:
            return


async def test_readyz_and_the_node_name_the_template_configmaps_until_they_load(
    tmp_path: Path, api: FakeApi, clock: FakeClock, make_client: Callable[..., Any]
) -> None:
    api.fail("GET", CONFIGMAPS, 403, times=10**6)
    app, _ = make_app(tmp_path, ONE, api, clock, make_client)
    task = asyncio.create_task(app.run())
    try:
        await advance(clock, 5)
        assert app.readiness() is not None and WAITING in (app.readiness() or "")
        status, reason, message = ready(api, "vk-test")
        assert (status, reason) == ("False", "InputsNotSynced") and message.startswith(WAITING)
        await grant_and_wait(api, clock, app)
        assert app.readiness() is None
        assert ready(api, "vk-test")[:2] == ("True", "KubeletReady")
    finally:
        app.request_stop()
        await asyncio.wait_for(task, 5)


async def test_every_node_of_a_process_waits_for_the_shared_input(
    tmp_path: Path, api: FakeApi, clock: FakeClock, make_client: Callable[..., Any]
) -> None:
    api.fail("GET", CONFIGMAPS, 403, times=10**6)
    app, names = make_app(tmp_path, TWO, api, clock, make_client)
    assert names == ["vk-a", "vk-b"]
    task = asyncio.create_task(app.run())
    try:
        await advance(clock, 5)
        reason = app.readiness() or ""
        assert f"node vk-a: {WAITING}" in reason and f"node vk-b: {WAITING}" in reason
        assert {ready(api, n)[:2] for n in names} == {("False", "InputsNotSynced")}
        # one list + watch of the ConfigMaps for the whole process, not one per node
        assert app.units[0].gate.inputs[0] is app.units[1].gate.inputs[0]
        await grant_and_wait(api, clock, app)
        assert app.readiness() is None
        assert {ready(api, n)[:2] for n in names} == {("True", "KubeletReady")}
    finally:
        app.request_stop()
        await asyncio.wait_for(task, 5)


async def test_a_standby_that_takes_over_waits_for_the_inputs_too(
    tmp_path: Path, api: FakeApi, clock: FakeClock, make_client: Callable[..., Any]
) -> None:
    api.objects[f"{LEASES}/vkgate-leader-vk-test"] = {
        "metadata": {"name": "vkgate-leader-vk-test", "resourceVersion": "1", "uid": "l-1"},
        "spec": {
            "holderIdentity": "old-leader",
            "leaseDurationSeconds": 10,
            "renewTime": rfc3339(clock.now()),
            "leaseTransitions": 0,
        },
    }
    api.fail("GET", CONFIGMAPS, 403, times=10**6)
    app, _ = make_app(tmp_path, ONE + "[ha]\nenabled = true\n", api, clock, make_client)
    task = asyncio.create_task(app.run())
    try:
        await settle()
        assert app.readiness() is None  # a standby that sees a live leader is ready
        assert not any("configmaps" in p for _, p, _ in api.requests)  # loads after leading
        await advance(clock, 15)  # the old leader never renews: taken over
        assert api.objects[f"{LEASES}/vkgate-leader-vk-test"]["spec"]["holderIdentity"] != (
            "old-leader"
        )
        assert WAITING in (app.readiness() or "")
        assert ready(api, "vk-test")[:2] == ("False", "InputsNotSynced")
        await grant_and_wait(api, clock, app)
        assert ready(api, "vk-test")[:2] == ("True", "KubeletReady")
    finally:
        app.request_stop()
        await asyncio.wait_for(task, 5)


def test_the_app_exposes_ignored_team_labels_and_refused_template_configmaps(
    tmp_path: Path, api: FakeApi, clock: FakeClock, make_client: Callable[..., Any]
) -> None:
    """docs/design/teams.md: an ignored team label and a template conflict are metrics."""
    app, _ = make_app(
        tmp_path, ONE + 'team_label_namespaces = ["lab-*"]\n', api, clock, make_client
    )
    assert app.teams is not None and app.templates is not None
    app.teams.reflector.store["intruder"] = {
        "metadata": {"name": "intruder", "labels": {"vkgate.io/team": "ml"}}
    }
    app.teams.reflector.store["lab-1"] = {
        "metadata": {"name": "lab-1", "labels": {"vkgate.io/team": "ml"}}
    }
    app.templates.refused["conflict"] += 1
    text = app.metrics.render().decode()
    assert 'vkgate_team_labels_ignored{object="namespace",reason="not_allowed"} 1.0' in text
    assert 'vkgate_template_configmaps_refused_total{reason="conflict"} 1.0' in text
