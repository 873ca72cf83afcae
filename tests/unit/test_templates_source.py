"""ConfigMap template source: live reload, validation, rejection with an Event, deletion.

The real Reflector runs against a fake KubeClient whose watch is fed by the test; the
validator is the real default one (compile + render the sample pods through the real Nomad
backend), and the ConfigMaps extend the packaged templates as users' do.  Whose templates a
ConfigMap defines is the operator's (``OPERATOR``: the ``ml-*``/``team`` ConfigMaps' labels
count, ``platform``, ``x`` and ``a`` are global; tests/unit/test_template_owners.py holds the
ownership rules themselves).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import TemplateSettings
from gateway.inputs import TeamRule
from gateway.templating.source import (
    TemplatesSource,
    owner_of,
    renderer_from_settings,
    templates_of,
)
from translators.base import ResolvedContainer, ResolvedPod, TranslatorContext
from translators.nomad import NomadTranslator
from translators.render.engine import Renderer, packaged_templates_dir

PACKAGED_JOB = (packaged_templates_dir() / "nomad" / "job.j2").read_text()
#: The operator's decision these tests run under.
OPERATOR = TemplateSettings(
    team_label_configmaps=["ml-*", "team"], global_configmaps=["platform", "x", "a"]
)
OWNERS: dict[str, Any] = {
    "rule": TeamRule.configmaps(OPERATOR),
    "global_configmaps": OPERATOR.global_configmaps,
}
META_BLOCK = "{% block meta %}{{ n.meta | tojson }}{% endblock %}"


def variant(value: str) -> str:
    """A Nomad template that marks its job with ``Meta.variant``."""
    return (
        '{% extends "nomad/job.j2" %}'
        f'{{% block meta %}}{{{{ dict(backend_info.meta, variant="{value}") | tojson }}}}'
        "{% endblock %}"
    )


class FakeKube:
    """list + watch only; watch events come from a queue the test fills."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.listed: list[tuple[str, dict[str, Any]]] = []

    async def list(self, path: str, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.listed.append((path, dict(params or {})))
        return {"items": self.items, "metadata": {"resourceVersion": "1"}}

    async def watch(self, path: str, *, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self.events.get()


class FakeEvents:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    async def record(
        self, obj: dict[str, Any], *, type: str, reason: str, message: str, field_path: str = ""
    ) -> None:
        self.recorded.append((obj["metadata"]["name"], type, reason, message))


def cm(name: str, data: dict[str, str], rv: str = "1", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "vkgate-system",
            "resourceVersion": rv,
            "uid": name,
            "labels": {"vkgate.io/templates": "true", **labels},
        },
        "data": data,
    }


def pod(namespace: str = "ml") -> ResolvedPod:
    return ResolvedPod(
        namespace=namespace,
        name="web",
        uid="00000000-0000-4000-8000-000000000001",
        node_name="vk",
        pod={"metadata": {"name": "web", "namespace": namespace}, "spec": {}},
        containers=(ResolvedContainer(name="app", image="nginx"),),
    )


@pytest.fixture
def renderer() -> Renderer:
    return Renderer(teams={"ml": "ml"})


async def settle(source: TemplatesSource, kube: FakeKube) -> None:
    for _ in range(200):
        await asyncio.sleep(0.01)
        if kube.events.empty() and not source._lock.locked():
            await asyncio.sleep(0.05)
            if kube.events.empty() and not source._lock.locked():
                return


def render_variant(renderer: Renderer, namespace: str = "ml") -> str:
    """What the real Nomad translator renders for a pod of ``namespace`` (its Meta.variant)."""
    ctx = TranslatorContext(node_name="vk", settings={}, renderer=renderer)
    job = NomadTranslator(ctx, environ={}).render_spec(pod(namespace))["Job"]
    return str(job["Meta"].get("variant", "default"))


async def test_live_reload_accept_reject_delete(renderer: Renderer) -> None:
    good = cm(
        "ml-templates",
        {"nomad__job.j2": variant("80")},
        **{"vkgate.io/team": "ml"},
    )
    kube = FakeKube([good])
    events = FakeEvents()
    changes: list[int] = []
    renderer.subscribe(lambda: changes.append(renderer.version))
    source = TemplatesSource(
        kube, renderer, namespace="vkgate-system", events=events, backend="nomad", **OWNERS
    )
    await source.start()
    try:
        await asyncio.wait_for(source.reflector.synced.wait(), 5)
        await settle(source, kube)
        assert kube.listed[0] == (
            "/api/v1/namespaces/vkgate-system/configmaps",
            {"labelSelector": "vkgate.io/templates=true"},
        )
        assert (
            renderer.origin("teams/ml/nomad/job.j2")
            == "configmap vkgate-system/ml-templates key nomad__job.j2"
        )
        assert render_variant(renderer) == "80"
        assert render_variant(renderer, "other") == "default"  # other namespaces: the default
        assert events.recorded[-1][:3] == ("ml-templates", "Normal", "TemplatesLoaded")

        # an update changes the next render
        updated = cm(
            "ml-templates",
            {"nomad__job.j2": variant("90")},
            rv="2",
            **{"vkgate.io/team": "ml"},
        )
        kube.events.put_nowait({"type": "MODIFIED", "object": updated})
        await settle(source, kube)
        assert render_variant(renderer) == "90"

        # a syntax error is rejected; the previous version keeps serving
        broken = cm(
            "ml-templates",
            {
                "nomad__job.j2": '{% extends "nomad/job.j2" %}\n{% block meta %}{{ 1 + }}{% endblock %}'
            },
            rv="3",
            **{"vkgate.io/team": "ml"},
        )
        kube.events.put_nowait({"type": "MODIFIED", "object": broken})
        await settle(source, kube)
        assert render_variant(renderer) == "90"
        name, etype, reason, message = events.recorded[-1]
        assert (name, etype, reason) == ("ml-templates", "Warning", "TemplateRejected")
        assert "teams/ml/nomad/job.j2:2: syntax error" in message
        assert "previous version keeps serving" in message

        # a version that renders invalid output for some sample pods is rejected too
        bad_output = cm(
            "ml-templates",
            {
                "nomad__job.j2": '{% extends "nomad/job.j2" %}{% block meta %}{"variant": 1}{% endblock %}'
            },
            rv="4",
            **{"vkgate.io/team": "ml"},
        )
        kube.events.put_nowait({"type": "MODIFIED", "object": bad_output})
        await settle(source, kube)
        assert render_variant(renderer) == "90"
        assert (
            "Job.Meta.variant" in events.recorded[-1][3]
            and "sample pod 'plain'" in events.recorded[-1][3]
        )

        # deleting the ConfigMap falls back to the default
        kube.events.put_nowait({"type": "DELETED", "object": bad_output})
        await settle(source, kube)
        assert render_variant(renderer) == "default"
        assert changes == [1, 2, 3]
    finally:
        await source.stop()


async def test_a_new_configmap_that_is_broken_is_not_loaded(renderer: Renderer) -> None:
    kube = FakeKube([cm("x", {"nomad__job.j2": "{% for %}"})])
    events = FakeEvents()
    source = TemplatesSource(
        kube, renderer, namespace="vkgate-system", events=events, backend="nomad", **OWNERS
    )
    await source.start()
    try:
        await asyncio.wait_for(source.reflector.synced.wait(), 5)
        await settle(source, kube)
        assert renderer.overlay == {} and renderer.version == 0
        assert (
            events.recorded[-1][2] == "TemplateRejected" and "not loaded" in events.recorded[-1][3]
        )
    finally:
        await source.stop()


async def test_breaking_a_template_others_extend_is_rejected(renderer: Renderer) -> None:
    """Overriding the base so that an existing team template breaks is caught by rendering."""
    source = TemplatesSource(
        FakeKube([]), renderer, namespace="ns", events=FakeEvents(), backend="nomad", **OWNERS
    )
    await source.handle(
        "ADDED",
        cm(
            "team",
            {"nomad__job.j2": variant("80")},
            **{"vkgate.io/team": "ml"},
        ),
        None,
    )
    assert "teams/ml/nomad/job.j2" in renderer.overlay
    # a platform ConfigMap replacing nomad/job.j2 with one that has no meta block
    assert META_BLOCK in PACKAGED_JOB
    await source.handle(
        "ADDED",
        cm("platform", {"nomad__job.j2": PACKAGED_JOB.replace(META_BLOCK, "{{ prio }}")}),
        None,
    )
    assert "nomad/job.j2" not in renderer.overlay
    recorded = source.events.recorded  # type: ignore[union-attr]
    assert recorded[-1][2] == "TemplateRejected" and "'prio' is undefined" in recorded[-1][3]


async def test_unchanged_data_is_not_revalidated(renderer: Renderer) -> None:
    calls: list[list[str]] = []

    def validator(r: Renderer, overlay: Any, names: Any) -> list[str]:
        calls.append(list(names))
        return []

    source = TemplatesSource(FakeKube([]), renderer, namespace="ns", validator=validator, **OWNERS)
    obj = cm("a", {"nomad__x.j2": "{}"})
    await source.handle("ADDED", obj, None)
    await source.handle(
        "MODIFIED", {**obj, "metadata": {**obj["metadata"], "resourceVersion": "9"}}, obj
    )
    assert calls == [["nomad/x.j2"]]


def test_configmap_key_names() -> None:
    templates, problems = templates_of(
        cm("c", {"nomad__job.j2": "a", "README.md": "b", "zun__c.j2": "c", "bad__..__x.j2": "d"})
    )
    assert (
        sorted(templates) == ["nomad/job.j2", "zun/c.j2"]
        and problems
        and "bad__..__x.j2" in problems[0]
    )

    def names(obj: dict[str, Any]) -> list[str]:
        owner = owner_of(obj, **OWNERS)
        assert not owner.refused, owner.refused
        return list(templates_of(obj, prefix=owner.prefix)[0])

    assert names(cm("ml-c", {"nomad__job.j2": "a"}, **{"vkgate.io/team": "ml"})) == [
        "teams/ml/nomad/job.j2"
    ]
    # the prefix annotation narrows the team's prefix (it may not leave it: test_template_owners)
    obj = cm("ml-c", {"job.j2": "a"}, **{"vkgate.io/team": "web"})
    obj["metadata"]["annotations"] = {"vkgate.io/template-prefix": "teams/web/nomad"}
    assert names(obj) == ["teams/web/nomad/job.j2"]


def test_renderer_from_settings(tmp_path: Path) -> None:
    (tmp_path / "x.j2").write_text("{{ 1 }}")
    r = renderer_from_settings(
        TemplateSettings(dirs=[str(tmp_path)], teams={"a": "b"}, allowed={"b": ["x*"]})
    )
    assert r.render_text("x.j2", {}) == "1" and r.teams == {"a": "b"} and r.allowed == {"b": ["x*"]}
    assert json.loads(r.render_text("x.j2", {})) == 1


async def test_a_team_template_that_shadows_nothing_is_a_warning(
    renderer: Renderer, caplog: pytest.LogCaptureFixture
) -> None:
    """``teams/ml/nomad/jobs.j2`` (typo: the base is ``nomad/job.j2``) would never be selected."""
    typo = cm(
        "ml-typo", {"nomad__jobs.j2": "{}", "nomad__job.j2": "{}"}, **{"vkgate.io/team": "ml"}
    )
    kube = FakeKube([typo])
    events = FakeEvents()
    source = TemplatesSource(
        kube,
        renderer,
        namespace="vkgate-system",
        events=events,
        backend="nomad",
        validator=lambda *a: [],
        **OWNERS,
    )
    await source.start()
    try:
        await asyncio.wait_for(source.reflector.synced.wait(), 5)
        await settle(source, kube)
    finally:
        await source.stop()
    warnings = [e for e in events.recorded if e[2] == "TemplateShadowsNothing"]
    assert len(warnings) == 1, events.recorded
    assert "teams/ml/nomad/jobs.j2 shadows nothing: no template nomad/jobs.j2" in warnings[0][3]
    assert "shadows nothing" in caplog.text and "teams/ml/nomad/job.j2 shadows" not in caplog.text


def test_a_team_template_is_held_to_the_template_it_replaces() -> None:
    """A sample the default itself cannot render (raw_exec and a container without a command)
    is no new failure of the team's version of it (e2e: test_templates_live_retry)."""
    from gateway.templating.source import _replaced

    assert _replaced("teams/ml/nomad/raw_exec.j2") == "nomad/raw_exec.j2"
    assert _replaced("nomad/raw_exec.j2") == "nomad/raw_exec.j2"
    assert _replaced("teams/ml") == "teams/ml"
