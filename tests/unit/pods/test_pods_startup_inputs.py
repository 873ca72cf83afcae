"""No pod is rendered before every input its rendering reads has loaded (gateway.inputs,
docs/design/startup.md): a pod created while the template ConfigMaps — or the namespace team
labels — cannot be listed waits, then renders with its team's template.  One node and two nodes
sharing the process-wide inputs, on the fake API server and a fake clock.  The operator lets
the namespaces ``ml`` and ``late`` and the ConfigMap ``ml-templates`` choose their team by label
(``OPERATOR``; docs/design/teams.md); any other label is ignored.

The translator renders the real Nomad job (``NomadTranslator.render_spec``, what its ``create``
submits) with the shared renderer and records it, over the simulated backend's lifecycle.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pods_fakes import FakeKube, Polled, run_for, settle, sim_context

from gateway.config import Settings, TemplateSettings
from gateway.inputs import InputsGate, TeamRule
from gateway.inputs.teams import NamespaceTeams
from gateway.kube.events import EventRecorder
from gateway.pods.controller import PodController
from gateway.templating.source import TemplatesSource, renderer_from_settings
from translators.base import ResolvedPod, TranslatorContext, WorkloadState
from translators.nomad import NomadTranslator
from translators.render.engine import Renderer
from translators.simulated import SimulatedTranslator
from vkgate_core.clock import FakeClock

SYSTEM = "vkgate-system"
CONFIGMAPS = f"/api/v1/namespaces/{SYSTEM}/configmaps"
NAMESPACES = "/api/v1/namespaces"
#: The operator's decision: which labels may choose a team.
OPERATOR = TemplateSettings(
    team_label_namespaces=["ml", "late"], team_label_configmaps=["ml-templates"]
)
TEAM_TEMPLATE = (
    '{% extends "nomad/job.j2" %}\n'
    "{% set backend_info = dict(backend_info, priority=80) %}\n"
    '{% block meta %}{{ dict(n.meta, **{"team": team}) | tojson }}{% endblock %}\n'
)


class Rendering(Polled):
    """Records the Nomad job each created pod renders to (``"<ns>/<name>"`` → Job)."""

    def __init__(self, inner: SimulatedTranslator, renderer: Renderer) -> None:
        super().__init__(inner)
        self.nomad = NomadTranslator(
            # the team's priority 80 is within what the node allows a template
            TranslatorContext(
                node_name=inner.node_name, settings={"max_priority": 80}, renderer=renderer
            ),
            environ={},
        )
        self.jobs: dict[str, dict[str, Any]] = {}

    async def create(self, pod: ResolvedPod) -> WorkloadState:
        self.jobs[f"{pod.namespace}/{pod.name}"] = self.nomad.render_spec(pod)["Job"]
        return await super().create(pod)


@dataclass
class Process:
    """One vkgate process on the fake API server: the shared inputs and one controller per node."""

    clock: FakeClock
    kube: FakeKube
    renderer: Renderer
    templates: TemplatesSource
    teams: NamespaceTeams
    controllers: dict[str, PodController] = field(default_factory=dict)
    backends: dict[str, Rendering] = field(default_factory=dict)

    def job(self, key: str) -> dict[str, Any] | None:
        return next((b.jobs[key] for b in self.backends.values() if key in b.jobs), None)

    async def stop(self) -> None:
        for ctl in self.controllers.values():
            await ctl.stop()
            await ctl.gate.stop()
        await self.templates.stop()
        await self.teams.stop()


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pod(ns: str, name: str, node: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox:1.36"}]},
    }


def team_configmap() -> dict[str, Any]:
    return {
        "kind": "ConfigMap",
        "metadata": {
            "name": "ml-templates",
            "namespace": SYSTEM,
            "labels": {"vkgate.io/templates": "true", "vkgate.io/team": "ml"},
        },
        "data": {"nomad__job.j2": TEAM_TEMPLATE},
    }


async def start_process(
    tmp_path: Path,
    kube: FakeKube,
    clock: FakeClock,
    nodes: list[str],
    operator: TemplateSettings = OPERATOR,
) -> Process:
    renderer = renderer_from_settings(operator, kinds=["nomad"])
    templates = TemplatesSource(
        kube,
        renderer,
        namespace=SYSTEM,
        validator=lambda *_: [],
        clock=clock,
        rule=TeamRule.configmaps(operator),
    )
    teams = NamespaceTeams(kube, clock=clock, rule=TeamRule.namespaces(operator))  # type: ignore[arg-type]
    proc = Process(clock, kube, renderer, templates, teams)
    await templates.start()
    await proc.teams.start()
    for node in nodes:  # as gateway.nodeunit builds each node: shared inputs + the node's own
        settings = Settings(templates=operator)
        settings.node.name = node
        sim = SimulatedTranslator(
            sim_context(clock, node),
            state_file=str(tmp_path / f"{node}.json"),
            start_delay=1.0,
        )
        backend = Rendering(sim, renderer)
        gate = InputsGate([templates.input, proc.teams.input], clock=clock, timeout=30, node=node)
        ctl = PodController(
            kube,  # type: ignore[arg-type]
            backend,
            EventRecorder(kube, host=node, clock=clock),  # type: ignore[arg-type]
            settings,
            clock=clock,
            gate=gate,
            teams=proc.teams,
        )
        gate.add(*ctl.inputs)
        await gate.start()
        await ctl.start()
        proc.controllers[node], proc.backends[node] = ctl, backend
    await settle()
    return proc


@pytest.fixture
def kube() -> FakeKube:
    k = FakeKube(FakeClock())
    k.add(namespace("ml", **{"vkgate.io/team": "ml"}))
    k.add(namespace("other"))
    k.add(team_configmap())
    return k


@pytest.fixture
async def started(tmp_path: Path, kube: FakeKube) -> AsyncIterator[list[Process]]:
    procs: list[Process] = []
    yield procs
    for p in procs:
        await p.stop()


async def test_a_pod_created_while_the_team_templates_cannot_load_waits_for_them(
    tmp_path: Path, kube: FakeKube, started: list[Process]
) -> None:
    kube.forbidden.add(CONFIGMAPS)  # the Role in vkgate-system is not bound yet
    proc = await start_process(tmp_path, kube, kube.clock, ["vk-1"])
    started.append(proc)
    await run_for(kube.clock, 1)
    kube.add(pod("ml", "a", "vk-1"))
    kube.add(pod("other", "b", "vk-1"))
    await run_for(kube.clock, 20)
    gate = proc.controllers["vk-1"].gate
    assert proc.backends["vk-1"].jobs == {}  # nothing rendered, not even the default's pod
    assert kube.status_writes("a") == 0 and kube.status_writes("b") == 0
    reason = gate.reason() or ""
    assert reason.startswith(f"pod syncs wait for template ConfigMaps in {SYSTEM} (list failed: ")
    assert "403" in reason and "namespace team labels" not in reason  # that one has loaded

    kube.forbidden.discard(CONFIGMAPS)  # granted: the reflector's next list succeeds
    await run_for(kube.clock, 40)
    assert gate.is_open
    job_a, job_b = proc.job("ml/a"), proc.job("other/b")
    assert job_a is not None and job_b is not None
    assert job_a["Priority"] == 80 and job_a["Meta"]["team"] == "ml"  # the team's template
    assert job_b["Priority"] == 50 and "team" not in job_b["Meta"]  # others: the default


async def test_a_pod_created_while_the_namespace_labels_cannot_load_waits_for_them(
    tmp_path: Path, kube: FakeKube, started: list[Process]
) -> None:
    kube.forbidden.add(NAMESPACES)  # list/watch namespaces not granted yet
    proc = await start_process(tmp_path, kube, kube.clock, ["vk-1"])
    started.append(proc)
    kube.add(pod("ml", "a", "vk-1"))
    await run_for(kube.clock, 20)
    assert proc.renderer.exists("teams/ml/nomad/job.j2")  # the templates did load
    assert proc.backends["vk-1"].jobs == {}
    reason = proc.controllers["vk-1"].gate.reason() or ""
    assert reason.startswith("pod syncs wait for namespace team labels (list failed: ")

    kube.forbidden.discard(NAMESPACES)
    await run_for(kube.clock, 40)
    job = proc.job("ml/a")
    assert job is not None and job["Priority"] == 80 and job["Meta"]["team"] == "ml"


async def test_a_label_added_later_is_seen_through_the_watch(
    tmp_path: Path, kube: FakeKube, started: list[Process]
) -> None:
    proc = await start_process(tmp_path, kube, kube.clock, ["vk-1"])
    started.append(proc)
    kube.add(namespace("late"))
    await run_for(kube.clock, 2)
    assert proc.controllers["vk-1"].gate.is_open and proc.teams.team("late") == ""
    kube.add(namespace("late", **{"vkgate.io/team": "ml"}))  # kubectl label namespace late …
    await settle()
    assert proc.teams.team("late") == "ml"
    kube.add(pod("late", "a", "vk-1"))
    await run_for(kube.clock, 2)
    job = proc.job("late/a")
    assert job is not None and job["Priority"] == 80 and job["Meta"]["team"] == "ml"


async def test_every_node_of_a_process_waits_for_the_shared_inputs(
    tmp_path: Path, kube: FakeKube, started: list[Process]
) -> None:
    kube.forbidden.update({CONFIGMAPS, NAMESPACES})
    proc = await start_process(tmp_path, kube, kube.clock, ["vk-a", "vk-b"])
    started.append(proc)
    kube.add(pod("ml", "a", "vk-a"))
    kube.add(pod("ml", "b", "vk-b"))
    await run_for(kube.clock, 20)
    for node in ("vk-a", "vk-b"):
        assert proc.backends[node].jobs == {}
        reason = proc.controllers[node].gate.reason() or ""
        assert "template ConfigMaps" in reason and "namespace team labels" in reason
    kube.forbidden.discard(CONFIGMAPS)
    await run_for(kube.clock, 40)
    assert all(b.jobs == {} for b in proc.backends.values())  # the labels still missing
    kube.forbidden.discard(NAMESPACES)
    await run_for(kube.clock, 40)
    for key, node in (("ml/a", "vk-a"), ("ml/b", "vk-b")):
        assert list(proc.backends[node].jobs) == [key]
        job = proc.job(key)
        assert job is not None and job["Priority"] == 80 and job["Meta"]["team"] == "ml"
    assert json.loads((tmp_path / "vk-a.json").read_text())  # the simulated workload exists


async def test_a_namespace_labelled_with_another_teams_name_does_not_get_its_templates(
    tmp_path: Path, kube: FakeKube, started: list[Process], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue row 6: the namespace owner of ``intruder`` labels it ``vkgate.io/team=ml``; the
    operator did not let ``intruder`` choose, so its pod gets the default, a Warning Event
    names the label and the setting, the log says it once, the metric counts it."""
    kube.add(namespace("intruder", **{"vkgate.io/team": "ml"}))
    proc = await start_process(tmp_path, kube, kube.clock, ["vk-1"])
    started.append(proc)
    kube.add(pod("intruder", "a", "vk-1"))
    kube.add(pod("ml", "b", "vk-1"))
    await run_for(kube.clock, 4)
    job_a, job_b = proc.job("intruder/a"), proc.job("ml/b")
    assert job_a is not None and job_b is not None
    assert job_a["Priority"] == 50 and "team" not in job_a["Meta"]  # not ml's template
    assert job_b["Priority"] == 80 and job_b["Meta"]["team"] == "ml"  # ml may choose: ml's
    (event,) = [e for e in kube.events("TeamLabelIgnored")]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "a"
    assert "namespace intruder: label vkgate.io/team='ml' ignored" in event["message"]
    assert "templates.team_label_namespaces" in event["message"]
    assert caplog.text.count("namespace intruder: label vkgate.io/team='ml' ignored") == 1
    assert proc.teams.ignored() == {"not_allowed": 1}


async def test_the_operator_may_let_a_namespace_choose_and_the_map_wins_over_its_label(
    tmp_path: Path, kube: FakeKube, started: list[Process]
) -> None:
    kube.add(namespace("web-prod", **{"vkgate.io/team": "ml"}))
    operator = TemplateSettings(
        team_label_namespaces=["*"],
        team_label_configmaps=["ml-templates"],
        teams={"web-prod": "web"},
    )
    proc = await start_process(tmp_path, kube, kube.clock, ["vk-1"], operator)
    started.append(proc)
    kube.add(pod("ml", "a", "vk-1"))
    kube.add(pod("web-prod", "b", "vk-1"))
    await run_for(kube.clock, 4)
    job_a, job_b = proc.job("ml/a"), proc.job("web-prod/b")
    assert job_a is not None and job_a["Meta"]["team"] == "ml"  # "*": ml's label counts
    assert job_b is not None and job_b["Priority"] == 50  # team web: no template of its own
    (event,) = kube.events("TeamLabelIgnored")
    assert "templates.teams makes it team 'web'" in event["message"]
    assert proc.teams.ignored() == {"map_differs": 1}
